//! The Redis hot tier's own duties, each test on a private `redis-server` (flushed, restarted,
//! restored from an older snapshot, or inspected key by key, so never the shared one): no seq
//! reissued after Redis loses state (seq leases of the durable high-water mark), AOF restarts,
//! restoring records, and the ADR-0019 trim and expiry rules.

use std::sync::Arc;

use crate::shared_redis::{zcard_all, zrange_all};

use qim_store::clock::{Clock, ManualClock};
use qim_store::ids::{ConversationId, ConversationSeq, TenantId, UnixMillis, MILLIS_PER_DAY};
use qim_store::memory::MemorySeqHighWater;
use qim_store::message::PublishedRecord;
use qim_store::message::{CommitState, Direction, HistoryPage, HistoryQuery, MessageRecord, Publication};
use qim_store::redis::{RedisConfig, RedisMessageStore, SeqLeases, DEFAULT_LEASE_BLOCK};
use qim_store::retention::{RetentionClass, RetentionPolicy, EPHEMERAL_MILLIS};
use qim_store::testsuite::fixtures::{
    assert_kind, clock, fresh_conversation, fresh_message_id, fresh_tenant, request, user, MembershipAuthorizer,
};
use qim_store::testsuite::message::commit_fully;
use qim_store::testsuite::private_redis::PrivateRedis;
use qim_store::{ErrorKind, MessageStore, SeqHighWater};

/// The durable seq high-water marks every store of this process leases from (in memory: they
/// outlive Redis restarts and flushes, as a database does).
fn marks() -> Arc<MemorySeqHighWater> {
    static MARKS: std::sync::OnceLock<Arc<MemorySeqHighWater>> = std::sync::OnceLock::new();
    MARKS.get_or_init(Arc::default).clone()
}

pub(crate) async fn open(redis: &PrivateRedis, days: u32, clock: Arc<ManualClock>) -> RedisMessageStore {
    let config = RedisConfig { url: redis.url(), namespace: "qim".into() };
    let policy = RetentionPolicy::with_default_days(days).expect("legal days");
    let store = RedisMessageStore::open(&config, policy, clock).await.expect("private redis answers");
    store.with_seq_leases(SeqLeases::new(marks()))
}

pub(crate) async fn raw(redis: &PrivateRedis) -> redis::aio::MultiplexedConnection {
    let client = redis::Client::open(redis.url()).expect("url");
    client.get_multiplexed_async_connection().await.expect("private redis answers")
}

async fn send(store: &RedisMessageStore, tenant: TenantId, conv: ConversationId, id: &str) -> u64 {
    commit_fully(store, &request(tenant, user(1), id, conv, b"hello")).await.intent.seq.0
}

async fn history(store: &RedisMessageStore, tenant: TenantId, conv: ConversationId) -> HistoryPage {
    let auth = MembershipAuthorizer::default();
    auth.admit(tenant, conv, user(1));
    let q = HistoryQuery {
        tenant,
        conversation: conv,
        viewer: user(1),
        direction: Direction::Newer,
        anchor: None,
        max_items: 100,
        max_bytes: 1 << 20,
    };
    store.history_page(&q, &auth).await.expect("history")
}

async fn history_seqs(store: &RedisMessageStore, tenant: TenantId, conv: ConversationId) -> (Vec<u64>, Option<u64>) {
    let page = history(store, tenant, conv).await;
    (page.records.iter().map(|r| r.seq.0).collect(), page.earliest_available.map(|s| s.0))
}

#[tokio::test]
async fn a_conversation_leases_a_block_of_the_durable_mark_before_its_first_seq() {
    let redis = PrivateRedis::start();
    let store = open(&redis, 30, clock()).await;
    let (t, conv) = (fresh_tenant(), fresh_conversation());
    assert_eq!(send(&store, t, conv, "m1").await, 1);
    assert_eq!(marks().high_water(t, conv).await.unwrap().through, ConversationSeq(DEFAULT_LEASE_BLOCK));
    for i in 2..=DEFAULT_LEASE_BLOCK + 10 {
        assert_eq!(send(&store, t, conv, &format!("m{i}")).await, i, "seqs stay contiguous across lease extensions");
    }
    let mark = marks().high_water(t, conv).await.unwrap().through.0;
    assert!(mark >= DEFAULT_LEASE_BLOCK + 10, "every issued seq is at or below the durable mark ({mark})");
}

