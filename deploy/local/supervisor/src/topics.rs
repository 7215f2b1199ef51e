//! The Kafka topics the pipeline uses, created on every `up` when missing (RF 1; RF 3 on the
//! three-node mode's brokers). Other topics are auto-created by the broker with 4 partitions.

use std::fs::File;
use std::path::Path;

use anyhow::bail;

use crate::kafka::tool_in;
use crate::layout::{Service, Settings, HOST};
use crate::log;
use crate::process::wait_with_limit;

/// `(name, partitions)` of each topic `up` makes sure of.
pub const TOPICS: [(&str, u32); 4] =
    [("qim.messages.v1", 8), ("qim.mailbox.dispatch.v1", 8), ("qim.messages.dlq.v1", 1), ("qim.mailbox.dlq.v1", 1)];

/// The topics of [`TOPICS`] that `listed` lacks (exact names).
pub fn missing(listed: &[String]) -> Vec<(&'static str, u32)> {
    TOPICS.iter().copied().filter(|(name, _)| !listed.iter().any(|l| l == name)).collect()
}

/// Creates the single stack's missing topics (RF 1), all at once (one admin JVM each, output
/// in `kafka/topic-<name>.log`).
///
/// # Errors
///
/// A creation failed (its output goes to stderr).
pub fn ensure(settings: &Settings, java: &Path, listed: &[String]) -> anyhow::Result<()> {
    let bootstrap = format!("{HOST}:{}", settings.ports.kafka);
    ensure_on(settings, java, &settings.dir(Service::Kafka), &bootstrap, 1, listed)
}

/// [`ensure`] on the cluster at `bootstrap` with `replication` replicas per partition; the tool
/// logs with, and writes its output into, the broker dir `dir`.
pub fn ensure_on(
    settings: &Settings,
    java: &Path,
    dir: &Path,
    bootstrap: &str,
    replication: u8,
    listed: &[String],
) -> anyhow::Result<()> {
    let absent = missing(listed);
    if absent.is_empty() {
        let names: String = TOPICS.iter().map(|(n, _)| format!("{n} ")).collect();
        log!("kafka topics present: {names}");
        return Ok(());
    }
    let rf = replication.to_string();
    let mut children = Vec::new();
    for (name, partitions) in &absent {
        let log_path = dir.join(format!("topic-{name}.log"));
        let out = File::create(&log_path)?;
        let child = tool_in(
            settings,
            java,
            dir,
            &[
                "org.apache.kafka.tools.TopicCommand",
                "--bootstrap-server",
                bootstrap,
                "--create",
                "--if-not-exists",
                "--topic",
                name,
                "--partitions",
                &partitions.to_string(),
                "--replication-factor",
                &rf,
            ],
        )
        .stdout(out.try_clone()?)
        .stderr(out)
        .spawn();
        children.push((*name, log_path, child));
    }
    let mut failed = false;
    for (name, log_path, child) in children {
        let ok = match child {
            Ok(mut c) => wait_with_limit(&mut c, settings.kafka_tool_timeout)?.is_some_and(|s| s.success()),
            Err(_) => false,
        };
        if !ok {
            failed = true;
            log!("creating topic {name} failed:");
            eprint!("{}", std::fs::read_to_string(&log_path).unwrap_or_default());
        }
    }
    if failed {
        bail!("kafka topic creation failed");
    }
    let made: String = absent.iter().map(|(n, p)| format!("{n}:{p} ")).collect();
    log!("kafka topics created: {made}(name:partitions, RF {rf})");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_exact_names_count_as_present() {
        let listed = vec!["qim.messages.v1".to_owned(), "qim.messages.dlq.v1x".into(), "__consumer_offsets".into()];
        assert_eq!(
            missing(&listed),
            [("qim.mailbox.dispatch.v1", 8), ("qim.messages.dlq.v1", 1), ("qim.mailbox.dlq.v1", 1)]
        );
        let all: Vec<String> = TOPICS.iter().map(|(n, _)| (*n).to_owned()).collect();
        assert!(missing(&all).is_empty());
    }
}
