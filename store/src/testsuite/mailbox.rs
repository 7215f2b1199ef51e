//! The `MailboxStore` contract suite. Each function is one test; see
//! [`crate::mailbox_store_contract_suite`].

use super::fixtures::*;
use super::MailboxHarness;
use crate::ids::{ConversationSeq, EventId, TenantId, UnixMillis, UserId, MILLIS_PER_DAY};
use crate::mailbox::{
    end_of_day, lane_of, ChunkId, DispatchId, DispatchManifest, LaneId, MailboxEntry, MailboxEvent, MailboxRetention,
    MailboxSeq, MessageRef, ShardEpoch, ShardId,
};
use crate::message::MessageKind;
use crate::{DispatchBegin, ErrorKind, MailboxStore};

mod dispatch;
mod fence;
pub use dispatch::*;
pub use fence::*;

const EPOCH: ShardEpoch = ShardEpoch(1);

fn seq(position: u64) -> MailboxSeq {
    MailboxSeq::new(EPOCH, position).expect("small positions fit")
}

fn origin() -> MailboxSeq {
    MailboxSeq::origin(EPOCH)
}

fn top() -> MailboxSeq {
    seq(1 << 40)
}

/// A shard no other test of this run uses. The suites of one run share a keyspace, and shard
/// rows are keyed by the shard alone, so a random 16-bit shard per test collided now and then
/// (a CI run failed on "offset 10 of shard 33028 was already observed as another dispatch": a
/// few hundred shards per run make a collision likely by the birthday bound). Each test claims
/// its shard by creating a file named after it in a directory of the run (the test runner's
/// process, which every test process of the run has as its parent): `create_new` is atomic
/// across processes. Starts at a random shard, so runs of other runners seldom meet either.
fn fresh_shard() -> ShardId {
    let b = fresh_bytes();
    let start = u16::from_be_bytes([b[6], b[7]]) ^ u16::from_be_bytes([b[14], b[15]]);
    let dir = std::env::temp_dir().join(format!("qim-test-shards-{}", std::os::unix::process::parent_id()));
    if std::fs::create_dir_all(&dir).is_err() {
        return ShardId(start);
    }
    for step in 0..=u16::MAX {
        let shard = start.wrapping_add(step);
        let claim = std::fs::OpenOptions::new().write(true).create_new(true).open(dir.join(shard.to_string()));
        match claim {
            Ok(_) => return ShardId(shard),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(_) => return ShardId(shard),
        }
    }
    ShardId(start)
}

fn message(tenant: TenantId, n: u64) -> MessageRef {
    MessageRef {
        tenant,
        conversation: crate::ids::ConversationId([3; 16]),
        seq: ConversationSeq(n),
        message_id: fresh_message_id(),
        sender: user(999),
        kind: MessageKind::Normal,
        created_at: T0,
    }
}

/// The end of the UTC day `days` after T0: a legal entry expiry.
fn expiry(days: i64) -> UnixMillis {
    end_of_day(T0.plus_millis(days * MILLIS_PER_DAY))
}

fn entry(tenant: TenantId, u: UserId, s: MailboxSeq, ordinal: u16, expires_at: UnixMillis) -> MailboxEntry {
    let mut event_id = [0u8; 16];
    event_id[..8].copy_from_slice(&s.as_u64().to_be_bytes());
    event_id[8..10].copy_from_slice(&ordinal.to_be_bytes());
    MailboxEntry {
        tenant,
        user: u,
        seq: s,
        expires_at,
        event: MailboxEvent { ordinal, event_id: EventId(event_id), message: message(tenant, 1) },
    }
}

/// `n` users of `tenant` in `lane`.
fn users_in_lane(tenant: TenantId, lane: LaneId, n: usize) -> Vec<UserId> {
    (0..).map(user).filter(|u| lane_of(&tenant, u) == lane).take(n).collect()
}

fn lane(n: u8) -> LaneId {
    LaneId::new(n).expect("lane below 64")
}

fn manifest(tenant: TenantId, shard: ShardId, recipients: Vec<UserId>) -> DispatchManifest {
    let message = message(tenant, 1);
    DispatchManifest::new(DispatchId { message_id: message.message_id, shard }, message, recipients)
}

/// Writes and completes every chunk of `lane` in `m`.
async fn complete_lane(
    store: &dyn MailboxStore,
    receipt: &crate::mailbox::DispatchReceipt,
    m: &DispatchManifest,
    l: LaneId,
) {
    for index in 0..m.chunk_counts()[l.get() as usize] {
        let chunk = ChunkId { lane: l, index };
        store.append_chunk(receipt, m, chunk).await.expect("append_chunk");
        store.mark_chunk_completed(m.id, chunk).await.expect("mark_chunk_completed");
    }
}

async fn open(h: &dyn MailboxHarness) -> (std::sync::Arc<dyn MailboxStore>, std::sync::Arc<crate::clock::ManualClock>) {
    let clock = clock();
    (h.open(MailboxRetention::default(), clock.clone()).await, clock)
}

