//! The `MessageStore` contract suite. Each function is one test; see
//! [`crate::message_store_contract_suite`].

use std::sync::Arc;

use super::fixtures::*;
use super::MessageHarness;
use crate::codec::encode_record;
use crate::ids::{ConversationId, ConversationSeq, MILLIS_PER_DAY};
use crate::message::{
    Commit, CommitRequest, CommitState, Direction, HistoryQuery, MessageKind, Publication, ReadPosition,
    MAX_PAYLOAD_BYTES, UNREAD_PRECISE_LIMIT,
};
use crate::retention::{RetentionClass, RetentionPolicy, EPHEMERAL_MILLIS};
use crate::{ErrorKind, MessageStore};

mod history;
mod skew;
pub use history::*;
pub use skew::*;

fn policy() -> RetentionPolicy {
    RetentionPolicy::with_default_days(30).expect("30 days is legal")
}

/// Drives `request` through every state and returns the COMMITTED commit.
pub async fn commit_fully(store: &dyn MessageStore, request: &CommitRequest) -> Commit {
    let reserved = store.reserve(request, fresh_message_id()).await.expect("reserve");
    let recorded = store.put_record(&reserved.intent).await.expect("put_record");
    assert_eq!(recorded.state, CommitState::Recorded);
    let publication = Publication { partition: 0, offset: reserved.intent.seq.0 as i64 };
    let outboxed = store
        .mark_outbox_published(&request.key, reserved.intent.message_id, publication)
        .await
        .expect("mark_outbox_published");
    assert_eq!(outboxed.intent.publication, Some(publication));
    let committed = store.mark_committed(&request.key, reserved.intent.message_id).await.expect("mark_committed");
    assert_eq!(committed.state, CommitState::Committed);
    committed
}

fn query(
    tenant: crate::ids::TenantId,
    conversation: ConversationId,
    viewer: crate::ids::UserId,
    direction: Direction,
    anchor: Option<u64>,
    max_items: usize,
    max_bytes: usize,
) -> HistoryQuery {
    HistoryQuery { tenant, conversation, viewer, direction, anchor: anchor.map(ConversationSeq), max_items, max_bytes }
}

fn seqs(page: &crate::message::HistoryPage) -> Vec<u64> {
    page.records.iter().map(|r| r.seq.0).collect()
}

/// Seqs start at 1 and increase by one per new key, independently per conversation.
pub async fn reserve_allocates_increasing_seqs_per_conversation(h: &dyn MessageHarness) {
    let store = h.open(policy(), clock()).await;
    let (t, a, b) = (fresh_tenant(), fresh_conversation(), fresh_conversation());
    for i in 1..=3u64 {
        let c = store.reserve(&request(t, user(1), &format!("a{i}"), a, b"x"), fresh_message_id()).await.unwrap();
        assert_eq!(c.intent.seq, ConversationSeq(i));
        assert_eq!(c.state, CommitState::Reserved);
        assert_eq!(c.intent.created_at, T0);
    }
    let c = store.reserve(&request(t, user(1), "b1", b, b"x"), fresh_message_id()).await.unwrap();
    assert_eq!(c.intent.seq, ConversationSeq(1), "another conversation counts on its own");
}

/// A replay with byte-identical content returns the first commit (same seq, id, time), in the
/// state it has reached, whatever id the replay proposes.
pub async fn reserve_replay_with_same_bytes_returns_first_commit(h: &dyn MessageHarness) {
    let clock = clock();
    let store = h.open(policy(), clock.clone()).await;
    let (t, conv) = (fresh_tenant(), fresh_conversation());
    let req = request(t, user(1), "m1", conv, b"hello");
    let first = store.reserve(&req, fresh_message_id()).await.unwrap();
    clock.advance(5_000);
    let again = store.reserve(&req, fresh_message_id()).await.unwrap();
    assert_eq!(again, first);
    let committed = commit_fully_from(store.as_ref(), &first).await;
    let after = store.reserve(&req, fresh_message_id()).await.unwrap();
    assert_eq!(after, committed);
    assert_eq!(after.intent.seq, first.intent.seq);
    assert_eq!(after.intent.message_id, first.intent.message_id);
    assert_eq!(after.intent.created_at, T0);
    let next = store.reserve(&request(t, user(1), "m2", conv, b"hello"), fresh_message_id()).await.unwrap();
    assert_eq!(next.intent.seq, ConversationSeq(2), "a replay does not consume a seq");
}

