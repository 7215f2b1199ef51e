//! Dispatch bookkeeping: one script per step on the shard's slot.

use redis::Value;

use super::reply::{bulk, number, status, text};
use super::{redis_err, RedisMailboxStore, BEGIN, GC, GC_DISPATCH, GC_SCAN_CAP, PROGRESS};
use crate::codec::{decode_manifest, encode_manifest};
use crate::error::{StoreError, StoreResult};
use crate::ids::MessageId;
use crate::mailbox::{
    ChunkId, DispatchId, DispatchProgress, DispatchReceipt, LaneId, MailboxSeq, ShardEpoch, ShardFence, ShardId,
};
use crate::mailbox_store::DispatchBegin;

/// What a dispatch row's `digest` holds of its manifest's canonical bytes: XXH3-128, hex. A
/// chunk write compares it (16 bytes) instead of reading the whole manifest back.
pub(super) fn manifest_digest(manifest_bytes: &[u8]) -> String {
    hex::encode(xxhash_rust::xxh3::xxh3_128(manifest_bytes).to_be_bytes())
}

/// The receipt of `begun` from its answer in `mailbox_begin.lua`'s reply.
fn receipt(begun: &DispatchBegin<'_>, answer: Option<Value>) -> StoreResult<DispatchReceipt> {
    let shard = begun.manifest.id.shard;
    let (code, rest) = status(answer.unwrap_or(Value::Nil))?;
    let mut rest = rest.into_iter();
    match code.as_str() {
        "ok" => {
            let canonical_offset = number(rest.next(), "canonical offset")?;
            let seq = MailboxSeq::from_u64(number(rest.next(), "seq")?)
                .ok_or_else(|| StoreError::CorruptEntry("dispatch seq has bit 63 set".into()))?;
            Ok(DispatchReceipt {
                id: begun.manifest.id,
                seq,
                canonical_offset,
                observed_offset: begun.observed_offset,
                duplicate: begun.observed_offset != canonical_offset,
            })
        }
        "dispatch_conflict" => Err(StoreError::DispatchConflict(format!("shard {}: {}", shard.0, text(rest.next())))),
        "corrupt" => Err(corrupt(shard, rest.next())),
        other => Err(StoreError::CorruptEntry(format!("begin_dispatch script answered {other:?}"))),
    }
}

pub(super) fn not_begun(id: &DispatchId) -> StoreError {
    StoreError::NotFound(format!("dispatch {}/{} was never begun", id.message_id, id.shard.0))
}