#[tokio::test]
async fn without_leases_a_store_installs_no_lease_but_answers_replays() {
    let redis = PrivateRedis::start();
    let store = open(&redis, 30, clock()).await;
    let (t, conv) = (fresh_tenant(), fresh_conversation());
    let req = request(t, user(1), "m1", conv, b"x");
    let committed = commit_fully(&store, &req).await;
    let config = RedisConfig { url: redis.url(), namespace: "qim".into() };
    let bare = RedisMessageStore::open(&config, RetentionPolicy::default(), clock()).await.unwrap();
    assert_eq!(bare.reserve(&req, fresh_message_id()).await.unwrap(), committed, "a replay is answered");
    let next = request(t, user(1), "n1", fresh_conversation(), b"x");
    assert_kind(bare.reserve(&next, fresh_message_id()).await, ErrorKind::InvariantViolation, "no lease to be had");
}

#[tokio::test]
async fn a_flush_mid_run_resumes_above_the_durable_mark() {
    let redis = PrivateRedis::start();
    let store = open(&redis, 30, clock()).await;
    let (t, conv) = (fresh_tenant(), fresh_conversation());
    for i in 1..=5 {
        assert_eq!(send(&store, t, conv, &format!("m{i}")).await, i);
    }
    redis::cmd("FLUSHALL").query_async::<()>(&mut raw(&redis).await).await.unwrap();
    let next = send(&store, t, conv, "m6").await;
    assert_eq!(next, DEFAULT_LEASE_BLOCK + 1, "the counter restarts above the mark, never at 1");
    assert_eq!(send(&store, t, conv, "m7").await, next + 1);
    assert_eq!(marks().high_water(t, conv).await.unwrap().through, ConversationSeq(2 * DEFAULT_LEASE_BLOCK));
}

#[tokio::test]
async fn a_lost_counter_under_surviving_history_resumes_above_the_mark() {
    let redis = PrivateRedis::start();
    let store = open(&redis, 30, clock()).await;
    let (t, conv, other) = (fresh_tenant(), fresh_conversation(), fresh_conversation());
    send(&store, t, conv, "m1").await;
    send(&store, t, other, "n1").await;
    redis::cmd("DEL").arg(store.seq_key(t, conv)).query_async::<()>(&mut raw(&redis).await).await.unwrap();
    assert_eq!(send(&store, t, conv, "m2").await, DEFAULT_LEASE_BLOCK + 1, "the lost counter is revalidated");
    assert_eq!(send(&store, t, other, "n2").await, 2, "another conversation keeps its lease");
}

#[tokio::test]
async fn an_aof_restart_loses_nothing_acknowledged_and_resumes_above_the_mark() {
    let mut redis = PrivateRedis::start();
    let store = open(&redis, 30, clock()).await;
    let (t, conv) = (fresh_tenant(), fresh_conversation());
    let mut acknowledged = Vec::new();
    for i in 1..=20 {
        let req = request(t, user(1), &format!("m{i}"), conv, b"payload");
        acknowledged.push((req.clone(), commit_fully(&store, &req).await));
    }
    redis.restart();
    let store = open(&redis, 30, clock()).await;
    assert!(!store.hot_tier_trusted(t, conv).await.unwrap(), "another Redis process: the lease is not valid");
    for (req, committed) in &acknowledged {
        let after = store.load_commit(&req.key).await.unwrap().expect("acknowledged commit survives");
        assert_eq!(&after, committed);
        assert_eq!(store.reserve(req, fresh_message_id()).await.unwrap(), *committed, "a retry gets the same answer");
    }
    assert_eq!(history_seqs(&store, t, conv).await.0, (1..=20).collect::<Vec<_>>());
    // The restarted process may have lost the last second of writes: the counter restarts above
    // the mark (the retries above, finding their claims gone, left holes there).
    assert!(send(&store, t, conv, "m21").await > DEFAULT_LEASE_BLOCK);
    assert!(store.hot_tier_trusted(t, conv).await.unwrap(), "revalidated");
}