/// A send reserved for a member of the conversation: a non-member is `Forbidden` and leaves no
/// seq (the next member's send gets the next one) and no commit; a member's is an ordinary
/// reservation, replayed identically.
pub async fn reserve_from_member_refuses_a_non_member_before_issuing_anything(h: &dyn MessageHarness) {
    let store = h.open(policy(), clock()).await;
    let (t, conv) = (fresh_tenant(), fresh_conversation());
    let members = MembershipAuthorizer::default();
    members.admit(t, conv, user(1));
    let outsider = request(t, user(2), "o1", conv, b"let me in");
    for _ in 0..2 {
        let refused = store.reserve_from_member(&outsider, fresh_message_id(), &members).await;
        assert_eq!(refused.map_err(|e| e.kind()).err(), Some(ErrorKind::Forbidden), "a non-member's send");
    }
    assert_eq!(store.load_commit(&outsider.key).await.unwrap(), None, "no commit for the refused send");
    let first = request(t, user(1), "m1", conv, b"hello");
    let c = store.reserve_from_member(&first, fresh_message_id(), &members).await.unwrap();
    assert_eq!((c.intent.seq, c.state), (ConversationSeq(1), CommitState::Reserved), "no seq was issued before");
    assert_eq!(store.reserve_from_member(&first, fresh_message_id(), &members).await.unwrap(), c, "a replay");
    let next = request(t, user(1), "m2", conv, b"x");
    let next = store.reserve_from_member(&next, fresh_message_id(), &members).await.unwrap();
    assert_eq!(next.intent.seq, ConversationSeq(2));
}

/// `reserve_and_record` takes a new send to RECORDED with its record in history; a replay gets
/// the stored commit in its state (a RESERVED one left behind is recorded, never reserved
/// again); other bytes are `Conflict` and a non-member `Forbidden`, neither issuing a seq.
pub async fn reserve_and_record_takes_a_send_to_recorded(h: &dyn MessageHarness) {
    let store = h.open(policy(), clock()).await;
    let (t, conv) = (fresh_tenant(), fresh_conversation());
    let members = MembershipAuthorizer::default();
    members.admit(t, conv, user(1));
    let first = request(t, user(1), "m1", conv, b"hello");
    let recorded = store.reserve_and_record(&first, fresh_message_id(), &members).await.unwrap();
    assert_eq!((recorded.intent.seq, recorded.state), (ConversationSeq(1), CommitState::Recorded));
    assert_eq!(store.load_commit(&first.key).await.unwrap(), Some(recorded.clone()));
    let page =
        store.history_page(&query(t, conv, user(1), Direction::Older, None, 10, 1 << 20), &members).await.unwrap();
    assert_eq!(seqs(&page), vec![1], "the record is written");
    assert_eq!(page.records[0].payload, b"hello".to_vec());
    let again = store.reserve_and_record(&first, fresh_message_id(), &members).await.unwrap();
    assert_eq!(again, recorded, "a replay gets the stored commit, recorded once");

    let other = request(t, user(1), "m1", conv, b"other bytes");
    let refused = store.reserve_and_record(&other, fresh_message_id(), &members).await;
    assert_eq!(refused.map_err(|e| e.kind()).err(), Some(ErrorKind::Conflict), "the key holds other bytes");
    let outsider = request(t, user(2), "o1", conv, b"let me in");
    let refused = store.reserve_and_record(&outsider, fresh_message_id(), &members).await;
    assert_eq!(refused.map_err(|e| e.kind()).err(), Some(ErrorKind::Forbidden), "a non-member's send");
    assert_eq!(store.load_commit(&outsider.key).await.unwrap(), None);

    let left = request(t, user(1), "m2", conv, b"left behind");
    let reserved = store.reserve(&left, fresh_message_id()).await.unwrap();
    assert_eq!((reserved.intent.seq, reserved.state), (ConversationSeq(2), CommitState::Reserved), "no seq issued");
    let finished = store.reserve_and_record(&left, fresh_message_id(), &members).await.unwrap();
    assert_eq!(finished.state, CommitState::Recorded, "a RESERVED commit is recorded");
    assert_eq!(finished.intent, reserved.intent, "with its first intent");
    let key = &left.key;
    let id = finished.intent.message_id;
    store.mark_outbox_published_and_committed(key, id, Publication { partition: 1, offset: 7 }).await.unwrap();
    let replayed = store.reserve_and_record(&left, fresh_message_id(), &members).await.unwrap();
    assert_eq!((replayed.state, replayed.intent.seq), (CommitState::Committed, ConversationSeq(2)), "a replay");
}

