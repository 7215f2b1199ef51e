//! Dispatch receipts over time on the CQL mailbox store (`store/src/scylla/mailbox/`), against a
//! real Cassandra: the lowest first observation wins, a dispatch replayed after its bookkeeping
//! rows expired starts afresh (its writes beat the expired rows' tombstones), and GC and
//! watermarks read the shard log from a persisted cursor.
//!
//! Same environment as `scylla_message_contract.rs` (see `scylla_support`); the mailbox tables
//! live in the same migrated keyspace, and each test uses shards of its own.

use crate::scylla_support;

use std::sync::Arc;

use qim_store::clock::ManualClock;
use qim_store::ids::{ConversationId, ConversationSeq, TenantId, UserId, MILLIS_PER_DAY};
use qim_store::mailbox::{
    ChunkId, DispatchId, DispatchManifest, DispatchReceipt, LaneId, MailboxRetention, MailboxSeq, MessageRef,
    ShardEpoch, ShardId,
};
use qim_store::message::MessageKind;
use qim_store::scylla::mailbox::ScyllaMailboxStore;
use qim_store::testsuite::fixtures::{clock, fresh_bytes, fresh_message_id, fresh_tenant, user, T0};
use qim_store::MailboxStore;
use scylla::client::session::Session;
use scylla_support::Keyspace;

/// This file's keyspace (see [`Keyspace`]).
static KEYSPACE: Keyspace = Keyspace::new("scylla_mailbox_lifecycle");

const EPOCH: ShardEpoch = ShardEpoch(1);

/// A mailbox store on the suite's migrated keyspace, its session and the keyspace name.
async fn open(clock: Arc<ManualClock>) -> (ScyllaMailboxStore, Arc<Session>, String) {
    let session = scylla_support::connect(KEYSPACE.config()).await;
    KEYSPACE.migrated(&session).await;
    let (session, ks) = (Arc::new(session), KEYSPACE.config().keyspace.clone());
    let store = ScyllaMailboxStore::connect(session.clone(), &ks, MailboxRetention::default(), clock)
        .await
        .expect("connecting the mailbox store");
    (store, session, ks)
}

fn fresh_shard() -> ShardId {
    let b = fresh_bytes();
    ShardId(u16::from_be_bytes([b[14], b[15]]) ^ u16::from_be_bytes([b[6], b[7]]))
}

fn manifest(tenant: TenantId, shard: ShardId, recipients: Vec<UserId>) -> DispatchManifest {
    let message = MessageRef {
        tenant,
        conversation: ConversationId([3; 16]),
        seq: ConversationSeq(1),
        message_id: fresh_message_id(),
        sender: user(999),
        kind: MessageKind::Normal,
        created_at: T0,
    };
    DispatchManifest::new(DispatchId { message_id: message.message_id, shard }, message, recipients)
}

/// Writes and marks every chunk of `m` under `receipt`.
async fn complete(store: &ScyllaMailboxStore, receipt: &DispatchReceipt, m: &DispatchManifest) {
    let counts = m.chunk_counts();
    for lane in LaneId::all() {
        for index in 0..counts[lane.get() as usize] {
            let chunk = ChunkId { lane, index };
            store.append_chunk(receipt, m, chunk).await.expect("append_chunk");
            store.mark_chunk_completed(m.id, chunk).await.expect("mark_chunk_completed");
        }
    }
}

/// Moves every lane of `shard` to `through`.
async fn advance_all(store: &ScyllaMailboxStore, shard: ShardId, through: u64) {
    for lane in LaneId::all() {
        store.advance_watermark(shard, lane, through).await.expect("advance_watermark");
    }
}