#[tokio::test]
async fn a_restored_older_snapshot_never_reissues_a_seq() {
    let mut redis = PrivateRedis::start();
    let store = open(&redis, 30, clock()).await;
    let (t, conv) = (fresh_tenant(), fresh_conversation());
    for i in 1..=70 {
        send(&store, t, conv, &format!("a{i}")).await;
    }
    let snapshot = redis.snapshot();
    let store = open(&redis, 30, clock()).await;
    let mut issued = Vec::new();
    for i in 1..=60 {
        issued.push(send(&store, t, conv, &format!("b{i}")).await);
    }
    let highest = *issued.last().unwrap();
    assert!(issued[0] > 70, "the restart revalidated the lease: {issued:?}");
    assert_eq!(highest, issued[0] + 59, "contiguous after the revalidation: {issued:?}");
    redis.restore(&snapshot);
    let store = open(&redis, 30, clock()).await;
    let counter: u64 = redis::cmd("GET").arg(store.seq_key(t, conv)).query_async(&mut raw(&redis).await).await.unwrap();
    assert_eq!(counter, 70, "the snapshot rolled the counter back");
    let next = send(&store, t, conv, "c1").await;
    assert!(next > highest, "seq {next} must be above every seq issued before the restore ({highest})");
    let mark = marks().high_water(t, conv).await.unwrap().through.0;
    assert!(mark >= next, "the mark ({mark}) covers the new lease");
}

#[tokio::test]
async fn two_redis_processes_serving_one_conversation_never_issue_one_seq_twice() {
    // A failover's old master still serving alongside the new one: both lease from one mark.
    let (a, b) = (PrivateRedis::start(), PrivateRedis::start());
    let (on_a, on_b) = (open(&a, 30, clock()).await, open(&b, 30, clock()).await);
    let (t, conv) = (fresh_tenant(), fresh_conversation());
    let mut issued = Vec::new();
    issued.push(send(&on_a, t, conv, "a0").await);
    for round in 0..6 {
        for i in 0..40 {
            issued.push(send(&on_b, t, conv, &format!("b{round}-{i}")).await);
            issued.push(send(&on_a, t, conv, &format!("a{round}-{i}")).await);
        }
    }
    let mut unique = issued.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), issued.len(), "a seq was issued twice: {issued:?}");
    let mark = marks().high_water(t, conv).await.unwrap();
    assert!(mark.through.0 >= *unique.last().unwrap(), "every issued seq is at or below the mark ({mark:?})");
}

#[tokio::test]
async fn a_reserve_from_before_a_loss_writes_no_record_after_the_revalidation() {
    let redis = PrivateRedis::start();
    let store = open(&redis, 30, clock()).await;
    let (t, conv) = (fresh_tenant(), fresh_conversation());
    let reserved = store.reserve(&request(t, user(1), "m1", conv, b"lost"), fresh_message_id()).await.unwrap();
    assert_eq!(reserved.intent.seq, ConversationSeq(1));
    redis::cmd("FLUSHALL").query_async::<()>(&mut raw(&redis).await).await.unwrap();
    let next = send(&store, t, conv, "m2").await;
    assert_eq!(next, DEFAULT_LEASE_BLOCK + 1, "revalidated above the mark");
    // The store still believes it reserved seq 1; Redis lost that commit, so no record may
    // appear under it.
    assert_kind(store.put_record(&reserved.intent).await, ErrorKind::NotFound, "Redis lost the reservation");
    assert_eq!(history_seqs(&store, t, conv).await.0, vec![next], "no ghost record under seq 1");
}

