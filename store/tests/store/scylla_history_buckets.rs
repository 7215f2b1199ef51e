//! The bucket directory and floor of history reads (`store/src/scylla/message/buckets.rs`) against
//! a real Cassandra: a read skips buckets whose records all expired without reading their index
//! entries and never looks below the floor; the floor moves only over fully issued buckets whose
//! records all expired, so a held record, or a bucket whose seqs are not all issued, stops it; and
//! a reservation recorded late under a longer retention brings it back down.
//!
//! Writing 100 000 expired rows is too slow for a test, so the tests observe the mechanism: seqs
//! are pushed to bucket boundaries by raising `last_seq` directly (the holes are legal), the floor
//! row is read back, and index entries without a record are planted where a read must not look
//! (reading one is `CorruptEntry`).
//!
//! Same environment as `scylla_message_contract.rs` (see `scylla_support`).

use crate::scylla_support;

use std::sync::Arc;

use qim_store::clock::ManualClock;
use qim_store::ids::{ConversationId, ConversationSeq, TenantId, UnixMillis};
use qim_store::message::{CommitRequest, Direction, HistoryPage, HistoryQuery, ReadPosition};
use qim_store::retention::{RetentionClass, RetentionPolicy, EPHEMERAL_MILLIS};
use qim_store::scylla::ScyllaMessageStore;
use qim_store::testsuite::fixtures::{
    clock, fresh_conversation, fresh_message_id, fresh_tenant, request, user, MembershipAuthorizer,
};
use qim_store::testsuite::message::commit_fully;
use qim_store::testsuite::MessageHarness;
use qim_store::{ErrorKind, MessageStore};
use scylla_support::{Keyspace, Scylla};

/// This file's keyspace (see [`Keyspace`]).
static KEYSPACE: Keyspace = Keyspace::new("scylla_history_buckets");

const HOUR: i64 = 3_600_000;
const BUCKET: u64 = qim_store::scylla::schema::SEQ_BUCKET_SIZE;

fn days(n: u32) -> RetentionPolicy {
    RetentionPolicy::with_default_days(n).expect("a legal retention")
}

struct Conv {
    store: Arc<dyn MessageStore>,
    typed: ScyllaMessageStore,
    t: TenantId,
    conv: ConversationId,
    auth: MembershipAuthorizer,
}

impl Conv {
    async fn open(policy: RetentionPolicy, clock: Arc<ManualClock>) -> Self {
        Self::on(fresh_tenant(), fresh_conversation(), policy, clock).await
    }

    /// Conversation `conv` of `t` through a store of its own.
    async fn on(t: TenantId, conv: ConversationId, policy: RetentionPolicy, clock: Arc<ManualClock>) -> Self {
        let h = Scylla::of(&KEYSPACE);
        let store = h.open(policy, clock).await;
        let typed = h.store();
        let auth = MembershipAuthorizer::default();
        auth.admit(t, conv, user(1));
        Self { store, typed, t, conv, auth }
    }

    fn req(&self, id: &str, retention: RetentionClass) -> CommitRequest {
        let mut r = request(self.t, user(2), id, self.conv, b"x");
        r.retention = retention;
        r
    }

    async fn commit(&self, id: &str, retention: RetentionClass) -> u64 {
        commit_fully(self.store.as_ref(), &self.req(id, retention)).await.intent.seq.0
    }

    /// Makes the next seq issued `next` (the skipped seqs stay holes).
    async fn skip_to(&self, next: u64) {
        let cql = format!(
            "UPDATE {}.conversation_sequence SET last_seq = ? WHERE tenant_id = ? AND conversation_id = ?",
            self.typed.config().keyspace
        );
        let values = (i64::try_from(next - 1).unwrap(), self.t.0.to_vec(), self.conv.0.to_vec());
        self.typed.session().query_unpaged(cql, values).await.expect("raising last_seq");
    }

    async fn page(&self, direction: Direction) -> Result<HistoryPage, qim_store::StoreError> {
        let q = HistoryQuery {
            tenant: self.t,
            conversation: self.conv,
            viewer: user(1),
            direction,
            anchor: None,
            max_items: 20,
            max_bytes: 1 << 20,
        };
        self.store.history_page(&q, &self.auth).await
    }

