//! The recovery scan of the Scylla message store (`store/src/scylla/message/recovery.rs`) against
//! a real Cassandra: commits stuck far longer than the old 2 h entry TTL are found, finished
//! entries in front of an unfinished one do not hide it (the cursor passes them for good), an
//! entry whose reserve LWT has not happened yet holds the cursor until it is old enough to be
//! fenced, and a reserve that misses its deadline writes no commit.
//!
//! Each test works in a keyspace of its own (`scylla_support::isolated_store`): the recovery
//! cursor is one row per keyspace and follows the scanning store's clock. Same environment as
//! `scylla_message_contract.rs`.

use crate::scylla_support;

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use qim_store::clock::{Clock, ManualClock};
use qim_store::ids::UnixMillis;
use qim_store::message::{Commit, CommitKey, CommitState};
use qim_store::retention::RetentionPolicy;
use qim_store::scylla::ScyllaMessageStore;
use qim_store::testsuite::fixtures::{clock, fresh_conversation, fresh_message_id, fresh_tenant, request, user, T0};
use qim_store::testsuite::message::commit_fully;
use qim_store::{ErrorKind, MessageStore};
use scylla_support::isolated_store;

const MINUTE: i64 = 60_000;
const HOUR: i64 = 60 * MINUTE;

fn policy() -> RetentionPolicy {
    RetentionPolicy::with_default_days(30).expect("30 days is legal")
}

async fn scan(store: &ScyllaMessageStore, clock: &ManualClock) -> Vec<(String, CommitState)> {
    let found = store.scan_recoverable_commits(clock.now(), 1_000).await.expect("a recovery scan");
    found.iter().map(|c| (c.intent.request.key.client_message_id.as_str().to_owned(), c.state)).collect()
}

fn names(list: &[(&str, CommitState)]) -> Vec<(String, CommitState)> {
    list.iter().map(|(n, s)| ((*n).to_owned(), *s)).collect()
}

/// The stored cursor (`None`: never advanced).
async fn swept(store: &ScyllaMessageStore) -> Option<i64> {
    let cql = format!("SELECT swept FROM {}.commit_recovery_cursor WHERE scope = 0", store.config().keyspace);
    let rows = store.session().query_unpaged(cql, &[]).await.expect("reading the cursor").into_rows_result().unwrap();
    rows.maybe_first_row::<(Option<i64>,)>().expect("one row at most").and_then(|(s,)| s)
}

/// A recovery entry written as `reserve` writes it, without its commit (a reserve between its
/// entry and its LWT).
async fn plant_entry(store: &ScyllaMessageStore, at: i64, key: &CommitKey) {
    let cql = format!(
        "INSERT INTO {}.commit_recovery (hour_bucket, created_at, tenant_id, sender_id, client_message_id) \
         VALUES (?, ?, ?, ?, ?) USING TIMESTAMP ?",
        store.config().keyspace
    );
    let ts = qim_store::scylla::mailbox::highest_wins_timestamp(at * 2);
    let values =
        (at.div_euclid(HOUR), at, key.tenant.0.to_vec(), key.sender.0.to_vec(), key.client_message_id.as_str(), ts);
    store.session().query_unpaged(cql, values).await.expect("planting an entry");
}

async fn drive(store: &ScyllaMessageStore, commit: &Commit) {
    let key = &commit.intent.request.key;
    let mut c = commit.clone();
    if c.state == CommitState::Reserved {
        c = store.put_record(&c.intent).await.unwrap();
    }
    let publication = qim_store::message::Publication { partition: 0, offset: 1 };
    store.mark_outbox_published(key, c.intent.message_id, publication).await.unwrap();
    store.mark_committed(key, c.intent.message_id).await.unwrap();
}

#[tokio::test]
async fn commits_stuck_for_a_night_are_still_found_until_they_commit() {
    let clock = clock();
    let store = isolated_store(policy(), clock.clone()).await;
    let (t, conv) = (fresh_tenant(), fresh_conversation());
    let reserved = store.reserve(&request(t, user(1), "reserved", conv, b"x"), fresh_message_id()).await.unwrap();
    clock.advance(1);
    let recorded = store.reserve(&request(t, user(1), "recorded", conv, b"x"), fresh_message_id()).await.unwrap();
    let recorded = store.put_record(&recorded.intent).await.unwrap();
    clock.advance(1);
    commit_fully(&store, &request(t, user(1), "done", conv, b"x")).await;
    let stuck = names(&[("reserved", CommitState::Reserved), ("recorded", CommitState::Recorded)]);
    assert_eq!(scan(&store, &clock).await, stuck);
    assert!(swept(&store).await.is_some_and(|s| s < T0.0), "the cursor stays two minutes behind the clock");

    // Every writer was down for the night: no scan ran, the entries kept no TTL.
    clock.advance(12 * HOUR);
    assert_eq!(scan(&store, &clock).await, stuck);
    assert_eq!(scan(&store, &clock).await, stuck, "moving the stuck entries up loses neither");
    let cursor = swept(&store).await.expect("the scan advanced the cursor");
    assert!(cursor > T0.0 + 2, "the finished entry and the moved ones are behind the cursor: {cursor}");

    clock.advance(HOUR);
    drive(&store, &reserved).await;
    assert_eq!(scan(&store, &clock).await, names(&[("recorded", CommitState::Recorded)]));
    drive(&store, &recorded).await;
    assert_eq!(scan(&store, &clock).await, vec![]);
}