async fn commit_fully_from(store: &dyn MessageStore, reserved: &Commit) -> Commit {
    let key = &reserved.intent.request.key;
    store.put_record(&reserved.intent).await.unwrap();
    store
        .mark_outbox_published(key, reserved.intent.message_id, Publication { partition: 1, offset: 7 })
        .await
        .unwrap();
    store.mark_committed(key, reserved.intent.message_id).await.unwrap()
}

/// The same key with any different byte is a conflict, and consumes no seq.
pub async fn reserve_same_key_with_different_bytes_conflicts(h: &dyn MessageHarness) {
    let store = h.open(policy(), clock()).await;
    let (t, conv) = (fresh_tenant(), fresh_conversation());
    let req = request(t, user(1), "m1", conv, b"hello");
    store.reserve(&req, fresh_message_id()).await.unwrap();
    let variants = [
        CommitRequest { payload: b"hellp".to_vec(), ..req.clone() },
        CommitRequest { kind: MessageKind::Edited, ..req.clone() },
        CommitRequest { retention: RetentionClass::Ephemeral24h, ..req.clone() },
        CommitRequest { conversation: fresh_conversation(), ..req.clone() },
    ];
    for v in &variants {
        assert_kind(store.reserve(v, fresh_message_id()).await, ErrorKind::Conflict, "different bytes under one key");
    }
    let next = store.reserve(&request(t, user(1), "m2", conv, b"x"), fresh_message_id()).await.unwrap();
    assert_eq!(next.intent.seq, ConversationSeq(2), "conflicts consume no seq");
}

/// `load_commit_for_request` finds the commit only for the same bytes.
pub async fn load_commit_for_request_compares_bytes(h: &dyn MessageHarness) {
    let store = h.open(policy(), clock()).await;
    let (t, conv) = (fresh_tenant(), fresh_conversation());
    let req = request(t, user(1), "m1", conv, b"hello");
    assert_eq!(store.load_commit(&req.key).await.unwrap(), None);
    assert_eq!(store.load_commit_for_request(&req).await.unwrap(), None);
    let c = store.reserve(&req, fresh_message_id()).await.unwrap();
    assert_eq!(store.load_commit(&req.key).await.unwrap(), Some(c.clone()));
    assert_eq!(store.load_commit_for_request(&req).await.unwrap(), Some(c));
    let other = CommitRequest { payload: b"other".to_vec(), ..req };
    assert_kind(store.load_commit_for_request(&other).await, ErrorKind::Conflict, "different bytes");
}

/// Each step runs only from its predecessor: no skipping, no repeating, no going back.
pub async fn states_move_forward_only_from_their_predecessor(h: &dyn MessageHarness) {
    let store = h.open(policy(), clock()).await;
    let req = request(fresh_tenant(), user(1), "m1", fresh_conversation(), b"x");
    let c = store.reserve(&req, fresh_message_id()).await.unwrap();
    let (key, id) = (&req.key, c.intent.message_id);
    let publication = Publication { partition: 2, offset: 40 };
    assert_kind(store.mark_outbox_published(key, id, publication).await, ErrorKind::Conflict, "outbox from RESERVED");
    assert_kind(store.mark_committed(key, id).await, ErrorKind::Conflict, "commit from RESERVED");
    store.put_record(&c.intent).await.unwrap();
    assert_kind(store.put_record(&c.intent).await, ErrorKind::Conflict, "record twice");
    assert_kind(store.mark_committed(key, id).await, ErrorKind::Conflict, "commit from RECORDED");
    store.mark_outbox_published(key, id, publication).await.unwrap();
    assert_kind(store.mark_outbox_published(key, id, publication).await, ErrorKind::Conflict, "outbox twice");
    assert_kind(store.put_record(&c.intent).await, ErrorKind::Conflict, "record after OUTBOXED");
    let done = store.mark_committed(key, id).await.unwrap();
    assert_kind(store.mark_committed(key, id).await, ErrorKind::Conflict, "commit twice");
    assert_eq!(done.intent.publication, Some(publication), "COMMITTED keeps the coordinates");
    assert_eq!(store.load_commit(key).await.unwrap(), Some(done));
}

