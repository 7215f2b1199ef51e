//! Dispatch bookkeeping without LWT: first receipts by decreasing write timestamps, observations,
//! chunk completions and the shard's source log (watermarks and GC: [`super::watermark`]).
//!
//! Every dispatch row carries a *generation*: GC marks a generation collected, and a dispatch
//! observed again afterwards (collected, or its rows expired) starts a newer generation (a first
//! receipt whose write timestamp beats every receipt of the older ones, expired ones included:
//! see [`super::calendar_generation`]). Observations and chunk completions are keyed by
//! generation, so a collected generation's rows, kept until their TTL, are never read again: the
//! store answers exactly as if they were gone.

use std::collections::BTreeSet;

use super::{
    calendar_generation, db, first, first_wins_timestamp, rows, ScyllaMailboxStore, DISPATCH_TTL_SECS, MAX_GENERATION,
    SOURCE_BUCKET_BITS,
};
use crate::codec::{decode_manifest, encode_manifest, i64_to_u64, u64_to_i64};
use crate::error::{StoreError, StoreResult};
use crate::mailbox::{
    ChunkId, DispatchId, DispatchManifest, DispatchProgress, DispatchReceipt, LaneId, MailboxSeq, ShardEpoch, ShardId,
    LANES,
};

/// Source rows read per query.
pub(super) const SOURCE_PAGE: usize = 1_000;
/// Receipt writes of one new generation that may read back absent before `begin_dispatch` gives
/// up (each retries one generation higher).
const SHADOWED_RETRIES: usize = 16;
/// Most sources one `gc_completed_dispatches` call inspects.
pub(super) const GC_SCAN_CAP: usize = 100_000;

type LaneChunks = [u32; LANES as usize];

pub(super) fn not_begun(id: &DispatchId) -> StoreError {
    StoreError::NotFound(format!("dispatch {}/{} was never begun", id.message_id, id.shard.0))
}

pub(super) fn shard_i(shard: ShardId) -> i32 {
    i32::from(shard.0)
}

pub(super) fn bucket_of(offset: u64) -> i64 {
    // Offsets are below 2^63 (checked by `u64_to_i64` before use), so the bucket fits.
    (offset >> SOURCE_BUCKET_BITS) as i64
}

fn lane_chunks_blob(counts: &LaneChunks) -> Vec<u8> {
    counts.iter().flat_map(|c| c.to_be_bytes()).collect()
}

fn parse_lane_chunks(id: &DispatchId, blob: &[u8]) -> StoreResult<LaneChunks> {
    if blob.len() != 4 * LANES as usize {
        return Err(StoreError::CorruptEntry(format!(
            "dispatch {} holds {} bytes of lane chunk counts",
            id.message_id,
            blob.len()
        )));
    }
    let mut out = [0u32; LANES as usize];
    for (slot, raw) in out.iter_mut().zip(blob.chunks_exact(4)) {
        *slot = u32::from_be_bytes(raw.try_into().expect("4-byte chunk"));
    }
    Ok(out)
}

/// The first receipt of a dispatch's current generation as stored.
pub(super) struct Head {
    pub(super) canonical: u64,
    pub(super) seq: MailboxSeq,
    pub(super) lane_chunks: LaneChunks,
    pub(super) generation: i32,
}

type DispatchRow = (Option<Vec<u8>>, Option<i64>, Option<i64>, Option<Vec<u8>>, Option<i32>);
type HeadRow = (Option<i64>, Option<i64>, Option<Vec<u8>>, Option<i32>);

impl ScyllaMailboxStore {
    fn head_from(id: &DispatchId, (canonical, seq, lanes, generation): HeadRow) -> StoreResult<Head> {
        let missing = |col: &str| StoreError::CorruptEntry(format!("dispatch {} has no {col}", id.message_id));
        let canonical = i64_to_u64("canonical offset", canonical.ok_or_else(|| missing("canonical_offset"))?)?;
        let raw_seq = i64_to_u64("dispatch seq", seq.ok_or_else(|| missing("mailbox_seq"))?)?;
        let seq = MailboxSeq::from_u64(raw_seq).ok_or_else(|| missing("valid mailbox_seq"))?;
        let lane_chunks = parse_lane_chunks(id, &lanes.ok_or_else(|| missing("lane_chunks"))?)?;
        let generation =
            generation.filter(|g| (0..=MAX_GENERATION).contains(g)).ok_or_else(|| missing("generation"))?;
        Ok(Head { canonical, seq, lane_chunks, generation })
    }

