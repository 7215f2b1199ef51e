//! Chunk writes and completion marks, one chunk or many per call.
//!
//! Many chunks cost what one does: the dispatch rows of every chunk are read in one pipeline (the
//! manifest's digest and the seq, not the manifest), every user's groups (of all the chunks) go
//! through one check-and-set script per user, and the marks of one shard are one script.

use std::collections::HashMap;

use redis::Value;

use crate::redis::connection::query_by_slot;

use super::dispatch::{corrupt, fence_arg, lost, manifest_digest, not_begun};
use super::keys::ShardKeys;
use super::reply::{number, status};
use super::{redis_err, user, RedisMailboxStore, MARK_CHUNKS};
use crate::codec::encode_manifest;
use crate::error::{StoreError, StoreResult};
use crate::mailbox::{ChunkId, DispatchId, MailboxEntry, MailboxSeq, ShardFence, ShardId};
use crate::mailbox_store::ChunkWrite;
use crate::rules::canonical_groups;
use crate::rules::distinct_chunk_writes;

/// Most chunks one `mailbox_mark_chunks.lua` call marks (it passes a dispatch's chunks to one
/// command as arguments, which Lua bounds).
const MARKS_PER_SCRIPT: usize = 1024;

impl RedisMailboxStore {
    /// `append_chunks`: checks every write against its stored dispatch, then writes all entries.
    pub(super) async fn write_chunks(&self, writes: &[ChunkWrite<'_>]) -> StoreResult<usize> {
        let writes = distinct_chunk_writes(writes);
        if writes.is_empty() {
            return Ok(0);
        }
        let mut rows: Vec<DispatchId> = Vec::new();
        let mut row_of: HashMap<DispatchId, usize> = HashMap::new();
        for w in &writes {
            row_of.entry(w.receipt.id).or_insert_with(|| {
                rows.push(w.receipt.id);
                rows.len() - 1
            });
        }
        let reads: Vec<redis::Cmd> = rows
            .iter()
            .map(|id| {
                let (row, _, _) = self.shard_keys(id.shard).dispatch(&id.message_id);
                redis::cmd("HMGET").arg(row).arg("digest").arg("seq").clone()
            })
            .collect();
        let stored: Vec<(Option<String>, Option<String>)> =
            query_by_slot(&self.conn, &reads).await.map_err(|e| redis_err("reading dispatches", e))?;
        if stored.len() != rows.len() {
            return Err(StoreError::CorruptEntry(format!("{} dispatch rows read for {}", stored.len(), rows.len())));
        }
        let legacy = self.legacy_manifests(&rows, &stored).await?;
        // Each manifest's digest once (by its address: the writes borrow it), however many carry it.
        let mut digests: HashMap<usize, String> = HashMap::new();
        let mut entries: Vec<MailboxEntry> = Vec::new();
        for w in writes {
            let (digest, seq) = &stored[row_of[&w.receipt.id]];
            let id = &w.receipt.id;
            let same = match (digest, legacy.get(&w.receipt.id)) {
                (Some(digest), _) => {
                    let ours = digests
                        .entry(std::ptr::from_ref(w.manifest).addr())
                        .or_insert_with(|| manifest_digest(&encode_manifest(w.manifest)));
                    digest == ours
                }
                (None, Some(Some(manifest))) => *manifest == encode_manifest(w.manifest),
                (None, _) => return Err(not_begun(id)),
            };
            if !same {
                return Err(StoreError::DispatchConflict(format!(
                    "chunk of dispatch {} carries a different manifest",
                    id.message_id
                )));
            }
            let canonical = seq
                .as_deref()
                .and_then(|s| s.parse().ok())
                .and_then(MailboxSeq::from_u64)
                .ok_or_else(|| StoreError::CorruptEntry(format!("dispatch {} holds a bad seq", id.message_id)))?;
            if canonical != w.receipt.seq {
                return Err(StoreError::Conflict(format!(
                    "receipt seq {} is not the canonical {canonical}",
                    w.receipt.seq
                )));
            }
            let recipients = w.manifest.chunk_recipients(w.chunk);
            if recipients.is_empty() {
                return Err(StoreError::InvalidInput(format!(
                    "lane {} has no chunk {}",
                    w.chunk.lane.get(),
                    w.chunk.index
                )));
            }
            entries.extend(recipients.iter().map(|u| w.manifest.entry_for(*u, canonical, &self.retention)));
        }
        let groups = canonical_groups(&entries)?;
        user::write_groups(&mut self.conn.clone(), &self.ns, &self.metas, groups, self.clock.now()).await?;
        Ok(entries.len())
    }

    /// The manifests of the rows begun by an earlier release (a seq but no digest), to compare
    /// whole: one more round trip, only while such dispatches are still being written.
    async fn legacy_manifests(
        &self,
        rows: &[DispatchId],
        stored: &[(Option<String>, Option<String>)],
    ) -> StoreResult<HashMap<DispatchId, Option<Vec<u8>>>> {
        let legacy: Vec<DispatchId> = rows
            .iter()
            .zip(stored)
            .filter(|(_, (digest, seq))| digest.is_none() && seq.is_some())
            .map(|(id, _)| *id)
            .collect();
        if legacy.is_empty() {
            return Ok(HashMap::new());
        }
        let reads: Vec<redis::Cmd> = legacy
            .iter()
            .map(|id| {
                let (row, _, _) = self.shard_keys(id.shard).dispatch(&id.message_id);
                redis::cmd("HGET").arg(row).arg("manifest").clone()
            })
            .collect();
        let manifests: Vec<Option<Vec<u8>>> =
            query_by_slot(&self.conn, &reads).await.map_err(|e| redis_err("reading dispatch manifests", e))?;
        if manifests.len() != legacy.len() {
            return Err(StoreError::CorruptEntry(format!("{} manifests read for {}", manifests.len(), legacy.len())));
        }
        Ok(legacy.into_iter().zip(manifests).collect())
    }

    /// `mark_chunks_completed`: one script per run of consecutive chunks of one shard (of at most
    /// [`MARKS_PER_SCRIPT`]), in input order; each checks all its chunks before marking any, so
    /// a refusal leaves only the runs before it marked (the trait's contract). The dispatcher's
    /// batches are one run.
    pub(super) async fn mark_chunks(
        &self,
        chunks: &[(DispatchId, ChunkId)],
        fence: Option<&ShardFence>,
    ) -> StoreResult<()> {
        for run in chunks.chunk_by(|a, b| a.0.shard == b.0.shard) {
            for part in run.chunks(MARKS_PER_SCRIPT) {
                self.mark_in_shard(part[0].0.shard, part, fence).await?;
            }
        }
        Ok(())
    }

    async fn mark_in_shard(
        &self,
        shard: ShardId,
        chunks: &[(DispatchId, ChunkId)],
        fence: Option<&ShardFence>,
    ) -> StoreResult<()> {
        let keys = self.shard_keys(shard);
        let mut inv = MARK_CHUNKS.prepare_invoke();
        inv.key(&keys.work).key(&keys.incarnation).arg(fence_arg(fence));
        let mut dispatches: Vec<DispatchId> = Vec::new();
        for (dispatch, chunk) in chunks {
            let k = match dispatches.iter().position(|d| d == dispatch) {
                Some(k) => k,
                None => {
                    let (row, done, _) = keys.dispatch(&dispatch.message_id);
                    inv.key(row).key(done);
                    dispatches.push(*dispatch);
                    dispatches.len() - 1
                }
            };
            inv.arg(k + 1)
                .arg(chunk.lane.get())
                .arg(chunk.index)
                .arg(ShardKeys::work_field(&dispatch.message_id, chunk.lane.get()));
        }
        let reply: Value =
            inv.invoke_async(&mut self.conn.clone()).await.map_err(|e| redis_err("marking chunks complete", e))?;
        let (code, rest) = status(reply)?;
        let mut rest = rest.into_iter();
        let which = |n: Option<Value>, of: usize| -> StoreResult<usize> {
            usize::try_from(number(n, "script index")?)
                .ok()
                .and_then(|i| i.checked_sub(1))
                .filter(|i| *i < of)
                .ok_or_else(|| StoreError::CorruptEntry("mark_chunks script answered a bad index".into()))
        };
        match code.as_str() {
            "ok" => Ok(()),
            "lost" => Err(lost(shard)),
            "not_found" => Err(not_begun(&dispatches[which(rest.next(), dispatches.len())?])),
            "invalid" => {
                let (_, chunk) = chunks[which(rest.next(), chunks.len())?];
                Err(StoreError::InvalidInput(format!("lane {} has no chunk {}", chunk.lane.get(), chunk.index)))
            }
            "corrupt" => Err(corrupt(shard, rest.next())),
            other => Err(StoreError::CorruptEntry(format!("mark_chunks script answered {other:?}"))),
        }
    }
}