/// `mark_outbox_published_and_committed` is both steps: only from RECORDED (anything else is
/// `Conflict` and leaves the commit as it was), to COMMITTED with the coordinates; a repeat is
/// `Conflict`. The stored result is the same as the two steps one after the other.
pub async fn outbox_and_commit_together_take_both_steps_in_order(h: &dyn MessageHarness) {
    let store = h.open(policy(), clock()).await;
    let req = request(fresh_tenant(), user(1), "m1", fresh_conversation(), b"x");
    let c = store.reserve(&req, fresh_message_id()).await.unwrap();
    let (key, id) = (&req.key, c.intent.message_id);
    let publication = Publication { partition: 3, offset: 41 };
    assert_kind(
        store.mark_outbox_published_and_committed(key, id, publication).await,
        ErrorKind::Conflict,
        "from RESERVED",
    );
    assert_eq!(store.load_commit(key).await.unwrap().unwrap().state, CommitState::Reserved);
    store.put_record(&c.intent).await.unwrap();
    assert_kind(
        store.mark_outbox_published_and_committed(key, fresh_message_id(), publication).await,
        ErrorKind::Conflict,
        "other message id",
    );
    assert_eq!(store.load_commit(key).await.unwrap().unwrap().state, CommitState::Recorded);
    let done = store.mark_outbox_published_and_committed(key, id, publication).await.unwrap();
    assert_eq!(done.state, CommitState::Committed);
    assert_eq!(done.intent.publication, Some(publication));
    assert!(done.committed_at.is_some());
    assert_eq!(store.load_commit(key).await.unwrap(), Some(done));
    assert_kind(store.mark_outbox_published_and_committed(key, id, publication).await, ErrorKind::Conflict, "twice");
    assert_kind(store.mark_committed(key, id).await, ErrorKind::Conflict, "commit after both");

    let other = request(req.key.tenant, user(1), "m2", req.conversation, b"y");
    let c = store.reserve(&other, fresh_message_id()).await.unwrap();
    store.put_record(&c.intent).await.unwrap();
    store.mark_outbox_published(&other.key, c.intent.message_id, publication).await.unwrap();
    assert_kind(
        store.mark_outbox_published_and_committed(&other.key, c.intent.message_id, publication).await,
        ErrorKind::Conflict,
        "from OUTBOXED",
    );
    assert_eq!(store.load_commit(&other.key).await.unwrap().unwrap().state, CommitState::Outboxed);
}

/// A step for another message id, a changed intent or an unknown key fails and changes nothing.
pub async fn step_with_wrong_message_or_unknown_key_fails(h: &dyn MessageHarness) {
    let store = h.open(policy(), clock()).await;
    let req = request(fresh_tenant(), user(1), "m1", fresh_conversation(), b"x");
    let c = store.reserve(&req, fresh_message_id()).await.unwrap();
    let mut forged = c.intent.clone();
    forged.request.payload = b"y".to_vec();
    assert_kind(store.put_record(&forged).await, ErrorKind::Conflict, "changed intent");
    let mut other_seq = c.intent.clone();
    other_seq.seq = ConversationSeq(99);
    assert_kind(store.put_record(&other_seq).await, ErrorKind::Conflict, "changed seq");
    store.put_record(&c.intent).await.unwrap();
    let publication = Publication { partition: 0, offset: 1 };
    assert_kind(
        store.mark_outbox_published(&req.key, fresh_message_id(), publication).await,
        ErrorKind::Conflict,
        "other message id",
    );
    let unknown = request(req.key.tenant, user(2), "never", req.conversation, b"x");
    assert_kind(store.mark_committed(&unknown.key, c.intent.message_id).await, ErrorKind::NotFound, "unknown key");
    let mut unknown_intent = c.intent.clone();
    unknown_intent.request = unknown;
    assert_kind(store.put_record(&unknown_intent).await, ErrorKind::NotFound, "unknown key");
    assert_eq!(store.load_commit(&req.key).await.unwrap().unwrap().state, CommitState::Recorded);
}