    /// The stored manifest bytes and first receipt (of whatever generation is stored).
    pub(super) async fn dispatch_row(&self, id: &DispatchId) -> StoreResult<Option<(Vec<u8>, Head)>> {
        let result = self
            .session()
            .execute_unpaged(&self.st().dispatch_select, (shard_i(id.shard), &id.message_id.0[..]))
            .await
            .map_err(db("reading a dispatch"))?;
        let Some((manifest, canonical, seq, lanes, generation)) = first::<DispatchRow>(result, "dispatch")? else {
            return Ok(None);
        };
        let manifest =
            manifest.ok_or_else(|| StoreError::CorruptEntry(format!("dispatch {} has no manifest", id.message_id)))?;
        Ok(Some((manifest, Self::head_from(id, (canonical, seq, lanes, generation))?)))
    }

    /// The first receipt without the manifest (of whatever generation is stored).
    pub(super) async fn dispatch_head(&self, id: &DispatchId) -> StoreResult<Option<Head>> {
        let result = self
            .session()
            .execute_unpaged(&self.st().dispatch_head, (shard_i(id.shard), &id.message_id.0[..]))
            .await
            .map_err(db("reading a dispatch"))?;
        first::<HeadRow>(result, "dispatch")?.map(|row| Self::head_from(id, row)).transpose()
    }

    /// The highest collected generation of a dispatch, if GC collected one.
    async fn collected_generation(&self, id: &DispatchId) -> StoreResult<Option<i32>> {
        let result = self
            .session()
            .execute_unpaged(&self.st().collected_select, (shard_i(id.shard), &id.message_id.0[..]))
            .await
            .map_err(db("reading a dispatch GC marker"))?;
        Ok(first::<(Option<i32>,)>(result, "dispatch GC marker")?.and_then(|(g,)| g))
    }

    /// The first receipt of a dispatch's live (not collected) generation.
    pub(super) async fn live_head(&self, id: &DispatchId) -> StoreResult<Option<Head>> {
        let Some(head) = self.dispatch_head(id).await? else { return Ok(None) };
        let collected = self.collected_generation(id).await?;
        Ok((collected < Some(head.generation)).then_some(head))
    }

    /// The dispatch (message id, generation) observed at `offset` of `shard`, if any.
    pub(super) async fn source_at(&self, shard: ShardId, offset: u64) -> StoreResult<Option<(Vec<u8>, i32)>> {
        let off = u64_to_i64("observed offset", offset)?;
        let result = self
            .session()
            .execute_unpaged(&self.st().source_select_one, (shard_i(shard), bucket_of(offset), off))
            .await
            .map_err(db("reading a dispatch source"))?;
        first::<(Option<Vec<u8>>, Option<i32>)>(result, "dispatch source")?
            .map(|(m, g)| match (m, g) {
                (Some(m), Some(g)) => Ok((m, g)),
                _ => {
                    Err(StoreError::CorruptEntry(format!("source offset {offset} of shard {} is incomplete", shard.0)))
                }
            })
            .transpose()
    }

    /// Whether the source `(mid, generation)` belongs to a collected generation (forgotten).
    pub(super) async fn forgotten(&self, shard: ShardId, mid: &[u8], generation: i32) -> StoreResult<bool> {
        let owner = Self::dispatch_id(shard, mid)?;
        Ok(self.collected_generation(&owner).await?.is_some_and(|c| c >= generation))
    }

