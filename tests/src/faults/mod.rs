//! Shared pieces of the fault-injection suite (`tests/tests/faults_*.rs`, issue 9): a steady
//! background load ([`load`]), the closing verdict with the figures every run prints
//! ([`Figures`], [`verify`]), and the local stack's `kill`/`up` for infrastructure faults
//! ([`stack_command`]).

pub mod load;

use std::time::Duration;

use anyhow::{bail, Context};

use crate::checker::{check, CheckInput};
use crate::services::PipelineEnv;
use crate::workload::{Plan, Report};

pub use load::{Load, Shape};

/// What a fault run did, printed and asserted at its end.
#[derive(Clone, Debug, Default)]
pub struct Figures {
    /// The run's name.
    pub label: String,
    /// Acknowledged sends.
    pub messages: usize,
    /// Service processes killed (SIGKILL or a failpoint abort).
    pub kills: u32,
    /// Infrastructure faults (a server killed and restarted).
    pub faults: u32,
    /// Acknowledged messages missing somewhere they belong (the checker's count).
    pub lost: u64,
    /// Logical duplicates (the checker's count).
    pub logical_duplicates: u64,
    /// Physical duplicates in Kafka (counted, allowed).
    pub kafka_duplicates: u64,
}

impl std::fmt::Display for Figures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: messages {}, kills {}, faults {}, lost {}, logical duplicates {} (kafka physical duplicates {})",
            self.label,
            self.messages,
            self.kills,
            self.faults,
            self.lost,
            self.logical_duplicates,
            self.kafka_duplicates
        )
    }
}

/// Runs the invariant checker over `report`'s acknowledgements of `plan` on `env`, prints the
/// run's figures and the verdict, and returns the figures.
///
/// # Errors
///
/// The checker could not read a store, or it found a violation (lost or logically duplicated
/// messages included), or a client retry was answered differently; the error holds the verdict.
pub async fn verify(
    label: &str,
    env: &PipelineEnv,
    plan: &Plan,
    report: &Report,
    kills: u32,
    faults: u32,
) -> anyhow::Result<Figures> {
    let input = CheckInput::new(env.clone(), plan, report.acks.clone(), report.retries_mismatched);
    let verdict = check(&input).await.with_context(|| format!("{label}: running the checker"))?;
    let c = &verdict.counts;
    let figures = Figures {
        label: label.to_owned(),
        messages: c.acked,
        kills,
        faults,
        lost: c.lost as u64,
        logical_duplicates: c.logical_duplicates as u64,
        kafka_duplicates: c.kafka_physical_duplicates as u64,
    };
    println!("{figures}\n{verdict}");
    if !verdict.is_ok() || figures.lost != 0 || figures.logical_duplicates != 0 || report.retries_mismatched != 0 {
        bail!("{figures}: the checker found violations:\n{verdict}");
    }
    if c.in_kafka != c.acked {
        bail!("{figures}: only {} of {} acknowledged messages are on the messages topic", c.in_kafka, c.acked);
    }
    Ok(figures)
}

/// Seqs issued twice: two acknowledgements of one conversation with the same seq and different
/// message ids (what a seq reissued after a Redis restart would look like).
pub fn reissued_seqs(report: &Report) -> Vec<String> {
    let mut seen = std::collections::HashMap::new();
    let mut out = Vec::new();
    for a in &report.acks {
        let key = (a.tenant.clone(), a.conversation.clone(), a.conversation_seq);
        match seen.insert(key, a.message_id.clone()) {
            Some(other) if other != a.message_id => {
                out.push(format!("{}#{}: {} and {}", a.conversation, a.conversation_seq, other, a.message_id))
            }
            _ => {}
        }
    }
    out
}

/// Runs `deploy/local/stack <args>` of this checkout (the stack named by `QIM_STACK_DIR`, as
/// the caller's environment has it) and waits up to `timeout`.
///
/// # Errors
///
/// The script failed or took longer (its output is in the error).
pub async fn stack_command(args: &[&str], timeout: Duration) -> anyhow::Result<()> {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/local/stack");
    let mut cmd = tokio::process::Command::new(&script);
    cmd.args(args).kill_on_drop(true);
    let out = tokio::time::timeout(timeout, cmd.output())
        .await
        .with_context(|| format!("stack {args:?} took longer than {timeout:?}"))?
        .with_context(|| format!("running {}", script.display()))?;
    if !out.status.success() {
        bail!(
            "stack {args:?} failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}