/// What the server holds once a dispatch's rows outlived their TTL and compaction turned them into
/// tombstones: every row deleted at its own write timestamp (the receipt and the GC marker carry
/// client timestamps; the other rows server ones, which any later write beats anyway).
async fn expire(session: &Session, ks: &str, m: &DispatchManifest, offsets: &[u64]) {
    let key = (i32::from(m.id.shard.0), m.id.message_id.0.to_vec());
    for (table, column) in [("mailbox_dispatch", "manifest"), ("mailbox_dispatch_collected", "generation")] {
        let cql = format!("SELECT WRITETIME({column}) FROM {ks}.{table} WHERE shard = ? AND message_id = ?");
        let rows = session.query_unpaged(cql, key.clone()).await.unwrap().into_rows_result().unwrap();
        if let Some((Some(ts),)) = rows.maybe_first_row::<(Option<i64>,)>().unwrap() {
            let cql = format!("DELETE FROM {ks}.{table} USING TIMESTAMP ? WHERE shard = ? AND message_id = ?");
            session.query_unpaged(cql, (ts, key.0, key.1.clone())).await.unwrap();
        }
    }
    for table in ["mailbox_dispatch_observation", "mailbox_dispatch_chunk"] {
        let cql = format!("DELETE FROM {ks}.{table} WHERE shard = ? AND message_id = ?");
        session.query_unpaged(cql, key.clone()).await.unwrap();
    }
    for offset in offsets {
        let cql =
            format!("DELETE FROM {ks}.mailbox_dispatch_source WHERE shard = ? AND bucket = ? AND observed_offset = ?");
        let bucket = i64::try_from(offset >> qim_store::scylla::mailbox::SOURCE_BUCKET_BITS).unwrap();
        session.query_unpaged(cql, (key.0, bucket, i64::try_from(*offset).unwrap())).await.unwrap();
    }
}

/// The lowest offset's first receipt wins however the writes arrive: a racing first
/// observation at a lower offset (written here directly, as a concurrent worker would) takes
/// the row over, and a receipt of the losing offset can not write further chunks.
#[tokio::test]
async fn the_lowest_first_observation_wins_and_the_loser_is_refused() {
    let (store, session, ks) = open(clock()).await;
    let (t, shard) = (fresh_tenant(), fresh_shard());
    let m = manifest(t, shard, (1..=3).map(user).collect());
    let late = store.begin_dispatch(EPOCH, &m, 15).await.unwrap();
    assert_eq!(late.canonical_offset, 15);
    let lane = qim_store::mailbox::lane_of(&t, &user(1));
    let chunk = ChunkId { lane, index: 0 };
    store.append_chunk(&late, &m, chunk).await.expect("the receipt still stands");
    let lanes: Vec<u8> = m.chunk_counts().iter().flat_map(|c| c.to_be_bytes()).collect();
    let seq10 = i64::try_from(MailboxSeq::from_offset(EPOCH, 10).unwrap().as_u64()).unwrap();
    // The concurrent worker starts the same generation as the store did.
    let (generation,) = session
        .query_unpaged(
            format!("SELECT generation FROM {ks}.mailbox_dispatch WHERE shard = ? AND message_id = ?"),
            (i32::from(shard.0), &m.id.message_id.0[..]),
        )
        .await
        .unwrap()
        .into_rows_result()
        .unwrap()
        .single_row::<(i32,)>()
        .unwrap();
    session
        .query_unpaged(
            format!(
                "INSERT INTO {ks}.mailbox_dispatch (shard, message_id, manifest, canonical_offset, mailbox_seq, \
                 lane_chunks, generation) VALUES (?, ?, ?, ?, ?, ?, ?) USING TIMESTAMP ?"
            ),
            (
                i32::from(shard.0),
                &m.id.message_id.0[..],
                qim_store::codec::encode_manifest(&m),
                10i64,
                seq10,
                lanes,
                generation,
                qim_store::scylla::mailbox::first_wins_timestamp(generation, 10),
            ),
        )
        .await
        .unwrap();
    // Every later observation reads the winner.
    let again = store.begin_dispatch(EPOCH, &m, 20).await.unwrap();
    assert_eq!((again.canonical_offset, again.duplicate), (10, true));
    let progress = store.dispatch_progress(m.id).await.unwrap().unwrap();
    assert_eq!(progress.receipt.canonical_offset, 10);
    assert_eq!(
        store.append_chunk(&late, &m, chunk).await.unwrap_err().kind(),
        qim_store::ErrorKind::Conflict,
        "the losing receipt's seq is refused (its manifest is cached, its seq is re-read)"
    );
    store.append_chunk(&again, &m, chunk).await.unwrap();
}

