//! Lane watermarks, without LWT: a watermark cell is written with its offset as the write
//! timestamp, so the highest offset wins and a stale writer can never move it back; it advances
//! only over sources whose lane work is complete, reading the shard log from the lane's own
//! watermark (a lane's very first advance reads the live log from its start: no fact bounds
//! which sources a lane without a watermark still has to check, and GC can not have collected
//! any before every lane had one). Collection is in [`super::gc`].

use std::collections::HashMap;

use super::{db, first, highest_wins_timestamp, rows, ScyllaMailboxStore};
use crate::codec::{i64_to_u64, u64_to_i64};
use crate::error::{StoreError, StoreResult};
use crate::mailbox::{DispatchId, LaneId, LaneWatermark, ShardId};

use super::dispatch::{bucket_of, shard_i, SOURCE_PAGE};

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
