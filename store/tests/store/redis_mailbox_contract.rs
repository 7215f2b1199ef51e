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

use crate::shared_redis;

use shared_redis::{unique_namespace, unreachable, Cleanup};

/// Opens Redis stores, each in a fresh namespace, and keeps a typed handle for sabotage.
struct Redis {
    url: String,
    stores: Mutex<Vec<RedisMailboxStore>>,
    cleanup: Cleanup,
}

impl Default for Redis {
    fn default() -> Self {
        Self::on(shared_redis::url())
    }
}

impl Redis {
    /// Stores on the Redis (or cluster) at `url`.
    fn on(url: String) -> Self {
        Self { url, stores: Mutex::default(), cleanup: Cleanup::default() }
    }

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
    cleanup.register_at(url, &config.namespace);
    match RedisMailboxStore::open(&config, retention, clock).await {
        Ok(store) => (store, config),
        Err(e) => panic!("{}", unreachable(url, &e)),
    }
}

#[async_trait]
impl MailboxHarness for Redis {
    async fn open(&self, retention: MailboxRetention, clock: Arc<ManualClock>) -> Arc<dyn MailboxStore> {
        let (store, _) = open_at(&self.url, retention, clock, &self.cleanup).await;
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

/// The same suite on the Redis Cluster.
mod mailbox_on_cluster {
    use super::*;
    qim_store::mailbox_store_contract_suite!(Redis::on(shared_redis::cluster_url()));
}

/// Redis-specific checks beyond the shared contract: exact seqs above 2^53, batch-wide ledger
/// planning, physical removal of expired groups and key lifetimes, concurrent writers and the
/// failure message when Redis is down.
mod redis_specific {
    use super::*;
    use qim_store::ids::{ConversationId, ConversationSeq, EventId, MessageId, UnixMillis, MILLIS_PER_DAY};
    use qim_store::mailbox::{
        end_of_day, lane_of, ChunkId, DispatchId, DispatchManifest, LaneId, MailboxEntry, MailboxEvent, MessageRef,
        ShardEpoch, ShardId,
    };
    use qim_store::message::MessageKind;
    use qim_store::testsuite::fixtures::{fresh_message_id, fresh_tenant, user, T0};
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
        let hour = 3_600_000;
        assert!(
            latest - 60_000 < ttl && ttl <= latest + hour,
            "group keys live until the last bucket + a day (extended an hour beyond): {ttl}"
        );
        // Another commit at the same `now` needs no more: the TTL only runs down (had it been
        // extended to exactly what was needed, the commit would set it again).
        let other_key = format!("{}:{{u:{}{}}}:groups", config.namespace, t.to_hex(), user(2).to_hex());
        store.append_batch(&[entry(t, user(2), seq(3), expiry(3))]).await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let first: i64 = redis::cmd("PTTL").arg(&other_key).query_async(&mut conn).await.unwrap();
        store.append_batch(&[entry(t, user(2), seq(4), expiry(3))]).await.unwrap();
        let second: i64 = redis::cmd("PTTL").arg(&other_key).query_async(&mut conn).await.unwrap();
        assert!(second <= first, "a commit within the hour leaves the TTL alone: {first} then {second}");
        clock.set(expiry(1));
        let err = store.range_scan(t, user(1), MailboxSeq::origin(ShardEpoch(1)), seq(9), 10).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::CursorExpired);
        assert_eq!(count(&mut conn).await, 1, "the expired group is gone");
        let page = store.range_scan(t, user(1), seq(5), seq(9), 10).await.unwrap();
        assert_eq!((positions(&page), page.covered), (vec![], seq(9)));
        let page = store.range_scan(t, user(1), seq(2), seq(2), 10);
        assert_eq!(page.await.unwrap_err().kind(), ErrorKind::CursorExpired);
    }

