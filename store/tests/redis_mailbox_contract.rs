//! The mailbox contract suite against the Redis backend.
//!
//! Needs a running Redis: `QIM_TEST_REDIS_URL` (default `redis://127.0.0.1:6379/0`), started on
//! our machines by `deploy/local/stack up`. An unreachable Redis fails the tests; they never skip.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use qim_store::clock::ManualClock;
use qim_store::ids::{TenantId, UserId};
use qim_store::mailbox::{MailboxRetention, MailboxSeq};
use qim_store::redis::mailbox::RedisMailboxStore;
use qim_store::redis::RedisConfig;
use qim_store::testsuite::MailboxHarness;
use qim_store::MailboxStore;

const URL_VAR: &str = "QIM_TEST_REDIS_URL";
const DEFAULT_URL: &str = "redis://127.0.0.1:6379/0";

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A namespace no other store (in this or another test process) uses.
fn unique_namespace() -> String {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    format!("qimtest_{}_{n}_{nanos}", std::process::id())
}

/// Opens Redis stores, each in a fresh namespace, and keeps a typed handle for sabotage.
#[derive(Default)]
struct Redis {
    stores: Mutex<Vec<RedisMailboxStore>>,
}

impl Redis {
    fn last(&self) -> RedisMailboxStore {
        self.stores.lock().unwrap().last().cloned().expect("a store was opened")
    }
}

fn test_url() -> String {
    std::env::var(URL_VAR).unwrap_or_else(|_| DEFAULT_URL.to_owned())
}

/// Opens a store in a fresh namespace at `url`; panics (never skips) when Redis is unreachable.
async fn open_at(url: &str, retention: MailboxRetention, clock: Arc<ManualClock>) -> (RedisMailboxStore, RedisConfig) {
    let config = RedisConfig { url: url.to_owned(), namespace: unique_namespace() };
    match RedisMailboxStore::open(&config, retention, clock).await {
        Ok(store) => (store, config),
        Err(e) => panic!(
            "Redis is unreachable at {url} ({URL_VAR}): {e}. Start the local stack with \
             `deploy/local/stack up` (or point {URL_VAR} at a running Redis); these tests never skip."
        ),
    }
}

#[async_trait]
impl MailboxHarness for Redis {
    async fn open(&self, retention: MailboxRetention, clock: Arc<ManualClock>) -> Arc<dyn MailboxStore> {
        let (store, _) = open_at(&test_url(), retention, clock).await;
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

    async fn open() -> (RedisMailboxStore, RedisConfig, Arc<ManualClock>) {
        let clock = Arc::new(ManualClock::new(T0));
        let (store, config) = open_at(&test_url(), MailboxRetention::default(), clock.clone()).await;
        (store, config, clock)
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
        let (store, _, _) = open().await;
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
        let (store, _, _) = open().await;
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
        let (store, config, clock) = open().await;
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
        let (store, _, _) = open().await;
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
        open_at("redis://127.0.0.1:1/0", MailboxRetention::default(), Arc::new(ManualClock::new(T0))).await;
    }
}

/// The memory backend is the reference: the same random operations against both stores, on one
/// manual clock, must give the same answers (values, or error kinds and `CursorExpired`
/// boundaries).
mod differential {
    use super::*;
    use qim_store::ids::{ConversationId, ConversationSeq, EventId, MessageId, UnixMillis, MILLIS_PER_DAY};
    use qim_store::mailbox::{
        end_of_day, ChunkId, DispatchId, DispatchManifest, DispatchReceipt, LaneId, MailboxEntry, MailboxEvent,
        MessageRef, ShardEpoch, ShardId,
    };
    use qim_store::memory::MemoryMailboxStore;
    use qim_store::message::MessageKind;
    use qim_store::testsuite::fixtures::{fresh_tenant, user, T0};
    use qim_store::{StoreError, StoreResult};

    const EPOCH: ShardEpoch = ShardEpoch(1);
    const SHARD: ShardId = ShardId(3);

