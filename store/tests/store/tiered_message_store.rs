//! `TieredMessageStore` (Redis hot tier + Scylla archive): the `MessageStore` contract suite,
//! and history paging across the hot/archive boundary compared, page by page, with the
//! single-store semantics computed from the full history.
//!
//! Needs Redis (`QIM_TEST_REDIS_URL`, default the local stack's) and the Scylla test cluster
//! (`QIM_TEST_SCYLLA_*`); fails, never skips, when either is missing.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use qim_store::clock::ManualClock;
use qim_store::ids::{ConversationId, ConversationSeq, TenantId, UnixMillis, MILLIS_PER_DAY};
use qim_store::message::{
    CommitRequest, Direction, HistoryPage, HistoryQuery, MessageRecord, PublishedRecord, ReadPosition,
};
use qim_store::redis::{
    RecentRecords, RedisConfig, RedisMembershipCache, RedisMessageStore, SeqLeases, DEFAULT_LEASE_BLOCK,
};
use qim_store::retention::{RetentionClass, RetentionPolicy};
use qim_store::scylla::{ScyllaMembershipStore, ScyllaMessageStore};
use qim_store::testsuite::fixtures::{
    clock, fresh_conversation, fresh_message_id, fresh_tenant, published, request, user, MembershipAuthorizer, T0,
};
use qim_store::testsuite::message::commit_fully;
use qim_store::testsuite::{MembershipHarness, MessageHarness};
use qim_store::tiered::{TieredMembershipStore, TieredMessageStore};
use qim_store::{all_members, MembershipStore, MessageStore, SeqHighWater};

use crate::scylla_support;
use crate::shared_redis;
use scylla_support::Keyspace;

use shared_redis::{unique_namespace, unreachable, url as redis_url, Cleanup};

/// This file's keyspace (see [`Keyspace`]).
static KEYSPACE: Keyspace = Keyspace::new("tiered_message_store");

const MINUTE: i64 = 60_000;

async fn hot_store(policy: RetentionPolicy, clock: Arc<ManualClock>, cleanup: &Cleanup) -> RedisMessageStore {
    hot_store_at(redis_url(), policy, clock, cleanup).await
}

/// [`hot_store`] on the Redis (or cluster) at `url`.
async fn hot_store_at(
    url: String,
    policy: RetentionPolicy,
    clock: Arc<ManualClock>,
    cleanup: &Cleanup,
) -> RedisMessageStore {
    let config = RedisConfig { url, namespace: unique_namespace() };
    cleanup.register_at(&config.url, &config.namespace);
    let store = RedisMessageStore::open(&config, policy, clock.clone())
        .await
        .unwrap_or_else(|e| panic!("{}", unreachable(&config.url, &e)));
    // Seqs leased from the archive keyspace's high-water marks, as in the writer.
    let marks = Arc::new(archive_store(policy, clock.clone()).await);
    store.with_seq_leases(qim_store::redis::SeqLeases::new(marks))
}

async fn archive_store(policy: RetentionPolicy, clock: Arc<ManualClock>) -> ScyllaMessageStore {
    let config = KEYSPACE.config();
    let session = scylla_support::connect(config).await;
    KEYSPACE.migrated(&session).await;
    ScyllaMessageStore::with_session(session, config, policy, clock)
        .await
        .unwrap_or_else(|e| panic!("opening the archive: {}", scylla_support::describe(&e)))
}

/// Tiered stores whose hot tier does not own a trim window (the suite's expiry tests then see
/// the hot tier's own expiry drain, as a plain Redis store does), on the shared Redis or on the
/// cluster.
struct Tiered {
    url: String,
    hot: Mutex<Vec<RedisMessageStore>>,
    cleanup: Cleanup,
}

impl Default for Tiered {
    fn default() -> Self {
        Self::on(redis_url())
    }
}

impl Tiered {
    /// Tiered stores whose hot tier is the Redis (or cluster) at `url`.
    fn on(url: String) -> Self {
        Self { url, hot: Mutex::default(), cleanup: Cleanup::default() }
    }
}

#[async_trait]
impl MessageHarness for Tiered {
    async fn open(&self, policy: RetentionPolicy, clock: Arc<ManualClock>) -> Arc<dyn MessageStore> {
        let hot = hot_store_at(self.url.clone(), policy, clock.clone(), &self.cleanup).await;
        let archive = archive_store(policy, clock.clone()).await;
        self.hot.lock().unwrap().push(hot.clone());
        Arc::new(TieredMessageStore::from_parts(Arc::new(hot), Arc::new(archive), 7, clock).unwrap())
    }

