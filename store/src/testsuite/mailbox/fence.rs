//! Fenced dispatch bookkeeping ([`ShardFence`]) in the contract suite: what every backend must
//! do with a fence of the shard's current incarnation. A stale fence exists only on a store
//! that can lose state (Redis): its refusals are tested there (`store/tests/store/redis_mailbox_fence.rs`).

use super::*;
use crate::mailbox::ShardFence;

/// Fenced begins, marks and advances under the shard's current incarnation answer what the
/// unfenced ones would; a fence of another shard is `InvalidInput` and writes nothing.
pub async fn fenced_writes_in_the_shards_incarnation_act_like_unfenced_ones(h: &dyn MailboxHarness) {
    let (store, _) = open(h).await;
    let (t, shard, l) = (fresh_tenant(), fresh_shard(), lane(11));
    let fence = ShardFence { shard, incarnation: store.shard_incarnation(shard).await.unwrap() };
    assert_eq!(
        store.shard_incarnation(shard).await.unwrap(),
        fence.incarnation,
        "the incarnation holds while nothing is lost"
    );
    let m = manifest(t, shard, users_in_lane(t, l, 1));
    let first = store.begin_dispatch_fenced(&fence, EPOCH, &m, 4).await.unwrap();
    assert!(!first.duplicate, "the first observation");
    let dup = store.begin_dispatch_fenced(&fence, EPOCH, &m, 6).await.unwrap();
    assert!(dup.duplicate && dup.seq == first.seq, "a duplicate reuses the first receipt");
    let chunk = ChunkId { lane: l, index: 0 };
    store.append_chunk(&first, &m, chunk).await.unwrap();
    let mut held = store.advance_watermarks_fenced(&fence, &[(l, 6)]).await;
    assert_kind(held.remove(0), ErrorKind::Conflict, "the lane's chunk is not complete");
    store.mark_chunks_completed_fenced(&fence, &[(m.id, chunk)]).await.unwrap();
    store.mark_chunks_completed_fenced(&fence, &[(m.id, chunk)]).await.unwrap();
    let moved: Vec<Option<u64>> = store
        .advance_watermarks_fenced(&fence, &[(l, 6), (lane(12), 6)])
        .await
        .into_iter()
        .map(|r| r.unwrap().through)
        .collect();
    assert_eq!(moved, vec![Some(6), Some(6)], "both lanes passed the dispatch and its duplicate");

    let other = ShardFence { shard: ShardId(shard.0.wrapping_add(1)), incarnation: fence.incarnation.clone() };
    assert_kind(
        store.begin_dispatch_fenced(&other, EPOCH, &m, 8).await,
        ErrorKind::InvalidInput,
        "another shard's fence",
    );
    assert_kind(
        store.mark_chunks_completed_fenced(&other, &[(m.id, chunk)]).await,
        ErrorKind::InvalidInput,
        "a chunk of another shard",
    );
    let progress = store.dispatch_progress(m.id).await.unwrap().expect("begun");
    assert_eq!(progress.max_observed_offset, 6, "the refused begin recorded nothing");
}