    pub(super) async fn begin(
        &self,
        epoch: ShardEpoch,
        manifest: &DispatchManifest,
        observed_offset: u64,
    ) -> StoreResult<DispatchReceipt> {
        let seq = crate::rules::dispatch_seq(epoch, manifest, observed_offset)?;
        let off = u64_to_i64("observed offset", observed_offset)?;
        let bytes = encode_manifest(manifest);
        let now = self.inner.clock.now().0;
        let id = manifest.id;
        let (shard, mid) = (shard_i(id.shard), &id.message_id.0[..]);
        if let Some((other, generation)) = self.source_at(id.shard, observed_offset).await? {
            // A source of a collected generation is forgotten (the memory reference removes it).
            if other != mid && !self.forgotten(id.shard, &other, generation).await? {
                return Err(StoreError::DispatchConflict(format!(
                    "offset {observed_offset} of shard {} was already observed as another dispatch",
                    id.shard.0
                )));
            }
        }
        let collected = self.collected_generation(&id).await?;
        let stored = self.dispatch_row(&id).await?;
        let (head, started) = match stored {
            Some((stored, head)) if collected < Some(head.generation) => {
                if stored != bytes {
                    return Err(StoreError::DispatchConflict(format!(
                        "dispatch {}/{} arrived with a different manifest",
                        id.message_id, id.shard.0
                    )));
                }
                (head, false)
            }
            old => {
                let known = old.map(|(_, h)| h.generation).max(collected).map_or(0, |g| g + 1);
                let generation = known.max(calendar_generation(now));
                (self.start_generation(manifest, &bytes, off, seq, generation).await?, true)
            }
        };
        let ttl = DISPATCH_TTL_SECS;
        self.session()
            .execute_unpaged(&self.st().obs_insert, (shard, mid, head.generation, off, now, ttl))
            .await
            .map_err(db("recording a dispatch observation"))?;
        // The observation row first (GC finds the highest observed offset there), then the
        // source row and its bucket index together.
        let bucket = bucket_of(observed_offset);
        let (source, index) = tokio::join!(
            self.session().execute_unpaged(&self.st().source_insert, (shard, bucket, off, mid, head.generation, ttl)),
            self.session().execute_unpaged(&self.st().source_bucket_insert, (shard, bucket, ttl)),
        );
        source.map_err(db("recording a dispatch source"))?;
        index.map_err(db("indexing a source bucket"))?;
        if started {
            // A replay of an old offset may start a generation where GC already read (gc.rs).
            self.register_if_below_gc(id.shard, observed_offset, mid, head.generation).await?;
        }
        Ok(DispatchReceipt {
            id,
            seq: head.seq,
            canonical_offset: head.canonical,
            observed_offset,
            duplicate: observed_offset != head.canonical,
        })
    }

    /// Writes the first receipt of a new generation (at least `generation`) observed at `off`,
    /// and returns the receipt that won: the write timestamp grows with the generation and falls
    /// with the offset, so the lowest offset of the newest generation wins however concurrent
    /// first observations interleave. A write that reads back nothing lost to the tombstone of an
    /// expired receipt and is repeated one generation higher (see the module docs).
    async fn start_generation(
        &self,
        manifest: &DispatchManifest,
        bytes: &[u8],
        off: i64,
        seq: MailboxSeq,
        mut generation: i32,
    ) -> StoreResult<Head> {
        let id = manifest.id;
        let lanes = lane_chunks_blob(&manifest.chunk_counts());
        for _ in 0..SHADOWED_RETRIES {
            if generation > MAX_GENERATION {
                return Err(StoreError::InvariantViolation(format!(
                    "dispatch {} would need generation {generation}, above {MAX_GENERATION}",
                    id.message_id
                )));
            }
            self.session()
                .execute_unpaged(
                    &self.st().dispatch_insert,
                    (
                        shard_i(id.shard),
                        &id.message_id.0[..],
                        bytes,
                        off,
                        u64_to_i64("mailbox seq", seq.as_u64())?,
                        &lanes,
                        generation,
                        DISPATCH_TTL_SECS,
                        first_wins_timestamp(generation, off),
                    ),
                )
                .await
                .map_err(db("writing a dispatch receipt"))?;
            let Some((stored, head)) = self.dispatch_row(&id).await? else {
                generation += 1;
                continue;
            };
            if stored != bytes {
                return Err(StoreError::DispatchConflict(format!(
                    "dispatch {}/{} was first observed with a different manifest",
                    id.message_id, id.shard.0
                )));
            }
            return Ok(head);
        }
        Err(StoreError::Unavailable {
            message: format!("dispatch {}: {SHADOWED_RETRIES} receipt writes in a row read back absent", id.message_id),
            source: None,
        })
    }