    async fn seqs(&self, direction: Direction) -> (Vec<u64>, Option<u64>) {
        let page = self.page(direction).await.expect("a history page");
        (page.records.iter().map(|r| r.seq.0).collect(), page.earliest_available.map(|s| s.0))
    }

    /// The stored floor bucket (`None`: no floor row).
    async fn floor(&self) -> Option<i64> {
        let cql = format!(
            "SELECT floor_bucket FROM {}.history_floor WHERE tenant_id = ? AND conversation_id = ?",
            self.typed.config().keyspace
        );
        let rows = self.typed.session().query_unpaged(cql, (self.t.0.to_vec(), self.conv.0.to_vec())).await;
        let rows = rows.expect("reading the floor").into_rows_result().expect("rows");
        rows.maybe_first_row::<(Option<i64>,)>().expect("one row at most").and_then(|(f,)| f)
    }

    /// Plants an index entry that never expires and has no record: a read that reaches it fails.
    async fn plant_orphan_index_entry(&self, seq: u64) {
        let cql = format!(
            "INSERT INTO {}.history_index (tenant_id, conversation_id, conversation_seq) VALUES (?, ?, ?)",
            self.typed.config().keyspace
        );
        let values = (self.t.0.to_vec(), self.conv.0.to_vec(), i64::try_from(seq).unwrap());
        self.typed.session().query_unpaged(cql, values).await.expect("planting an index entry");
    }

    /// Plants a directory row claiming `bucket` holds records that never expire.
    async fn plant_never_bound(&self, bucket: i64) {
        let cql = format!(
            "INSERT INTO {}.history_bucket (tenant_id, conversation_id, seq_bucket, max_expires_at) VALUES (?, ?, ?, ?)",
            self.typed.config().keyspace
        );
        let values = (self.t.0.to_vec(), self.conv.0.to_vec(), bucket, i64::MAX);
        self.typed.session().query_unpaged(cql, values).await.expect("planting a bound");
    }
}

#[tokio::test]
async fn a_held_record_stops_the_floor_and_reads_start_at_it() {
    let clock = clock();
    let c = Conv::open(days(30), clock.clone()).await;
    c.skip_to(BUCKET - 2).await;
    let (e1, e2) =
        (c.commit("e1", RetentionClass::Ephemeral24h).await, c.commit("e2", RetentionClass::Ephemeral24h).await);
    let held = c.commit("held", RetentionClass::ComplianceHold).await;
    c.skip_to(2 * BUCKET - 2).await;
    let (e3, e4) =
        (c.commit("e3", RetentionClass::Ephemeral24h).await, c.commit("e4", RetentionClass::Ephemeral24h).await);
    let kept = c.commit("kept", RetentionClass::Default).await;
    assert_eq!((e1, e2, held, e3, e4, kept), (1022, 1023, 1024, 2046, 2047, 2048), "bucket 0 | 1 | 2");
    assert_eq!(c.seqs(Direction::Newer).await, (vec![e1, e2, held, e3, e4, kept], Some(e1)));
    assert_eq!(c.floor().await, None, "nothing expired, nothing moved");

    // Bucket 0 held only ephemeral records; bucket 1 holds a record that never expires.
    clock.advance(EPHEMERAL_MILLIS + HOUR);
    assert_eq!(c.seqs(Direction::Newer).await, (vec![held, kept], Some(held)));
    assert_eq!(c.floor().await, Some(1), "the floor passed the expired, fully issued bucket 0 and stopped at the hold");
    assert_eq!(c.seqs(Direction::Older).await, (vec![kept, held], Some(held)));

    // Reads never look below the floor: a corrupt entry there, under a bound claiming bucket 0
    // is live, is not seen.
    c.plant_never_bound(0).await;
    c.plant_orphan_index_entry(5).await;
    assert_eq!(c.seqs(Direction::Newer).await, (vec![held, kept], Some(held)));
    assert_eq!(c.seqs(Direction::Older).await, (vec![kept, held], Some(held)));
    let pos = ReadPosition { conversation: c.conv, read_through: ConversationSeq(0) };
    let sums = c.store.conversation_summaries(c.t, user(1), &[pos]).await.unwrap();
    assert_eq!((sums[0].last_seq, sums[0].unread), (Some(ConversationSeq(kept)), 2));

    // The same corrupt entry inside a live bucket is found: the planted entry above proves
    // something only because this one fails.
    c.plant_orphan_index_entry(1500).await;
    let err = c.page(Direction::Newer).await.expect_err("an index entry without its record");
    assert_eq!(err.kind(), ErrorKind::CorruptEntry, "{err}");
}

