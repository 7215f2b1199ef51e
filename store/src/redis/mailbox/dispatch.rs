//! Dispatch bookkeeping: one script per step on the shard's slot.

use redis::Value;

use super::keys::ShardKeys;
use super::reply::{bulk, number, status, text};
use super::{redis_err, RedisMailboxStore, BEGIN, GC, GC_DISPATCH, GC_PIPELINE, GC_SCAN_CAP, PROGRESS};
use crate::codec::{decode_manifest, encode_manifest};
use crate::error::{StoreError, StoreResult};
use crate::ids::MessageId;
use crate::mailbox::{
    ChunkId, DispatchId, DispatchProgress, DispatchReceipt, LaneId, MailboxSeq, ShardEpoch, ShardFence, ShardId,
};
use crate::mailbox_store::DispatchBegin;
use crate::redis::connection::pipeline_by_slot;

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
        let ids = rest
            .map(|id| {
                String::from_utf8(bulk(id).unwrap_or_default())
                    .ok()
                    .and_then(|hex| MessageId::from_hex(&hex).ok())
                    .ok_or_else(|| StoreError::CorruptEntry(format!("shard {} holds a bad dispatch id", shard.0)))
            })
            .collect::<StoreResult<Vec<MessageId>>>()?;
        // The selected dispatches are forgotten GC_PIPELINE at a time, each by its own script (a
        // round trip per dispatch cost more than the script); each checks again that its
        // dispatch is still collectable, so a pipeline cut short by an error is collected later.
        let mut collected = 0usize;
        for some in ids.chunks(GC_PIPELINE) {
            let calls: Vec<GcCall> = some.iter().map(|id| GcCall::new(&keys, id, floor, seen_before_millis)).collect();
            let commands: Vec<redis::Cmd> = calls.iter().map(GcCall::evalsha).collect();
            let (replies, _) =
                pipeline_by_slot(&self.conn, &commands).await.map_err(|e| redis_err("collecting dispatches", e))?;
            for (call, reply) in calls.iter().zip(replies) {
                let reply = match reply {
                    // The server lost the script (a restart, SCRIPT FLUSH): this call loads it.
                    Value::ServerError(e) if e.kind() == Some(redis::ServerErrorKind::NoScript) => call
                        .invocation()
                        .invoke_async(&mut conn)
                        .await
                        .map_err(|e| redis_err("collecting a dispatch", e))?,
                    Value::ServerError(e) => return Err(redis_err("collecting a dispatch", e.into())),
                    reply => reply,
                };
                let (code, rest) = status(reply)?;
                let mut rest = rest.into_iter();
                match code.as_str() {
                    "ok" => collected += usize::from(number(rest.next(), "collected flag")? == 1),
                    "corrupt" => return Err(corrupt(shard, rest.next())),
                    other => return Err(StoreError::CorruptEntry(format!("dispatch GC script answered {other:?}"))),
                }
            }
        }
        Ok(collected)
    }
}

/// One call of `mailbox_gc_dispatch.lua`: its seven keys and three arguments.
struct GcCall {
    keys: [String; 7],
    args: [String; 3],
}

impl GcCall {
    /// The call that forgets dispatch `id` of the shard at `keys`.
    fn new(keys: &ShardKeys, id: &MessageId, floor: u64, seen_before_millis: i64) -> Self {
        let (row, done, obs) = keys.dispatch(id);
        Self {
            keys: [row, done, obs, keys.sources.clone(), keys.src.clone(), keys.seen.clone(), keys.work.clone()],
            args: [id.to_hex(), floor.to_string(), seen_before_millis.to_string()],
        }
    }

    /// The call as a command for a pipeline (the script must be loaded: a pipeline cannot load it).
    fn evalsha(&self) -> redis::Cmd {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(GC_DISPATCH.get_hash()).arg(self.keys.len()).arg(&self.keys[..]).arg(&self.args[..]);
        cmd
    }

    /// The call as an invocation, which loads the script when the server lacks it.
    fn invocation(&self) -> redis::ScriptInvocation<'static> {
        let mut invocation = GC_DISPATCH.prepare_invoke();
        invocation.key(&self.keys[..]).arg(&self.args[..]);
        invocation
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