    async fn remove_record(&self, _: &Arc<dyn MessageStore>, t: TenantId, c: ConversationId, seq: ConversationSeq) {
        let hot = self.hot.lock().unwrap().last().cloned().unwrap();
        hot.sabotage_remove_record(t, c, seq).await.expect("sabotage: remove record");
    }

    async fn overwrite_record(
        &self,
        _: &Arc<dyn MessageStore>,
        t: TenantId,
        c: ConversationId,
        seq: ConversationSeq,
        bytes: Vec<u8>,
    ) {
        let hot = self.hot.lock().unwrap().last().cloned().unwrap();
        hot.sabotage_overwrite_record(t, c, seq, bytes).await.expect("sabotage: overwrite record");
    }
}

mod contract {
    use super::*;
    qim_store::message_store_contract_suite!(Tiered::default());
}

/// The same suite with the hot tier on the Redis Cluster.
mod contract_on_cluster {
    use super::*;
    qim_store::message_store_contract_suite!(Tiered::on(shared_redis::cluster_url()));
}

/// The page a single store holding `all` (live records, ascending) answers.
fn reference(all: &[MessageRecord], q: &HistoryQuery) -> (Vec<u64>, bool) {
    let candidates: Vec<&MessageRecord> = match q.direction {
        Direction::Older => all.iter().rev().filter(|r| q.anchor.is_none_or(|a| r.seq < a)).collect(),
        Direction::Newer => all.iter().filter(|r| q.anchor.is_none_or(|a| r.seq > a)).collect(),
    };
    let (mut seqs, mut used) = (Vec::new(), 0);
    for r in &candidates {
        let fits = seqs.is_empty() || (seqs.len() < q.max_items && used + r.page_bytes() <= q.max_bytes);
        if !fits {
            return (seqs, true);
        }
        used += r.page_bytes();
        seqs.push(r.seq.0);
    }
    (seqs, false)
}

fn seqs(page: &HistoryPage) -> Vec<u64> {
    page.records.iter().map(|r| r.seq.0).collect()
}

fn sized_request(t: TenantId, n: u64, conversation: ConversationId, class: RetentionClass) -> CommitRequest {
    let payload = vec![b'a' + (n % 26) as u8; 10 + (n as usize * 7) % 50];
    let mut r = request(t, user(1 + (n % 2) as u32), &format!("m{n}-{conversation}"), conversation, &payload);
    r.retention = class;
    r
}