#[tokio::test]
async fn expired_buckets_are_skipped_unread_and_a_partly_issued_bucket_keeps_the_floor() {
    let clock = clock();
    let c = Conv::open(days(30), clock.clone()).await;
    let held = c.commit("held", RetentionClass::ComplianceHold).await;
    c.skip_to(BUCKET).await;
    let e1 = c.commit("e1", RetentionClass::Ephemeral24h).await;
    c.commit("e2", RetentionClass::Ephemeral24h).await;
    c.skip_to(2 * BUCKET).await;
    let eph = c.commit("e3", RetentionClass::Ephemeral24h).await;
    assert_eq!((held, e1, eph), (1, 1024, 2048), "bucket 0 | 1 | 2");

    clock.advance(EPHEMERAL_MILLIS + HOUR);
    // Bucket 1 expired whole: its entries are not read, not even a corrupt one.
    c.plant_orphan_index_entry(e1 + 10).await;
    assert_eq!(c.seqs(Direction::Newer).await, (vec![held], Some(held)));
    assert_eq!(c.seqs(Direction::Older).await, (vec![held], Some(held)));
    assert_eq!(c.floor().await, None, "bucket 0 holds a live record");

    // A conversation whose records all expired, in a bucket not fully issued: the floor stays,
    // and a record reserved later in that bucket is shown.
    let d = Conv::open(days(30), clock.clone()).await;
    for i in 0..3 {
        d.commit(&format!("e{i}"), RetentionClass::Ephemeral24h).await;
    }
    clock.advance(EPHEMERAL_MILLIS + HOUR);
    assert_eq!(d.seqs(Direction::Newer).await, (vec![], None));
    assert_eq!(d.floor().await, None, "bucket 0 still has seqs to issue");
    let late = d.commit("late", RetentionClass::Default).await;
    assert_eq!(d.seqs(Direction::Newer).await, (vec![late], Some(late)));
    assert_eq!(late, 4);
}

#[tokio::test]
async fn a_record_made_live_by_a_longer_retention_after_the_floor_passed_brings_it_down() {
    let clock = clock();
    let short = Conv::open(days(1), clock.clone()).await;
    // The same conversation through a store configured with 30 days (a changed policy).
    let long = Conv::on(short.t, short.conv, days(30), clock.clone()).await;

    short.skip_to(BUCKET - 2).await;
    let reserved = short.store.reserve(&short.req("slow", RetentionClass::Default), fresh_message_id()).await.unwrap();
    let eph = short.commit("eph", RetentionClass::Ephemeral24h).await;
    assert_eq!((reserved.intent.seq.0, eph), (1022, 1023));

    clock.advance(EPHEMERAL_MILLIS + HOUR);
    assert_eq!(short.seqs(Direction::Newer).await, (vec![], None));
    assert_eq!(short.floor().await, Some(1), "bucket 0 is fully issued and every bound in it passed");

    // Recorded a day late by the 30-day store: the record lives until T0 + 30 days.
    long.store.put_record(&reserved.intent).await.unwrap();
    let now = qim_store::clock::Clock::now(clock.as_ref());
    assert!(reserved.intent.created_at.plus_millis(30 * 24 * HOUR) > now && now > UnixMillis(0));
    assert_eq!(long.floor().await, Some(0), "the late record brought the floor down");
    assert_eq!(long.seqs(Direction::Newer).await, (vec![1022], Some(1022)));
    assert_eq!(short.seqs(Direction::Newer).await, (vec![1022], Some(1022)), "whichever store reads");
    assert_eq!(short.floor().await, Some(0), "and no reader raises it over the live record");
}
