//! The mailbox contract suite against the Redis backend.
//!
//! Needs a running Redis: `QIM_TEST_REDIS_URL` (default `redis://127.0.0.1:6379/0`), started on
//! our machines by `deploy/local/stack up`. An unreachable Redis fails the tests; they never skip.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use qim_store::clock::ManualClock;
use qim_store::ids::{TenantId, UserId};
use qim_store::mailbox::{MailboxRetention, MailboxSeq};
use qim_store::redis::mailbox::RedisMailboxStore;
use qim_store::redis::RedisConfig;
use qim_store::testsuite::MailboxHarness;
use qim_store::MailboxStore;

#[path = "support/shared_redis.rs"]
mod shared_redis;

use shared_redis::{unique_namespace, unreachable, Cleanup};

/// Opens Redis stores, each in a fresh namespace, and keeps a typed handle for sabotage.
#[derive(Default)]
struct Redis {
    stores: Mutex<Vec<RedisMailboxStore>>,
    cleanup: Cleanup,
}

impl Redis {
    fn last(&self) -> RedisMailboxStore {
        self.stores.lock().unwrap().last().cloned().expect("a store was opened")
    }
}

/// Opens a store in a fresh namespace at `url` (deleted by `cleanup`); panics (never skips) when
/// Redis is unreachable.
async fn open_at(
    url: &str,
    retention: MailboxRetention,
    clock: Arc<ManualClock>,
    cleanup: &Cleanup,
) -> (RedisMailboxStore, RedisConfig) {
    let config = RedisConfig { url: url.to_owned(), namespace: unique_namespace() };
    cleanup.register(&config.namespace);
    match RedisMailboxStore::open(&config, retention, clock).await {
        Ok(store) => (store, config),
        Err(e) => panic!("{}", unreachable(url, &e)),
    }
}

#[async_trait]
impl MailboxHarness for Redis {
    async fn open(&self, retention: MailboxRetention, clock: Arc<ManualClock>) -> Arc<dyn MailboxStore> {
        let (store, _) = open_at(&shared_redis::url(), retention, clock, &self.cleanup).await;
        self.stores.lock().unwrap().push(store.clone());
        Arc::new(store)
    }

    async fn overwrite_group(
        &self,
        _: &Arc<dyn MailboxStore>,
        tenant: TenantId,
        user: UserId,
        seq: MailboxSeq,
        bytes: Vec<u8>,
    ) {
        self.last().sabotage_overwrite_group(tenant, user, seq, bytes).await.expect("overwriting a group in Redis");
    }
}

mod mailbox {
    use super::*;
    qim_store::mailbox_store_contract_suite!(Redis::default());
}

/// Redis-specific checks beyond the shared contract: exact seqs above 2^53, batch-wide ledger
/// planning, physical removal of expired groups and key lifetimes, concurrent writers and the
/// failure message when Redis is down.
mod redis_specific {
    use super::*;
    use qim_store::ids::{ConversationId, ConversationSeq, EventId, MessageId, UnixMillis, MILLIS_PER_DAY};
    use qim_store::mailbox::{end_of_day, MailboxEntry, MailboxEvent, MessageRef, ShardEpoch};
    use qim_store::message::MessageKind;
    use qim_store::testsuite::fixtures::{fresh_tenant, user, T0};
    use qim_store::ErrorKind;

    /// A store in a fresh namespace, the namespace's cleanup guard, and its clock.
    async fn open() -> (RedisMailboxStore, RedisConfig, Arc<ManualClock>, Cleanup) {
        let clock = Arc::new(ManualClock::new(T0));
        let cleanup = Cleanup::default();
        let (store, config) = open_at(&shared_redis::url(), MailboxRetention::default(), clock.clone(), &cleanup).await;
        (store, config, clock, cleanup)
    }

    async fn raw(config: &RedisConfig) -> redis::aio::MultiplexedConnection {
        let client = redis::Client::open(config.url.as_str()).expect("redis url");
        client.get_multiplexed_async_connection().await.expect("raw redis connection")
    }

    fn expiry(days: i64) -> UnixMillis {
        end_of_day(T0.plus_millis(days * MILLIS_PER_DAY))
    }

    fn entry(tenant: TenantId, u: UserId, s: MailboxSeq, expires_at: UnixMillis) -> MailboxEntry {
        let mut event_id = [0u8; 16];
        event_id[..8].copy_from_slice(&s.as_u64().to_be_bytes());
        MailboxEntry {
            tenant,
            user: u,
            seq: s,
            expires_at,
            event: MailboxEvent {
                ordinal: 0,
                event_id: EventId(event_id),
                message: MessageRef {
                    tenant,
                    conversation: ConversationId([3; 16]),
                    seq: ConversationSeq(1),
                    message_id: MessageId([4; 16]),
                    sender: user(999),
                    kind: MessageKind::Normal,
                    created_at: T0,
                },
            },
        }
    }

    fn positions(page: &qim_store::mailbox::MailboxPage) -> Vec<u64> {
        page.groups.iter().map(|g| g.seq.position()).collect()
    }