/// 40 records committed a minute apart (seq 5 ephemeral, seq 13 a hole left by a reserve that
/// never recorded), 1..=30 archived, the clock moved a week on, the hot tier trimmed (1..=25
/// leave it), then 10 young records: every page in both directions, with every anchor and
/// several limits, equals the single-store answer, and `earliest_available` is the archive's.
#[tokio::test]
async fn pages_cross_the_hot_archive_boundary_seamlessly() {
    let policy = RetentionPolicy::with_default_days(30).unwrap();
    let clock = clock();
    let cleanup = Cleanup::default();
    let hot = hot_store(policy, clock.clone(), &cleanup).await.with_trim_window(7);
    let archive = archive_store(policy, clock.clone()).await;
    let tiered =
        TieredMessageStore::from_parts(Arc::new(hot.clone()), Arc::new(archive.clone()), 7, clock.clone()).unwrap();
    let (t, c) = (fresh_tenant(), fresh_conversation());
    let mut records = Vec::new();
    for n in 1..=40u64 {
        clock.set(T0.plus_millis(n as i64 * MINUTE));
        let class = if n == 5 { RetentionClass::Ephemeral24h } else { RetentionClass::Default };
        let req = sized_request(t, n, c, class);
        if n == 13 {
            let hole = hot.reserve(&req, fresh_message_id()).await.unwrap();
            assert_eq!(hole.intent.seq.0, 13);
            continue;
        }
        let commit = commit_fully(&hot, &req).await;
        records.push(commit.intent.record(policy.expires_at(class, commit.intent.created_at)));
    }
    archive.archive_records(&published(&records[..29]), 16).await.unwrap(); // seqs 1..=30 without the hole
    hot.record_archived_watermark(t, c, ConversationSeq(30)).await.unwrap();
    clock.set(T0.plus_millis(7 * MILLIS_PER_DAY + 25 * MINUTE + 30_000));
    let report = hot.trim_hot_history(1000).await.unwrap();
    assert_eq!(report.trimmed, 24, "1..=25 without the hole left the hot tier: {report:?}");
    for n in 41..=50u64 {
        let commit = commit_fully(&hot, &sized_request(t, n, c, RetentionClass::Default)).await;
        records.push(commit.intent.record(policy.expires_at(RetentionClass::Default, commit.intent.created_at)));
    }
    let now = qim_store::clock::Clock::now(clock.as_ref());
    let live: Vec<MessageRecord> = records.iter().filter(|r| !r.is_expired(now)).cloned().collect();
    assert_eq!(live.len(), 48, "50 seqs without the hole and the expired ephemeral record");

    let viewer = user(9);
    let auth = MembershipAuthorizer::default();
    auth.admit(t, c, viewer);
    let limits = [(3usize, usize::MAX), (7, 150), (500, usize::MAX), (4, 1)];
    let anchors = std::iter::once(None).chain((0..=52).map(|a| Some(ConversationSeq(a))));
    let mut pages = 0;
    for anchor in anchors {
        for direction in [Direction::Older, Direction::Newer] {
            for (max_items, max_bytes) in limits {
                let q = HistoryQuery { tenant: t, conversation: c, viewer, direction, anchor, max_items, max_bytes };
                let page = tiered.history_page(&q, &auth).await.unwrap();
                let (want, more) = reference(&live, &q);
                assert_eq!(
                    (seqs(&page), page.has_more),
                    (want, more),
                    "{direction:?} from {anchor:?}, {max_items}/{max_bytes}"
                );
                assert_eq!(page.earliest_available, Some(ConversationSeq(1)));
                for r in &page.records {
                    assert_eq!(Some(r), live.iter().find(|x| x.seq == r.seq), "records come back as committed");
                }
                pages += 1;
            }
        }
    }
    assert_eq!(auth.calls(), pages, "the authorizer is consulted once per page");

    // Unread summaries see both tiers: sender user(1) wrote the even seqs, user(2) the odd ones.
    let others = |after: u64| live.iter().filter(|r| r.seq.0 > after && r.sender != user(1)).count() as u32;
    let positions = [
        ReadPosition { conversation: c, read_through: ConversationSeq(0) },
        ReadPosition { conversation: c, read_through: ConversationSeq(20) },
    ];
    let summaries = tiered.conversation_summaries(t, user(1), &positions).await.unwrap();
    assert_eq!(summaries[0].unread, others(0));
    assert_eq!(summaries[1].unread, others(20));
    assert!(summaries.iter().all(|s| s.unread_precise && s.last_seq == Some(ConversationSeq(50))));
}

/// A conversation entirely trimmed from the hot tier reads from the archive alone, and one
/// never archived reads from the hot tier alone.
#[tokio::test]
async fn either_tier_alone_serves_the_whole_history() {
    let policy = RetentionPolicy::with_default_days(30).unwrap();
    let clock = clock();
    let cleanup = Cleanup::default();
    let hot = hot_store(policy, clock.clone(), &cleanup).await.with_trim_window(7);
    let archive = archive_store(policy, clock.clone()).await;
    let tiered =
        TieredMessageStore::from_parts(Arc::new(hot.clone()), Arc::new(archive.clone()), 7, clock.clone()).unwrap();
    let t = fresh_tenant();
    let (old, fresh) = (fresh_conversation(), fresh_conversation());
    let mut archived = Vec::new();
    for n in 1..=6u64 {
        let commit = commit_fully(&hot, &sized_request(t, n, old, RetentionClass::Default)).await;
        archived.push(commit.intent.record(policy.expires_at(RetentionClass::Default, commit.intent.created_at)));
    }
    archive.archive_records(&published(&archived), 4).await.unwrap();
    hot.record_archived_watermark(t, old, ConversationSeq(6)).await.unwrap();
    clock.set(T0.plus_millis(8 * MILLIS_PER_DAY));
    assert_eq!(hot.trim_hot_history(100).await.unwrap().trimmed, 6);
    for n in 1..=3u64 {
        commit_fully(&hot, &sized_request(t, n, fresh, RetentionClass::Default)).await;
    }
    let viewer = user(9);
    let auth = MembershipAuthorizer::default();
    for (conv, want) in [(old, vec![6, 5, 4, 3, 2, 1]), (fresh, vec![3, 2, 1])] {
        auth.admit(t, conv, viewer);
        let q = HistoryQuery {
            tenant: t,
            conversation: conv,
            viewer,
            direction: Direction::Older,
            anchor: None,
            max_items: 10,
            max_bytes: usize::MAX,
        };
        let page = tiered.history_page(&q, &auth).await.unwrap();
        assert_eq!((seqs(&page), page.has_more, page.earliest_available), (want, false, Some(ConversationSeq(1))));
    }
}

