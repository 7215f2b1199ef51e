//! The `MailboxStore` contract: per-user mailboxes, dispatch bookkeeping and lane watermarks.
//!
//! This is seed 000's MailboxStore reshaped by DESIGN.md's dispatch departure: no LWT per record
//! or per recipient; duplicates reuse the first receipt; replays write identical rows; a
//! watermark advances only over dispatches whose lane work is durable and never moves back.

use std::collections::HashSet;

use async_trait::async_trait;

use crate::error::StoreResult;
use crate::ids::{TenantId, UserId};
use crate::mailbox::{
    ChunkId, DispatchId, DispatchManifest, DispatchProgress, DispatchReceipt, LaneId, LaneWatermark, MailboxEntry,
    MailboxPage, MailboxSeq, ShardEpoch, ShardFence, ShardId,
};

/// One chunk for [`MailboxStore::append_chunks`]: what [`MailboxStore::append_chunk`] takes.
#[derive(Clone, Copy, Debug)]
pub struct ChunkWrite<'a> {
    /// The receipt to write under.
    pub receipt: &'a DispatchReceipt,
    /// The dispatch's manifest (as begun).
    pub manifest: &'a DispatchManifest,
    /// Which chunk of it.
    pub chunk: ChunkId,
}

/// One observation for [`MailboxStore::begin_dispatches_fenced`]: what
/// [`MailboxStore::begin_dispatch`] takes besides the epoch.
#[derive(Clone, Copy, Debug)]
pub struct DispatchBegin<'a> {
    /// The dispatch as observed.
    pub manifest: &'a DispatchManifest,
    /// Where in the shard log it was observed.
    pub observed_offset: u64,
}

/// Per-user mailboxes and the dispatch bookkeeping that fills them.
#[async_trait]
pub trait MailboxStore: Send + Sync {
    /// Writes entries as whole event groups, one per `(user, seq)`. Within a batch the events of
    /// a group are put in canonical order (ordinal, event id); a repeated ordinal in one group is
    /// `InvalidInput` and nothing is written. A replay overwrites a group with identical bytes.
    /// Entries already expired are not written, but raise the user's expired-gap boundary; live
    /// ones are registered in the retention ledger before they are written.
    async fn append_batch(&self, entries: &[MailboxEntry]) -> StoreResult<()>;

    /// Records that `manifest` was observed at `observed_offset` of the shard log. The first
    /// observation fixes the canonical receipt (seq from that offset in `epoch`); a later
    /// duplicate with the same manifest returns that receipt with `duplicate = true`, and is
    /// remembered in every lane so watermarks account for its offset. The same id with a
    /// different manifest is `DispatchConflict`.
    async fn begin_dispatch(
        &self,
        epoch: ShardEpoch,
        manifest: &DispatchManifest,
        observed_offset: u64,
    ) -> StoreResult<DispatchReceipt>;

    /// Writes the mailbox entries of one chunk of `manifest` at the receipt's seq. The manifest
    /// and receipt must match what `begin_dispatch` stored. Does not mark the chunk complete.
    /// Returns how many entries were written.
    async fn append_chunk(
        &self,
        receipt: &DispatchReceipt,
        manifest: &DispatchManifest,
        chunk: ChunkId,
    ) -> StoreResult<usize>;

    /// Durably marks one chunk complete (after its `append_chunk` succeeded). Idempotent. A chunk
    /// the manifest does not declare is `InvalidInput`.
    async fn mark_chunk_completed(&self, dispatch: DispatchId, chunk: ChunkId) -> StoreResult<()>;

