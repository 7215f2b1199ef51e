//! The `MessageStore` contract suite against Redis, plus Redis-specific checks (script reply
//! mapping through the real `Script` path, the expiry drain's lower bound and crash retries).
//!
//! Needs Redis at `QIM_TEST_REDIS_URL` (default `redis://127.0.0.1:6379/0`); fails, never
//! skips, when it is missing: start it with `deploy/local/stack up`. Every store opened here
//! lives in its own key namespace; the tests that `SCRIPT FLUSH` run on a server of their own.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use qim_store::clock::ManualClock;
use qim_store::ids::{ConversationId, ConversationSeq, TenantId};
use qim_store::memory::MemorySeqHighWater;
use qim_store::message::{CommitRequest, Direction, HistoryQuery, Publication};
use qim_store::redis::message::RedisMessageStore;
use qim_store::redis::{CommitLayout, RedisConfig, SeqLeases};
use qim_store::retention::{RetentionClass, RetentionPolicy, EPHEMERAL_MILLIS};
use qim_store::testsuite::fixtures::{
    assert_kind, clock, fresh_conversation, fresh_message_id, fresh_tenant, request, user, MembershipAuthorizer, T0,
};
use qim_store::testsuite::message::commit_fully;
use qim_store::testsuite::private_redis::PrivateRedis;
use qim_store::testsuite::MessageHarness;
use qim_store::{ErrorKind, MessageStore};

use crate::shared_redis;

use shared_redis::{unique_namespace, unreachable, url as redis_url, zcard_all, zrange_all, Cleanup};

/// The durable seq high-water marks every store of this process leases from (in memory: they
/// outlive every store of a test, as a database outlives writer processes).
fn marks() -> Arc<MemorySeqHighWater> {
    static MARKS: std::sync::OnceLock<Arc<MemorySeqHighWater>> = std::sync::OnceLock::new();
    MARKS.get_or_init(Arc::default).clone()
}

/// Opens a store in a fresh namespace (deleted by `cleanup`), or fails the test naming Redis and
/// how to start it.
async fn open_store(policy: RetentionPolicy, clock: Arc<ManualClock>, cleanup: &Cleanup) -> RedisMessageStore {
    open_store_at(&redis_url(), policy, clock, cleanup).await
}

/// [`open_store`] on the Redis (or cluster) at `url`.
async fn open_store_at(
    url: &str,
    policy: RetentionPolicy,
    clock: Arc<ManualClock>,
    cleanup: &Cleanup,
) -> RedisMessageStore {
    let config = RedisConfig { url: url.to_owned(), namespace: unique_namespace() };
    cleanup.register_at(url, &config.namespace);
    open_store_with(config, policy, clock).await
}

async fn open_store_with(config: RedisConfig, policy: RetentionPolicy, clock: Arc<ManualClock>) -> RedisMessageStore {
    let url = config.url.clone();
    match RedisMessageStore::open(&config, policy, clock).await {
        Ok(store) => store.with_seq_leases(SeqLeases::new(marks())),
        Err(e) => panic!("{}", unreachable(&url, &e)),
    }
}

/// Opens a second store on `namespace` (another writer process: nothing in flight).
async fn open_in(namespace: String, policy: RetentionPolicy, clock: Arc<ManualClock>) -> RedisMessageStore {
    let config = RedisConfig { url: redis_url(), namespace };
    let store = RedisMessageStore::open(&config, policy, clock)
        .await
        .unwrap_or_else(|e| panic!("{}", unreachable(&config.url, &e)));
    store.with_seq_leases(SeqLeases::new(marks()))
}

/// The namespace of a store opened here (its keys start with it).
fn store_namespace(store: &RedisMessageStore) -> String {
    store.recovery_keys()[0].split(":{").next().expect("a namespace").to_owned()
}

/// Drives a reserved commit through the remaining steps.
async fn commit_fully_from(store: &RedisMessageStore, reserved: &qim_store::message::Commit) {
    let key = &reserved.intent.request.key;
    store.put_record(&reserved.intent).await.unwrap();
    let publication = Publication { partition: 0, offset: reserved.intent.seq.0 as i64 };
    store.mark_outbox_published(key, reserved.intent.message_id, publication).await.unwrap();
    store.mark_committed(key, reserved.intent.message_id).await.unwrap();
}