/// Replaying the shard log from old offsets after a dispatch's rows expired (14 days): the
/// replayed receipt is written with the same offset, hence the same seq, and must not lose to the
/// tombstones of the expired rows; nor must a GC marker after a collected dispatch expired.
#[tokio::test]
async fn a_replay_after_the_rows_expired_starts_afresh() {
    let clock = clock();
    let (store, session, ks) = open(clock.clone()).await;
    let t = fresh_tenant();
    let m = manifest(t, fresh_shard(), vec![user(1), user(2)]);
    let first = store.begin_dispatch(EPOCH, &m, 40).await.unwrap();
    complete(&store, &first, &m).await;
    expire(&session, &ks, &m, &[40]).await;
    clock.advance(15 * MILLIS_PER_DAY);
    assert_eq!(store.dispatch_progress(m.id).await.unwrap(), None, "the rows are gone");
    let again = store.begin_dispatch(EPOCH, &m, 40).await.expect("the replay is accepted");
    assert_eq!((again.seq, again.canonical_offset, again.duplicate), (first.seq, 40, false));
    complete(&store, &again, &m).await;
    let progress = store.dispatch_progress(m.id).await.unwrap().expect("the replay's progress");
    assert_eq!(progress.completed.len(), m.chunk_counts().iter().sum::<u32>() as usize);

    // Collected, then expired with its GC marker: replayed, and collected again.
    let shard = fresh_shard();
    let m = manifest(t, shard, vec![user(3)]);
    let first = store.begin_dispatch(EPOCH, &m, 41).await.unwrap();
    complete(&store, &first, &m).await;
    advance_all(&store, shard, 41).await;
    let now = qim_store::clock::Clock::now(clock.as_ref()).0;
    assert_eq!(store.gc_completed_dispatches(shard, now + 1, 10).await.unwrap(), 1);
    expire(&session, &ks, &m, &[41]).await;
    clock.advance(15 * MILLIS_PER_DAY);
    let again = store.begin_dispatch(EPOCH, &m, 41).await.expect("the replay is accepted");
    assert_eq!((again.seq, again.duplicate), (MailboxSeq::from_offset(EPOCH, 41).unwrap(), false));
    assert!(store.dispatch_progress(m.id).await.unwrap().is_some());
    complete(&store, &again, &m).await;
    let now = qim_store::clock::Clock::now(clock.as_ref()).0;
    assert_eq!(store.gc_completed_dispatches(shard, now + 1, 10).await.unwrap(), 1, "collected again");
    assert_eq!(store.dispatch_progress(m.id).await.unwrap(), None, "and its marker holds");
}

/// GC reads the shard log from its persisted cursor: after many dispatches were collected, the
/// next call reads only the new sources; a dispatch not collectable yet is read again until it
/// is; and a replay of an offset GC passed long ago is still collected.
#[tokio::test]
async fn gc_reads_the_shard_log_from_its_cursor() {
    let clock = clock();
    let (store, _, _) = open(clock.clone()).await;
    let (t, shard) = (fresh_tenant(), fresh_shard());
    let mut dispatches = Vec::new();
    let dispatch = |offset: u64, n: u32| {
        let store = &store;
        let m = manifest(t, shard, vec![user(n)]);
        async move {
            let receipt = store.begin_dispatch(EPOCH, &m, offset).await.unwrap();
            complete(store, &receipt, &m).await;
            m
        }
    };
    for i in 0..12u32 {
        dispatches.push(dispatch(10 + u64::from(i), i).await);
    }
    advance_all(&store, shard, 21).await;
    let later = qim_store::clock::Clock::now(clock.as_ref()).0 + 1;
    let gc = |seen_before: i64| {
        let store = &store;
        async move {
            let before = store.source_rows_read();
            let collected = store.gc_completed_dispatches(shard, seen_before, 100).await.unwrap();
            (collected, store.source_rows_read() - before)
        }
    };
    assert_eq!(gc(later).await, (12, 12), "the first call reads the whole log");
    for i in 12..15u32 {
        dispatch(10 + u64::from(i), i).await;
    }
    advance_all(&store, shard, 24).await;
    assert_eq!(gc(later).await, (3, 3), "then only what is new");
    assert_eq!(gc(later).await, (0, 0), "and nothing when nothing is");

    // Last seen too recently for this call's cut-off: read again next time, until collected.
    dispatch(25, 25).await;
    advance_all(&store, shard, 25).await;
    assert_eq!(gc(T0.0).await, (0, 1));
    assert_eq!(gc(T0.0).await, (0, 1), "the cursor stays below the waiting dispatch");
    assert_eq!(gc(later).await, (1, 1));

    // A replay of offset 10, collected long ago: a new generation, registered for GC.
    let replayed = &dispatches[0];
    let receipt = store.begin_dispatch(EPOCH, replayed, 10).await.unwrap();
    assert!(!receipt.duplicate, "a collected dispatch starts afresh");
    complete(&store, &receipt, replayed).await;
    assert_eq!(gc(later).await, (1, 0), "found through its registration, not by rereading the log");
    assert_eq!(store.dispatch_progress(replayed.id).await.unwrap(), None);
}
