//! A dispatcher's fence on a Redis that loses state. A pipeline takes a shard over by reading
//! its incarnation; every begin, chunk mark and watermark advance it makes names that fence.
//! After Redis restarted, was restored from an older snapshot or was flushed, those writes are
//! refused (`StateLost`) and write nothing, so no watermark moves over observations Redis
//! forgot and no dispatch gets its receipt from a later duplicate; a new take-over writes again.
//!
//! Each test runs its own `redis-server` (`PrivateRedis`), installed by `deploy/local/stack up`.

use qim_store::ids::{ConversationId, ConversationSeq, TenantId, UserId};
use qim_store::mailbox::{
    lane_of, ChunkId, DispatchId, DispatchManifest, LaneId, MailboxRetention, MessageRef, ShardEpoch, ShardFence,
    ShardId,
};
use qim_store::message::MessageKind;
use qim_store::redis::mailbox::RedisMailboxStore;
use qim_store::redis::RedisConfig;
use qim_store::testsuite::fixtures::{assert_kind, clock, fresh_message_id, fresh_tenant, user, T0};
use qim_store::testsuite::private_redis::PrivateRedis;
use qim_store::{DispatchBegin, ErrorKind, MailboxStore};

const EPOCH: ShardEpoch = ShardEpoch(1);
const SHARD: ShardId = ShardId(3);

async fn open(redis: &PrivateRedis) -> RedisMailboxStore {
    let config = RedisConfig { url: redis.url(), namespace: "qim".into() };
    RedisMailboxStore::open(&config, MailboxRetention::default(), clock()).await.expect("private redis answers")
}

async fn take_over(store: &RedisMailboxStore) -> ShardFence {
    ShardFence { shard: SHARD, incarnation: store.shard_incarnation(SHARD).await.expect("the incarnation") }
}

fn lane() -> LaneId {
    LaneId::new(17).expect("a lane")
}

/// A dispatch of `SHARD` to one recipient in [`lane`].
fn manifest(tenant: TenantId) -> DispatchManifest {
    let recipient: UserId = (0..).map(user).find(|u| lane_of(&tenant, u) == lane()).expect("a user in the lane");
    let message = MessageRef {
        tenant,
        conversation: ConversationId([5; 16]),
        seq: ConversationSeq(1),
        message_id: fresh_message_id(),
        sender: user(9_999),
        kind: MessageKind::Normal,
        created_at: T0,
    };
    DispatchManifest::new(DispatchId { message_id: message.message_id, shard: SHARD }, message, vec![recipient])
}

/// Begins `m` at `offset` under `fence`, writes and completes its one chunk, and advances its
/// lane to `offset`.
async fn dispatch(store: &RedisMailboxStore, fence: &ShardFence, m: &DispatchManifest, offset: u64) {
    let receipt = store.begin_dispatch_fenced(fence, EPOCH, m, offset).await.expect("begin");
    let chunk = ChunkId { lane: lane(), index: 0 };
    store.append_chunk(&receipt, m, chunk).await.expect("append");
    store.mark_chunks_completed_fenced(fence, &[(m.id, chunk)]).await.expect("mark");
    let advanced = store.advance_watermarks_fenced(fence, &[(lane(), offset)]).await.remove(0).expect("advance");
    assert_eq!(advanced.through, Some(offset));
}