/// Concurrent reserves of distinct keys in one conversation get distinct seqs (holes are legal).
pub async fn concurrent_reserves_never_share_a_seq(h: &dyn MessageHarness) {
    let store = h.open(policy(), clock()).await;
    let (t, conv) = (fresh_tenant(), fresh_conversation());
    let mut tasks = Vec::new();
    for i in 0..32 {
        let store = Arc::clone(&store);
        let req = request(t, user(i % 4), &format!("c{i}"), conv, b"x");
        tasks.push(tokio::spawn(async move { store.reserve(&req, fresh_message_id()).await.map(|c| c.intent.seq.0) }));
    }
    let mut got = Vec::new();
    for task in tasks {
        got.push(task.await.expect("task").expect("reserve"));
    }
    got.sort_unstable();
    got.dedup();
    // Contention may legally leave holes (a number consumed and never used), never a reuse.
    assert_eq!(got.len(), 32, "every reserve got its own seq: {got:?}");
    assert!(got.iter().all(|s| *s >= 1), "seqs start at 1: {got:?}");
}

/// Whole sends in flight at once (several senders and conversations, and each request sent
/// twice at the same moment, as a client's retry racing its first attempt) are each committed
/// once: both attempts get the same commit, every commit its own seq.
pub async fn sends_in_flight_at_once_commit_each_once(h: &dyn MessageHarness) {
    let store = h.open(policy(), clock()).await;
    let t = fresh_tenant();
    let convs = [fresh_conversation(), fresh_conversation()];
    let members = Arc::new(MembershipAuthorizer::default());
    for conv in convs {
        for u in 0..4 {
            members.admit(t, conv, user(u));
        }
    }
    let mut tasks = Vec::new();
    for i in 0..48u32 {
        let req = request(t, user(i % 4), &format!("f{i}"), convs[(i % 2) as usize], b"x");
        for _attempt in 0..2 {
            let (store, members, req) = (Arc::clone(&store), Arc::clone(&members), req.clone());
            tasks.push(tokio::spawn(async move {
                // As a client does: a send that met an unavailable store is sent again.
                for _ in 0..MAX_RESENDS {
                    match send_whole(store.as_ref(), &req, members.as_ref(), i64::from(i)).await {
                        Err(e) if e.kind() == ErrorKind::Unavailable => tokio::time::sleep(RESEND_PAUSE).await,
                        other => return other.map(|()| req.key),
                    }
                }
                send_whole(store.as_ref(), &req, members.as_ref(), i64::from(i)).await.map(|()| req.key)
            }));
        }
    }
    let mut keys = Vec::new();
    for task in tasks {
        keys.push(task.await.expect("task").expect("send"));
    }
    let mut seqs = Vec::new();
    for key in keys.iter().step_by(2) {
        let c = store.load_commit(key).await.unwrap().expect("stored");
        assert_eq!(c.state, CommitState::Committed, "one of the two attempts committed it");
        seqs.push((c.intent.request.conversation, c.intent.seq.0));
    }
    let n = seqs.len();
    seqs.sort_unstable();
    seqs.dedup();
    assert_eq!((n, seqs.len()), (48, 48), "one commit per request, every one its own seq");
}

/// How often [`sends_in_flight_at_once_commit_each_once`] sends a request again after the store
/// was unavailable (contended lightweight transactions time out on a three-node ring).
const MAX_RESENDS: usize = 20;
const RESEND_PAUSE: std::time::Duration = std::time::Duration::from_millis(50);

/// One whole send of `req` by a member, driven to COMMITTED as the writer drives it (published
/// at `offset`); a `Conflict` means another attempt of the same request moved it, and this one
/// goes on from where that left it.
async fn send_whole(
    store: &dyn MessageStore,
    req: &CommitRequest,
    members: &MembershipAuthorizer,
    offset: i64,
) -> Result<(), crate::StoreError> {
    let key = &req.key;
    let mut commit = store.reserve_and_record(req, fresh_message_id(), members).await?;
    for _ in 0..MAX_RESENDS {
        let id = commit.intent.message_id;
        let step = match commit.state {
            CommitState::Committed => return Ok(()),
            CommitState::Reserved => store.put_record(&commit.intent).await,
            CommitState::Recorded => {
                let publication = Publication { partition: 0, offset };
                store.mark_outbox_published_and_committed(key, id, publication).await
            }
            CommitState::Outboxed => store.mark_committed(key, id).await,
        };
        commit = match step {
            Err(e) if e.kind() == ErrorKind::Conflict => store.load_commit(key).await?.expect("a commit once reserved"),
            other => other?,
        };
    }
    panic!("{key:?} did not reach COMMITTED while two attempts drove it");
}