/// The archive as the source of a conversation's recent records (the writer adds the topic's
/// unarchived tail).
struct ArchiveRecent(ScyllaMessageStore);

#[async_trait]
impl RecentRecords for ArchiveRecent {
    async fn recent_records(
        &self,
        tenant: TenantId,
        conversation: ConversationId,
        since: UnixMillis,
    ) -> qim_store::StoreResult<Vec<PublishedRecord>> {
        self.0.recent_published(tenant, conversation, since, 10_000).await
    }
}

/// A hot tier that leases from `archive`'s marks and restores from it, in a namespace of its
/// own (returned, for wiping).
async fn rebuilding_hot_store(
    policy: RetentionPolicy,
    clock: Arc<ManualClock>,
    cleanup: &Cleanup,
    archive: &ScyllaMessageStore,
) -> (RedisMessageStore, String) {
    let config = RedisConfig { url: redis_url(), namespace: unique_namespace() };
    cleanup.register(&config.namespace);
    let store = RedisMessageStore::open(&config, policy, clock)
        .await
        .unwrap_or_else(|e| panic!("{}", unreachable(&config.url, &e)));
    let leases =
        SeqLeases::new(Arc::new(archive.clone())).with_recent_records(Arc::new(ArchiveRecent(archive.clone())));
    (store.with_trim_window(7).with_seq_leases(leases), config.namespace)
}

fn newest_first(viewer: qim_store::ids::UserId, t: TenantId, c: ConversationId) -> HistoryQuery {
    HistoryQuery {
        tenant: t,
        conversation: c,
        viewer,
        direction: Direction::Older,
        anchor: None,
        max_items: 100,
        max_bytes: usize::MAX,
    }
}

/// The scenario at the store level (DESIGN invariants 1, 2, 7): five messages
/// committed and archived, then Redis loses every key (the topic's records may be long gone:
/// nothing here reads it). History stays whole from the archive meanwhile; the conversation's
/// next send revalidates its lease: the recent records and commits come back (a retry of an
/// acknowledged send gets its first answer, without using up a seq), and the next seq is above
/// the durable mark, never 1.
#[tokio::test]
async fn after_redis_lost_everything_a_conversation_comes_back_from_the_archive() {
    let policy = RetentionPolicy::with_default_days(30).unwrap();
    let clock = clock();
    let cleanup = Cleanup::default();
    let archive = archive_store(policy, clock.clone()).await;
    let (hot, namespace) = rebuilding_hot_store(policy, clock.clone(), &cleanup, &archive).await;
    let tiered =
        TieredMessageStore::from_parts(Arc::new(hot.clone()), Arc::new(archive.clone()), 7, clock.clone()).unwrap();
    let (t, c) = (fresh_tenant(), fresh_conversation());
    let mut acknowledged = Vec::new();
    let mut records = Vec::new();
    for n in 1..=5u64 {
        clock.set(T0.plus_millis(n as i64 * MINUTE));
        let req = sized_request(t, n, c, RetentionClass::Default);
        let commit = commit_fully(&tiered, &req).await;
        records.push(commit.intent.record(policy.expires_at(RetentionClass::Default, commit.intent.created_at)));
        acknowledged.push((req, commit));
    }
    archive.archive_records(&published(&records), 8).await.unwrap();
    assert!(shared_redis::wipe(&namespace) > 10, "the hot tier held the conversation");

    let auth = MembershipAuthorizer::default();
    auth.admit(t, c, user(9));
    let page = tiered.history_page(&newest_first(user(9), t, c), &auth).await.unwrap();
    assert_eq!(seqs(&page), vec![5, 4, 3, 2, 1], "read from the archive while the hot tier is not trusted");

    let (retried, first) = &acknowledged[2];
    let retry = tiered.reserve(retried, fresh_message_id()).await.unwrap();
    assert_eq!(&retry, first, "the retry of an acknowledged send gets its first answer");
    let next = commit_fully(&tiered, &sized_request(t, 6, c, RetentionClass::Default)).await;
    assert_eq!(next.intent.seq, ConversationSeq(DEFAULT_LEASE_BLOCK + 1), "above the durable mark, never 1");
    let (again, first) = &acknowledged[3];
    assert_eq!(&tiered.reserve(again, fresh_message_id()).await.unwrap(), first);
    let after = commit_fully(&tiered, &sized_request(t, 7, c, RetentionClass::Default)).await;
    assert_eq!(after.intent.seq.0, next.intent.seq.0 + 1, "the restored claims answered the retries: no hole");

    assert!(hot.hot_tier_trusted(t, c).await.unwrap());
    let hot_only = hot.history_page(&newest_first(user(9), t, c), &auth).await.unwrap();
    let want = vec![after.intent.seq.0, next.intent.seq.0, 5, 4, 3, 2, 1];
    assert_eq!(seqs(&hot_only), want, "the hot tier holds the restored records");
    assert_eq!(&hot_only.records[2..], records.iter().rev().cloned().collect::<Vec<_>>().as_slice());
}