#[tokio::test]
async fn the_hot_tier_and_recent_commits_are_restored_from_the_topic_without_overwriting_or_resurrecting() {
    let redis = PrivateRedis::start();
    let clock = clock();
    let store = open(&redis, 30, clock.clone()).await;
    let (t, conv) = (fresh_tenant(), fresh_conversation());
    let mut acknowledged = Vec::new();
    for i in 1..=4 {
        let req = request(t, user(1), &format!("m{i}"), conv, b"hello");
        acknowledged.push((req.clone(), commit_fully(&store, &req).await));
    }
    // What qim.messages.v1 holds, then Redis loses everything.
    let records: Vec<MessageRecord> = history(&store, t, conv).await.records;
    assert_eq!(records.len(), 4);
    let published = |records: &[MessageRecord]| -> Vec<PublishedRecord> {
        let at = |i| Publication { partition: 0, offset: i as i64 };
        records.iter().enumerate().map(|(i, r)| PublishedRecord { record: r.clone(), publication: at(i) }).collect()
    };
    redis::cmd("FLUSHALL").query_async::<()>(&mut raw(&redis).await).await.unwrap();
    let window_start = UnixMillis(clock.now().0 - 7 * MILLIS_PER_DAY);

    let report = store.restore_records(&published(&records), window_start).await.unwrap();
    assert_eq!((report.restored, report.present, report.conflicts.len()), (4, 0, 0));
    assert_eq!((report.commits_restored, report.commits_present), (4, 0));
    assert_eq!(history(&store, t, conv).await.records, records, "the same records, byte for byte");
    let again = store.restore_records(&published(&records), window_start).await.unwrap();
    assert_eq!((again.restored, again.present, again.commits_present), (0, 4, 4), "restoring twice changes nothing");

    // Another record under an existing seq is never written over the first.
    let mut impostor = records[1].clone();
    impostor.payload = b"another body".to_vec();
    let report = store.restore_records(&published(&[impostor]), window_start).await.unwrap();
    assert_eq!(report.conflicts.len(), 1, "{report:?}");
    assert_eq!(history(&store, t, conv).await.records, records);

    // Records outside the window or past their retention are skipped; a trimmed one stays gone.
    let other = fresh_conversation();
    let mut old = records[0].clone();
    (old.conversation, old.created_at) = (other, UnixMillis(window_start.0 - 1));
    let mut expired = records[0].clone();
    (expired.conversation, expired.seq, expired.expires_at) = (other, ConversationSeq(2), Some(clock.now()));
    let mut trimmed = records[0].clone();
    (trimmed.conversation, trimmed.seq) = (other, ConversationSeq(3));
    redis::cmd("SET")
        .arg(store.lower_bound_key(t, other))
        .arg(3)
        .query_async::<()>(&mut raw(&redis).await)
        .await
        .unwrap();
    let report = store.restore_records(&published(&[old, expired, trimmed]), window_start).await.unwrap();
    assert_eq!((report.outside_window, report.expired, report.removed, report.restored), (1, 1, 1, 0), "{report:?}");

    // The restored records carry their expiry registrations: the drain removes them on time.
    // A retry of an acknowledged send gets its first answer; other content under its key is a conflict.
    for (req, committed) in &acknowledged {
        let retry = store.reserve(req, fresh_message_id()).await.unwrap();
        assert_eq!(
            (retry.state, retry.intent.seq, retry.intent.message_id),
            (CommitState::Committed, committed.intent.seq, committed.intent.message_id)
        );
    }
    let changed = request(t, user(1), "m1", conv, b"other content");
    assert_kind(store.reserve(&changed, fresh_message_id()).await, ErrorKind::Conflict, "same key, other content");
    assert!(send(&store, t, conv, "m5").await > DEFAULT_LEASE_BLOCK, "above the durable mark");
    clock.advance(30 * MILLIS_PER_DAY + 1);
    assert_eq!(store.gc_expired_history(100).await.unwrap().removed, 5);
}

#[tokio::test]
async fn a_counter_rolled_back_under_surviving_history_never_reissues() {
    let redis = PrivateRedis::start();
    let store = open(&redis, 30, clock()).await;
    let (t, conv) = (fresh_tenant(), fresh_conversation());
    for i in 1..=3 {
        send(&store, t, conv, &format!("m{i}")).await;
    }
    redis::cmd("SET").arg(store.seq_key(t, conv)).arg(1).query_async::<()>(&mut raw(&redis).await).await.unwrap();
    assert_eq!(send(&store, t, conv, "m4").await, 4, "the counter is raised above the history it still has");
}

