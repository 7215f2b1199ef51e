//! The hot-tier expiry loop (ADR-0019): every 5 seconds, drains history records whose expiry
//! has passed, in batches, until a batch comes back short.

use std::sync::Arc;
use std::time::Duration;

use qim_runtime::events::emit;
use qim_store::MessageStore;
use tokio_util::sync::CancellationToken;

use crate::events::ExpiryDrained;

/// How often the loop runs (ADR-0019).
pub const EXPIRY_INTERVAL: Duration = Duration::from_secs(5);
/// Records removed per store call.
pub const EXPIRY_BATCH: usize = 500;
/// Batches per pass at most, so one pass never monopolises the store.
const MAX_BATCHES_PER_PASS: usize = 100;

/// Drains expired records `batch` at a time until a short batch; returns how many were removed.
pub async fn drain_once(store: &dyn MessageStore, batch: usize) -> usize {
    let mut drained = 0;
    for _ in 0..MAX_BATCHES_PER_PASS {
        match store.gc_expired_history(batch).await {
            Ok(report) => {
                drained += report.removed;
                emit(ExpiryDrained { removed: report.removed, orphans_cleaned: report.orphans_cleaned });
                if report.removed < batch {
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
        drain_once(store.as_ref(), EXPIRY_BATCH).await;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use qim_store::clock::ManualClock;
    use qim_store::ids::{ClientMessageId, ConversationId, MessageId, TenantId, UnixMillis, UserId};
    use qim_store::memory::MemoryMessageStore;
    use qim_store::message::{CommitKey, CommitRequest, MessageKind, Publication};
    use qim_store::retention::{RetentionClass, RetentionPolicy, EPHEMERAL_MILLIS};
    use qim_store::MessageStore;

    use super::*;

    async fn commit(store: &MemoryMessageStore, n: u8, retention: RetentionClass) {
        let request = CommitRequest {
            key: CommitKey {
                tenant: TenantId([1; 16]),
                sender: UserId([2; 16]),
                client_message_id: ClientMessageId::new(format!("m{n}")).unwrap(),
            },
            conversation: ConversationId([3; 16]),
            kind: MessageKind::Normal,
            retention,
            payload: vec![n],
        };
        let c = store.reserve(&request, MessageId([n; 16])).await.unwrap();
        store.put_record(&c.intent).await.unwrap();
        let publication = Publication { partition: 0, offset: i64::from(n) };
        store.mark_outbox_published(&request.key, c.intent.message_id, publication).await.unwrap();
        store.mark_committed(&request.key, c.intent.message_id).await.unwrap();
    }

    #[tokio::test]
    async fn a_pass_drains_exactly_the_expired_records_in_batches() {
        let clock = Arc::new(ManualClock::new(UnixMillis(1_700_000_000_000)));
        let store = MemoryMessageStore::new(RetentionPolicy::with_default_days(30).unwrap(), clock.clone());
        for n in 0..250 {
            commit(&store, n, RetentionClass::Ephemeral24h).await;
        }
        commit(&store, 251, RetentionClass::Default).await;
        commit(&store, 252, RetentionClass::ComplianceHold).await;
        assert_eq!(drain_once(&store, 7).await, 0, "nothing has expired yet");
        clock.advance(EPHEMERAL_MILLIS + 1);
        assert_eq!(drain_once(&store, 7).await, 250, "every ephemeral record, batch after batch");
        assert_eq!(drain_once(&store, 7).await, 0, "a second pass finds nothing");
    }
}