    /// One batch may bring a user more groups than one Lua call unpacks (the commit writes them
    /// 1000 per command), and as many may expire at once: all land, all are read back, and all
    /// leave Redis once the gap covers them.
    #[tokio::test]
    async fn thousands_of_one_users_groups_land_and_leave_together() {
        const N: u64 = 2_500;
        let (store, config, clock, _cleanup) = open().await;
        let t = fresh_tenant();
        let seq = |p: u64| MailboxSeq::new(ShardEpoch(1), p).unwrap();
        let batch: Vec<MailboxEntry> = (1..=N).map(|p| entry(t, user(1), seq(p), expiry(1))).collect();
        store.append_batch(&batch).await.unwrap();
        let page = store.range_scan(t, user(1), MailboxSeq::origin(ShardEpoch(1)), seq(N), N as usize).await.unwrap();
        assert_eq!(positions(&page), (1..=N).collect::<Vec<_>>());

        let groups_key = format!("{}:{{u:{}{}}}:groups", config.namespace, t.to_hex(), user(1).to_hex());
        let mut conn = raw(&config).await;
        let held: u64 = redis::cmd("HLEN").arg(&groups_key).query_async(&mut conn).await.unwrap();
        assert_eq!(held, N);
        clock.set(expiry(1));
        store.append_batch(&[entry(t, user(1), seq(N + 1), expiry(3))]).await.unwrap();
        let held: u64 = redis::cmd("HLEN").arg(&groups_key).query_async(&mut conn).await.unwrap();
        assert_eq!(held, 1, "every expired group left with one commit");
        let err = store.range_scan(t, user(1), seq(1), seq(N + 1), 10).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::CursorExpired);
        let page = store.range_scan(t, user(1), seq(N), seq(N + 1), 10).await.unwrap();
        assert_eq!(positions(&page), vec![N + 1]);
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

    /// A store plans a user's commit on the meta it wrote last, without reading it. When Redis
    /// rolled the meta back under it and another store wrote since, the cached meta must be
    /// refused however many changes were lost: the other store's day stays in the ledger. (With
    /// a counter for the generation, the other store's write would repeat the cached generation
    /// and the cached plan would drop its day.)
    #[tokio::test]
    async fn a_cached_meta_is_refused_after_redis_rolled_it_back_and_another_store_wrote() {
        let (a, config, clock, _cleanup) = open().await;
        let b = RedisMailboxStore::open(&config, MailboxRetention::default(), clock).await.expect("a second store");
        let (t, u) = (fresh_tenant(), user(1));
        let seq = |p: u64| MailboxSeq::new(ShardEpoch(1), p).unwrap();
        let mut con = raw(&config).await;
        b.append_batch(&[entry(t, u, seq(1), expiry(1))]).await.unwrap();
        let metas: Vec<String> =
            redis::cmd("KEYS").arg(format!("{}:*:meta", config.namespace)).query_async(&mut con).await.unwrap();
        let [meta] = &metas[..] else { panic!("one user's meta, found {metas:?}") };
        let snapshot: Vec<(Vec<u8>, Vec<u8>)> = redis::cmd("HGETALL").arg(meta).query_async(&mut con).await.unwrap();
        a.append_batch(&[entry(t, u, seq(2), expiry(2))]).await.unwrap();
        // Redis comes back with the meta as it was before `a` wrote (an older file loaded).
        let mut restore = redis::pipe();
        restore.atomic().cmd("DEL").arg(meta).ignore().cmd("HSET").arg(meta).arg(&snapshot).ignore();
        restore.query_async::<()>(&mut con).await.unwrap();
        b.append_batch(&[entry(t, u, seq(3), expiry(3))]).await.unwrap();
        a.append_batch(&[entry(t, u, seq(4), expiry(4))]).await.unwrap();
        let blob: Vec<u8> = redis::cmd("HGET").arg(meta).arg("ledger").query_async(&mut con).await.unwrap();
        let ledger = qim_store::codec::RetentionLedger::decode(&blob).unwrap();
        let days: Vec<i64> = ledger.items().iter().map(|i| i64::from(i.day)).collect();
        assert_eq!(days, [1, 3, 4].map(|n| expiry(n).day()), "day 2 was rolled back, day 3 must stay");
    }