async fn raw_connection() -> redis::aio::MultiplexedConnection {
    raw_connection_at(redis_url()).await
}

async fn raw_connection_at(url: String) -> redis::aio::MultiplexedConnection {
    let client = redis::Client::open(url.as_str()).unwrap_or_else(|e| panic!("Redis url {url:?}: {e}"));
    client.get_multiplexed_async_connection().await.unwrap_or_else(|e| panic!("{}", unreachable(&url, &e)))
}

/// Opens Redis stores (on the shared Redis, or on the cluster) and keeps a typed handle to
/// each, for sabotage.
struct Redis {
    url: String,
    layout: CommitLayout,
    stores: Mutex<Vec<RedisMessageStore>>,
    cleanup: Cleanup,
}

impl Default for Redis {
    fn default() -> Self {
        Self::on(redis_url())
    }
}

impl Redis {
    fn on(url: String) -> Self {
        Self { url, layout: CommitLayout::default(), stores: Mutex::default(), cleanup: Cleanup::default() }
    }

    /// Stores creating their commits in the group-commit layout.
    fn in_conversation_slots(url: String) -> Self {
        Self { layout: CommitLayout::InConversationSlot, ..Self::on(url) }
    }

    /// The typed store behind the suite's store (harness stores are opened one per test).
    fn store(&self) -> RedisMessageStore {
        self.stores.lock().unwrap().last().cloned().expect("a store was opened")
    }
}

#[async_trait]
impl MessageHarness for Redis {
    async fn open(&self, policy: RetentionPolicy, clock: Arc<ManualClock>) -> Arc<dyn MessageStore> {
        let store = open_store_at(&self.url, policy, clock, &self.cleanup).await.with_commit_layout(self.layout);
        self.stores.lock().unwrap().push(store.clone());
        Arc::new(store)
    }

    async fn remove_record(
        &self,
        _: &Arc<dyn MessageStore>,
        tenant: TenantId,
        conversation: ConversationId,
        seq: ConversationSeq,
    ) {
        self.store().sabotage_remove_record(tenant, conversation, seq).await.expect("sabotage: remove record");
    }

    async fn overwrite_record(
        &self,
        _: &Arc<dyn MessageStore>,
        tenant: TenantId,
        conversation: ConversationId,
        seq: ConversationSeq,
        bytes: Vec<u8>,
    ) {
        self.store().sabotage_overwrite_record(tenant, conversation, seq, bytes).await.expect("sabotage: overwrite");
    }
}

mod contract {
    use super::*;
    qim_store::message_store_contract_suite!(Redis::default());
}

/// The same suite on the Redis Cluster: every script in its slot, batches split by slot, the
/// global indexes spread over their shards.
mod contract_on_cluster {
    use super::*;
    qim_store::message_store_contract_suite!(Redis::on(shared_redis::cluster_url()));
}

/// The suite with commits created in their conversations' slots (the group-commit layout).
mod contract_group_commit_layout {
    use super::*;
    qim_store::message_store_contract_suite!(Redis::in_conversation_slots(redis_url()));
}

/// The same on the Redis Cluster.
mod contract_group_commit_layout_on_cluster {
    use super::*;
    qim_store::message_store_contract_suite!(Redis::in_conversation_slots(shared_redis::cluster_url()));
}

fn policy() -> RetentionPolicy {
    RetentionPolicy::with_default_days(30).expect("30 days is legal")
}

/// A store and a raw connection on a server of the test's own, for the tests that `SCRIPT FLUSH`:
/// the script cache is the server's, and a flush of the shared one would make the scripts of
/// every other test running against it miss mid-call.
async fn private_store(
    redis: &PrivateRedis,
    policy: RetentionPolicy,
    clock: Arc<ManualClock>,
) -> (RedisMessageStore, redis::aio::MultiplexedConnection) {
    let config = RedisConfig { url: redis.url(), namespace: unique_namespace() };
    (open_store_with(config, policy, clock).await, raw_connection_at(redis.url()).await)
}

async fn script_flush(con: &mut redis::aio::MultiplexedConnection) {
    redis::cmd("SCRIPT").arg("FLUSH").query_async::<()>(con).await.expect("SCRIPT FLUSH");
}

