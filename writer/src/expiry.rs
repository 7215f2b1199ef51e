//! The hot-tier expiry loop (ADR-0019): every 5 seconds, drains history records whose expiry
//! has passed, in batches, until a batch comes back short.

use std::sync::Arc;
use std::time::Duration;

use metrics::counter;
use qim_store::MessageStore;
use tokio_util::sync::CancellationToken;

use crate::metrics::EXPIRY_DRAINED;

/// How often the loop runs (ADR-0019).
pub const EXPIRY_INTERVAL: Duration = Duration::from_secs(5);
/// Records removed per store call.
pub const EXPIRY_BATCH: usize = 500;
/// Batches per pass at most, so one pass never monopolises the store.
const MAX_BATCHES_PER_PASS: usize = 100;

/// Drains expired records until a short batch; returns how many were removed.
pub async fn drain_once(store: &dyn MessageStore) -> usize {
    let mut drained = 0;
    for _ in 0..MAX_BATCHES_PER_PASS {
        match store.gc_expired_history(EXPIRY_BATCH).await {
            Ok(report) => {
                drained += report.removed;
                counter!(EXPIRY_DRAINED).increment(report.removed as u64);
                if report.orphans_cleaned > 0 {
                    tracing::warn!(orphans = report.orphans_cleaned, "expiry cleaned index entries without records");
                }
                if report.removed < EXPIRY_BATCH {
                    break;
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "draining expired history failed, retrying next pass");
                break;
            }
        }
    }
    drained
}

/// Runs [`drain_once`] every [`EXPIRY_INTERVAL`] until `shutdown`.
pub async fn run(store: Arc<dyn MessageStore>, shutdown: CancellationToken) {
    let mut tick = tokio::time::interval(EXPIRY_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        drain_once(store.as_ref()).await;
    }
}
