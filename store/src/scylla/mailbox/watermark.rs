//! Lane watermarks, without LWT: a watermark cell is written with its offset as the write
//! timestamp, so the highest offset wins and a stale writer can never move it back; it advances
//! only over sources whose lane work is complete, reading the shard log from the lane's own
//! watermark (a lane's very first advance reads the live log from its start: no fact bounds
//! which sources a lane without a watermark still has to check, and GC can not have collected
//! any before every lane had one). Several lanes advance together from one read of the log:
//! each dispatch it passes costs three reads (its GC marker, its head and all its completed
//! chunks) whatever the number of lanes. Collection is in [`super::gc`].

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Bound;

use futures_util::stream::{self, StreamExt, TryStreamExt};

use super::{db, first, highest_wins_timestamp, rows, ScyllaMailboxStore};
use crate::codec::{i64_to_u64, u64_to_i64};
use crate::error::{StoreError, StoreResult};
use crate::mailbox::{DispatchId, LaneId, LaneWatermark, ShardId, LANES};

use super::dispatch::{bucket_of, shard_i, SOURCE_PAGE};

/// Which of a dispatch's lanes are complete.
type LaneFlags = [bool; LANES as usize];
/// Dispatches whose completion one batch advance reads at once.
const LANE_READS_IN_FLIGHT: usize = 16;

impl ScyllaMailboxStore {
    pub(super) async fn watermark(&self, shard: ShardId, lane: LaneId) -> StoreResult<LaneWatermark> {
        let result = self
            .session()
            .execute_unpaged(&self.st().wm_select_lane, (shard_i(shard), i32::from(lane.get())))
            .await
            .map_err(db("reading a lane watermark"))?;
        let through = first::<(Option<i64>,)>(result, "lane watermark")?
            .and_then(|(t,)| t)
            .map(|t| i64_to_u64("watermark", t))
            .transpose()?;
        Ok(LaneWatermark { shard, lane, through })
    }

    /// Every source `(offset, dispatch message id, generation)` of `shard` with
    /// `after < offset <= through` (`after = None`: from the start), ascending, at most `cap`.
    pub(super) async fn sources(
        &self,
        shard: ShardId,
        after: Option<u64>,
        through: u64,
        cap: usize,
    ) -> StoreResult<Vec<(u64, Vec<u8>, i32)>> {
        let upper = u64_to_i64("offset", through)?;
        let from_bucket = after.map_or(0, bucket_of);
        let result = self
            .session()
            .execute_unpaged(&self.st().source_bucket_range, (shard_i(shard), from_bucket, bucket_of(through)))
            .await
            .map_err(db("reading source buckets"))?;
        let buckets = rows::<(i64,)>(result, "source bucket")?;
        let mut out = Vec::new();
        for (bucket,) in buckets {
            let mut lower = match after {
                Some(a) => u64_to_i64("offset", a)?,
                None => -1,
            };
            loop {
                let result = self
                    .session()
                    .execute_unpaged(
                        &self.st().source_range,
                        (shard_i(shard), bucket, lower, upper, SOURCE_PAGE as i32),
                    )
                    .await
                    .map_err(db("reading dispatch sources"))?;
                let page = rows::<(i64, Option<Vec<u8>>, Option<i32>)>(result, "dispatch source")?;
                let n = page.len();
                self.inner.source_rows.fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
                for (offset, mid, generation) in page {
                    lower = offset;
                    let (Some(mid), Some(generation)) = (mid, generation) else {
                        return Err(StoreError::CorruptEntry(format!(
                            "source offset {offset} of shard {} is incomplete",
                            shard.0
                        )));
                    };
                    out.push((i64_to_u64("offset", offset)?, mid, generation));
                    if out.len() >= cap {
                        return Ok(out);
                    }
                }
                if n < SOURCE_PAGE {
                    break;
                }
            }
        }
        Ok(out)
    }

    pub(super) fn dispatch_id(shard: ShardId, mid: &[u8]) -> StoreResult<DispatchId> {
        let bytes: [u8; 16] = mid
            .try_into()
            .map_err(|_| StoreError::CorruptEntry(format!("a source of shard {} holds a bad dispatch id", shard.0)))?;
        Ok(DispatchId { message_id: crate::ids::MessageId(bytes), shard })
    }

