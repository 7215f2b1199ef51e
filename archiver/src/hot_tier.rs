//! The archiver's hot-tier duties (Redis backend only): the trim of the hot window and the
//! gap rechecks of the archived watermarks.
//!
//! The trim runs here, not in the writer: it can only ever remove what the archive holds, and
//! the archiver is the process that knows when that changes; a stalled archiver stops both the
//! watermarks and the trim together (ADR-0019). The writer's store must own the trim window
//! (`TieredMessageStore::new` / `RedisMessageStore::with_trim_window`), so every COMMITTED
//! record is registered for the trim. Several archivers may trim at once: a trim step removes
//! a record only at or below its watermark and is idempotent.

use std::sync::Arc;
use std::time::Duration;

use qim_runtime::events::emit;
use qim_store::redis::RedisMessageStore;
use tokio_util::sync::CancellationToken;

use crate::events::{HotTierTrimFailed, HotTierTrimmed};
use crate::watermark::Watermarks;

/// Records removed per trim call.
pub const TRIM_BATCH: usize = 500;
/// Trim calls per pass at most, so one pass never monopolises Redis.
const MAX_TRIM_CALLS_PER_PASS: usize = 100;
/// How often due gap rechecks are looked for.
pub const RECHECK_INTERVAL: Duration = Duration::from_secs(2);
/// Conversations rechecked per look.
const RECHECK_BATCH: usize = 200;

/// One trim pass: trims until a call comes back short; returns how many records went.
pub async fn trim_once(hot: &RedisMessageStore) -> usize {
    let mut trimmed = 0;
    for _ in 0..MAX_TRIM_CALLS_PER_PASS {
        match hot.trim_hot_history(TRIM_BATCH).await {
            Ok(report) => {
                trimmed += report.trimmed;
                emit(HotTierTrimmed { trimmed: report.trimmed, waiting_for_archive: report.waiting_for_archive });
                if report.trimmed < TRIM_BATCH {
                    break;
                }
            }
            Err(error) => {
                emit(HotTierTrimFailed { error: &error });
                break;
            }
        }
    }
    trimmed
}

/// Runs [`trim_once`] every `interval` until `shutdown`.
pub async fn run_trim(hot: RedisMessageStore, interval: Duration, shutdown: CancellationToken) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        let n = trim_once(&hot).await;
        if n > 0 {
            tracing::info!(trimmed = n, "hot tier trimmed");
        }
    }
}

/// Revisits conversations whose watermark waits on a gap, every [`RECHECK_INTERVAL`].
pub async fn run_rechecks(watermarks: Arc<Watermarks>, shutdown: CancellationToken) {
    let mut tick = tokio::time::interval(RECHECK_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        if let Err(e) = watermarks.recheck_due(RECHECK_BATCH).await {
            tracing::warn!(error = %e, "rechecking archived watermarks failed, retrying next pass");
        }
    }
}