/// Events given out of order come back as one group in (ordinal, event id) order.
pub async fn append_batch_stores_canonical_groups(h: &dyn MailboxHarness) {
    let (store, _) = open(h).await;
    let t = fresh_tenant();
    let e = expiry(30);
    let batch = [
        entry(t, user(1), seq(4), 2, e),
        entry(t, user(2), seq(4), 0, e),
        entry(t, user(1), seq(4), 0, e),
        entry(t, user(1), seq(4), 1, e),
    ];
    store.append_batch(&batch).await.unwrap();
    let page = store.range_scan(t, user(1), origin(), top(), 100).await.unwrap();
    assert_eq!(page.covered, top());
    assert_eq!(page.groups.len(), 1);
    let g = &page.groups[0];
    assert_eq!((g.user, g.seq, g.expires_at), (user(1), seq(4), e));
    assert_eq!(g.events.iter().map(|e| e.ordinal).collect::<Vec<_>>(), vec![0, 1, 2]);
    assert_eq!(g.events[2], batch[0].event);
    assert_eq!(store.range_scan(t, user(2), origin(), top(), 100).await.unwrap().groups.len(), 1);
}

/// A repeated ordinal within one (user, seq) refuses the whole batch.
pub async fn append_batch_rejects_duplicate_ordinals_and_writes_nothing(h: &dyn MailboxHarness) {
    let (store, _) = open(h).await;
    let t = fresh_tenant();
    let e = expiry(30);
    let mut twin = entry(t, user(2), seq(4), 0, e);
    twin.event.event_id = EventId([9; 16]);
    let batch = [entry(t, user(1), seq(4), 0, e), entry(t, user(2), seq(4), 0, e), twin];
    assert_kind(store.append_batch(&batch).await, ErrorKind::InvalidInput, "duplicate ordinal");
    for u in [user(1), user(2)] {
        let page = store.range_scan(t, u, origin(), top(), 100).await.unwrap();
        assert!(page.groups.is_empty(), "nothing of the refused batch was written");
    }
    let unaligned = entry(t, user(1), seq(5), 0, T0.plus_millis(30 * MILLIS_PER_DAY));
    assert_kind(store.append_batch(&[unaligned]).await, ErrorKind::InvalidInput, "expiry not at a day's end");
}

/// Replaying a batch leaves exactly the same groups.
pub async fn append_batch_replay_is_identical(h: &dyn MailboxHarness) {
    let (store, _) = open(h).await;
    let t = fresh_tenant();
    let batch = [entry(t, user(1), seq(4), 0, expiry(30)), entry(t, user(1), seq(6), 0, expiry(30))];
    store.append_batch(&batch).await.unwrap();
    let first = store.range_scan(t, user(1), origin(), top(), 100).await.unwrap();
    store.append_batch(&batch).await.unwrap();
    assert_eq!(store.range_scan(t, user(1), origin(), top(), 100).await.unwrap(), first);
    assert_eq!(first.groups.len(), 2);
}

/// `after > up_to`, a clean user, mixed epochs and a zero limit.
pub async fn range_scan_edge_cases(h: &dyn MailboxHarness) {
    let (store, _) = open(h).await;
    let t = fresh_tenant();
    let page = store.range_scan(t, user(1), seq(9), seq(5), 10).await.unwrap();
    assert_eq!((page.groups.len(), page.covered), (0, seq(9)), "after beyond up_to");
    let page = store.range_scan(t, user(1), origin(), seq(5), 10).await.unwrap();
    assert_eq!((page.groups.len(), page.covered), (0, seq(5)), "a clean user is covered to up_to");
    let other_epoch = MailboxSeq::new(ShardEpoch(2), 1).unwrap();
    assert_kind(store.range_scan(t, user(1), origin(), other_epoch, 10).await, ErrorKind::InvalidInput, "mixed epochs");
    assert_kind(store.range_scan(t, user(1), origin(), seq(5), 0).await, ErrorKind::InvalidInput, "zero limit");
    store.append_batch(&[entry(t, user(1), seq(7), 0, expiry(30))]).await.unwrap();
    let page = store.range_scan(t, user(1), origin(), seq(5), 10).await.unwrap();
    assert_eq!((page.groups.len(), page.covered), (0, seq(5)), "nothing above up_to is returned");
}

/// A page never splits a group; the first group may exceed the limit.
pub async fn range_scan_cuts_pages_only_at_seq_boundaries(h: &dyn MailboxHarness) {
    let (store, _) = open(h).await;
    let t = fresh_tenant();
    let e = expiry(30);
    let mut batch = Vec::new();
    for (s, events) in [(1, 3u16), (2, 1), (3, 2)] {
        batch.extend((0..events).map(|o| entry(t, user(1), seq(s), o, e)));
    }
    store.append_batch(&batch).await.unwrap();
    let seqs = |p: &crate::mailbox::MailboxPage| p.groups.iter().map(|g| g.seq.position()).collect::<Vec<_>>();
    let p = store.range_scan(t, user(1), origin(), top(), 2).await.unwrap();
    assert_eq!((seqs(&p), p.covered), (vec![1], seq(1)), "a 3-event group exceeds a limit of 2 alone");
    let p = store.range_scan(t, user(1), p.covered, top(), 2).await.unwrap();
    assert_eq!((seqs(&p), p.covered), (vec![2, 3], seq(3)));
    let p = store.range_scan(t, user(1), p.covered, top(), 2).await.unwrap();
    assert_eq!((seqs(&p), p.covered), (vec![], top()));
}

