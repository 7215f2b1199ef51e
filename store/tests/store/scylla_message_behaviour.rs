//! What the contract suite can not see from one store: LWT races between two stores (two
//! sessions, two seq caches), the TTLs actually written, key reuse after the auxiliary TTL, and
//! the failure when the server is missing.
//!
//! Same environment as `scylla_message_contract.rs` (see `scylla_support`).

use crate::scylla_support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use qim_store::clock::ManualClock;
use qim_store::ids::ConversationSeq;
use qim_store::message::{CommitKey, CommitRequest, CommitState, Direction, HistoryQuery};
use qim_store::retention::{RetentionClass, RetentionPolicy, EPHEMERAL_MILLIS};
use qim_store::scylla::{open_session, ScyllaMessageStore};
use qim_store::testsuite::fixtures::{
    assert_kind, clock, fresh_conversation, fresh_message_id, fresh_tenant, request, user, MembershipAuthorizer, T0,
};
use qim_store::testsuite::message::commit_fully;
use qim_store::testsuite::MessageHarness;
use qim_store::{ErrorKind, MessageStore, COMMIT_AUX_TTL_MILLIS};
use scylla_support::{archived_record, at, isolated_store, Keyspace, Scylla};

/// This file's keyspace (see [`Keyspace`]).
static KEYSPACE: Keyspace = Keyspace::new("scylla_message_behaviour");

fn policy() -> RetentionPolicy {
    RetentionPolicy::with_default_days(30).expect("30 days is legal")
}

/// Two stores on their own sessions, sharing `clock`.
async fn two_stores(clock: Arc<ManualClock>) -> (Scylla, Arc<dyn MessageStore>, Arc<dyn MessageStore>) {
    let h = Scylla::of(&KEYSPACE);
    let a = h.open(policy(), clock.clone()).await;
    let b = h.open(policy(), clock).await;
    (h, a, b)
}

/// `SELECT TTL(column)` of the one row `where_` selects in `table`.
async fn ttl_of(store: &ScyllaMessageStore, table: &str, column: &str, where_: &str, key: CommitKey) -> Option<i32> {
    let cql = format!("SELECT TTL({column}) FROM {}.{table} WHERE {where_}", store.config().keyspace);
    let values = (key.tenant.0.to_vec(), key.sender.0.to_vec(), key.client_message_id.as_str().to_owned());
    let rows = store.session().query_unpaged(cql, values).await.expect("TTL read").into_rows_result().expect("rows");
    rows.single_row::<(Option<i32>,)>().expect("one row").0
}

/// `SELECT TTL(record_blob)` of the record row: `None` when there is no row (never written, or
/// expired already).
async fn record_row_ttl(store: &ScyllaMessageStore, req: &CommitRequest, seq: u64) -> Option<Option<i32>> {
    let cql = format!(
        "SELECT TTL(record_blob) FROM {}.message_record WHERE tenant_id = ? AND conversation_id = ? \
         AND seq_bucket = ? AND conversation_seq = ?",
        store.config().keyspace
    );
    let values = scylla_support::record_key(req.key.tenant, req.conversation, ConversationSeq(seq));
    let rows = store.session().query_unpaged(cql, values).await.expect("TTL read").into_rows_result().expect("rows");
    rows.maybe_first_row::<(Option<i32>,)>().expect("a TTL").map(|(ttl,)| ttl)
}

async fn record_ttl(store: &ScyllaMessageStore, req: &CommitRequest, seq: u64) -> Option<i32> {
    record_row_ttl(store, req, seq).await.expect("one record row")
}

const COMMIT_WHERE: &str = "tenant_id = ? AND sender_id = ? AND client_message_id = ?";