    /// Writes the entries of several chunks (of one dispatch or many, of any shards), each as
    /// [`append_chunk`](Self::append_chunk) would: the hot path's one call for many small chunks.
    /// A chunk `append_chunk` would refuse refuses the call with that error; chunks before it, or
    /// all of them after a failure while writing, may have been written (writing them again is
    /// harmless). Returns how many entries were written in all.
    async fn append_chunks(&self, writes: &[ChunkWrite<'_>]) -> StoreResult<usize> {
        let mut written = 0;
        for w in writes {
            written += self.append_chunk(w.receipt, w.manifest, w.chunk).await?;
        }
        Ok(written)
    }

    /// Durably marks several chunks complete, each as
    /// [`mark_chunk_completed`](Self::mark_chunk_completed) would (idempotent). An error (a chunk
    /// it would refuse) may leave the chunks before it marked; marking them again is harmless.
    async fn mark_chunks_completed(&self, chunks: &[(DispatchId, ChunkId)]) -> StoreResult<()> {
        for (dispatch, chunk) in chunks {
            self.mark_chunk_completed(*dispatch, *chunk).await?;
        }
        Ok(())
    }

    /// Whether the chunk is durably complete.
    async fn chunk_completed(&self, dispatch: DispatchId, chunk: ChunkId) -> StoreResult<bool>;

    /// What is known of a dispatch; `None` if it was never begun (or was collected).
    async fn dispatch_progress(&self, dispatch: DispatchId) -> StoreResult<Option<DispatchProgress>>;

    /// Whole event groups of `user` with `after < seq <= up_to`, ascending, cut only at seq
    /// boundaries once `max_items` events are reached (the first group may exceed it).
    ///
    /// `after` and `up_to` must share an epoch. `after > up_to` returns nothing covered at
    /// `after`. A cursor below `max(trim, expired_gap_boundary)` is `CursorExpired` with that
    /// boundary as the earliest valid cursor. The returned `covered` never claims a seq whose
    /// group may have vanished unnoticed.
    async fn range_scan(
        &self,
        tenant: TenantId,
        user: UserId,
        after: MailboxSeq,
        up_to: MailboxSeq,
        max_items: usize,
    ) -> StoreResult<MailboxPage>;

    /// The reader acknowledged everything up to and including `through`: entries at or below it
    /// may be removed and cursors below it expire. Monotonic: a lower value changes nothing.
    /// Returns the trim in force afterwards.
    async fn truncate_before(&self, tenant: TenantId, user: UserId, through: MailboxSeq) -> StoreResult<MailboxSeq>;

    /// Where one lane of one shard stands.
    async fn lane_watermark(&self, shard: ShardId, lane: LaneId) -> StoreResult<LaneWatermark>;

    /// An opaque token of the shard's state that changes whenever the store may have lost or
    /// rolled back any of it (Redis: flushed, restarted, failed over, restored from an older
    /// snapshot). A dispatcher that sees it change reads the shard's log again from the lane
    /// watermarks. Stores that never lose acknowledged writes answer a constant (the default).
    async fn shard_incarnation(&self, shard: ShardId) -> StoreResult<String> {
        let _ = shard;
        Ok(String::new())
    }

    /// [`begin_dispatch`](Self::begin_dispatch), only while the shard's incarnation is still
    /// `fence`'s: otherwise `StateLost` and nothing is written. A manifest of another shard is
    /// `InvalidInput`. Stores that never lose acknowledged writes check nothing more (the default).
    async fn begin_dispatch_fenced(
        &self,
        fence: &ShardFence,
        epoch: ShardEpoch,
        manifest: &DispatchManifest,
        observed_offset: u64,
    ) -> StoreResult<DispatchReceipt> {
        fence.admits(manifest.id.shard)?;
        self.begin_dispatch(epoch, manifest, observed_offset).await
    }

    /// Several observations of `fence`'s shard, each begun as
    /// [`begin_dispatch_fenced`](Self::begin_dispatch_fenced) would, in the given order (so a
    /// duplicate after its first observation in one call gets that observation's receipt): one
    /// result per observation. A refused observation (`DispatchConflict`, `InvalidInput`, a
    /// manifest of another shard) writes nothing and does not stop the others. The call's own
    /// error (the store unavailable, its fence broken: `StateLost`) may leave some observations
    /// recorded; beginning them again is harmless. The default begins them in waves, each wave
    /// concurrently: the next observations in order that share neither a dispatch id nor an
    /// offset with another of the wave (so a duplicate waits for its first observation). A
    /// backend with one round trip per call begins them all in one.
    async fn begin_dispatches_fenced(
        &self,
        fence: &ShardFence,
        epoch: ShardEpoch,
        begins: &[DispatchBegin<'_>],
    ) -> StoreResult<Vec<StoreResult<DispatchReceipt>>> {
        let mut receipts: Vec<Option<StoreResult<DispatchReceipt>>> = begins.iter().map(|_| None).collect();
        let mut pending: Vec<usize> = (0..begins.len()).collect();
        while !pending.is_empty() {
            let (mut ids, mut offsets) = (HashSet::new(), HashSet::new());
            let (wave, rest): (Vec<usize>, Vec<usize>) = pending.into_iter().partition(|&i| {
                let b = &begins[i];
                // Both sets see every index in order: one taken is marked in both.
                !ids.contains(&b.manifest.id)
                    && !offsets.contains(&b.observed_offset)
                    && ids.insert(b.manifest.id)
                    && offsets.insert(b.observed_offset)
            });
            let begun = futures_util::future::join_all(
                wave.iter()
                    .map(|&i| self.begin_dispatch_fenced(fence, epoch, begins[i].manifest, begins[i].observed_offset)),
            )
            .await;
            for (i, result) in wave.into_iter().zip(begun) {
                match result {
                    Err(e) if !refuses_one(&e) => return Err(e),
                    result => receipts[i] = Some(result),
                }
            }
            pending = rest;
        }
        // Every wave takes at least the first pending observation, so each has its result.
        Ok(receipts.into_iter().flatten().collect())
    }

    /// [`mark_chunks_completed`](Self::mark_chunks_completed) of chunks of `fence`'s shard, only
    /// while its incarnation is still `fence`'s: otherwise `StateLost` and nothing is marked. A
    /// chunk of another shard is `InvalidInput`.
    async fn mark_chunks_completed_fenced(
        &self,
        fence: &ShardFence,
        chunks: &[(DispatchId, ChunkId)],
    ) -> StoreResult<()> {
        fence.admits_chunks(chunks)?;
        self.mark_chunks_completed(chunks).await
    }

    /// [`advance_watermarks`](Self::advance_watermarks) of `fence`'s shard, each advance only
    /// while its incarnation is still `fence`'s: otherwise that target is `StateLost` and its
    /// watermark does not move.
    async fn advance_watermarks_fenced(
        &self,
        fence: &ShardFence,
        targets: &[(LaneId, u64)],
    ) -> Vec<StoreResult<LaneWatermark>> {
        self.advance_watermarks(fence.shard, targets).await
    }

    /// Moves the lane's watermark to `through`, an offset where a dispatch was observed, when
    /// every dispatch observed in this shard above the current watermark and at or below
    /// `through` has its lane work complete; otherwise `Conflict` naming the first incomplete
    /// offset (a backend that advances in bounded steps may have moved the watermark part of the
    /// way, never onto or past that offset). A `through` at or below the current watermark
    /// changes nothing.
    async fn advance_watermark(&self, shard: ShardId, lane: LaneId, through: u64) -> StoreResult<LaneWatermark>;

    /// Advances several lanes of `shard`, each `(lane, through)` as
    /// [`advance_watermark`](Self::advance_watermark) would (name a lane once): one result per
    /// target, in order. The default runs them concurrently; a backend whose reads are costly
    /// reads the shard log once for every lane.
    async fn advance_watermarks(&self, shard: ShardId, targets: &[(LaneId, u64)]) -> Vec<StoreResult<LaneWatermark>> {
        futures_util::future::join_all(
            targets.iter().map(|(lane, through)| self.advance_watermark(shard, *lane, *through)),
        )
        .await
    }

    /// Forgets up to `limit` dispatches of `shard` that every lane's watermark has passed and
    /// that were last observed before `seen_before_millis` (TTL-managed backends let the rows
    /// expire). Returns how many were collected.
    async fn gc_completed_dispatches(
        &self,
        shard: ShardId,
        seen_before_millis: i64,
        limit: usize,
    ) -> StoreResult<usize>;
}

/// Whether a begin's error refuses only its own observation (a bad or conflicting record), not
/// the whole call.
pub(crate) fn refuses_one(error: &crate::StoreError) -> bool {
    matches!(error.kind(), crate::ErrorKind::DispatchConflict | crate::ErrorKind::InvalidInput)
}