#[tokio::test]
async fn a_fence_from_before_a_restore_writes_nothing_and_a_new_take_over_writes_again() {
    let mut redis = PrivateRedis::start();
    let t = fresh_tenant();
    let (a, b) = (manifest(t), manifest(t));
    let store = open(&redis).await;
    let first = take_over(&store).await;
    dispatch(&store, &first, &a, 1).await;

    // A clean restart loses nothing, but Redis can not tell: the old fence no longer holds.
    let snapshot = redis.snapshot();
    let store = open(&redis).await;
    assert_kind(store.begin_dispatch_fenced(&first, EPOCH, &b, 2).await, ErrorKind::StateLost, "after a restart");
    let second = take_over(&store).await;
    assert_ne!(second, first, "a restart is a new incarnation");
    dispatch(&store, &second, &b, 2).await;
    store.begin_dispatch_fenced(&second, EPOCH, &a, 3).await.expect("a duplicate of a");

    // Restored to the snapshot: b and a's duplicate are gone, lane watermark back at 1.
    redis.restore(&snapshot);
    let store = open(&redis).await;
    let chunk = ChunkId { lane: lane(), index: 0 };
    assert_kind(
        store.begin_dispatch_fenced(&second, EPOCH, &b, 4).await,
        ErrorKind::StateLost,
        "a later duplicate of b must not become b's first receipt",
    );
    assert_eq!(store.dispatch_progress(b.id).await.unwrap(), None, "the refused begin wrote nothing");
    assert_kind(
        store.mark_chunks_completed_fenced(&second, &[(a.id, chunk)]).await,
        ErrorKind::StateLost,
        "a mark under the old fence",
    );
    let refused = store.advance_watermarks_fenced(&second, &[(lane(), 1)]).await.remove(0);
    assert_kind(refused, ErrorKind::StateLost, "an advance under the old fence");
    assert_eq!(store.lane_watermark(SHARD, lane()).await.unwrap().through, Some(1), "the restored watermark");

    let third = take_over(&store).await;
    assert!(third != second && third != first, "a restore is a new incarnation");
    let receipt = store.begin_dispatch_fenced(&third, EPOCH, &b, 2).await.expect("b begun again at its offset");
    assert!(!receipt.duplicate, "b's receipt comes from its first offset again");
    assert_eq!(receipt.canonical_offset, 2);
}

#[tokio::test]
async fn a_flush_breaks_the_fence() {
    let redis = PrivateRedis::start();
    let store = open(&redis).await;
    let fence = take_over(&store).await;
    let m = manifest(fresh_tenant());
    dispatch(&store, &fence, &m, 7).await;
    let client = redis::Client::open(redis.url()).expect("url");
    let mut raw = client.get_multiplexed_async_connection().await.expect("private redis answers");
    redis::cmd("FLUSHALL").query_async::<()>(&mut raw).await.unwrap();
    let refused = store.advance_watermarks_fenced(&fence, &[(lane(), 7)]).await.remove(0);
    assert_kind(refused, ErrorKind::StateLost, "an advance after the flush");
    assert_eq!(store.lane_watermark(SHARD, lane()).await.unwrap().through, None, "nothing written");
    assert_ne!(take_over(&store).await, fence, "a flush is a new incarnation");
}

#[tokio::test]
async fn unfenced_writes_are_not_checked() {
    let redis = PrivateRedis::start();
    let store = open(&redis).await;
    let stale = ShardFence { shard: SHARD, incarnation: "some-other-copy:0".into() };
    let m = manifest(fresh_tenant());
    assert_kind(store.begin_dispatch_fenced(&stale, EPOCH, &m, 1).await, ErrorKind::StateLost, "a forged fence");
    let receipt = store.begin_dispatch(EPOCH, &m, 1).await.expect("an unfenced begin");
    assert_eq!(receipt.canonical_offset, 1);
}

#[tokio::test]
async fn begins_of_one_call_under_a_broken_fence_write_nothing() {
    let redis = PrivateRedis::start();
    let store = open(&redis).await;
    let stale = ShardFence { shard: SHARD, incarnation: "some-other-copy:0".into() };
    let (a, b) = (manifest(fresh_tenant()), manifest(fresh_tenant()));
    let begins =
        [DispatchBegin { manifest: &a, observed_offset: 1 }, DispatchBegin { manifest: &b, observed_offset: 2 }];
    assert_kind(store.begin_dispatches_fenced(&stale, EPOCH, &begins).await, ErrorKind::StateLost, "a forged fence");
    for m in [&a, &b] {
        assert_eq!(store.dispatch_progress(m.id).await.unwrap(), None, "the refused call wrote nothing");
    }
    let fence = take_over(&store).await;
    let begun = store.begin_dispatches_fenced(&fence, EPOCH, &begins).await.expect("the call under the shard's fence");
    let offsets: Vec<u64> = begun.into_iter().map(|r| r.expect("begun").canonical_offset).collect();
    assert_eq!(offsets, vec![1, 2]);
}
