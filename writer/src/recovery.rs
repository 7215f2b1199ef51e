//! The recovery loop: drives commits left behind by a crash (or a failed publication) to
//! COMMITTED, and collects the auxiliary facts of old committed commits.
//!
//! Every `interval`, commits reserved more than `grace` ago and not yet COMMITTED are read in
//! batches (oldest first) and each is driven forward by the same committer the API uses, so a
//! recovered commit is exactly the commit the client's retry would have produced.

use std::sync::Arc;
use std::time::Duration;

use qim_runtime::events::emit;
use qim_store::ids::UnixMillis;
use qim_store::MessageStore;
use tokio_util::sync::CancellationToken;

use crate::committer::DurableMessageCommitter;

use crate::events::{AuxCollected, CommitRecovered, RecoveryPassDone};

/// Commits read per scan.
const SCAN_BATCH: usize = 256;
/// Auxiliary facts collected per pass.
const GC_BATCH: usize = 1_000;

/// What one recovery pass did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Commits driven to COMMITTED.
    pub completed: usize,
    /// Commits that failed again (retried next pass).
    pub failed: usize,
}

/// Runs one pass: scans commits older than `grace` and drives each.
pub async fn recover_once(
    store: &dyn MessageStore,
    committer: &DurableMessageCommitter,
    grace: Duration,
) -> RecoveryReport {
    let mut report = RecoveryReport::default();
    let cutoff = UnixMillis(now_millis() - i64::try_from(grace.as_millis()).unwrap_or(i64::MAX));
    let commits = match store.scan_recoverable_commits(cutoff, SCAN_BATCH).await {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(error = %e, "recovery scan failed, retrying next pass");
            return report;
        }
    };
    let found = commits.len();
    for commit in commits {
        let state = commit.state.as_str();
        let message_id = commit.intent.message_id;
        match committer.drive(commit).await {
            Ok(_) => {
                report.completed += 1;
                emit(CommitRecovered { message_id, from_state: state, error: None });
            }
            Err(e) => {
                report.failed += 1;
                emit(CommitRecovered { message_id, from_state: state, error: Some(&e) });
            }
        }
    }
    emit(RecoveryPassDone { found, left: report.failed });
    match store.gc_committed_auxiliary(GC_BATCH).await {
        Ok(gc) => emit(AuxCollected { removed: gc.removed }),
        Err(e) => tracing::warn!(error = %e, "collecting committed auxiliary facts failed"),
    }
    report
}

/// Runs [`recover_once`] every `interval` until `shutdown`.
pub async fn run(
    store: Arc<dyn MessageStore>,
    committer: Arc<DurableMessageCommitter>,
    grace: Duration,
    interval: Duration,
    shutdown: CancellationToken,
) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        // A pass is never cut in half by shutdown: each drive is a sequence of durable steps.
        recover_once(store.as_ref(), &committer, grace).await;
    }
}

fn now_millis() -> i64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
}