    /// Seqs of a high epoch exceed 2^53 (a Lua number would round them): they must stay exact.
    #[tokio::test]
    async fn seqs_above_two_to_the_53_stay_exact() {
        let (store, _, _, _cleanup) = open().await;
        let (t, epoch) = (fresh_tenant(), ShardEpoch(60_000));
        let s = |p: u64| MailboxSeq::new(epoch, p).unwrap();
        assert!(s(1).as_u64() > 1 << 53);
        let batch: Vec<_> = (1..=5).map(|p| entry(t, user(1), s(p), expiry(30))).collect();
        store.append_batch(&batch).await.unwrap();
        let page = store.range_scan(t, user(1), s(1), s(4), 10).await.unwrap();
        assert_eq!((positions(&page), page.covered), (vec![2, 3, 4], s(4)));
        assert_eq!(store.truncate_before(t, user(1), s(3)).await.unwrap(), s(3));
        match store.range_scan(t, user(1), s(2), s(9), 10).await {
            Err(qim_store::StoreError::CursorExpired { earliest }) => assert_eq!(earliest, s(3)),
            other => panic!("expected CursorExpired at {}, got {other:?}", s(3)),
        }
        let page = store.range_scan(t, user(1), s(3), s(9), 10).await.unwrap();
        assert_eq!(positions(&page), vec![4, 5]);
    }

    /// A ledger overflow of one user refuses the whole batch: the other user gets nothing.
    #[tokio::test]
    async fn a_ledger_overflow_anywhere_writes_nothing() {
        let (store, _, _, _cleanup) = open().await;
        let t = fresh_tenant();
        let seq = |p: u64| MailboxSeq::new(ShardEpoch(1), p).unwrap();
        let full: Vec<_> = (1..=32).map(|d| entry(t, user(2), seq(d as u64), expiry(d))).collect();
        store.append_batch(&full).await.unwrap();
        let batch = [entry(t, user(1), seq(40), expiry(5)), entry(t, user(2), seq(40), expiry(33))];
        let err = store.append_batch(&batch).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvariantViolation, "{err}");
        let top = seq(1 << 40);
        let page = store.range_scan(t, user(1), MailboxSeq::origin(ShardEpoch(1)), top, 10).await.unwrap();
        assert!(page.groups.is_empty(), "user 1 was written although user 2's ledger refused the batch");
        let page = store.range_scan(t, user(2), MailboxSeq::origin(ShardEpoch(1)), top, 100).await.unwrap();
        assert_eq!(page.groups.len(), 32);
    }

    /// Once a bucket expired and the gap covers it, its groups are removed from Redis.
    #[tokio::test]
    async fn expired_groups_are_removed_once_the_gap_covers_them() {
        let (store, config, clock, _cleanup) = open().await;
        let t = fresh_tenant();
        let seq = |p: u64| MailboxSeq::new(ShardEpoch(1), p).unwrap();
        store
            .append_batch(&[entry(t, user(1), seq(3), expiry(3)), entry(t, user(1), seq(5), expiry(1))])
            .await
            .unwrap();
        let groups_key = format!("{}:{{u:{}{}}}:groups", config.namespace, t.to_hex(), user(1).to_hex());
        let mut conn = raw(&config).await;
        let count = |c: &mut redis::aio::MultiplexedConnection| {
            let mut c = c.clone();
            let key = groups_key.clone();
            async move { redis::cmd("HLEN").arg(key).query_async::<u64>(&mut c).await.unwrap() }
        };
        assert_eq!(count(&mut conn).await, 2);
        let ttl: i64 = redis::cmd("PTTL").arg(&groups_key).query_async(&mut conn).await.unwrap();
        let latest = expiry(3).0 - T0.0 + MILLIS_PER_DAY;
        assert!(latest - 60_000 < ttl && ttl <= latest, "group keys live until the last bucket + a day: {ttl}");
        clock.set(expiry(1));
        let err = store.range_scan(t, user(1), MailboxSeq::origin(ShardEpoch(1)), seq(9), 10).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::CursorExpired);
        assert_eq!(count(&mut conn).await, 1, "the expired group is gone");
        let page = store.range_scan(t, user(1), seq(5), seq(9), 10).await.unwrap();
        assert_eq!((positions(&page), page.covered), (vec![], seq(9)));
        let page = store.range_scan(t, user(1), seq(2), seq(2), 10);
        assert_eq!(page.await.unwrap_err().kind(), ErrorKind::CursorExpired);
    }

    /// Concurrent writers of one user's mailbox all land (the meta check-and-set retries).
    #[tokio::test]
    async fn concurrent_writers_of_one_user_all_land() {
        let (store, _, _, _cleanup) = open().await;
        let t = fresh_tenant();
        let seq = |p: u64| MailboxSeq::new(ShardEpoch(1), p).unwrap();
        let mut tasks = tokio::task::JoinSet::new();
        for p in 1..=40u64 {
            let store = store.clone();
            tasks.spawn(
                async move { store.append_batch(&[entry(t, user(1), seq(p), expiry((p % 5) as i64 + 1))]).await },
            );
        }
        while let Some(done) = tasks.join_next().await {
            done.expect("task").expect("append_batch");
        }
        let page = store.range_scan(t, user(1), MailboxSeq::origin(ShardEpoch(1)), seq(100), 1000).await.unwrap();
        assert_eq!(positions(&page), (1..=40).collect::<Vec<_>>());
    }

    /// An unreachable Redis fails the test with directions, never a skip.
    #[tokio::test]
    #[should_panic(expected = "deploy/local/stack up")]
    async fn unreachable_redis_fails_naming_the_stack() {
        let clock = Arc::new(ManualClock::new(T0));
        open_at("redis://127.0.0.1:1/0", MailboxRetention::default(), clock, &Cleanup::default()).await;
    }
}