/// After `SCRIPT FLUSH` the scripts reload themselves (NOSCRIPT → SCRIPT LOAD → EVALSHA), and a
/// script's own `conflict` reply maps to `Conflict`: two concurrent `put_record`s of one intent
/// both pass the read-side checks, and the commit CAS script refuses the second.
#[tokio::test]
async fn cas_script_conflict_maps_after_script_flush() {
    let redis = PrivateRedis::start();
    let (store, mut con) = private_store(&redis, policy(), clock()).await;
    let t = fresh_tenant();
    let mut script_conflicts = 0;
    for attempt in 0..40 {
        let req = request(t, user(1), &format!("m{attempt}"), fresh_conversation(), b"x");
        let reserved = store.reserve(&req, fresh_message_id()).await.unwrap();
        script_flush(&mut con).await;
        let (a, b) = tokio::join!(store.put_record(&reserved.intent), store.put_record(&reserved.intent));
        let (ok, err) = match (a, b) {
            (Ok(c), Err(e)) | (Err(e), Ok(c)) => (c, e),
            other => panic!("exactly one put_record wins: {other:?}"),
        };
        assert_eq!(ok.state, qim_store::message::CommitState::Recorded);
        assert_eq!(err.kind(), ErrorKind::Conflict, "{err}");
        if err.to_string().contains("changed since it was read") {
            script_conflicts += 1;
            break;
        }
    }
    assert!(script_conflicts > 0, "the CAS script's conflict reply was never reached");
}

/// Two reservers of one key race after `SCRIPT FLUSH` (every script reloads itself): both
/// allocate a seq (allocation is speculative) and reach the reserve script, which creates the
/// commit for one and shows the other the stored commit: `Conflict` for different bytes, the
/// winner's commit for the same bytes. The loser's seq is given back if it is still the newest,
/// else it stays a hole; either way no seq is issued twice.
#[tokio::test]
async fn reserve_script_race_replies_map_after_script_flush() {
    let redis = PrivateRedis::start();
    let (store, mut con) = private_store(&redis, policy(), clock()).await;
    let t = fresh_tenant();
    for attempt in 0..10 {
        let conv = fresh_conversation();
        let mine = request(t, user(1), &format!("r{attempt}"), conv, b"mine");
        let theirs = CommitRequest { payload: b"theirs".to_vec(), ..mine.clone() };
        script_flush(&mut con).await;
        let (a, b) = tokio::join!(store.reserve(&mine, fresh_message_id()), store.reserve(&theirs, fresh_message_id()));
        let winner = match (a, b) {
            (Ok(c), Err(e)) | (Err(e), Ok(c)) => {
                assert_eq!(e.kind(), ErrorKind::Conflict, "{e}");
                c
            }
            other => panic!("exactly one reserve wins: {other:?}"),
        };
        let next = store
            .reserve(&request(t, user(2), &format!("next{attempt}"), conv, b"x"), fresh_message_id())
            .await
            .unwrap();
        assert!(next.intent.seq > winner.intent.seq && next.intent.seq.0 <= 3, "{next:?} after {winner:?}");
    }
    for attempt in 0..10 {
        let conv = fresh_conversation();
        let same = request(t, user(1), &format!("s{attempt}"), conv, b"same");
        script_flush(&mut con).await;
        let (a, b) = tokio::join!(store.reserve(&same, fresh_message_id()), store.reserve(&same, fresh_message_id()));
        let (a, b) = (a.unwrap(), b.unwrap());
        assert_eq!(a, b, "both reservers get the winner's commit");
        let next = store
            .reserve(&request(t, user(2), &format!("after{attempt}"), conv, b"x"), fresh_message_id())
            .await
            .unwrap();
        assert!(next.intent.seq > a.intent.seq && next.intent.seq.0 <= 3, "{next:?} after {a:?}");
    }
}