#[tokio::test]
async fn a_second_writer_handed_the_same_seq_can_not_overwrite_the_first() {
    // A counter rolled back under an in-flight send (whatever the cause) hands one seq to two
    // writers; the record of the first must win and the second must fail before it is ever
    // published.
    let redis = PrivateRedis::start();
    let store = open(&redis, 30, clock()).await;
    let (t, conv) = (fresh_tenant(), fresh_conversation());
    let first = store.reserve(&request(t, user(1), "a", conv, b"first"), fresh_message_id()).await.unwrap();
    redis::cmd("SET").arg(store.seq_key(t, conv)).arg(0).query_async::<()>(&mut raw(&redis).await).await.unwrap();
    let second = store.reserve(&request(t, user(2), "b", conv, b"second"), fresh_message_id()).await.unwrap();
    assert_eq!(second.intent.seq, first.intent.seq, "the rolled-back counter handed out the seq again");
    store.put_record(&second.intent).await.unwrap();
    assert_kind(store.put_record(&first.intent).await, ErrorKind::Conflict, "overwriting another record");
    let (seqs, _) = history_seqs(&store, t, conv).await;
    assert_eq!(seqs, vec![1]);
}

#[tokio::test]
async fn an_expiry_registered_again_after_the_drain_does_not_jam_it() {
    // The expiry is registered before COMMITTED (alongside RECORDED, and again by a later step
    // that did not see that succeed); a crash in between and a retry after the
    // drain ran registers the same member again.
    let redis = PrivateRedis::start();
    let clock = clock();
    let store = open(&redis, 30, clock.clone()).await;
    let (t, conv) = (fresh_tenant(), fresh_conversation());
    let mut eph = request(t, user(1), "e", conv, b"x");
    eph.retention = RetentionClass::Ephemeral24h;
    commit_fully(&store, &eph).await;
    clock.advance(EPHEMERAL_MILLIS + 1);
    let mut con = raw(&redis).await;
    let [gc_key] = <[String; 1]>::try_from(
        zrange_all(&mut con, store.history_gc_keys())
            .await
            .iter()
            .map(|m| store.history_gc_key_of(m))
            .collect::<Vec<_>>(),
    )
    .expect("one registered record");
    let members: Vec<(String, f64)> =
        redis::cmd("ZRANGE").arg(&gc_key).arg(0).arg(-1).arg("WITHSCORES").query_async(&mut con).await.unwrap();
    assert_eq!(store.gc_expired_history(10).await.unwrap().removed, 1);
    let (member, score) = &members[0];
    redis::cmd("ZADD").arg(&gc_key).arg(*score).arg(member).query_async::<()>(&mut con).await.unwrap();
    let again = store.gc_expired_history(10).await.expect("the drain recognises the re-registered member");
    assert_eq!(again.removed, 1);
    assert_eq!(store.gc_expired_history(10).await.unwrap().removed, 0, "and is empty afterwards");
}

#[tokio::test]
async fn corrupt_numbers_and_members_are_corrupt_entries_not_outages() {
    let redis = PrivateRedis::start();
    let store = open(&redis, 30, clock()).await;
    let (t, conv) = (fresh_tenant(), fresh_conversation());
    send(&store, t, conv, "m1").await;
    let mut con = raw(&redis).await;
    redis::cmd("SET").arg(store.seq_key(t, conv)).arg("eleven").query_async::<()>(&mut con).await.unwrap();
    let next = request(t, user(1), "m2", conv, b"x");
    assert_kind(store.reserve(&next, fresh_message_id()).await, ErrorKind::CorruptEntry, "non-numeric counter");
    let other = fresh_conversation();
    let watermark = format!("{}archived", store.seq_key(t, other).trim_end_matches("seq"));
    redis::cmd("SET").arg(&watermark).arg("lots").query_async::<()>(&mut con).await.unwrap();
    let raised = store.record_archived_watermark(t, other, ConversationSeq(3)).await;
    assert_kind(raised, ErrorKind::CorruptEntry, "non-numeric archived watermark");
    let [recovery, _] = store.aux_keys_of(&"é".repeat(40));
    redis::cmd("ZADD").arg(recovery).arg(1).arg("é".repeat(40)).query_async::<()>(&mut con).await.unwrap();
    let scan = store.scan_recoverable_commits(qim_store::ids::UnixMillis(i64::MAX), 10).await;
    assert_kind(scan, ErrorKind::CorruptEntry, "non-ASCII recovery member");
}