/// The committed record reads back byte for byte, with the policy's expiry.
pub async fn committed_record_reads_back_exactly(h: &dyn MessageHarness) {
    let store = h.open(policy(), clock()).await;
    let (t, conv) = (fresh_tenant(), fresh_conversation());
    let mut req = request(t, user(1), "m1", conv, &[0, 1, 2, 255]);
    req.kind = MessageKind::Control;
    req.retention = RetentionClass::Ephemeral24h;
    let c = commit_fully(store.as_ref(), &req).await;
    let auth = MembershipAuthorizer::default();
    auth.admit(t, conv, user(1));
    let page = store.history_page(&query(t, conv, user(1), Direction::Older, None, 10, 1 << 20), &auth).await.unwrap();
    assert_eq!(page.records, vec![c.intent.record(Some(T0.plus_millis(EPHEMERAL_MILLIS)))]);
    assert_eq!(page.earliest_available, Some(ConversationSeq(1)));
    assert!(!page.has_more);
}

/// Unfinished commits older than the cutoff are found, oldest first; committed ones are not.
pub async fn scan_recoverable_commits_finds_unfinished_work(h: &dyn MessageHarness) {
    let clock = clock();
    let store = h.open(policy(), clock.clone()).await;
    let (t, conv) = (fresh_tenant(), fresh_conversation());
    let reserved = store.reserve(&request(t, user(1), "r", conv, b"x"), fresh_message_id()).await.unwrap();
    clock.advance(10);
    let recorded = store.reserve(&request(t, user(1), "p", conv, b"x"), fresh_message_id()).await.unwrap();
    store.put_record(&recorded.intent).await.unwrap();
    clock.advance(10);
    commit_fully(store.as_ref(), &request(t, user(1), "done", conv, b"x")).await;
    clock.advance(10);
    store.reserve(&request(t, user(1), "late", conv, b"x"), fresh_message_id()).await.unwrap();
    // Other tests' unfinished commits may share a backend: scan wide, then keep this tenant's.
    let found = store.scan_recoverable_commits(T0.plus_millis(25), 100_000).await.unwrap();
    let mine: Vec<_> =
        found.iter().filter(|c| c.intent.request.key.tenant == t).map(|c| (c.intent.seq.0, c.state)).collect();
    assert_eq!(
        mine,
        vec![(reserved.intent.seq.0, CommitState::Reserved), (recorded.intent.seq.0, CommitState::Recorded)]
    );
    let limited = store.scan_recoverable_commits(T0.plus_millis(25), 1).await.unwrap();
    assert_eq!(limited.len(), 1);
}

/// Committed auxiliary facts stay for the TTL (idempotent retries keep working), then go.
pub async fn gc_committed_auxiliary_waits_for_the_ttl(h: &dyn MessageHarness) {
    let clock = clock();
    let store = h.open(policy(), clock.clone()).await;
    let req = request(fresh_tenant(), user(1), "m1", fresh_conversation(), b"x");
    let c = commit_fully(store.as_ref(), &req).await;
    store.gc_committed_auxiliary(1000).await.unwrap();
    assert_eq!(store.load_commit(&req.key).await.unwrap(), Some(c));
    clock.advance(crate::COMMIT_AUX_TTL_MILLIS + 1);
    let report = store.gc_committed_auxiliary(100_000).await.unwrap();
    assert!(report.removed >= 1, "{report:?}");
    assert_eq!(store.load_commit(&req.key).await.unwrap(), None);
}