#[tokio::test]
async fn finished_entries_ahead_of_an_unfinished_one_do_not_hide_it() {
    let clock = clock();
    let store = isolated_store(policy(), clock.clone()).await;
    // The production budget is 10 000 entries per pass; 3 makes the same point with 7 entries.
    store.set_recovery_entries_per_pass(3);
    let (t, conv) = (fresh_tenant(), fresh_conversation());
    for i in 0..7 {
        commit_fully(&store, &request(t, user(1), &format!("done{i}"), conv, b"x")).await;
        clock.advance(1);
    }
    store.reserve(&request(t, user(1), "open", conv, b"x"), fresh_message_id()).await.unwrap();
    clock.advance(10 * MINUTE);
    // Each pass resolves three entries and moves the cursor past the finished ones for good.
    assert_eq!(scan(&store, &clock).await, vec![], "pass 1: done0..done2");
    assert_eq!(swept(&store).await, Some(T0.0 + 3));
    assert_eq!(scan(&store, &clock).await, vec![], "pass 2: done3..done5");
    assert_eq!(swept(&store).await, Some(T0.0 + 6));
    let open = names(&[("open", CommitState::Reserved)]);
    assert_eq!(scan(&store, &clock).await, open, "pass 3: done6 and the open commit");
    assert_eq!(swept(&store).await, Some(T0.0 + 7), "the cursor stops at the open commit");
    assert_eq!(scan(&store, &clock).await, open, "and every later pass finds it again");
}

#[tokio::test]
async fn an_entry_without_its_commit_holds_the_cursor_until_it_is_fenced() {
    let clock = clock();
    let store = isolated_store(policy(), clock.clone()).await;
    let (t, conv) = (fresh_tenant(), fresh_conversation());
    // A reserve wrote its entry and has not sent its LWT yet.
    let slow = request(t, user(1), "slow", conv, b"x");
    plant_entry(&store, T0.0, &slow.key).await;
    clock.advance(3 * MINUTE);
    assert_eq!(scan(&store, &clock).await, vec![]);
    assert!(swept(&store).await.is_none_or(|s| s <= T0.0), "the cursor waits for the entry");
    // Its LWT lands (same created_at): the next scan finds the commit.
    clock.set(T0);
    let reserved = store.reserve(&slow, fresh_message_id()).await.unwrap();
    assert_eq!(reserved.intent.created_at, T0);
    clock.set(T0.plus_millis(4 * MINUTE));
    assert_eq!(scan(&store, &clock).await, names(&[("slow", CommitState::Reserved)]));

    // A reserve that never came: fenced once the entry is 5 minutes old, then passed.
    let gone = request(t, user(1), "gone", conv, b"x");
    let at = T0.0 + 5 * MINUTE;
    plant_entry(&store, at, &gone.key).await;
    clock.set(UnixMillis(at + 6 * MINUTE));
    drive(&store, &reserved).await;
    assert_eq!(scan(&store, &clock).await, vec![]);
    assert!(swept(&store).await.is_some_and(|s| s > at), "the fenced entry is behind the cursor");
    assert_eq!(store.load_commit(&gone.key).await.unwrap(), None, "the fence reads as no commit");
    let fresh = store.reserve(&gone, fresh_message_id()).await.expect("the fenced key is taken over");
    assert_eq!(fresh.state, CommitState::Reserved);
    clock.advance(3 * MINUTE);
    assert_eq!(scan(&store, &clock).await, names(&[("gone", CommitState::Reserved)]));
}

/// A clock that moves 31 s every time it is read.
#[derive(Debug)]
struct Stepping(AtomicI64);

impl Clock for Stepping {
    fn now(&self) -> UnixMillis {
        UnixMillis(self.0.fetch_add(31_000, Ordering::SeqCst))
    }
}

#[tokio::test]
async fn a_reserve_past_its_deadline_writes_no_commit() {
    let store = isolated_store(policy(), Arc::new(Stepping(AtomicI64::new(T0.0)))).await;
    let req = request(fresh_tenant(), user(1), "late", fresh_conversation(), b"x");
    let err = store.reserve(&req, fresh_message_id()).await.expect_err("more than 30 s before the LWT");
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert_eq!(store.load_commit(&req.key).await.unwrap(), None);
}
