//! The archive's TTLs when the server answers late: a record statement acknowledged in a later
//! whole second than it was sent may have executed there, so it is sent again with a fresh TTL
//! until one is acknowledged in its own second, and a server that never does so within
//! `TTL_SETTLE_BUDGET` fails the batch (`qim_store::scylla::message::archive` module docs).
//!
//! "Late" is played by the store's clock: it moves a whole second on each read while it is told
//! to, so every acknowledgement seems to land a second after its statement was sent.

use crate::scylla_support;

use std::sync::atomic::{AtomicI64, AtomicU32, Ordering};
use std::sync::Arc;

use qim_store::clock::Clock;
use qim_store::ids::UnixMillis;
use qim_store::scylla::{aligned_ttl, ScyllaMessageStore};
use qim_store::testsuite::fixtures::{clock, fresh_conversation, fresh_tenant};
use qim_store::testsuite::MessageHarness;
use qim_store::ErrorKind;
use scylla_support::{archived_record, at, default_policy, record_key, Keyspace, Scylla};

/// This file's keyspace (see [`Keyspace`]).
static KEYSPACE: Keyspace = Keyspace::new("scylla_archive_ttl");

/// A clock standing at `start` that moves one second forward on each of its next `jumps` reads.
#[derive(Debug)]
struct LateAcks {
    now: AtomicI64,
    jumps: AtomicU32,
}

impl LateAcks {
    fn new(start: UnixMillis, jumps: u32) -> Arc<Self> {
        Arc::new(Self { now: AtomicI64::new(start.0), jumps: AtomicU32::new(jumps) })
    }

    fn position(&self) -> UnixMillis {
        UnixMillis(self.now.load(Ordering::SeqCst))
    }
}

impl Clock for LateAcks {
    fn now(&self) -> UnixMillis {
        let jump = self.jumps.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |j| j.checked_sub(1)).is_ok();
        if jump {
            UnixMillis(self.now.fetch_add(1000, Ordering::SeqCst) + 1000)
        } else {
            self.position()
        }
    }
}

/// A store on this file's (migrated) keyspace reading time from `clock`.
async fn store_with(clock: Arc<LateAcks>) -> ScyllaMessageStore {
    let h = Scylla::of(&KEYSPACE);
    drop(h.open(default_policy(), self::clock()).await);
    let session = scylla_support::connect(KEYSPACE.config()).await;
    ScyllaMessageStore::with_session(session, KEYSPACE.config(), default_policy(), clock)
        .await
        .unwrap_or_else(|e| panic!("opening the store: {}", scylla_support::describe(&e)))
}

/// Twelve acknowledgements in a row arrive a second late: the record row keeps the TTL of the
/// send that was acknowledged in its own second (the clock's final second), not of an earlier
/// one, so it vanishes at the record's expiry and not up to twelve seconds after it.
#[tokio::test]
async fn a_record_acknowledged_late_again_and_again_keeps_the_ttl_of_the_settled_send() {
    let start = UnixMillis::now();
    let late = LateAcks::new(start, 12);
    let store = store_with(late.clone()).await;
    let (t, c) = (fresh_tenant(), fresh_conversation());
    let record = archived_record(t, c, 1, "late", start);
    let expires = record.expires_at.expect("the default class expires");

    let report = store.archive_records(&at(&[record], 10), 1).await.expect("the batch settles once acks are prompt");
    assert_eq!(report.written, 1);
    assert_eq!(late.jumps.load(Ordering::SeqCst), 0, "every late acknowledgement was met by a new send");

    let cql = format!(
        "SELECT TTL(record_blob) FROM {}.message_record WHERE tenant_id = ? AND conversation_id = ? \
         AND seq_bucket = ? AND conversation_seq = ?",
        KEYSPACE.config().keyspace
    );
    let rows = store
        .session()
        .query_unpaged(cql, record_key(t, c, qim_store::ids::ConversationSeq(1)))
        .await
        .expect("TTL read")
        .into_rows_result()
        .expect("rows");
    let (ttl,) = rows.single_row::<(Option<i32>,)>().expect("one record row");
    let settled = aligned_ttl(expires, late.position());
    let ttl = ttl.expect("an expiring record carries a TTL");
    // Read back within a second of the write, the server counts down at most one second.
    assert!(
        (settled - 1..=settled).contains(&ttl),
        "TTL {ttl} s: the settled send carried {settled} s (the first send {} s)",
        aligned_ttl(expires, start)
    );
}

/// A server whose every acknowledgement arrives a second late fails the batch `Unavailable`
/// once the settle budget is spent (the consumer retries it whole), naming why.
#[tokio::test]
async fn a_server_that_never_answers_in_the_same_second_fails_the_batch_retryably() {
    let start = UnixMillis::now();
    let store = store_with(LateAcks::new(start, u32::MAX)).await;
    let (t, c) = (fresh_tenant(), fresh_conversation());
    let batch = at(&[archived_record(t, c, 1, "never settles", start)], 10);

    let err = store.archive_records(&batch, 1).await.expect_err("no acknowledgement ever lands in its second");
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(err.kind().is_retryable());
    assert!(err.to_string().contains("later second"), "the error says why: {err}");
}