    /// A small deterministic generator (SplitMix64).
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }

        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    fn seq(p: u64) -> MailboxSeq {
        MailboxSeq::new(EPOCH, p).unwrap()
    }

    thread_local! {
        /// How often each (operation, outcome) was seen, to check the run reached every path.
        static SEEN: std::cell::RefCell<std::collections::BTreeMap<String, usize>> = Default::default();
    }

    fn note(path: &str) {
        SEEN.with(|s| *s.borrow_mut().entry(path.to_owned()).or_default() += 1);
    }

    /// Same values, or the same error kind (and the same earliest cursor).
    #[track_caller]
    fn same<T: PartialEq + std::fmt::Debug>(step: usize, what: &str, mem: StoreResult<T>, red: StoreResult<T>) {
        let outcome = match &mem {
            Ok(_) => "ok",
            Err(e) => e.kind().as_str(),
        };
        note(&format!("{what}:{outcome}"));
        match (&mem, &red) {
            (Ok(a), Ok(b)) => assert_eq!(a, b, "step {step} {what}: values differ"),
            (Err(StoreError::CursorExpired { earliest: a }), Err(StoreError::CursorExpired { earliest: b })) => {
                assert_eq!(a, b, "step {step} {what}: earliest cursors differ")
            }
            (Err(a), Err(b)) => assert_eq!(a.kind(), b.kind(), "step {step} {what}: memory {a} vs redis {b}"),
            _ => panic!("step {step} {what}: memory {mem:?} vs redis {red:?}"),
        }
    }

    fn message(tenant: TenantId, n: u8, created_at: UnixMillis) -> MessageRef {
        MessageRef {
            tenant,
            conversation: ConversationId([5; 16]),
            seq: ConversationSeq(u64::from(n) + 1),
            message_id: MessageId([n + 1; 16]),
            sender: user(999),
            kind: MessageKind::Normal,
            created_at,
        }
    }