/// A replay allocates a seq (allocation is speculative: it goes with the recovery entry in one
/// round trip) and gives it back when it is still the newest, with its recovery entry: no hole,
/// no orphan. Under contention the seq stays a hole instead, which is legal.
#[tokio::test]
async fn a_replay_gives_back_its_seq_and_its_recovery_entry() {
    let clock = clock();
    let cleanup = Cleanup::default();
    let store = open_store(policy(), clock.clone(), &cleanup).await;
    let mut con = raw_connection().await;
    let (t, conv) = (fresh_tenant(), fresh_conversation());
    let req = request(t, user(1), "m1", conv, b"hello");
    let first = store.reserve(&req, fresh_message_id()).await.unwrap();
    clock.advance(5_000);
    assert_eq!(store.reserve(&req, fresh_message_id()).await.unwrap(), first);
    let other = CommitRequest { payload: b"other".to_vec(), ..req.clone() };
    assert_kind(store.reserve(&other, fresh_message_id()).await, ErrorKind::Conflict, "different bytes");
    let counter: u64 = redis::cmd("GET").arg(store.seq_key(t, conv)).query_async(&mut con).await.unwrap();
    assert_eq!(counter, 1, "both allocations were given back");
    let members = zrange_all(&mut con, store.recovery_keys()).await;
    assert_eq!(members.len(), 1, "only the first reservation's entry: {members:?}");
}

/// A store acting on a stale belief (it reserved the commit; another process finished it and the
/// record has since expired or been trimmed) must not write the record again: the record script
/// refuses in mode `known`, and the step reads the commit and answers `Conflict`.
#[tokio::test]
async fn a_stale_in_flight_belief_never_resurrects_an_expired_or_trimmed_record() {
    let clock = clock();
    let cleanup = Cleanup::default();
    let mine = open_store(policy(), clock.clone(), &cleanup).await;
    // Other writers: one registers expiries, one owns a trim window of 0 days.
    let plain = open_in(store_namespace(&mine), policy(), clock.clone()).await;
    let trimming = open_in(store_namespace(&mine), policy(), clock.clone()).await.with_trim_window(0);
    let (t, conv) = (fresh_tenant(), fresh_conversation());
    let mut eph = request(t, user(1), "eph", conv, b"x");
    eph.retention = RetentionClass::Ephemeral24h;
    let expiring = mine.reserve(&eph, fresh_message_id()).await.unwrap();
    let trimmed = mine.reserve(&request(t, user(1), "old", conv, b"x"), fresh_message_id()).await.unwrap();
    commit_fully_from(&plain, &expiring).await;
    commit_fully_from(&trimming, &trimmed).await;
    clock.advance(EPHEMERAL_MILLIS + 1);
    assert_eq!(plain.gc_expired_history(10).await.unwrap().removed, 1);
    trimming.record_archived_watermark(t, conv, trimmed.intent.seq).await.unwrap();
    assert_eq!(trimming.trim_hot_history(10).await.unwrap().trimmed, 1);
    for reserved in [&expiring, &trimmed] {
        assert_kind(mine.put_record(&reserved.intent).await, ErrorKind::Conflict, "the commit is COMMITTED");
    }
    let auth = MembershipAuthorizer::default();
    auth.admit(t, conv, user(1));
    let q = HistoryQuery {
        tenant: t,
        conversation: conv,
        viewer: user(1),
        direction: Direction::Newer,
        anchor: None,
        max_items: 10,
        max_bytes: 1 << 20,
    };
    assert!(mine.history_page(&q, &auth).await.unwrap().records.is_empty(), "nothing came back");
    let mut con = raw_connection().await;
    let fields: i64 = redis::cmd("HLEN").arg(mine.record_key(t, conv)).query_async(&mut con).await.unwrap();
    assert_eq!(fields, 0);
}

