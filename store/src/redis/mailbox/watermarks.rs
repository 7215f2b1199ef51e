//! Lane watermark advances: every lane of one call in one script per round trip, which reads
//! the shard's sources once for all of them (`mailbox_advance.lua`).

use redis::Value;

use super::dispatch::{corrupt, fence_arg, lost};
use super::reply::{number, status, text};
use super::{redis_err, RedisMailboxStore, ADVANCE, ADVANCE_SOURCES};
use crate::error::{StoreError, StoreResult};
use crate::mailbox::{LaneId, LaneWatermark, ShardFence, ShardId};

/// One lane's answer within a call.
enum Step {
    /// Done: the watermark now (the lane's `through`, or a higher one it already had).
    Done(u64),
    /// Every source the call inspected was complete, the rest wait: call again.
    More,
}

impl RedisMailboxStore {
    /// Advances each `(lane, through)` of `shard` as
    /// [`MailboxStore::advance_watermark`](crate::MailboxStore::advance_watermark) would, one
    /// script per round trip for all of them, until each is done or refused: one answer per
    /// target, in order.
    pub(super) async fn advance_lanes(
        &self,
        shard: ShardId,
        targets: &[(LaneId, u64)],
        fence: Option<&ShardFence>,
    ) -> Vec<StoreResult<LaneWatermark>> {
        let keys = self.shard_keys(shard);
        let mut conn = self.conn.clone();
        let mut answers: Vec<Option<StoreResult<LaneWatermark>>> = targets.iter().map(|_| None).collect();
        // Indexes of the targets still moving.
        let mut moving: Vec<usize> = (0..targets.len()).collect();
        while !moving.is_empty() {
            let mut invocation = ADVANCE.prepare_invoke();
            invocation.key(&keys.watermarks).key(&keys.sources).key(&keys.src).key(&keys.work).key(&keys.incarnation);
            invocation.arg(ADVANCE_SOURCES).arg(fence_arg(fence));
            for &i in &moving {
                let (lane, through) = targets[i];
                invocation.arg(lane.get()).arg(through.to_string());
            }
            let reply = invocation.invoke_async::<Value>(&mut conn).await;
            let per_lane = match reply.map_err(|e| redis_err("advancing lane watermarks", e)).and_then(|r| {
                let (code, rest) = status(r)?;
                match code.as_str() {
                    "ok" if rest.len() == moving.len() => Ok(rest),
                    "ok" => Err(StoreError::CorruptEntry(format!(
                        "advance script answered {} lanes of {}",
                        rest.len(),
                        moving.len()
                    ))),
                    "lost" => Err(lost(shard)),
                    "corrupt" => Err(corrupt(shard, rest.into_iter().next())),
                    other => Err(StoreError::CorruptEntry(format!("advance script answered {other:?}"))),
                }
            }) {
                Ok(per_lane) => per_lane,
                Err(e) => {
                    // The whole call failed: every lane still moving gets the same answer.
                    for &i in &moving {
                        answers[i] = Some(Err(e.same_again()));
                    }
                    break;
                }
            };
            let mut still = Vec::new();
            for (&i, reply) in moving.iter().zip(per_lane) {
                let (lane, through) = targets[i];
                match lane_step(shard, lane, through, reply) {
                    Ok(Step::Done(at)) => answers[i] = Some(Ok(LaneWatermark { shard, lane, through: Some(at) })),
                    Ok(Step::More) => still.push(i),
                    Err(e) => answers[i] = Some(Err(e)),
                }
            }
            moving = still;
        }
        answers
            .into_iter()
            .map(|a| a.unwrap_or_else(|| Err(StoreError::InvariantViolation("a lane advance got no answer".into()))))
            .collect()
    }
}

/// One lane's `{status, ...}` within the script's reply.
fn lane_step(shard: ShardId, lane: LaneId, through: u64, reply: Value) -> StoreResult<Step> {
    let (code, rest) = status(reply)?;
    let mut rest = rest.into_iter();
    match code.as_str() {
        "ok" => Ok(Step::Done(number(rest.next(), "watermark")?)),
        "more" => {
            let reached = number(rest.next(), "watermark")?;
            if reached >= through {
                return Err(StoreError::CorruptEntry(format!(
                    "advance script stopped lane {} at {reached}, not below {through}",
                    lane.get()
                )));
            }
            Ok(Step::More)
        }
        "invalid" => {
            Err(StoreError::InvalidInput(format!("no dispatch was observed at offset {through} of shard {}", shard.0)))
        }
        "conflict" => Err(StoreError::Conflict(format!(
            "lane {} of shard {} is incomplete at offset {}",
            lane.get(),
            shard.0,
            text(rest.next())
        ))),
        "corrupt" => Err(corrupt(shard, rest.next())),
        other => Err(StoreError::CorruptEntry(format!("advance script answered {other:?} for a lane"))),
    }
}