#[tokio::test]
async fn the_trim_stops_at_the_archived_watermark() {
    let redis = PrivateRedis::start();
    let clock = clock();
    let store = open(&redis, 30, clock.clone()).await.with_trim_window(7);
    let (t, conv) = (fresh_tenant(), fresh_conversation());
    for i in 1..=5 {
        send(&store, t, conv, &format!("m{i}")).await;
    }
    assert_eq!(store.trim_hot_history(100).await.unwrap().trimmed, 0, "inside the window");
    clock.advance(7 * MILLIS_PER_DAY + 1);
    let report = store.trim_hot_history(100).await.unwrap();
    assert_eq!((report.trimmed, report.waiting_for_archive), (0, 5), "nothing archived: nothing trimmed");
    assert_eq!(store.record_archived_watermark(t, conv, ConversationSeq(3)).await.unwrap(), ConversationSeq(3));
    assert_eq!(store.record_archived_watermark(t, conv, ConversationSeq(2)).await.unwrap(), ConversationSeq(3));
    let report = store.trim_hot_history(100).await.unwrap();
    assert_eq!((report.trimmed, report.waiting_for_archive), (3, 2));
    assert_eq!(history_seqs(&store, t, conv).await, (vec![4, 5], Some(4)));
    store.record_archived_watermark(t, conv, ConversationSeq(5)).await.unwrap();
    assert_eq!(store.trim_hot_history(100).await.unwrap().trimmed, 2);
    assert_eq!(history_seqs(&store, t, conv).await, (vec![], None));
    assert_eq!(store.trim_hot_history(100).await.unwrap(), Default::default(), "nothing left to trim");
}

#[tokio::test]
async fn the_trim_owner_registers_expiry_only_for_records_expiring_inside_the_window() {
    let redis = PrivateRedis::start();
    let store = open(&redis, 30, clock()).await.with_trim_window(7);
    let (t, conv) = (fresh_tenant(), fresh_conversation());
    send(&store, t, conv, "default").await;
    let mut eph = request(t, user(1), "eph", conv, b"x");
    eph.retention = RetentionClass::Ephemeral24h;
    let eph = commit_fully(&store, &eph).await;
    let members = zrange_all(&mut raw(&redis).await, store.history_gc_keys()).await;
    assert_eq!(members.len(), 1, "only the ephemeral record is registered: {members:?}");
    assert!(members[0].ends_with(&format!("|{}", eph.intent.seq.0)));
    // A store that does not own the trim registers every expiring record.
    let plain = open(&redis, 30, clock()).await;
    send(&plain, t, conv, "default-2").await;
    let count = zcard_all(&mut raw(&redis).await, plain.history_gc_keys()).await;
    assert_eq!(count, 2);
}

#[tokio::test]
async fn a_trimmed_record_leaves_no_expiry_member_to_stall_the_drain() {
    // ADR-0019 revision of 2026-09-27: a 7-day retention equals the 7-day window, so the record
    // is registered for expiry and trimmed at the same age; the trim must take the member too.
    let redis = PrivateRedis::start();
    let clock = clock();
    let store = open(&redis, 7, clock.clone()).await.with_trim_window(7);
    let (t, conv) = (fresh_tenant(), fresh_conversation());
    send(&store, t, conv, "m1").await;
    send(&store, t, conv, "m2").await;
    store.record_archived_watermark(t, conv, ConversationSeq(2)).await.unwrap();
    clock.advance(7 * MILLIS_PER_DAY + 1);
    assert_eq!(store.trim_hot_history(100).await.unwrap().trimmed, 2);
    let left = zcard_all(&mut raw(&redis).await, store.history_gc_keys()).await;
    assert_eq!(left, 0, "the trim removed the expiry members");
    let drained = store.gc_expired_history(100).await.expect("the drain does not trip on trimmed records");
    assert_eq!(drained.removed, 0);
}