/// `mark_committed` by a store that did not publish the commit registers the record with the
/// hot tier itself, before the transition (the registrations made alongside the outbox CAS may
/// not have landed: a pipeline is not a transaction).
#[tokio::test]
async fn mark_committed_elsewhere_registers_the_record_first() {
    let cleanup = Cleanup::default();
    let store = open_store(policy(), clock(), &cleanup).await;
    let mut con = raw_connection().await;
    let (t, conv) = (fresh_tenant(), fresh_conversation());
    let mut eph = request(t, user(1), "e", conv, b"x");
    eph.retention = RetentionClass::Ephemeral24h;
    let reserved = store.reserve(&eph, fresh_message_id()).await.unwrap();
    store.put_record(&reserved.intent).await.unwrap();
    let publication = Publication { partition: 0, offset: 1 };
    store.mark_outbox_published(&eph.key, reserved.intent.message_id, publication).await.unwrap();
    assert_eq!(zcard_all(&mut con, store.history_gc_keys()).await, 1, "registered alongside the outbox transition");
    for key in store.history_gc_keys() {
        redis::cmd("DEL").arg(key).query_async::<()>(&mut con).await.unwrap();
    }
    let elsewhere = open_in(store_namespace(&store), policy(), clock()).await;
    elsewhere.mark_committed(&eph.key, reserved.intent.message_id).await.unwrap();
    assert_eq!(zcard_all(&mut con, store.history_gc_keys()).await, 1, "registered again before COMMITTED");
}

/// COMMITTED commits leave `{recovery}` on a later round trip (the next `mark_committed`, the
/// recovery scan, the auxiliary GC or `flush_settled`); until then the scan skips them.
#[tokio::test]
async fn committed_commits_leave_the_recovery_index_on_a_later_round_trip() {
    let cleanup = Cleanup::default();
    let store = open_store(policy(), clock(), &cleanup).await;
    let mut con = raw_connection().await;
    let (t, conv) = (fresh_tenant(), fresh_conversation());
    let recovery = |con: &mut redis::aio::MultiplexedConnection| {
        let (keys, mut con) = (store.recovery_keys(), con.clone());
        async move { zcard_all(&mut con, keys).await }
    };
    commit_fully(&store, &request(t, user(1), "a", conv, b"x")).await;
    assert_eq!(recovery(&mut con).await, 1, "still listed, COMMITTED");
    assert_eq!(store.scan_recoverable_commits(T0.plus_millis(1), 10).await.unwrap(), vec![]);
    assert_eq!(recovery(&mut con).await, 0, "the scan flushed it first");
    commit_fully(&store, &request(t, user(1), "b", conv, b"x")).await;
    commit_fully(&store, &request(t, user(1), "c", conv, b"x")).await;
    assert_eq!(recovery(&mut con).await, 1, "b left with c's transition");
    store.flush_settled().await.unwrap();
    assert_eq!(recovery(&mut con).await, 0);
    assert_eq!(zcard_all(&mut con, store.commit_gc_keys()).await, 3, "every committed commit is in {{commitgc}}");
}

/// A `{commitgc}` entry of a commit that is not COMMITTED (its transition did not land with it)
/// is dropped by the auxiliary GC without touching the commit's recovery entry.
#[tokio::test]
async fn a_commitgc_entry_of_an_unfinished_commit_keeps_it_recoverable() {
    let clock = clock();
    let cleanup = Cleanup::default();
    let store = open_store(policy(), clock.clone(), &cleanup).await;
    let mut con = raw_connection().await;
    let req = request(fresh_tenant(), user(1), "u", fresh_conversation(), b"x");
    let reserved = store.reserve(&req, fresh_message_id()).await.unwrap();
    store.put_record(&reserved.intent).await.unwrap();
    let publication = Publication { partition: 0, offset: 1 };
    let outboxed = store.mark_outbox_published(&req.key, reserved.intent.message_id, publication).await.unwrap();
    let member = format!("{}{}:{}:u", req.key.tenant.to_hex(), user(1).to_hex(), T0.0);
    let [_, commit_gc] = store.aux_keys_of(&member);
    redis::cmd("ZADD").arg(commit_gc).arg(T0.0).arg(&member).query_async::<()>(&mut con).await.unwrap();
    clock.advance(qim_store::COMMIT_AUX_TTL_MILLIS);
    assert_eq!(store.gc_committed_auxiliary(10).await.unwrap().removed, 1, "the stray entry");
    assert_eq!(zcard_all(&mut con, store.commit_gc_keys()).await, 0);
    assert_eq!(store.scan_recoverable_commits(T0.plus_millis(1), 10).await.unwrap(), vec![outboxed]);
}