/// Trim only rises; cursors below it expire with the trim as the earliest valid cursor.
pub async fn truncate_before_is_monotonic_and_expires_cursors(h: &dyn MailboxHarness) {
    let (store, _) = open(h).await;
    let t = fresh_tenant();
    let batch: Vec<_> = (1..=4).map(|s| entry(t, user(1), seq(s), 0, expiry(30))).collect();
    store.append_batch(&batch).await.unwrap();
    assert_eq!(store.truncate_before(t, user(1), seq(2)).await.unwrap(), seq(2));
    assert_eq!(store.truncate_before(t, user(1), seq(1)).await.unwrap(), seq(2), "never lowered");
    match store.range_scan(t, user(1), seq(1), top(), 10).await {
        Err(crate::StoreError::CursorExpired { earliest }) => assert_eq!(earliest, seq(2)),
        other => panic!("expected CursorExpired, got {other:?}"),
    }
    let p = store.range_scan(t, user(1), seq(2), top(), 10).await.unwrap();
    assert_eq!(p.groups.iter().map(|g| g.seq.position()).collect::<Vec<_>>(), vec![3, 4]);
    assert_eq!(
        store.truncate_before(fresh_tenant(), user(1), seq(7)).await.unwrap(),
        seq(7),
        "a clean user can be trimmed"
    );
}

/// When a day bucket expires, cursors below its highest seq expire instead of skipping silently;
/// live lower buckets stay readable above the boundary.
pub async fn expired_entries_raise_the_gap_instead_of_leaving_a_silent_hole(h: &dyn MailboxHarness) {
    let (store, clock) = open(h).await;
    let t = fresh_tenant();
    // Seq 5 expires first although seq 3 and 7 (later buckets) live on: created_at and seq are
    // not monotonic together.
    let batch = [
        entry(t, user(1), seq(3), 0, expiry(3)),
        entry(t, user(1), seq(5), 0, expiry(1)),
        entry(t, user(1), seq(7), 0, expiry(3)),
    ];
    store.append_batch(&batch).await.unwrap();
    assert_eq!(store.range_scan(t, user(1), origin(), top(), 10).await.unwrap().groups.len(), 3);
    clock.set(expiry(1));
    match store.range_scan(t, user(1), origin(), top(), 10).await {
        Err(crate::StoreError::CursorExpired { earliest }) => assert_eq!(earliest, seq(5)),
        other => panic!("expected CursorExpired at the expired bucket's max seq, got {other:?}"),
    }
    let p = store.range_scan(t, user(1), seq(5), top(), 10).await.unwrap();
    assert_eq!(p.groups.iter().map(|g| g.seq.position()).collect::<Vec<_>>(), vec![7]);
    clock.set(expiry(3));
    match store.range_scan(t, user(1), seq(5), top(), 10).await {
        Err(crate::StoreError::CursorExpired { earliest }) => assert_eq!(earliest, seq(7)),
        other => panic!("expected CursorExpired after every bucket expired, got {other:?}"),
    }
    let p = store.range_scan(t, user(1), seq(7), top(), 10).await.unwrap();
    assert_eq!((p.groups.len(), p.covered), (0, top()));
}

/// Replaying an entry whose expiry passed writes nothing readable and expires cursors below it.
pub async fn replayed_expired_entries_are_not_resurrected(h: &dyn MailboxHarness) {
    let (store, clock) = open(h).await;
    let t = fresh_tenant();
    clock.set(expiry(40));
    store
        .append_batch(&[entry(t, user(1), seq(8), 0, expiry(30)), entry(t, user(1), seq(9), 0, expiry(70))])
        .await
        .unwrap();
    assert_kind(
        store.range_scan(t, user(1), origin(), top(), 10).await,
        ErrorKind::CursorExpired,
        "below the replayed expired entry",
    );
    let p = store.range_scan(t, user(1), seq(8), top(), 10).await.unwrap();
    assert_eq!(p.groups.iter().map(|g| g.seq.position()).collect::<Vec<_>>(), vec![9]);
}

/// Undecodable group bytes are CorruptEntry, never skipped.
pub async fn corrupt_group_fails_closed(h: &dyn MailboxHarness) {
    let (store, _) = open(h).await;
    let t = fresh_tenant();
    store.append_batch(&[entry(t, user(1), seq(2), 0, expiry(30))]).await.unwrap();
    h.overwrite_group(&store, t, user(1), seq(2), vec![0x61, 1, 0, 0]).await;
    assert_kind(store.range_scan(t, user(1), origin(), top(), 10).await, ErrorKind::CorruptEntry, "truncated group");
}