/// Records whose archive rows expired leave no trace but the durable mark, which has no TTL:
/// after Redis loses everything the next send still starts above every seq ever issued.
#[tokio::test]
async fn a_conversation_whose_archived_records_all_expired_still_never_reissues() {
    let policy = RetentionPolicy::with_default_days(1).unwrap();
    let cleanup = Cleanup::default();
    // Sent two days ago (by the store's clock), archived now: the rows get a 1 s TTL.
    let sent = Arc::new(ManualClock::new(UnixMillis(UnixMillis::now().0 - 2 * MILLIS_PER_DAY)));
    let archive = archive_store(policy, Arc::new(ManualClock::new(UnixMillis::now()))).await;
    let (hot, namespace) = rebuilding_hot_store(policy, sent.clone(), &cleanup, &archive).await;
    let (t, c) = (fresh_tenant(), fresh_conversation());
    let mut records = Vec::new();
    for n in 1..=5u64 {
        let commit = commit_fully(&hot, &sized_request(t, n, c, RetentionClass::Default)).await;
        records.push(commit.intent.record(policy.expires_at(RetentionClass::Default, commit.intent.created_at)));
    }
    archive.archive_records(&published(&records), 8).await.unwrap();
    let rows = format!(
        "SELECT conversation_seq FROM {}.history_index WHERE tenant_id = ? AND conversation_id = ?",
        archive.config().keyspace
    );
    scylla_support::wait_until("every archived row to expire", std::time::Duration::from_secs(10), || async {
        let left = archive.session().query_unpaged(rows.clone(), (t.0.to_vec(), c.0.to_vec())).await.unwrap();
        left.into_rows_result().unwrap().rows_num() == 0
    })
    .await;
    shared_redis::wipe(&namespace);
    sent.set(UnixMillis::now());
    let next = commit_fully(&hot, &sized_request(t, 6, c, RetentionClass::Default)).await;
    assert!(next.intent.seq.0 > 5, "seq {} was issued before", next.intent.seq.0);
    assert_eq!(archive.high_water(t, c).await.unwrap().through, ConversationSeq(2 * DEFAULT_LEASE_BLOCK));
}

/// Tiered membership stores sharing one durable table and one cache namespace.
struct TieredMembers {
    namespace: String,
    cleanup: Cleanup,
}

impl Default for TieredMembers {
    fn default() -> Self {
        let cleanup = Cleanup::default();
        let namespace = unique_namespace();
        cleanup.register(&namespace);
        Self { namespace, cleanup }
    }
}