    pub(super) async fn advance(&self, shard: ShardId, lane: LaneId, through: u64) -> StoreResult<LaneWatermark> {
        let current = self.watermark(shard, lane).await?;
        if current.through.is_some_and(|w| through <= w) {
            return Ok(current);
        }
        let observed = match self.source_at(shard, through).await? {
            Some((mid, generation)) => !self.forgotten(shard, &mid, generation).await?,
            None => false,
        };
        if !observed {
            return Err(StoreError::InvalidInput(format!(
                "no dispatch was observed at offset {through} of shard {}",
                shard.0
            )));
        }
        // Per (dispatch, generation): `None` when forgotten, else whether the lane is complete.
        let mut known: HashMap<(Vec<u8>, i32), Option<bool>> = HashMap::new();
        for (offset, mid, generation) in self.sources(shard, current.through, through, usize::MAX).await? {
            let key = (mid, generation);
            let state = match known.get(&key) {
                Some(state) => *state,
                None => {
                    let id = Self::dispatch_id(shard, &key.0)?;
                    let state = if self.forgotten(shard, &key.0, generation).await? {
                        None
                    } else {
                        let head =
                            self.dispatch_head(&id).await?.filter(|h| h.generation == generation).ok_or_else(|| {
                                StoreError::CorruptEntry(format!(
                                    "source offset {offset} of shard {} names dispatch {} which is gone",
                                    shard.0, id.message_id
                                ))
                            })?;
                        let need = head.lane_chunks[lane.get() as usize];
                        Some(need == 0 || self.lane_done(&id, generation, lane, need).await? >= need)
                    };
                    known.insert(key, state);
                    state
                }
            };
            if state == Some(false) {
                return Err(StoreError::Conflict(format!(
                    "lane {} of shard {} is incomplete at offset {offset}",
                    lane.get(),
                    shard.0
                )));
            }
        }
        self.write_watermark(shard, lane, through).await
    }

    /// `advance_watermarks`: reads the watermarks, the shard log and each dispatch it passes
    /// once for all `targets`; a read that fails falls back to advancing lane by lane (which
    /// reports each lane's own error).
    pub(super) async fn advance_lanes(
        &self,
        shard: ShardId,
        targets: &[(LaneId, u64)],
    ) -> Vec<StoreResult<LaneWatermark>> {
        match self.try_advance_lanes(shard, targets).await {
            Ok(results) => results,
            Err(_) => {
                // Each lane's own attempt reports its own error (the same failure, most likely).
                let mut out = Vec::with_capacity(targets.len());
                for (lane, through) in targets {
                    out.push(self.advance(shard, *lane, *through).await);
                }
                out
            }
        }
    }

    async fn try_advance_lanes(
        &self,
        shard: ShardId,
        targets: &[(LaneId, u64)],
    ) -> StoreResult<Vec<StoreResult<LaneWatermark>>> {
        let current = self.all_watermarks(shard).await?;
        let behind: Vec<(u64, Option<u64>)> = targets
            .iter()
            .map(|(lane, through)| (*through, current[lane.get() as usize]))
            .filter(|(through, wm)| !wm.is_some_and(|w| *through <= w))
            .collect();
        // Whether a dispatch was observed (and not forgotten) at each target a lane is behind.
        let mut observed: HashMap<u64, bool> = HashMap::new();
        for (through, _) in &behind {
            if !observed.contains_key(through) {
                let live = match self.source_at(shard, *through).await? {
                    Some((mid, generation)) => !self.forgotten(shard, &mid, generation).await?,
                    None => false,
                };
                observed.insert(*through, live);
            }
        }
        // Every source any lane passes: which lanes it is complete in (`None`: forgotten).
        let mut passed: BTreeMap<u64, Option<LaneFlags>> = BTreeMap::new();
        if let Some(to) = behind.iter().map(|(t, _)| *t).max() {
            let from = behind.iter().map(|(_, wm)| *wm).min().flatten();
            let sources = self.sources(shard, from, to, usize::MAX).await?;
            let mut first_offset: HashMap<(Vec<u8>, i32), u64> = HashMap::new();
            for (offset, mid, generation) in &sources {
                first_offset.entry((mid.clone(), *generation)).or_insert(*offset);
            }
            let states: HashMap<(Vec<u8>, i32), Option<LaneFlags>> = stream::iter(first_offset)
                .map(|((mid, generation), offset)| async move {
                    let state = self.lanes_complete(shard, &mid, generation, offset).await?;
                    Ok::<_, StoreError>(((mid, generation), state))
                })
                .buffer_unordered(LANE_READS_IN_FLIGHT)
                .try_collect()
                .await?;
            for (offset, mid, generation) in sources {
                passed.insert(offset, states[&(mid, generation)]);
            }
        }
        // Each lane's answer, in order; the lanes that may move are written all at once.
        let answers = targets.iter().map(|(lane, through)| {
            let verdict = Self::lane_verdict(shard, *lane, *through, current[lane.get() as usize], &observed, &passed);
            async move {
                match verdict {
                    Ok(Some(unchanged)) => Ok(unchanged),
                    Ok(None) => self.write_watermark(shard, *lane, *through).await,
                    Err(e) => Err(e),
                }
            }
        });
        Ok(futures_util::future::join_all(answers).await)
    }