/// A commit hash missing its commit blob fails closed.
#[tokio::test]
async fn half_written_commit_is_corrupt() {
    let cleanup = Cleanup::default();
    let store = open_store(policy(), clock(), &cleanup).await;
    let mut con = raw_connection().await;
    let req = request(fresh_tenant(), user(4), "broken", fresh_conversation(), b"x");
    let hash = store.commit_key(&req.key);
    redis::cmd("HSET").arg(&hash).arg("req").arg(b"x".as_slice()).query_async::<i64>(&mut con).await.unwrap();
    assert_kind(store.reserve(&req, fresh_message_id()).await, ErrorKind::CorruptEntry, "reserve");
    assert_kind(store.load_commit(&req.key).await, ErrorKind::CorruptEntry, "load_commit");
}

/// ADR-0019 revision 2026-09-27: an expiry member whose record and index are both gone at or
/// below the conversation's hot-tier lower bound is cleaned and reported; above it, the drain
/// fails closed.
#[tokio::test]
async fn expiry_drain_cleans_orphans_below_the_lower_bound_only() {
    let clock = clock();
    let redis = PrivateRedis::start();
    let (store, mut con) = private_store(&redis, policy(), clock.clone()).await;
    let (t, conv) = (fresh_tenant(), fresh_conversation());
    for i in 1..=2 {
        let mut req = request(t, user(1), &format!("e{i}"), conv, b"x");
        req.retention = RetentionClass::Ephemeral24h;
        commit_fully(&store, &req).await;
    }
    // A trim took both records and their index entries but (an old build) left the members.
    for seq in [1u64, 2] {
        redis::cmd("HDEL").arg(store.record_key(t, conv)).arg(seq).query_async::<i64>(&mut con).await.unwrap();
        redis::cmd("ZREM").arg(store.index_key(t, conv)).arg(seq).query_async::<i64>(&mut con).await.unwrap();
    }
    redis::cmd("SET").arg(store.lower_bound_key(t, conv)).arg(1).query_async::<()>(&mut con).await.unwrap();
    clock.advance(EPHEMERAL_MILLIS + 1);
    script_flush(&mut con).await;
    assert_kind(store.gc_expired_history(10).await, ErrorKind::CorruptEntry, "seq 2 is above the lower bound");
    redis::cmd("SET").arg(store.lower_bound_key(t, conv)).arg(2).query_async::<()>(&mut con).await.unwrap();
    let report = store.gc_expired_history(10).await.unwrap();
    assert_eq!((report.removed, report.orphans_cleaned), (0, 1), "seq 1 was cleaned by the failed pass");
    assert_eq!(store.gc_expired_history(10).await.unwrap(), Default::default());
    assert_eq!(zcard_all(&mut con, store.history_gc_keys()).await, 0);
}

/// A drain that crashed after deleting a record but before removing its expiry member is
/// retried without failing (the tombstone, kept for days, tells it the record was ours).
#[tokio::test]
async fn expiry_drain_retry_after_a_crash_does_not_fail() {
    let clock = clock();
    let cleanup = Cleanup::default();
    let store = open_store(policy(), clock.clone(), &cleanup).await;
    let mut con = raw_connection().await;
    let (t, conv) = (fresh_tenant(), fresh_conversation());
    let mut req = request(t, user(1), "e", conv, b"x");
    req.retention = RetentionClass::Ephemeral24h;
    let committed = commit_fully(&store, &req).await;
    let expiry = T0.plus_millis(EPHEMERAL_MILLIS).0;
    let member = format!("{}|{}|1", t.to_hex(), conv.to_hex());
    let score: Option<i64> =
        redis::cmd("ZSCORE").arg(store.history_gc_key_of(&member)).arg(&member).query_async(&mut con).await.unwrap();
    assert_eq!(score, Some(expiry), "mark_committed registered the expiry: {committed:?}");
    clock.advance(EPHEMERAL_MILLIS);
    assert_eq!(store.gc_expired_history(10).await.unwrap().removed, 1);
    // Put back the state a crash between the record script and the member removal leaves.
    let gcdone = store.index_key(t, conv).replace(":idx", ":gcdone");
    redis::cmd("ZADD")
        .arg(store.history_gc_key_of(&member))
        .arg(expiry)
        .arg(&member)
        .query_async::<i64>(&mut con)
        .await
        .unwrap();
    redis::cmd("SADD").arg(&gcdone).arg(1).query_async::<i64>(&mut con).await.unwrap();
    assert_eq!(store.gc_expired_history(10).await.unwrap().removed, 1);
    // The tombstone stays (with a Redis TTL), so a member registered again later is recognised.
    let ttl: i64 = redis::cmd("PTTL").arg(&gcdone).query_async(&mut con).await.unwrap();
    assert!(ttl > 0, "the tombstone set expires by itself: PTTL {ttl}");
}

