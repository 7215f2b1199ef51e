//! Start-up steps that wait for their servers: a busy, restarting or not-yet-started server
//! delays a service's start, it does not fail it.
//!
//! [`Startup::step`] runs one step (connect, prepare, check a topic) until it succeeds. A
//! failure the step's error calls transient ([`is_transient`]: a store's `Unavailable`, or a
//! [`Unreachable`] server) is retried with exponential backoff and jitter, from 200 ms up to 5 s
//! between attempts, each failed attempt logged with the step's name, until the service's
//! start-up deadline (`QIM_STARTUP_TIMEOUT_SECS`); any other failure (an unmigrated keyspace, a
//! topic with the wrong partitions) ends the start at once.

use std::future::Future;
use std::time::{Duration, Instant};

use backon::{ExponentialBuilder, Retryable};

use qim_store::error::StoreError;

/// A server that did not answer (Kafka, say: its client reports strings): a transient failure.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Unreachable(pub String);

/// Whether `err` is worth retrying: a store error of a retryable kind, or [`Unreachable`],
/// anywhere in its chain.
pub fn is_transient(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause.downcast_ref::<StoreError>().is_some_and(|e| e.kind().is_retryable())
            || cause.downcast_ref::<Unreachable>().is_some()
    })
}

/// The start-up deadline every step of one service's start shares.
#[derive(Clone, Copy, Debug)]
pub struct Startup {
    deadline: Instant,
}

impl Startup {
    /// A start that may take up to `timeout` in all.
    pub fn new(timeout: Duration) -> Self {
        Self { deadline: Instant::now() + timeout }
    }

    /// Runs `attempt` until it succeeds, retrying transient failures (see the module docs);
    /// `what` names the step in logs and in the final error.
    pub async fn step<T, F, Fut>(&self, what: &str, attempt: F) -> anyhow::Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = anyhow::Result<T>>,
    {
        let began = Instant::now();
        let remaining = self.deadline.saturating_duration_since(began);
        let backoff = ExponentialBuilder::default()
            .with_min_delay(Duration::from_millis(200))
            .with_max_delay(Duration::from_secs(5))
            .with_jitter()
            .without_max_times()
            .with_total_delay(Some(remaining));
        let mut failures = 0u32;
        let result = attempt
            .retry(backoff)
            .when(|e| is_transient(e) && Instant::now() < self.deadline)
            .notify(|e, retry_in| {
                failures += 1;
                tracing::warn!(step = what, attempt = failures, error = %format!("{e:#}"), retry_in = ?retry_in, "start-up step failed; retrying");
            })
            .await;
        match result {
            Ok(value) => {
                if failures > 0 {
                    tracing::info!(step = what, attempts = failures + 1, took = ?began.elapsed(), "start-up step succeeded after retrying");
                }
                Ok(value)
            }
            Err(e) if failures > 0 && is_transient(&e) => {
                Err(e.context(format!("{what}: still failing after {failures} retries within the start-up deadline")))
            }
            Err(e) => Err(e.context(what.to_owned())),
        }
    }
}

/// Opens the message store of a migrated keyspace: a session (transient while the server does
/// not answer), then the schema (an unmigrated keyspace is a permanent refusal naming
/// `migrate_command`), then the prepared statements.
pub async fn open_scylla_messages(
    config: &qim_store::scylla::ScyllaConfig,
    policy: qim_store::retention::RetentionPolicy,
    clock: std::sync::Arc<dyn qim_store::clock::Clock>,
    migrate_command: &str,
) -> anyhow::Result<qim_store::scylla::ScyllaMessageStore> {
    use anyhow::Context;
    let hosts = config.hosts.join(",");
    let session =
        qim_store::scylla::open_session(config).await.with_context(|| format!("connecting to scylla at {hosts}"))?;
    let schema = qim_store::scylla::readiness(&session, config).await.context("reading the scylla schema")?;
    if !schema.is_ready() {
        anyhow::bail!("scylla keyspace {} is not ready: {schema:?}; run `{migrate_command}`", config.keyspace);
    }
    qim_store::scylla::ScyllaMessageStore::with_session(session, config, policy, clock)
        .await
        .with_context(|| format!("preparing the statements of keyspace {}", config.keyspace))
}
