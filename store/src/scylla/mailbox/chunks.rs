//! Chunk writes and completion marks, one chunk or many per call.
//!
//! Every chunk is checked against its dispatch's live receipt (the receipt row and the GC marker
//! are read per call, so a receipt that lost a first-observation race, or a collected dispatch, is
//! refused as soon as the rows show it; the manifest bytes of the same generation may come from
//! the cache). The entries of all the chunks of one call are then written together, so a user
//! with several entries in the call gets one bucket proof per day, not one per entry.

use std::collections::HashMap;
use std::sync::Arc;

use futures_util::future::try_join_all;

use super::dispatch::{not_begun, shard_i, Head};
use super::{ScyllaMailboxStore, DISPATCH_TTL_SECS};
use crate::codec::encode_manifest;
use crate::error::{StoreError, StoreResult};
use crate::mailbox::{ChunkId, DispatchId, MailboxEntry};
use crate::mailbox_store::ChunkWrite;
use crate::rules::distinct_chunk_writes;
use crate::scylla::batches::write_partition;

impl ScyllaMailboxStore {
    /// `append_chunks`: checks every write, then writes all their entries.
    pub(super) async fn write_chunks(&self, writes: &[ChunkWrite<'_>]) -> StoreResult<usize> {
        let writes = distinct_chunk_writes(writes);
        // A call holds a lane batch (tens of chunks): every check runs at once.
        let checked: Vec<Vec<MailboxEntry>> = try_join_all(writes.into_iter().map(|w| self.checked_entries(w))).await?;
        let entries: Vec<MailboxEntry> = checked.into_iter().flatten().collect();
        if entries.is_empty() {
            return Ok(0);
        }
        let groups = super::user::canonical_groups(&entries)?;
        self.write_groups(groups).await?;
        Ok(entries.len())
    }

    /// The entries of one chunk write, after checking its receipt and manifest.
    async fn checked_entries(&self, w: &ChunkWrite<'_>) -> StoreResult<Vec<MailboxEntry>> {
        let (receipt, manifest, chunk) = (w.receipt, w.manifest, w.chunk);
        let bytes = encode_manifest(manifest);
        let head = self.live_head(&receipt.id).await?.ok_or_else(|| not_begun(&receipt.id))?;
        let stored = match self.verified(&receipt.id, head.generation) {
            Some(stored) => stored,
            None => {
                let (stored, row) = self.dispatch_row(&receipt.id).await?.ok_or_else(|| not_begun(&receipt.id))?;
                if row.generation != head.generation {
                    return Err(StoreError::Unavailable {
                        message: format!("dispatch {} changed generation while read", receipt.id.message_id),
                        source: None,
                    });
                }
                let stored = Arc::new(stored);
                self.remember_verified(receipt.id, head.generation, stored.clone());
                stored
            }
        };
        if *stored != bytes {
            return Err(StoreError::DispatchConflict(format!(
                "chunk of dispatch {} carries a different manifest",
                receipt.id.message_id
            )));
        }
        let seq = head.seq;
        if seq != receipt.seq {
            return Err(StoreError::Conflict(format!("receipt seq {} is not the canonical {seq}", receipt.seq)));
        }
        let recipients = manifest.chunk_recipients(chunk);
        if recipients.is_empty() {
            return Err(StoreError::InvalidInput(format!("lane {} has no chunk {}", chunk.lane.get(), chunk.index)));
        }
        Ok(recipients.iter().map(|u| manifest.entry_for(*u, seq, &self.inner.retention)).collect())
    }

    /// `mark_chunks_completed`: reads each dispatch's live receipt once, checks every chunk, then
    /// writes the completion rows.
    pub(super) async fn mark_chunks(&self, chunks: &[(DispatchId, ChunkId)]) -> StoreResult<()> {
        let mut dispatches: Vec<DispatchId> = chunks.iter().map(|(d, _)| *d).collect();
        dispatches.sort_unstable_by_key(|d| (d.shard.0, d.message_id.0));
        dispatches.dedup();
        let heads: HashMap<DispatchId, Head> = try_join_all(dispatches.into_iter().map(|id| async move {
            let head = self.live_head(&id).await?.ok_or_else(|| not_begun(&id))?;
            Ok::<_, StoreError>((id, head))
        }))
        .await?
        .into_iter()
        .collect();
        for (dispatch, chunk) in chunks {
            if chunk.index >= heads[dispatch].lane_chunks[chunk.lane.get() as usize] {
                return Err(StoreError::InvalidInput(format!(
                    "lane {} has no chunk {}",
                    chunk.lane.get(),
                    chunk.index
                )));
            }
        }
        // One dispatch's chunks share its partition: a few batches per dispatch, all at once.
        let mut by_dispatch: HashMap<DispatchId, Vec<_>> = HashMap::new();
        for (dispatch, chunk) in chunks {
            by_dispatch.entry(*dispatch).or_default().push((
                shard_i(dispatch.shard),
                dispatch.message_id.0.to_vec(),
                heads[dispatch].generation,
                i32::from(chunk.lane.get()),
                i64::from(chunk.index),
                DISPATCH_TTL_SECS,
            ));
        }
        let statement = &self.st().chunk_insert;
        try_join_all(
            by_dispatch
                .values()
                .map(|rows| write_partition(self.session(), statement, rows, "marking a chunk complete")),
        )
        .await?;
        Ok(())
    }
}