    async fn run(seed: u64, steps: usize) {
        let clock = Arc::new(ManualClock::new(T0));
        let retention = MailboxRetention::days(3).unwrap();
        let memory = MemoryMailboxStore::new(retention, clock.clone());
        let (redis, _) = open_at(&test_url(), retention, clock.clone()).await;
        let (mem, red): (&dyn MailboxStore, &dyn MailboxStore) = (&memory, &redis);
        let tenant = fresh_tenant();
        let mut rng = Rng(seed);
        let manifests: Vec<DispatchManifest> = (0..4u8)
            .map(|n| {
                let m = message(tenant, n, T0.plus_millis(i64::from(n) * MILLIS_PER_DAY / 2));
                let recipients = (0..3).map(|_| user(1 + (rng.below(6) as u32))).collect();
                DispatchManifest::new(DispatchId { message_id: m.message_id, shard: SHARD }, m, recipients)
            })
            .collect();
        let mut receipts: Vec<DispatchReceipt> = Vec::new();
        let now = |c: &ManualClock| qim_store::clock::Clock::now(c);
        for step in 0..steps {
            match rng.below(100) {
                0..=24 => {
                    let n = 1 + rng.below(4);
                    let mut batch = Vec::new();
                    for _ in 0..n {
                        let days = rng.below(8) as i64;
                        let mut expires_at = end_of_day(now(&clock).plus_millis((days - 2) * MILLIS_PER_DAY));
                        if rng.below(40) == 0 {
                            expires_at = expires_at.plus_millis(1);
                        }
                        if rng.below(30) == 0 {
                            expires_at = end_of_day(now(&clock).plus_millis(rng.below(45) as i64 * MILLIS_PER_DAY));
                        }
                        let s = seq(1 + rng.below(40));
                        let ordinal = rng.below(3) as u16;
                        let mut event_id = [0u8; 16];
                        event_id[0] = rng.below(2) as u8;
                        event_id[8..].copy_from_slice(&s.as_u64().to_be_bytes());
                        batch.push(MailboxEntry {
                            tenant,
                            user: user(1 + rng.below(6) as u32),
                            seq: s,
                            expires_at,
                            event: MailboxEvent {
                                ordinal,
                                event_id: EventId(event_id),
                                message: message(tenant, 9, T0),
                            },
                        });
                    }
                    if rng.below(25) == 0 {
                        // More live days than the ledger holds: refused whole.
                        let (u, base) = (user(1 + rng.below(6) as u32), batch[0].clone());
                        batch.extend((1..=33).map(|d| MailboxEntry {
                            user: u,
                            seq: seq(d),
                            expires_at: end_of_day(now(&clock).plus_millis(d as i64 * MILLIS_PER_DAY)),
                            ..base.clone()
                        }));
                    }
                    same(step, "append_batch", mem.append_batch(&batch).await, red.append_batch(&batch).await);
                }
                25..=44 => {
                    let u = user(1 + rng.below(6) as u32);
                    let after = seq(rng.below(45));
                    let up_to = seq(rng.below(45));
                    let max = rng.below(6) as usize;
                    let a = mem.range_scan(tenant, u, after, up_to, max).await;
                    if a.as_ref().is_ok_and(|p| p.groups.len() > 1) {
                        note("range_scan:groups");
                    }
                    same(step, "range_scan", a, red.range_scan(tenant, u, after, up_to, max).await);
                }
                45..=49 => {
                    let u = user(1 + rng.below(6) as u32);
                    let through = seq(rng.below(30));
                    same(
                        step,
                        "truncate_before",
                        mem.truncate_before(tenant, u, through).await,
                        red.truncate_before(tenant, u, through).await,
                    );
                }
                50..=57 => clock.advance(rng.below(MILLIS_PER_DAY as u64) as i64),
                58..=67 => {
                    let m = &manifests[rng.below(manifests.len() as u64) as usize];
                    let offset = rng.below(30);
                    let (a, b) =
                        (mem.begin_dispatch(EPOCH, m, offset).await, red.begin_dispatch(EPOCH, m, offset).await);
                    if let Ok(r) = &a {
                        receipts.push(*r);
                    }
                    same(step, "begin_dispatch", a, b);
                }
                68..=77 => {
                    let Some(r) = receipts.get(rng.below(receipts.len().max(1) as u64) as usize).copied() else {
                        continue;
                    };
                    let m = manifests.iter().find(|m| m.id == r.id).unwrap();
                    let lane = if rng.below(4) == 0 {
                        LaneId::new(rng.below(64) as u8).unwrap()
                    } else {
                        let u = m.recipients[rng.below(m.recipients.len() as u64) as usize];
                        qim_store::mailbox::lane_of(&tenant, &u)
                    };
                    let chunk = ChunkId { lane, index: rng.below(2) as u32 };
                    let mut receipt = r;
                    if rng.below(10) == 0 {
                        receipt.seq = seq(44);
                    }
                    if rng.below(2) == 0 {
                        same(
                            step,
                            "append_chunk",
                            mem.append_chunk(&receipt, m, chunk).await,
                            red.append_chunk(&receipt, m, chunk).await,
                        );
                    } else {
                        same(
                            step,
                            "mark_chunk_completed",
                            mem.mark_chunk_completed(m.id, chunk).await,
                            red.mark_chunk_completed(m.id, chunk).await,
                        );
                    }
                    same(
                        step,
                        "chunk_completed",
                        mem.chunk_completed(m.id, chunk).await,
                        red.chunk_completed(m.id, chunk).await,
                    );
                }
                78..=89 => {
                    let lane = LaneId::new(rng.below(64) as u8).unwrap();
                    let through = rng.below(30);
                    same(
                        step,
                        "advance_watermark",
                        mem.advance_watermark(SHARD, lane, through).await,
                        red.advance_watermark(SHARD, lane, through).await,
                    );
                    same(
                        step,
                        "lane_watermark",
                        mem.lane_watermark(SHARD, lane).await,
                        red.lane_watermark(SHARD, lane).await,
                    );
                }
                90..=93 => {
                    let cutoff = now(&clock).0 - rng.below(MILLIS_PER_DAY as u64) as i64;
                    let mut cutoff = cutoff;
                    if rng.below(3) == 0 {
                        // Finish every begun dispatch, so whole lanes can pass and GC collect.
                        cutoff = now(&clock).0 + 1;
                        for m in &manifests {
                            let Some(r) = receipts.iter().find(|r| r.id == m.id).copied() else { continue };
                            for lane in LaneId::all() {
                                for index in 0..m.chunk_counts()[lane.get() as usize] {
                                    let chunk = ChunkId { lane, index };
                                    let (a, b) =
                                        (mem.append_chunk(&r, m, chunk).await, red.append_chunk(&r, m, chunk).await);
                                    same(step, "append_chunk", a, b);
                                    let (a, b) = (
                                        mem.mark_chunk_completed(m.id, chunk).await,
                                        red.mark_chunk_completed(m.id, chunk).await,
                                    );
                                    same(step, "mark_chunk_completed", a, b);
                                }
                            }
                        }
                    }
                    if rng.below(2) == 0 {
                        let through = rng.below(30);
                        for lane in LaneId::all() {
                            same(
                                step,
                                "advance_watermark",
                                mem.advance_watermark(SHARD, lane, through).await,
                                red.advance_watermark(SHARD, lane, through).await,
                            );
                        }
                    }
                    let a = mem.gc_completed_dispatches(SHARD, cutoff, 100).await;
                    if a.as_ref().is_ok_and(|n| *n > 0) {
                        note("gc_completed_dispatches:collected");
                    }
                    same(step, "gc_completed_dispatches", a, red.gc_completed_dispatches(SHARD, cutoff, 100).await);
                }
                _ => {
                    let m = &manifests[rng.below(manifests.len() as u64) as usize];
                    same(
                        step,
                        "dispatch_progress",
                        mem.dispatch_progress(m.id).await,
                        red.dispatch_progress(m.id).await,
                    );
                }
            }
        }
        for (i, m) in manifests.iter().enumerate() {
            same(steps + i, "final progress", mem.dispatch_progress(m.id).await, red.dispatch_progress(m.id).await);
        }
        for n in 1..=6 {
            let mut after = seq(0);
            loop {
                let a = mem.range_scan(tenant, user(n), after, seq(50), 1000).await;
                let b = red.range_scan(tenant, user(n), after, seq(50), 1000).await;
                let earliest = match &a {
                    Err(StoreError::CursorExpired { earliest }) => Some(*earliest),
                    _ => None,
                };
                same(steps, "final scan", a, b);
                match earliest {
                    Some(e) if e > after => after = e,
                    _ => break,
                }
            }
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn redis_answers_like_the_memory_reference() {
        for seed in 0..24u64 {
            run(seed.wrapping_mul(0x2545_f491_4f6c_dd1d) ^ 0x51ed, 300).await;
        }
        let seen = SEEN.with(|s| s.borrow().clone());
        for path in [
            "append_batch:ok",
            "append_batch:invalid_input",
            "append_batch:invariant_violation",
            "range_scan:ok",
            "range_scan:cursor_expired",
            "range_scan:invalid_input",
            "truncate_before:ok",
            "begin_dispatch:ok",
            "begin_dispatch:dispatch_conflict",
            "append_chunk:ok",
            "append_chunk:invalid_input",
            "append_chunk:conflict",
            "mark_chunk_completed:ok",
            "mark_chunk_completed:invalid_input",
            "advance_watermark:ok",
            "advance_watermark:conflict",
            "advance_watermark:invalid_input",
            "gc_completed_dispatches:ok",
            "gc_completed_dispatches:collected",
            "range_scan:groups",
            "final scan:ok",
        ] {
            assert!(seen.contains_key(path), "the random run never reached {path}: {seen:#?}");
        }
        eprintln!("{seen:#?}");
    }
}