impl RedisMailboxStore {
    /// Begins `begins` in one script call on the shard's slot (see `mailbox_begin.lua`): one
    /// result per observation, refused ones (a bad seq, another shard than `fence`'s) without
    /// being sent. `StateLost` for the whole call when the fence broke.
    pub(super) async fn begin(
        &self,
        epoch: ShardEpoch,
        begins: &[DispatchBegin<'_>],
        fence: Option<&ShardFence>,
    ) -> StoreResult<Vec<StoreResult<DispatchReceipt>>> {
        let mut answers: Vec<Option<StoreResult<DispatchReceipt>>> = Vec::with_capacity(begins.len());
        let mut inv = BEGIN.prepare_invoke();
        let mut sent = 0;
        let shard = fence.map(|f| f.shard).or_else(|| begins.first().map(|b| b.manifest.id.shard));
        let Some(shard) = shard else { return Ok(Vec::new()) };
        let keys = self.shard_keys(shard);
        inv.key(&keys.sources).key(&keys.src).key(&keys.seen).key(&keys.work).key(&keys.incarnation);
        inv.arg(fence_arg(fence)).arg(self.clock.now().0);
        for b in begins {
            let manifest = b.manifest;
            let admitted = fence.map_or(Ok(()), |f| f.admits(manifest.id.shard));
            let seq = match admitted.and_then(|()| crate::rules::dispatch_seq(epoch, manifest, b.observed_offset)) {
                Ok(seq) => seq,
                Err(e) => {
                    answers.push(Some(Err(e)));
                    continue;
                }
            };
            let bytes = encode_manifest(manifest);
            let (row, _, obs) = keys.dispatch(&manifest.id.message_id);
            inv.key(row).key(obs);
            let lanes: Vec<(usize, u32)> =
                manifest.chunk_counts().iter().copied().enumerate().filter(|(_, count)| *count > 0).collect();
            inv.arg(manifest.id.message_id.to_hex())
                .arg(&bytes)
                .arg(b.observed_offset.to_string())
                .arg(seq.as_u64().to_string())
                .arg(manifest_digest(&bytes))
                .arg(lanes.len());
            for (lane, count) in lanes {
                inv.arg(lane).arg(count);
            }
            answers.push(None);
            sent += 1;
        }
        if sent == 0 {
            return Ok(answers.into_iter().flatten().collect());
        }
        let reply: Value =
            inv.invoke_async(&mut self.conn.clone()).await.map_err(|e| redis_err("beginning dispatches", e))?;
        let (code, rest) = status(reply)?;
        match code.as_str() {
            "ok" => {}
            "lost" => return Err(lost(shard)),
            "corrupt" => return Err(corrupt(shard, rest.into_iter().next())),
            other => return Err(StoreError::CorruptEntry(format!("begin_dispatch script answered {other:?}"))),
        }
        if rest.len() != sent {
            return Err(StoreError::CorruptEntry(format!(
                "begin_dispatch script answered {} observations of {sent}",
                rest.len()
            )));
        }
        let mut replies = rest.into_iter();
        Ok(begins
            .iter()
            .zip(answers)
            .map(|(b, answer)| match answer {
                Some(refused) => refused,
                None => receipt(b, replies.next()),
            })
            .collect())
    }

    pub(super) async fn progress(&self, dispatch: DispatchId) -> StoreResult<Option<DispatchProgress>> {
        let keys = self.shard_keys(dispatch.shard);
        let (row, done, _) = keys.dispatch(&dispatch.message_id);
        let reply: Value = PROGRESS
            .key(&row)
            .key(&done)
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(|e| redis_err("reading dispatch progress", e))?;
        let Value::Array(items) = reply else {
            return Err(StoreError::CorruptEntry(format!("dispatch progress script answered {reply:?}")));
        };
        if items.is_empty() {
            return Ok(None);
        }
        let mut it = items.into_iter();
        let bytes = it
            .next()
            .and_then(bulk)
            .ok_or_else(|| StoreError::CorruptEntry(format!("dispatch {} has no manifest", dispatch.message_id)))?;
        let manifest = decode_manifest(&bytes)?;
        if manifest.id != dispatch {
            return Err(StoreError::CorruptEntry(format!(
                "dispatch {} holds the manifest of {}",
                dispatch.message_id, manifest.id.message_id
            )));
        }
        let canonical_offset = number(it.next(), "canonical offset")?;
        let seq = MailboxSeq::from_u64(number(it.next(), "seq")?)
            .ok_or_else(|| StoreError::CorruptEntry("dispatch seq has bit 63 set".into()))?;
        let max_observed_offset = number(it.next(), "max observed offset")?;
        let counts = manifest.chunk_counts();
        let mut completed = it
            .map(|v| {
                let raw = text(Some(v));
                raw.split_once(':')
                    .and_then(|(l, i)| Some((LaneId::new(l.parse().ok()?)?, i.parse::<u32>().ok()?)))
                    .filter(|(lane, index)| *index < counts[lane.get() as usize])
                    .map(|(lane, index)| ChunkId { lane, index })
                    .ok_or_else(|| StoreError::CorruptEntry(format!("dispatch holds a bad completed chunk {raw:?}")))
            })
            .collect::<StoreResult<Vec<_>>>()?;
        completed.sort_unstable();
        Ok(Some(DispatchProgress {
            receipt: DispatchReceipt {
                id: dispatch,
                seq,
                canonical_offset,
                observed_offset: canonical_offset,
                duplicate: false,
            },
            manifest,
            max_observed_offset,
            completed,
        }))
    }

    pub(super) async fn gc(&self, shard: ShardId, seen_before_millis: i64, limit: usize) -> StoreResult<usize> {
        let keys = self.shard_keys(shard);
        let mut conn = self.conn.clone();
        let reply: Value = GC
            .key(&keys.seen)
            .key(&keys.watermarks)
            .key(&keys.work)
            .arg(seen_before_millis)
            .arg(limit)
            .arg(GC_SCAN_CAP)
            .invoke_async(&mut conn)
            .await
            .map_err(|e| redis_err("selecting dispatches to collect", e))?;
        let (code, rest) = status(reply)?;
        match code.as_str() {
            "ok" => {}
            "corrupt" => return Err(corrupt(shard, rest.into_iter().next())),
            other => return Err(StoreError::CorruptEntry(format!("dispatch GC script answered {other:?}"))),
        }
        let mut rest = rest.into_iter();
        let Some(floor) = rest.next() else { return Ok(0) };
        let floor = number(Some(floor), "watermark floor")?;
        let mut collected = 0usize;
        for id in rest {
            let id = String::from_utf8(bulk(id).unwrap_or_default())
                .ok()
                .and_then(|hex| MessageId::from_hex(&hex).ok())
                .ok_or_else(|| StoreError::CorruptEntry(format!("shard {} holds a bad dispatch id", shard.0)))?;
            let (row, done, obs) = keys.dispatch(&id);
            let reply: Value = GC_DISPATCH
                .key(&row)
                .key(&done)
                .key(&obs)
                .key(&keys.sources)
                .key(&keys.src)
                .key(&keys.seen)
                .key(&keys.work)
                .arg(id.to_hex())
                .arg(floor.to_string())
                .arg(seen_before_millis)
                .invoke_async(&mut conn)
                .await
                .map_err(|e| redis_err("collecting a dispatch", e))?;
            let (code, rest) = status(reply)?;
            let mut rest = rest.into_iter();
            match code.as_str() {
                "ok" => collected += usize::from(number(rest.next(), "collected flag")? == 1),
                "corrupt" => return Err(corrupt(shard, rest.next())),
                other => return Err(StoreError::CorruptEntry(format!("dispatch GC script answered {other:?}"))),
            }
            if collected >= limit {
                break;
            }
        }
        Ok(collected)
    }
}

/// What a fenced script is given: the fence's marker, or `''` (unfenced).
pub(super) fn fence_arg(fence: Option<&ShardFence>) -> &str {
    fence.map_or("", |f| f.incarnation.as_str())
}

/// A fenced script's `{'lost'}` answer.
pub(super) fn lost(shard: ShardId) -> StoreError {
    StoreError::StateLost(format!(
        "the store's incarnation of shard {} is no longer the fence's (redis restarted, restored, failed over or flushed)",
        shard.0
    ))
}

/// A script's `{'corrupt', reason}` answer.
pub(super) fn corrupt(shard: ShardId, reason: Option<Value>) -> StoreError {
    StoreError::CorruptEntry(format!("dispatch bookkeeping of shard {}: {}", shard.0, text(reason)))
}