#[tokio::test]
async fn two_stores_contending_for_one_conversation_never_share_a_seq() {
    let (_h, a, b) = two_stores(clock()).await;
    let (t, conv) = (fresh_tenant(), fresh_conversation());
    let mut tasks = Vec::new();
    for i in 0..24 {
        let store = if i % 2 == 0 { Arc::clone(&a) } else { Arc::clone(&b) };
        let req = request(t, user(i % 3), &format!("x{i}"), conv, b"x");
        tasks.push(tokio::spawn(async move { store.reserve(&req, fresh_message_id()).await.map(|c| c.intent.seq.0) }));
    }
    let mut got = Vec::new();
    for task in tasks {
        got.push(task.await.expect("task").expect("reserve"));
    }
    got.sort_unstable();
    let before = got.len();
    got.dedup();
    assert_eq!(got.len(), before, "two stores issued one seq twice: {got:?}");
}

#[tokio::test]
async fn racing_reserves_of_one_key_agree_on_the_first_commit() {
    let (_h, a, b) = two_stores(clock()).await;
    let t = fresh_tenant();
    for round in 0..6 {
        let conv = fresh_conversation();
        let req = request(t, user(1), &format!("same{round}"), conv, b"same bytes");
        let (ra, rb) = tokio::join!(a.reserve(&req, fresh_message_id()), b.reserve(&req, fresh_message_id()));
        let (ra, rb) = (ra.expect("reserve a"), rb.expect("reserve b"));
        assert_eq!(ra, rb, "round {round}: both callers must get the first commit");
        assert_eq!(a.load_commit(&req.key).await.unwrap(), Some(ra));

        let other = CommitRequest { payload: b"other bytes".to_vec(), ..request(t, user(1), "diff", conv, b"") };
        let mut mine = other.clone();
        mine.key.client_message_id = qim_store::ids::ClientMessageId::new(format!("diff{round}")).unwrap();
        let mut theirs = mine.clone();
        theirs.payload = b"third bytes".to_vec();
        let (ra, rb) = tokio::join!(a.reserve(&mine, fresh_message_id()), b.reserve(&theirs, fresh_message_id()));
        let oks = [ra.is_ok(), rb.is_ok()];
        assert_eq!(oks.iter().filter(|ok| **ok).count(), 1, "round {round}: exactly one of two contents wins");
        let loser = if ra.is_ok() { rb } else { ra };
        assert_kind(loser, ErrorKind::Conflict, "the other content");
    }
}

#[tokio::test]
async fn rows_carry_the_retention_and_auxiliary_ttls() {
    let h = Scylla::of(&KEYSPACE);
    let store = h.open(policy(), clock()).await;
    let typed = h.store();
    let (t, conv) = (fresh_tenant(), fresh_conversation());
    let mut eph = request(t, user(1), "eph", conv, b"x");
    eph.retention = RetentionClass::Ephemeral24h;
    let reserved = store.reserve(&eph, fresh_message_id()).await.unwrap();
    assert_eq!(ttl_of(&typed, "message_commit", "commit_blob", COMMIT_WHERE, eph.key.clone()).await, None);
    store.put_record(&reserved.intent).await.unwrap();
    let day = (EPHEMERAL_MILLIS / 1000) as i32;
    let ttl = record_ttl(&typed, &eph, reserved.intent.seq.0).await.expect("an ephemeral record has a TTL");
    assert!((day - 60..=day).contains(&ttl), "ephemeral record TTL {ttl}");

    let mut hold = request(t, user(1), "hold", conv, b"x");
    hold.retention = RetentionClass::ComplianceHold;
    let held = commit_fully(store.as_ref(), &hold).await;
    assert_eq!(record_ttl(&typed, &hold, held.intent.seq.0).await, None, "compliance hold never expires");
    // The 2 h auxiliary TTL plus an hour of slack for server clock skew.
    let aux = (COMMIT_AUX_TTL_MILLIS / 1000) as i32 + 3_600;
    let ttl = ttl_of(&typed, "message_commit", "commit_blob", COMMIT_WHERE, hold.key.clone()).await;
    assert!(ttl.is_some_and(|s| (aux - 60..=aux).contains(&s)), "a COMMITTED commit carries 2 h + 1 h slack: {ttl:?}");
}