    pub(super) async fn is_chunk_completed(&self, dispatch: DispatchId, chunk: ChunkId) -> StoreResult<bool> {
        let Some(head) = self.live_head(&dispatch).await? else { return Ok(false) };
        let result = self
            .session()
            .execute_unpaged(
                &self.st().chunk_select_one,
                (
                    shard_i(dispatch.shard),
                    &dispatch.message_id.0[..],
                    head.generation,
                    i32::from(chunk.lane.get()),
                    i64::from(chunk.index),
                ),
            )
            .await
            .map_err(db("reading chunk completion"))?;
        Ok(first::<(i64,)>(result, "dispatch chunk")?.is_some())
    }

    /// `(max observed offset, last observation ms)` of one generation's observation rows.
    pub(super) async fn observations(
        &self,
        id: &DispatchId,
        generation: i32,
    ) -> StoreResult<(Option<u64>, Option<i64>)> {
        let result = self
            .session()
            .execute_unpaged(&self.st().obs_select, (shard_i(id.shard), &id.message_id.0[..], generation))
            .await
            .map_err(db("reading dispatch observations"))?;
        let mut max = None;
        let mut seen = None;
        for (offset, at) in rows::<(i64, Option<i64>)>(result, "dispatch observation")? {
            max = max.max(Some(i64_to_u64("observed offset", offset)?));
            seen = seen.max(at);
        }
        Ok((max, seen))
    }

    /// Completed chunks of one lane (distinct indexes below the lane's chunk count).
    pub(super) async fn lane_done(
        &self,
        id: &DispatchId,
        generation: i32,
        lane: LaneId,
        need: u32,
    ) -> StoreResult<u32> {
        let result = self
            .session()
            .execute_unpaged(
                &self.st().chunk_select_lane,
                (shard_i(id.shard), &id.message_id.0[..], generation, i32::from(lane.get())),
            )
            .await
            .map_err(db("reading lane completion"))?;
        let done: BTreeSet<i64> = rows::<(i64,)>(result, "dispatch chunk")?
            .into_iter()
            .map(|(i,)| i)
            .filter(|i| (0..i64::from(need)).contains(i))
            .collect();
        Ok(done.len() as u32)
    }

    pub(super) async fn progress(&self, dispatch: DispatchId) -> StoreResult<Option<DispatchProgress>> {
        let Some((bytes, head)) = self.dispatch_row(&dispatch).await? else {
            return Ok(None);
        };
        if self.collected_generation(&dispatch).await? >= Some(head.generation) {
            return Ok(None);
        }
        let manifest = decode_manifest(&bytes)?;
        if manifest.id != dispatch {
            return Err(StoreError::CorruptEntry(format!(
                "dispatch {} holds the manifest of {}",
                dispatch.message_id, manifest.id.message_id
            )));
        }
        let counts = manifest.chunk_counts();
        if counts != head.lane_chunks {
            return Err(StoreError::CorruptEntry(format!(
                "dispatch {} lane chunk counts disagree with its manifest",
                dispatch.message_id
            )));
        }
        let (max_obs, _) = self.observations(&dispatch, head.generation).await?;
        let max_observed_offset = max_obs.map_or(head.canonical, |m| m.max(head.canonical));
        let result = self
            .session()
            .execute_unpaged(
                &self.st().chunk_select_all,
                (shard_i(dispatch.shard), &dispatch.message_id.0[..], head.generation),
            )
            .await
            .map_err(db("reading dispatch chunks"))?;
        let mut completed = Vec::new();
        for (lane, index) in rows::<(i32, i64)>(result, "dispatch chunk")? {
            let chunk = u8::try_from(lane)
                .ok()
                .and_then(LaneId::new)
                .zip(u32::try_from(index).ok())
                .filter(|(l, i)| *i < counts[l.get() as usize])
                .map(|(lane, index)| ChunkId { lane, index })
                .ok_or_else(|| {
                    StoreError::CorruptEntry(format!("dispatch holds a bad completed chunk {lane}:{index}"))
                })?;
            completed.push(chunk);
        }
        completed.sort_unstable();
        completed.dedup();
        Ok(Some(DispatchProgress {
            receipt: DispatchReceipt {
                id: dispatch,
                seq: head.seq,
                canonical_offset: head.canonical,
                observed_offset: head.canonical,
                duplicate: false,
            },
            manifest,
            max_observed_offset,
            completed,
        }))
    }
}