impl TieredMembers {
    async fn store(&self) -> TieredMembershipStore {
        let _ = &self.cleanup;
        let config = KEYSPACE.config();
        let session = scylla_support::connect(config).await;
        KEYSPACE.migrated(&session).await;
        let durable = ScyllaMembershipStore::with_session(session, config).await.expect("membership statements");
        let redis = RedisConfig { url: redis_url(), namespace: self.namespace.clone() };
        let cache =
            RedisMembershipCache::open(&redis).await.unwrap_or_else(|e| panic!("{}", unreachable(&redis.url, &e)));
        TieredMembershipStore::new(durable, cache)
    }
}

#[async_trait]
impl MembershipHarness for TieredMembers {
    async fn open(&self) -> Arc<dyn MembershipStore> {
        Arc::new(self.store().await)
    }
}

mod membership {
    use super::*;
    qim_store::membership_store_contract_suite!(TieredMembers::default());
}

/// DESIGN invariant 9: membership is durable outside Redis. After Redis loses every key the
/// members are still members (read from the durable table and cached again); a change made while
/// cached reaches the cache; and a cache filled before a change is never trusted after it.
#[tokio::test]
async fn members_survive_a_redis_loss_and_the_cache_follows_changes() {
    let h = TieredMembers::default();
    let store = h.store().await;
    let (t, c) = (fresh_tenant(), fresh_conversation());
    store.add_members(t, c, &[user(1), user(2), user(3)]).await.unwrap();
    assert!(store.is_member(t, c, user(2)).await.unwrap(), "fills the cache");
    store.remove_members(t, c, &[user(2)]).await.unwrap();
    assert!(!store.is_member(t, c, user(2)).await.unwrap(), "the cached set took the removal");
    assert!(shared_redis::wipe(&h.namespace) > 0, "the cache was in Redis");
    assert!(store.is_member(t, c, user(1)).await.unwrap(), "a member after the wipe");
    assert!(!store.is_member(t, c, user(2)).await.unwrap(), "and a removed one stays removed");
    assert_eq!(all_members(&store, t, c).await.unwrap(), vec![user(1), user(3)]);

    // A reader that saw the cache missing, then read the durable table, and only then tried to
    // fill it, after a change: its fill is refused and the change stands.
    shared_redis::wipe(&h.namespace);
    let redis = RedisConfig { url: redis_url(), namespace: h.namespace.clone() };
    let cache = RedisMembershipCache::open(&redis).await.unwrap();
    let qim_store::redis::membership_cache::Cached::Miss { generation } = cache.is_member(t, c, user(1)).await.unwrap()
    else {
        panic!("the cache was wiped")
    };
    let stale = all_members(&store, t, c).await.unwrap();
    store.add_members(t, c, &[user(4)]).await.unwrap();
    assert!(!cache.fill(t, c, &generation, &stale).await.unwrap(), "a fill older than a change is refused");
    assert!(store.is_member(t, c, user(4)).await.unwrap());
}

/// A fill of many members is written in parts; two fills under way at once never mix their
/// parts: a valid cache holds exactly one fill's members.
#[tokio::test]
async fn two_fills_in_parts_at_once_never_mix() {
    use qim_store::redis::membership_cache::Cached;
    let h = TieredMembers::default();
    let redis = RedisConfig { url: redis_url(), namespace: h.namespace.clone() };
    let (a, b) = (RedisMembershipCache::open(&redis).await.unwrap(), RedisMembershipCache::open(&redis).await.unwrap());
    // Distinct sets (of one generation they would be the same), so a mix shows.
    let set = |offset: u32| -> Vec<qim_store::ids::UserId> { (0..5_000).map(|i| user(offset + i)).collect() };
    let (x, y) = (set(0), set(100_000));
    for round in 0..4 {
        let (t, c) = (fresh_tenant(), fresh_conversation());
        let Cached::Miss { generation } = a.is_member(t, c, user(1)).await.unwrap() else { panic!("a fresh cache") };
        let (filled_x, filled_y) = tokio::join!(a.fill(t, c, &generation, &x), b.fill(t, c, &generation, &y));
        assert!(filled_x.unwrap() || filled_y.unwrap(), "round {round}: one of the fills lands");
        let mut cached = Vec::new();
        loop {
            let Cached::Hit(page) = a.members_page(t, c, cached.last().copied(), 1_000).await.unwrap() else {
                panic!("round {round}: the landed fill left the cache valid")
            };
            if page.is_empty() {
                break;
            }
            cached.extend(page);
        }
        assert!(cached == x || cached == y, "round {round}: the cache mixes two fills ({} members)", cached.len());
    }
}