    /// What advancing `lane` from `wm` to `through` comes to: `Some` (unchanged) when the lane is
    /// there already, `None` when it may move, else why not.
    fn lane_verdict(
        shard: ShardId,
        lane: LaneId,
        through: u64,
        wm: Option<u64>,
        observed: &HashMap<u64, bool>,
        passed: &BTreeMap<u64, Option<LaneFlags>>,
    ) -> StoreResult<Option<LaneWatermark>> {
        if wm.is_some_and(|w| through <= w) {
            return Ok(Some(LaneWatermark { shard, lane, through: wm }));
        }
        if !observed.get(&through).copied().unwrap_or(false) {
            return Err(StoreError::InvalidInput(format!(
                "no dispatch was observed at offset {through} of shard {}",
                shard.0
            )));
        }
        let l = lane.get() as usize;
        let lower = wm.map_or(Bound::Unbounded, Bound::Excluded);
        let incomplete =
            passed.range((lower, Bound::Included(through))).find(|(_, state)| state.is_some_and(|lanes| !lanes[l]));
        match incomplete {
            Some((offset, _)) => Err(StoreError::Conflict(format!(
                "lane {} of shard {} is incomplete at offset {offset}",
                lane.get(),
                shard.0
            ))),
            None => Ok(None),
        }
    }

    /// Every lane's watermark of `shard` (`None` for a lane without one).
    async fn all_watermarks(&self, shard: ShardId) -> StoreResult<[Option<u64>; LANES as usize]> {
        let result = self
            .session()
            .execute_unpaged(&self.st().wm_select_all, (shard_i(shard),))
            .await
            .map_err(db("reading lane watermarks"))?;
        let mut out = [None; LANES as usize];
        for (lane, through) in rows::<(i32, Option<i64>)>(result, "lane watermark")? {
            let (Some(through), Some(slot)) = (through, usize::try_from(lane).ok().and_then(|l| out.get_mut(l))) else {
                continue;
            };
            *slot = Some(i64_to_u64("watermark", through)?);
        }
        Ok(out)
    }

    /// Which lanes of the dispatch `(mid, generation)`, a source at `offset`, have every chunk
    /// complete; `None` when that generation was forgotten.
    async fn lanes_complete(
        &self,
        shard: ShardId,
        mid: &[u8],
        generation: i32,
        offset: u64,
    ) -> StoreResult<Option<LaneFlags>> {
        if self.forgotten(shard, mid, generation).await? {
            return Ok(None);
        }
        let id = Self::dispatch_id(shard, mid)?;
        let head = self.dispatch_head(&id).await?.filter(|h| h.generation == generation).ok_or_else(|| {
            StoreError::CorruptEntry(format!(
                "source offset {offset} of shard {} names dispatch {} which is gone",
                shard.0, id.message_id
            ))
        })?;
        let result = self
            .session()
            .execute_unpaged(&self.st().chunk_select_all, (shard_i(shard), mid, generation))
            .await
            .map_err(db("reading dispatch chunks"))?;
        let mut done = [0u32; LANES as usize];
        let mut seen = BTreeSet::new();
        for (lane, index) in rows::<(i32, i64)>(result, "dispatch chunk")? {
            let Some(l) = usize::try_from(lane).ok().filter(|l| *l < LANES as usize) else { continue };
            if (0..i64::from(head.lane_chunks[l])).contains(&index) && seen.insert((l, index)) {
                done[l] += 1;
            }
        }
        Ok(Some(std::array::from_fn(|l| done[l] >= head.lane_chunks[l])))
    }

    async fn write_watermark(&self, shard: ShardId, lane: LaneId, through: u64) -> StoreResult<LaneWatermark> {
        let t = u64_to_i64("watermark", through)?;
        self.session()
            .execute_unpaged(
                &self.st().wm_update,
                (highest_wins_timestamp(t), t, shard_i(shard), i32::from(lane.get())),
            )
            .await
            .map_err(db("advancing a lane watermark"))?;
        Ok(LaneWatermark { shard, lane, through: Some(through) })
    }
}
