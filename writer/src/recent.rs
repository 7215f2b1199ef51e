//! Where a conversation's recent records are durable outside Redis: the archive, and the
//! topic's unarchived tail ([`crate::tail`]). The Redis store writes them back when it
//! revalidates a conversation's seq lease after Redis lost state
//! (`qim_store::redis::RecentRecords`).

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use qim_store::ids::{ConversationId, TenantId, UnixMillis};
use qim_store::message::PublishedRecord;
use qim_store::redis::RecentRecords;
use qim_store::scylla::ScyllaMessageStore;
use qim_store::StoreResult;

use crate::tail::TailScanner;

/// Most records one conversation's restore takes from the archive (a conversation writing more
/// within the auxiliary TTL keeps only its newest this many answerable to retries).
pub const MAX_ARCHIVED_RECENT: usize = 100_000;

/// The archive plus the unarchived tail.
pub struct ArchiveAndTail {
    archive: ScyllaMessageStore,
    tail: Arc<TailScanner>,
}

impl ArchiveAndTail {
    /// Recent records from `archive` and from what `tail` finds past the archiver's offsets.
    pub fn new(archive: ScyllaMessageStore, tail: Arc<TailScanner>) -> Self {
        Self { archive, tail }
    }
}

#[async_trait]
impl RecentRecords for ArchiveAndTail {
    async fn recent_records(
        &self,
        tenant: TenantId,
        conversation: ConversationId,
        since: UnixMillis,
    ) -> StoreResult<Vec<PublishedRecord>> {
        // The tail first, from a scan that began now (after the caller's revalidation began).
        let tail = self.tail.tail_since(Instant::now()).await?;
        let unarchived = tail.of(tenant, conversation);
        // Down to the oldest unarchived record too, so the union is a suffix of the history.
        let oldest = unarchived.iter().map(|p| p.record.created_at).min().map_or(since, |o| o.min(since));
        let mut records = self.archive.recent_published(tenant, conversation, oldest, MAX_ARCHIVED_RECENT).await?;
        if records.len() == MAX_ARCHIVED_RECENT {
            tracing::warn!(%conversation, limit = MAX_ARCHIVED_RECENT, "restoring only the newest recent records of a busy conversation");
        }
        records.extend_from_slice(unarchived);
        Ok(records)
    }
}