    /// A dispatch in `shard` of a fresh message to one recipient.
    fn one_recipient_dispatch(t: TenantId, shard: ShardId, recipient: UserId) -> DispatchManifest {
        let message = MessageRef {
            tenant: t,
            conversation: ConversationId([3; 16]),
            seq: ConversationSeq(1),
            message_id: fresh_message_id(),
            sender: user(999),
            kind: MessageKind::Normal,
            created_at: T0,
        };
        DispatchManifest::new(DispatchId { message_id: message.message_id, shard }, message, vec![recipient])
    }

    /// A non-numeric lane watermark, or a watermark key of the wrong type, is `CorruptEntry`
    /// alike through `lane_watermark`, `advance_watermark` and GC (never `Unavailable`).
    #[tokio::test]
    async fn corrupt_watermarks_are_corrupt_entries() {
        let (store, config, _, _cleanup) = open().await;
        let mut conn = raw(&config).await;
        let l = LaneId::new(4).unwrap();
        let wm = |shard: u16| format!("{}:{{d:{shard}}}:wm", config.namespace);

        let not_a_number = ShardId(11);
        let t = fresh_tenant();
        store.begin_dispatch(ShardEpoch(1), &one_recipient_dispatch(t, not_a_number, user(1)), 7).await.unwrap();
        let _: () = redis::cmd("HSET").arg(wm(11)).arg(l.get()).arg("seven").query_async(&mut conn).await.unwrap();
        let err = store.lane_watermark(not_a_number, l).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::CorruptEntry, "{err}");
        let err = store.advance_watermark(not_a_number, l, 7).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::CorruptEntry, "{err}");
        for lane in 0..64u8 {
            let value = if lane == l.get() { "seven" } else { "7" };
            let _: () = redis::cmd("HSET").arg(wm(11)).arg(lane).arg(value).query_async(&mut conn).await.unwrap();
        }
        let err = store.gc_completed_dispatches(not_a_number, i64::MAX, 10).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::CorruptEntry, "{err}");

        let wrong_type = ShardId(12);
        let _: () = redis::cmd("SET").arg(wm(12)).arg("not a hash").query_async(&mut conn).await.unwrap();
        let err = store.lane_watermark(wrong_type, l).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::CorruptEntry, "{err}");
        let err = store.advance_watermark(wrong_type, l, 7).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::CorruptEntry, "{err}");
        let err = store.gc_completed_dispatches(wrong_type, i64::MAX, 10).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::CorruptEntry, "{err}");
    }

    /// A non-numeric chunk count in a dispatch row is `CorruptEntry` for `mark_chunk_completed`.
    #[tokio::test]
    async fn a_corrupt_chunk_count_is_a_corrupt_entry() {
        let (store, config, _, _cleanup) = open().await;
        let (t, shard) = (fresh_tenant(), ShardId(13));
        let m = one_recipient_dispatch(t, shard, user(1));
        store.begin_dispatch(ShardEpoch(1), &m, 1).await.unwrap();
        let l = lane_of(&t, &user(1));
        let row = format!("{}:{{d:13}}:disp:{}", config.namespace, m.id.message_id.to_hex());
        let mut conn = raw(&config).await;
        let _: () =
            redis::cmd("HSET").arg(&row).arg(format!("n:{}", l.get())).arg("one").query_async(&mut conn).await.unwrap();
        let err = store.mark_chunk_completed(m.id, ChunkId { lane: l, index: 0 }).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::CorruptEntry, "{err}");
    }

    /// A dispatch an earlier release began (its row has the manifest but no digest) still takes
    /// chunk writes of its manifest and refuses another one, and its next observation stores the
    /// digest.
    #[tokio::test]
    async fn a_dispatch_begun_without_a_digest_is_checked_whole() {
        let (store, config, _, _cleanup) = open().await;
        let (t, shard) = (fresh_tenant(), ShardId(16));
        let m = one_recipient_dispatch(t, shard, user(1));
        let receipt = store.begin_dispatch(ShardEpoch(1), &m, 1).await.unwrap();
        let row = format!("{}:{{d:16}}:disp:{}", config.namespace, m.id.message_id.to_hex());
        let mut conn = raw(&config).await;
        let digest = |mut conn: redis::aio::MultiplexedConnection| {
            let row = row.clone();
            async move { redis::cmd("HGET").arg(row).arg("digest").query_async::<Option<String>>(&mut conn).await }
        };
        let stored = digest(conn.clone()).await.unwrap();
        assert_eq!(stored.as_ref().map(String::len), Some(32), "a dispatch begun now has a digest: {stored:?}");
        let _: () = redis::cmd("HDEL").arg(&row).arg("digest").query_async(&mut conn).await.unwrap();

        let chunk = ChunkId { lane: lane_of(&t, &user(1)), index: 0 };
        let forged = DispatchManifest::new(m.id, m.message.clone(), vec![user(2)]);
        let err = store.append_chunk(&receipt, &forged, chunk).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::DispatchConflict, "{err}");
        assert_eq!(store.append_chunk(&receipt, &m, chunk).await.unwrap(), 1);

        let again = store.begin_dispatch(ShardEpoch(1), &m, 2).await.unwrap();
        assert!(again.duplicate);
        assert_eq!(digest(conn.clone()).await.unwrap(), stored, "the next observation stores the digest");
        let err = store.append_chunk(&receipt, &forged, chunk).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::DispatchConflict, "{err}");
    }

    /// A chunk named twice in one `mark_chunks_completed` is marked once: its lane's work count
    /// goes down by one, not two (the script dedupes within the call).
    #[tokio::test]
    async fn a_chunk_named_twice_in_one_mark_counts_down_once() {
        let (store, config, _, _cleanup) = open().await;
        let (t, shard) = (fresh_tenant(), ShardId(15));
        let m = one_recipient_dispatch(t, shard, user(1));
        store.begin_dispatch(ShardEpoch(1), &m, 1).await.unwrap();
        let chunk = ChunkId { lane: lane_of(&t, &user(1)), index: 0 };
        store.mark_chunks_completed(&[(m.id, chunk), (m.id, chunk)]).await.unwrap();
        store.mark_chunks_completed(&[(m.id, chunk)]).await.unwrap();
        let mut conn = raw(&config).await;
        let left: String = redis::cmd("HGET")
            .arg(format!("{}:{{d:15}}:work", config.namespace))
            .arg(format!("{}:{}", m.id.message_id.to_hex(), chunk.lane.get()))
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(left, "0");
        assert!(store.chunk_completed(m.id, chunk).await.unwrap());
    }

    /// A dispatch lists its lanes with work in the shard's work hash, and an advance reads only
    /// those lanes' counts; one an earlier release began lists none and has every lane on the way
    /// read. Both hold their incomplete lane and let every other lane pass; both pass once
    /// complete, and GC leaves nothing of them.
    #[tokio::test]
    async fn advances_read_the_lanes_a_dispatch_lists_and_every_lane_of_one_that_lists_none() {
        let (store, config, _, _cleanup) = open().await;
        let (t, shard, epoch) = (fresh_tenant(), ShardId(17), ShardEpoch(1));
        let work = format!("{}:{{d:17}}:work", config.namespace);
        let mut conn = raw(&config).await;
        let lane_a = lane_of(&t, &user(1));
        let other = (2..).map(user).find(|u| lane_of(&t, u) != lane_a).expect("a user in another lane");
        let (a, b) = (one_recipient_dispatch(t, shard, user(1)), one_recipient_dispatch(t, shard, other));
        let lane_b = lane_of(&t, &other);
        store.begin_dispatch(epoch, &a, 1).await.unwrap();
        store.begin_dispatch(epoch, &b, 2).await.unwrap();
        let listed = |m: &DispatchManifest| format!("{}:lanes", m.id.message_id.to_hex());
        let lanes: Option<String> = redis::cmd("HGET").arg(&work).arg(listed(&a)).query_async(&mut conn).await.unwrap();
        assert_eq!(lanes, Some(lane_a.get().to_string()), "a lists its one lane with work");
        let _: () = redis::cmd("HDEL").arg(&work).arg(listed(&b)).query_async(&mut conn).await.unwrap();

        let everywhere: Vec<(LaneId, u64)> = LaneId::all().map(|l| (l, 2)).collect();
        for ((lane, _), answer) in everywhere.iter().zip(store.advance_watermarks(shard, &everywhere).await) {
            if *lane == lane_a || *lane == lane_b {
                assert_eq!(answer.unwrap_err().kind(), ErrorKind::Conflict, "lane {} has incomplete work", lane.get());
            } else {
                assert_eq!(answer.unwrap().through, Some(2), "lane {} has no work in either", lane.get());
            }
        }
        let chunks = [(a.id, ChunkId { lane: lane_a, index: 0 }), (b.id, ChunkId { lane: lane_b, index: 0 })];
        store.mark_chunks_completed(&chunks).await.unwrap();
        for answer in store.advance_watermarks(shard, &[(lane_a, 2), (lane_b, 2)]).await {
            assert_eq!(answer.unwrap().through, Some(2), "complete work is passed");
        }
        assert_eq!(store.gc_completed_dispatches(shard, i64::MAX, 10).await.unwrap(), 2);
        let left: i64 = redis::cmd("HLEN").arg(&work).query_async(&mut conn).await.unwrap();
        assert_eq!(left, 0, "GC leaves no work field of either, their lane lists included");
    }

    /// Lanes of one call whose ways differ: a source that lies on neither lane's way (between
    /// their windows) holds neither, an incomplete source holds only the lanes it lies on the
    /// way of and has work in, and once every lane of a call is held the sources after them (more
    /// than one script inspects) move none of them.
    #[tokio::test]
    async fn an_advance_holds_each_lane_only_at_its_own_incomplete_work() {
        let (store, _, _, _cleanup) = open().await;
        let (t, shard, epoch) = (fresh_tenant(), ShardId(19), ShardEpoch(1));
        let lane_a = lane_of(&t, &user(1));
        let other = (2..).map(user).find(|u| lane_of(&t, u) != lane_a).expect("a user in another lane");
        let lane_b = lane_of(&t, &other);
        // Offsets 1..=3 have work in lane a, 4..=300 in lane b.
        let mut ids = Vec::new();
        for offset in 1..=300u64 {
            let recipient = if offset <= 3 { user(1) } else { other };
            let m = one_recipient_dispatch(t, shard, recipient);
            store.begin_dispatch(epoch, &m, offset).await.unwrap();
            ids.push(m.id);
        }
        let mark = |offset: u64| {
            let lane = if offset <= 3 { lane_a } else { lane_b };
            (ids[offset as usize - 1], ChunkId { lane, index: 0 })
        };
        // Lane b moves to 3 over lane a's incomplete work; lane a is held at offset 1.
        let answers = store.advance_watermarks(shard, &[(lane_a, 3), (lane_b, 3)]).await;
        assert_eq!(answers[0].as_ref().unwrap_err().kind(), ErrorKind::Conflict);
        assert_eq!(answers[1].as_ref().unwrap().through, Some(3), "lane b has no work in 1..=3");
        // Offsets 2 and 3 lie on neither lane's way once lane a's window ends at 1: complete 1
        // only, and hold lane b at 4.
        store.mark_chunks_completed(&[mark(1)]).await.unwrap();
        let answers = store.advance_watermarks(shard, &[(lane_a, 1), (lane_b, 300)]).await;
        assert_eq!(answers[0].as_ref().unwrap().through, Some(1));
        let held = answers[1].as_ref().unwrap_err();
        assert_eq!(held.kind(), ErrorKind::Conflict);
        assert!(held.to_string().contains("offset 4"), "{held}");
        // Both lanes held at their first source; nothing after moves either.
        let answers = store.advance_watermarks(shard, &[(lane_a, 300), (lane_b, 300)]).await;
        for (answer, at) in answers.iter().zip(["offset 2", "offset 4"]) {
            let err = answer.as_ref().unwrap_err();
            assert!(err.kind() == ErrorKind::Conflict && err.to_string().contains(at), "{err}");
        }
        assert_eq!(store.lane_watermark(shard, lane_a).await.unwrap().through, Some(1));
        assert_eq!(store.lane_watermark(shard, lane_b).await.unwrap().through, Some(3));
        // Complete: both pass everything (lane a over lane b's 297 sources, more than one call).
        let rest: Vec<_> = (2..=300).map(mark).collect();
        store.mark_chunks_completed(&rest).await.unwrap();
        for answer in store.advance_watermarks(shard, &[(lane_a, 300), (lane_b, 300)]).await {
            assert_eq!(answer.unwrap().through, Some(300));
        }
    }

    /// GC forgets the dispatches it selects in pipelines of scripts (more than one here), and
    /// after `SCRIPT FLUSH` (a server of the test's own: the script cache is the server's) each
    /// call loads its script again. Every dispatch is collected with every offset it was
    /// observed at, its duplicates' included; the shard is left with its watermarks alone.
    #[tokio::test]
    async fn gc_collects_every_selected_dispatch_and_offset_after_the_scripts_were_flushed() {
        const N: u64 = 150;
        let redis = qim_store::testsuite::private_redis::PrivateRedis::start();
        let (clock, cleanup) = (Arc::new(ManualClock::new(T0)), Cleanup::default());
        let (store, config) = open_at(&redis.url(), MailboxRetention::default(), clock.clone(), &cleanup).await;
        let mut conn = raw(&config).await;
        let (t, shard) = (fresh_tenant(), ShardId(21));
        let (mut manifests, mut marks) = (Vec::new(), Vec::new());
        for offset in 1..=N {
            let recipient = user((offset % 7) as u32 + 1);
            let m = one_recipient_dispatch(t, shard, recipient);
            store.begin_dispatch(ShardEpoch(1), &m, offset).await.unwrap();
            marks.push((m.id, ChunkId { lane: lane_of(&t, &recipient), index: 0 }));
            manifests.push(m);
        }
        // Every tenth observed again.
        let mut end = N;
        for m in manifests.iter().step_by(10) {
            end += 1;
            assert!(store.begin_dispatch(ShardEpoch(1), m, end).await.unwrap().duplicate);
        }
        store.mark_chunks_completed(&marks).await.unwrap();
        let all: Vec<(LaneId, u64)> = LaneId::all().map(|lane| (lane, end)).collect();
        for answer in store.advance_watermarks(shard, &all).await {
            assert_eq!(answer.unwrap().through, Some(end));
        }
        redis::cmd("SCRIPT").arg("FLUSH").query_async::<()>(&mut conn).await.expect("SCRIPT FLUSH");
        clock.advance(1000);
        let later = qim_store::clock::Clock::now(clock.as_ref()).0 + 1;
        assert_eq!(store.gc_completed_dispatches(shard, later, 1_000).await.unwrap(), N as usize);
        assert_eq!(store.gc_completed_dispatches(shard, later, 1_000).await.unwrap(), 0, "nothing is left to collect");
        let mut left: Vec<String> =
            redis::cmd("KEYS").arg(format!("{}:{{d:21}}:*", config.namespace)).query_async(&mut conn).await.unwrap();
        left.sort();
        assert_eq!(left, vec![format!("{}:{{d:21}}:wm", config.namespace)], "only the watermarks are left");
    }

    /// One `advance_watermark` crosses more sources than one script inspects (256): it stops at
    /// the first incomplete one anywhere, and passes all of them once complete. All 64 lanes
    /// advanced together (one script per round trip) answer each on its own: the incomplete lane
    /// is refused at its offset, every other lane passes every source. GC then leaves nothing of
    /// the shard but its watermarks.
    #[tokio::test]
    async fn advance_crosses_more_sources_than_one_batch() {
        const N: u64 = 1200;
        let (store, config, clock, _cleanup) = open().await;
        let (t, shard) = (fresh_tenant(), ShardId(14));
        let l = lane_of(&t, &user(1));
        let mut ids = Vec::new();
        for offset in 1..=N {
            let m = one_recipient_dispatch(t, shard, user(1));
            store.begin_dispatch(ShardEpoch(1), &m, offset).await.unwrap();
            ids.push(m.id);
        }
        let mut tasks = tokio::task::JoinSet::new();
        for (i, id) in ids.iter().copied().enumerate() {
            if i as u64 + 1 == 1100 {
                continue;
            }
            let store = store.clone();
            tasks.spawn(async move { store.mark_chunk_completed(id, ChunkId { lane: l, index: 0 }).await });
        }
        while let Some(done) = tasks.join_next().await {
            done.expect("task").expect("mark_chunk_completed");
        }
        let err = store.advance_watermark(shard, l, N).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Conflict, "{err}");
        assert!(err.to_string().contains("offset 1100"), "{err}");
        let through = store.lane_watermark(shard, l).await.unwrap().through;
        assert!(through.is_none_or(|w| w < 1100), "the watermark passed the incomplete offset: {through:?}");
        let all: Vec<(LaneId, u64)> = LaneId::all().map(|lane| (lane, N)).collect();
        let answers = store.advance_watermarks(shard, &all).await;
        assert_eq!(answers.len(), all.len());
        for ((lane, _), answer) in all.iter().zip(answers) {
            if *lane == l {
                let err = answer.unwrap_err();
                assert_eq!(err.kind(), ErrorKind::Conflict, "{err}");
                assert!(err.to_string().contains("offset 1100"), "{err}");
            } else {
                assert_eq!(answer.unwrap().through, Some(N), "lane {}", lane.get());
                assert_eq!(store.lane_watermark(shard, *lane).await.unwrap().through, Some(N));
            }
        }
        let through = store.lane_watermark(shard, l).await.unwrap().through;
        assert!(through.is_none_or(|w| w < 1100), "the watermark passed the incomplete offset: {through:?}");
        store.mark_chunk_completed(ids[1099], ChunkId { lane: l, index: 0 }).await.unwrap();
        assert_eq!(store.advance_watermark(shard, l, N).await.unwrap().through, Some(N));
        assert_eq!(store.lane_watermark(shard, l).await.unwrap().through, Some(N));
        clock.advance(1000);
        let later = qim_store::clock::Clock::now(clock.as_ref()).0 + 1;
        assert_eq!(store.gc_completed_dispatches(shard, later, 10_000).await.unwrap(), N as usize);
        let mut conn = raw(&config).await;
        let mut left: Vec<String> =
            redis::cmd("KEYS").arg(format!("{}:{{d:14}}:*", config.namespace)).query_async(&mut conn).await.unwrap();
        left.sort();
        assert_eq!(left, vec![format!("{}:{{d:14}}:wm", config.namespace)]);
    }

    /// An unreachable Redis fails the test with directions, never a skip.
    #[tokio::test]
    #[should_panic(expected = "deploy/local/stack up")]
    async fn unreachable_redis_fails_naming_the_stack() {
        let clock = Arc::new(ManualClock::new(T0));
        open_at("redis://127.0.0.1:1/0", MailboxRetention::default(), clock, &Cleanup::default()).await;
    }
}