/// Unread counts only others' Normal and Edited messages after the read position.
pub async fn conversation_summaries_count_unread_from_others(h: &dyn MessageHarness) {
    let store = h.open(policy(), clock()).await;
    let (t, conv, empty) = (fresh_tenant(), fresh_conversation(), fresh_conversation());
    let viewer = user(1);
    let kinds = [
        (user(2), MessageKind::Normal),
        (viewer, MessageKind::Normal),
        (user(2), MessageKind::Control),
        (user(3), MessageKind::Edited),
        (user(2), MessageKind::Normal),
    ];
    for (i, (sender, kind)) in kinds.iter().enumerate() {
        let mut req = request(t, *sender, &format!("s{i}"), conv, b"x");
        req.kind = *kind;
        commit_fully(store.as_ref(), &req).await;
    }
    let positions = [
        ReadPosition { conversation: conv, read_through: ConversationSeq(0) },
        ReadPosition { conversation: conv, read_through: ConversationSeq(4) },
        ReadPosition { conversation: empty, read_through: ConversationSeq(0) },
    ];
    let got = store.conversation_summaries(t, viewer, &positions).await.unwrap();
    let view: Vec<_> =
        got.iter().map(|s| (s.conversation, s.last_seq.map(|q| q.0), s.unread, s.unread_precise)).collect();
    assert_eq!(view, vec![(conv, Some(5), 3, true), (conv, Some(5), 1, true), (empty, None, 0, true)]);
}

/// Beyond the precise window the count is the cap, flagged imprecise.
pub async fn conversation_summaries_cap_beyond_the_precise_window(h: &dyn MessageHarness) {
    let store = h.open(policy(), clock()).await;
    let (t, conv) = (fresh_tenant(), fresh_conversation());
    let n = UNREAD_PRECISE_LIMIT as u64 + 5;
    for i in 0..n {
        commit_fully(store.as_ref(), &request(t, user(2), &format!("s{i}"), conv, b"x")).await;
    }
    let at = |read| ReadPosition { conversation: conv, read_through: ConversationSeq(read) };
    let got = store.conversation_summaries(t, user(1), &[at(0), at(5), at(n - 1)]).await.unwrap();
    let view: Vec<_> = got.iter().map(|s| (s.last_seq.map(|q| q.0), s.unread, s.unread_precise)).collect();
    assert_eq!(
        view,
        vec![(Some(n), UNREAD_PRECISE_LIMIT, false), (Some(n), UNREAD_PRECISE_LIMIT, true), (Some(n), 1, true)]
    );
}

/// Oversized payloads and out-of-range page sizes are InvalidInput; nothing is written.
pub async fn oversized_and_malformed_requests_are_refused(h: &dyn MessageHarness) {
    let store = h.open(policy(), clock()).await;
    let (t, conv) = (fresh_tenant(), fresh_conversation());
    let big = request(t, user(1), "big", conv, &vec![0; MAX_PAYLOAD_BYTES + 1]);
    assert_kind(store.reserve(&big, fresh_message_id()).await, ErrorKind::InvalidInput, "oversized payload");
    assert_eq!(store.load_commit(&big.key).await.unwrap(), None);
    let ok =
        store.reserve(&request(t, user(1), "ok", conv, &vec![0; MAX_PAYLOAD_BYTES]), fresh_message_id()).await.unwrap();
    assert_eq!(ok.intent.seq, ConversationSeq(1), "the refused request consumed no seq");
    let auth = MembershipAuthorizer::default();
    auth.admit(t, conv, user(1));
    for items in [0, crate::message::MAX_PAGE_ITEMS + 1] {
        let q = query(t, conv, user(1), Direction::Older, None, items, 100);
        assert_kind(store.history_page(&q, &auth).await, ErrorKind::InvalidInput, "max_items out of range");
    }
}

/// The same conversation id under another tenant shares nothing.
pub async fn tenants_are_isolated(h: &dyn MessageHarness) {
    let store = h.open(policy(), clock()).await;
    let (a, b, conv) = (fresh_tenant(), fresh_tenant(), fresh_conversation());
    commit_fully(store.as_ref(), &request(a, user(1), "m1", conv, b"secret")).await;
    let c = store.reserve(&request(b, user(1), "m1", conv, b"other"), fresh_message_id()).await.unwrap();
    assert_eq!(c.intent.seq, ConversationSeq(1), "tenant b has its own counter and keys");
    let auth = MembershipAuthorizer::default();
    auth.admit(b, conv, user(1));
    let page = store.history_page(&query(b, conv, user(1), Direction::Older, None, 10, 1 << 20), &auth).await.unwrap();
    assert!(page.records.is_empty(), "tenant b sees none of tenant a's history");
    let sums = store
        .conversation_summaries(b, user(2), &[ReadPosition { conversation: conv, read_through: ConversationSeq(0) }])
        .await
        .unwrap();
    assert_eq!((sums[0].last_seq, sums[0].unread), (None, 0));
}