/// A recovery entry left by a crash inside `reserve` (before the commit was written) is skipped
/// by the scan and removed by the auxiliary GC once older than the TTL.
#[tokio::test]
async fn orphan_recovery_entries_are_skipped_then_collected() {
    let clock = clock();
    let cleanup = Cleanup::default();
    let store = open_store(policy(), clock.clone(), &cleanup).await;
    let mut con = raw_connection().await;
    let t = fresh_tenant();
    let orphan = format!("{}{}:{}:lost", t.to_hex(), user(1).to_hex(), T0.0);
    let [recovery, _] = store.aux_keys_of(&orphan);
    redis::cmd("ZADD").arg(recovery).arg(T0.0).arg(&orphan).query_async::<i64>(&mut con).await.unwrap();
    let pending = store.reserve(&request(t, user(1), "pending", fresh_conversation(), b"x"), fresh_message_id()).await;
    let pending = pending.unwrap();
    let found = store.scan_recoverable_commits(T0.plus_millis(1), 10).await.unwrap();
    assert_eq!(found, vec![pending.clone()]);
    clock.advance(qim_store::COMMIT_AUX_TTL_MILLIS);
    let report = store.gc_committed_auxiliary(10).await.unwrap();
    assert_eq!(report.removed, 1, "only the orphan goes");
    let members = zrange_all(&mut con, store.recovery_keys()).await;
    assert_eq!(members.len(), 1, "the unfinished commit keeps its entry: {members:?}");
    assert_eq!(store.scan_recoverable_commits(T0.plus_millis(1), 10).await.unwrap(), vec![pending]);
}

/// History reads skip expired records across batch boundaries and keep the page exact.
#[tokio::test]
async fn history_reads_across_batches() {
    let clock = clock();
    let cleanup = Cleanup::default();
    let store = open_store(policy(), clock.clone(), &cleanup).await;
    let (t, conv) = (fresh_tenant(), fresh_conversation());
    for i in 0..300 {
        let mut req = request(t, user(1), &format!("b{i}"), conv, b"x");
        if i < 200 {
            req.retention = RetentionClass::Ephemeral24h;
        }
        commit_fully(&store, &req).await;
    }
    clock.advance(EPHEMERAL_MILLIS);
    let auth = MembershipAuthorizer::default();
    auth.admit(t, conv, user(1));
    let q = |direction, anchor: Option<u64>, max_items| HistoryQuery {
        tenant: t,
        conversation: conv,
        viewer: user(1),
        direction,
        anchor: anchor.map(ConversationSeq),
        max_items,
        max_bytes: 1 << 20,
    };
    let page = store.history_page(&q(Direction::Newer, None, 3), &auth).await.unwrap();
    let seqs: Vec<u64> = page.records.iter().map(|r| r.seq.0).collect();
    assert_eq!((seqs, page.earliest_available, page.has_more), (vec![201, 202, 203], Some(ConversationSeq(201)), true));
    let page = store.history_page(&q(Direction::Older, Some(203), 500), &auth).await.unwrap();
    let seqs: Vec<u64> = page.records.iter().map(|r| r.seq.0).collect();
    assert_eq!((seqs, page.has_more), (vec![202, 201], false));
    let page = store.history_page(&q(Direction::Older, None, 500), &auth).await.unwrap();
    assert_eq!((page.records.len(), page.has_more), (100, false));
}

/// Redis missing is `Unavailable`, and the harness names Redis and the stack command.
#[tokio::test]
async fn unreachable_redis_is_unavailable() {
    let config = RedisConfig { url: "redis://127.0.0.1:1/0".to_owned(), namespace: unique_namespace() };
    let err = RedisMessageStore::open(&config, policy(), clock()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    let message = unreachable(&config.url, &err);
    assert!(message.contains("Redis") && message.contains("`deploy/local/stack up`"), "{message}");
}