#[tokio::test]
async fn a_record_written_after_its_expiry_gets_one_second_and_is_never_shown() {
    let clock = clock();
    let h = Scylla::of(&KEYSPACE);
    let store = h.open(policy(), clock.clone()).await;
    let (t, conv) = (fresh_tenant(), fresh_conversation());
    let mut eph = request(t, user(1), "late", conv, b"x");
    eph.retention = RetentionClass::Ephemeral24h;
    let reserved = store.reserve(&eph, fresh_message_id()).await.unwrap();
    clock.advance(EPHEMERAL_MILLIS + 5_000);
    store.put_record(&reserved.intent).await.unwrap();
    // The row may be gone already (its one second may have run out before this read).
    let ttl = record_row_ttl(&h.store(), &eph, reserved.intent.seq.0).await;
    assert!(ttl.is_none_or(|t| t.is_some_and(|s| s <= 1)), "an expired record is written with at most 1 s: {ttl:?}");
    scylla_support::wait_until("the record row to expire", std::time::Duration::from_secs(10), || async {
        record_row_ttl(&h.store(), &eph, reserved.intent.seq.0).await.is_none()
    })
    .await;
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
    let page = store.history_page(&q, &auth).await.unwrap();
    assert!(page.records.is_empty() && page.earliest_available.is_none(), "{page:?}");
}

#[tokio::test]
async fn a_key_past_its_auxiliary_ttl_is_reserved_anew() {
    let clock = clock();
    let h = Scylla::of(&KEYSPACE);
    let store = h.open(policy(), clock.clone()).await;
    let (t, conv) = (fresh_tenant(), fresh_conversation());
    let first = commit_fully(store.as_ref(), &request(t, user(1), "k", conv, b"one")).await;
    clock.advance(COMMIT_AUX_TTL_MILLIS + 1);
    assert_eq!(store.load_commit(&first.intent.request.key).await.unwrap(), None);
    let again = request(t, user(1), "k", conv, b"two");
    let second = store.reserve(&again, fresh_message_id()).await.expect("the key is free again");
    assert_eq!((second.intent.seq.0, second.state), (first.intent.seq.0 + 1, CommitState::Reserved));
    assert_eq!(second.intent.created_at, T0.plus_millis(COMMIT_AUX_TTL_MILLIS + 1));
    assert_eq!(store.load_commit_for_request(&again).await.unwrap(), Some(second.clone()));
    assert_eq!(store.reserve(&again, fresh_message_id()).await.unwrap(), second, "and replays return it");
}

#[tokio::test]
async fn a_commit_row_whose_columns_expired_reads_as_absent_and_is_reusable() {
    let h = Scylla::of(&KEYSPACE);
    let store = h.open(policy(), clock()).await;
    let typed = h.store();
    let (t, conv) = (fresh_tenant(), fresh_conversation());
    let req = request(t, user(1), "ghost", conv, b"x");
    let first = commit_fully(store.as_ref(), &req).await;
    // What the server leaves once the 2 h TTL passed: the INSERT's row marker, null columns.
    let cql = format!(
        "UPDATE {}.message_commit SET request_blob = null, commit_blob = null, state = null, created_at = null, \
         committed_at = null WHERE {COMMIT_WHERE}",
        typed.config().keyspace
    );
    let key = (t.0.to_vec(), user(1).0.to_vec(), "ghost".to_owned());
    typed.session().query_unpaged(cql, key).await.expect("emulating expired columns");
    assert_eq!(store.load_commit(&req.key).await.unwrap(), None);
    assert_eq!(store.load_commit_for_request(&req).await.unwrap(), None);
    let second = store.reserve(&req, fresh_message_id()).await.expect("the ghost row is taken over");
    assert_eq!(second.intent.seq.0, first.intent.seq.0 + 1);
    assert_eq!(store.load_commit(&req.key).await.unwrap(), Some(second));
}