#[tokio::test]
async fn the_drain_removes_expired_records_in_batches() {
    let redis = PrivateRedis::start();
    let clock = clock();
    let store = open(&redis, 30, clock.clone()).await;
    let (t, conv) = (fresh_tenant(), fresh_conversation());
    for i in 0..7 {
        let mut eph = request(t, user(1), &format!("e{i}"), conv, b"x");
        eph.retention = RetentionClass::Ephemeral24h;
        let c = commit_fully(&store, &eph).await;
        assert_eq!(c.state, CommitState::Committed);
    }
    send(&store, t, conv, "keep").await;
    clock.advance(EPHEMERAL_MILLIS);
    let mut removed = Vec::new();
    for _ in 0..4 {
        removed.push(store.gc_expired_history(3).await.unwrap().removed);
    }
    assert_eq!(removed, vec![3, 3, 1, 0]);
    assert_eq!(history_seqs(&store, t, conv).await, (vec![8], Some(8)));
}

#[tokio::test]
async fn a_send_costs_five_round_trips() {
    // The hot path of one send (one store drives every step): reserve 2, put_record 2 (the
    // record, then the CAS with the hot-tier registrations), OUTBOXED and COMMITTED together 1.
    // Separately, mark_outbox_published and mark_committed cost 1 each. A store that did not
    // drive the earlier steps (the recovery loop elsewhere) reads the commit first. A private
    // server: a `SCRIPT FLUSH` from another test would add reload trips.
    let redis = PrivateRedis::start();
    let store = open(&redis, 30, clock()).await;
    let (t, conv) = (fresh_tenant(), fresh_conversation());
    send(&store, t, conv, "warm").await;
    let trips = |store: &RedisMessageStore| store.round_trips();
    let before = trips(&store);
    let req = request(t, user(1), "m1", conv, b"x");
    let reserved = store.reserve(&req, fresh_message_id()).await.unwrap();
    assert_eq!(trips(&store) - before, 2, "reserve");
    store.put_record(&reserved.intent).await.unwrap();
    assert_eq!(trips(&store) - before, 4, "put_record");
    let publication = Publication { partition: 0, offset: 1 };
    let done = store.mark_outbox_published_and_committed(&req.key, reserved.intent.message_id, publication).await;
    assert_eq!(done.unwrap().state, CommitState::Committed);
    assert_eq!(trips(&store) - before, 5, "mark_outbox_published_and_committed");

    let req = request(t, user(1), "m2", conv, b"x");
    let reserved = store.reserve(&req, fresh_message_id()).await.unwrap();
    store.put_record(&reserved.intent).await.unwrap();
    let before = trips(&store);
    store.mark_outbox_published(&req.key, reserved.intent.message_id, publication).await.unwrap();
    assert_eq!(trips(&store) - before, 1, "mark_outbox_published: the CAS (registered at RECORDED)");
    store.mark_committed(&req.key, reserved.intent.message_id).await.unwrap();
    assert_eq!(trips(&store) - before, 2, "mark_committed: the CAS");

    let req = request(t, user(1), "m3", conv, b"x");
    let reserved = store.reserve(&req, fresh_message_id()).await.unwrap();
    let cold = open(&redis, 30, clock()).await;
    let before = trips(&cold);
    cold.put_record(&reserved.intent).await.unwrap();
    assert_eq!(trips(&cold) - before, 3, "put_record: read, record, CAS with registrations");
    let cold = open(&redis, 30, clock()).await;
    let before = trips(&cold);
    cold.mark_outbox_published(&req.key, reserved.intent.message_id, publication).await.unwrap();
    assert_eq!(trips(&cold) - before, 2, "mark_outbox_published: read, CAS with registrations");
    let cold = open(&redis, 30, clock()).await;
    let before = trips(&cold);
    cold.mark_committed(&req.key, reserved.intent.message_id).await.unwrap();
    assert_eq!(trips(&cold) - before, 3, "mark_committed: read, registrations, CAS");
    let req = request(t, user(1), "m4", conv, b"x");
    let reserved = store.reserve(&req, fresh_message_id()).await.unwrap();
    store.put_record(&reserved.intent).await.unwrap();
    let cold = open(&redis, 30, clock()).await;
    let before = trips(&cold);
    let done = cold.mark_outbox_published_and_committed(&req.key, reserved.intent.message_id, publication).await;
    assert_eq!(done.unwrap().state, CommitState::Committed);
    assert_eq!(trips(&cold) - before, 3, "both steps cold: read, CAS with registrations, CAS");
}