#[tokio::test]
async fn a_missing_server_is_unavailable_within_the_connect_bound() {
    let mut c = KEYSPACE.config().clone();
    c.hosts = vec!["127.0.0.1:1".to_owned()];
    let started = Instant::now();
    let err = open_session(&c).await.expect_err("nothing listens on port 1");
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(err.to_string().contains("127.0.0.1:1"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(25), "took {:?}", started.elapsed());
}

#[tokio::test]
async fn recovery_finds_a_key_reserved_again_and_skips_orphan_entries() {
    // A keyspace of its own: a scan two hours past T0 fences the unfinished reserves it finds,
    // which in the file's keyspace are other tests' reserves in flight.
    let clock = clock();
    let typed = isolated_store(policy(), clock.clone()).await;
    let store: Arc<dyn MessageStore> = Arc::new(typed.clone());
    let (t, conv) = (fresh_tenant(), fresh_conversation());
    commit_fully(store.as_ref(), &request(t, user(1), "again", conv, b"one")).await;
    // An entry whose reserve never happened (a crash or a lost race before the LWT).
    let cql = format!(
        "INSERT INTO {}.commit_recovery (hour_bucket, created_at, tenant_id, sender_id, client_message_id) \
         VALUES (?, ?, ?, ?, ?)",
        typed.config().keyspace
    );
    let at = T0.0 + 1;
    let orphan = (at.div_euclid(3_600_000), at, t.0.to_vec(), user(2).0.to_vec(), "orphan".to_owned());
    typed.session().query_unpaged(cql, orphan).await.expect("writing an orphan entry");
    clock.advance(COMMIT_AUX_TTL_MILLIS + 1);
    let second = store.reserve(&request(t, user(1), "again", conv, b"two"), fresh_message_id()).await.unwrap();
    clock.advance(10);
    let found = store.scan_recoverable_commits(qim_store::clock::Clock::now(clock.as_ref()), 10_000).await.unwrap();
    let mine: Vec<_> = found.into_iter().filter(|c| c.intent.request.key.tenant == t).collect();
    assert_eq!(mine, vec![second], "the new reservation is found once; the orphan and the old entry are skipped");
}

#[tokio::test]
async fn pages_skip_a_long_run_of_expired_records() {
    let clock = clock();
    let h = Scylla::of(&KEYSPACE);
    let store = h.open(policy(), clock.clone()).await;
    let (t, conv) = (fresh_tenant(), fresh_conversation());
    for i in 0..40 {
        let mut eph = request(t, user(2), &format!("e{i}"), conv, b"x");
        eph.retention = RetentionClass::Ephemeral24h;
        commit_fully(store.as_ref(), &eph).await;
    }
    for i in 0..2 {
        let mut hold = request(t, user(2), &format!("h{i}"), conv, b"x");
        hold.retention = RetentionClass::ComplianceHold;
        commit_fully(store.as_ref(), &hold).await;
    }
    clock.advance(EPHEMERAL_MILLIS);
    let auth = MembershipAuthorizer::default();
    auth.admit(t, conv, user(1));
    let q = |direction, max_items| HistoryQuery {
        tenant: t,
        conversation: conv,
        viewer: user(1),
        direction,
        anchor: None,
        max_items,
        max_bytes: 1 << 20,
    };
    let page = store.history_page(&q(Direction::Newer, 1), &auth).await.unwrap();
    let seqs: Vec<u64> = page.records.iter().map(|r| r.seq.0).collect();
    assert_eq!((seqs, page.earliest_available, page.has_more), (vec![41], Some(ConversationSeq(41)), true));
    let page = store.history_page(&q(Direction::Older, 5), &auth).await.unwrap();
    let seqs: Vec<u64> = page.records.iter().map(|r| r.seq.0).collect();
    assert_eq!((seqs, page.has_more), (vec![42, 41], false));
    let pos = qim_store::message::ReadPosition { conversation: conv, read_through: ConversationSeq(0) };
    let sums = store.conversation_summaries(t, user(1), &[pos]).await.unwrap();
    assert_eq!((sums[0].last_seq, sums[0].unread, sums[0].unread_precise), (Some(ConversationSeq(42)), 2, true));
}

#[tokio::test]
async fn racing_takeovers_of_an_expired_key_agree_or_conflict() {
    let clock = clock();
    let (_h, a, b) = two_stores(clock.clone()).await;
    let t = fresh_tenant();
    let conv = fresh_conversation();
    let mut keys = Vec::new();
    for round in 0..4 {
        let first = commit_fully(a.as_ref(), &request(t, user(1), &format!("same{round}"), conv, b"old")).await;
        let other = commit_fully(a.as_ref(), &request(t, user(1), &format!("diff{round}"), conv, b"old")).await;
        keys.push((first, other));
    }
    clock.advance(COMMIT_AUX_TTL_MILLIS + 1);
    for (round, (first, other)) in keys.iter().enumerate() {
        let same = CommitRequest { payload: b"new".to_vec(), ..first.intent.request.clone() };
        let (ra, rb) = tokio::join!(a.reserve(&same, fresh_message_id()), b.reserve(&same, fresh_message_id()));
        let (ra, rb) = (ra.expect("takeover a"), rb.expect("takeover b"));
        assert_eq!(ra, rb, "round {round}: both take-overs answer with the winner's commit");
        assert_eq!(ra.state, CommitState::Reserved);

        let mine = CommitRequest { payload: b"mine".to_vec(), ..other.intent.request.clone() };
        let theirs = CommitRequest { payload: b"theirs".to_vec(), ..other.intent.request.clone() };
        let (ra, rb) = tokio::join!(a.reserve(&mine, fresh_message_id()), b.reserve(&theirs, fresh_message_id()));
        assert_eq!([ra.is_ok(), rb.is_ok()].iter().filter(|ok| **ok).count(), 1, "round {round}: one content wins");
        assert_kind(if ra.is_ok() { rb } else { ra }, ErrorKind::Conflict, "the other content");
    }
}

#[tokio::test]
async fn a_seq_that_would_set_bit_63_is_refused_and_nothing_is_reserved() {
    let h = Scylla::of(&KEYSPACE);
    let store = h.open(policy(), clock()).await;
    let typed = h.store();
    let (t, conv) = (fresh_tenant(), fresh_conversation());
    let cql = format!(
        "INSERT INTO {}.conversation_sequence (tenant_id, conversation_id, last_seq) VALUES (?, ?, ?)",
        typed.config().keyspace
    );
    typed.session().query_unpaged(cql, (t.0.to_vec(), conv.0.to_vec(), i64::MAX)).await.expect("seeding last_seq");
    let req = request(t, user(1), "overflow", conv, b"x");
    assert_kind(store.reserve(&req, fresh_message_id()).await, ErrorKind::InvariantViolation, "seq 2^63");
    assert_eq!(store.load_commit(&req.key).await.unwrap(), None, "no commit was written");
}

async fn newest_first(
    store: &ScyllaMessageStore,
    t: qim_store::ids::TenantId,
    c: qim_store::ids::ConversationId,
) -> Vec<qim_store::message::MessageRecord> {
    let auth = MembershipAuthorizer::default();
    auth.admit(t, c, user(9));
    let q = HistoryQuery {
        tenant: t,
        conversation: c,
        viewer: user(9),
        direction: Direction::Older,
        anchor: None,
        max_items: 100,
        max_bytes: usize::MAX,
    };
    store.history_page(&q, &auth).await.unwrap().records
}

/// DESIGN invariant 8: an archived record is never overwritten by a different one at the same
/// coordinates (a reissued seq, whatever its cause): the batch writes everything else and names
/// the refused record; the original stays readable. The same record again is a rewrite, and of
/// two different records for one seq within a batch the first is kept.
#[tokio::test]
async fn the_archive_refuses_a_different_record_at_archived_coordinates() {
    let h = Scylla::of(&KEYSPACE);
    drop(h.open(policy(), clock()).await);
    let store_typed = h.store();
    let (t, c) = (fresh_tenant(), fresh_conversation());
    let originals: Vec<_> = (1..=3).map(|n| archived_record(t, c, n, &format!("original {n}"), T0)).collect();
    let report = store_typed.archive_records(&at(&originals, 10), 8).await.unwrap();
    assert_eq!((report.written, report.conflicts.len()), (3, 0));

    let impostor = archived_record(t, c, 2, "a different message at seq 2", T0.plus_millis(1));
    let next = archived_record(t, c, 4, "seq 4", T0);
    let batch = at(&[originals[0].clone(), impostor, next.clone()], 20);
    let report = store_typed.archive_records(&batch, 8).await.unwrap();
    assert_eq!(report.written, 2, "the repeat of seq 1 and the new seq 4: {report:?}");
    assert_eq!(report.conflicts.len(), 1, "{report:?}");
    assert_eq!(report.conflicts[0].index, 1);
    assert!(report.conflicts[0].detail.contains("seq 2"), "{}", report.conflicts[0].detail);

    let twins = at(&[archived_record(t, c, 5, "first", T0), archived_record(t, c, 5, "second", T0)], 30);
    let report = store_typed.archive_records(&twins, 8).await.unwrap();
    assert_eq!((report.written, report.conflicts.iter().map(|c| c.index).collect::<Vec<_>>()), (1, vec![1]));

    let stored = newest_first(&store_typed, t, c).await;
    let bodies: Vec<String> = stored.iter().map(|r| String::from_utf8_lossy(&r.payload).into_owned()).collect();
    assert_eq!(bodies, ["first", "seq 4", "original 3", "original 2", "original 1"]);
}

/// `recent_published` answers the newest records down to the first one created before `since`
/// (less the clock-skew margin), each with the publication the archiver stored.
#[tokio::test]
async fn recent_publications_are_a_suffix_of_the_archive_with_their_offsets() {
    let h = Scylla::of(&KEYSPACE);
    drop(h.open(policy(), clock()).await);
    let store = h.store();
    let (t, c) = (fresh_tenant(), fresh_conversation());
    let hour = 60 * 60 * 1000;
    // Seqs 1..=6 an hour apart, seq 1 the oldest; the bucket boundary is crossed at 1024.
    let mut records: Vec<_> = (1..=6).map(|n| archived_record(t, c, n, "x", T0.plus_millis(n as i64 * hour))).collect();
    records.push(archived_record(t, c, 1030, "in the next bucket", T0.plus_millis(7 * hour)));
    store.archive_records(&at(&records, 100), 8).await.unwrap();
    let since = T0.plus_millis(4 * hour);
    let recent = store.recent_published(t, c, since, 100).await.unwrap();
    let seqs: Vec<u64> = recent.iter().map(|p| p.record.seq.0).collect();
    assert_eq!(seqs, vec![1030, 6, 5, 4], "newest first, down to the first record before `since`");
    assert_eq!(recent[0].publication, qim_store::message::Publication { partition: 3, offset: 106 });
    assert_eq!(recent[3].publication, qim_store::message::Publication { partition: 3, offset: 103 });
    assert_eq!(recent[1].record, records[5], "records come back as archived");
    let capped = store.recent_published(t, c, since, 2).await.unwrap();
    assert_eq!(capped.len(), 2);
    let none = store.recent_published(t, fresh_conversation(), since, 100).await.unwrap();
    assert!(none.is_empty());
}
