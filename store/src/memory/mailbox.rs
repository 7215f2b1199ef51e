//! `MailboxStore` in memory.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use super::lock;
use crate::clock::Clock;
use crate::codec::{encode_event_group, encode_manifest, RetentionLedger};
use crate::error::{StoreError, StoreResult};
use crate::ids::{TenantId, UserId};
use crate::mailbox::{
    ChunkId, DispatchId, DispatchManifest, DispatchProgress, DispatchReceipt, EventGroup, LaneId, LaneWatermark,
    MailboxEntry, MailboxPage, MailboxRetention, MailboxSeq, ShardEpoch, ShardId,
};
use crate::mailbox_store::MailboxStore;
use crate::rules::{canonical_groups, range_preamble};

type UserKey = (TenantId, UserId);

/// Per-user retention state: trim, expired-gap boundary and the live-bucket ledger.
#[derive(Clone, Default)]
struct UserMeta {
    trim: Option<MailboxSeq>,
    gap: Option<MailboxSeq>,
    ledger: RetentionLedger,
}

impl UserMeta {
    fn raise_gap(&mut self, seq: u64) {
        let seq = MailboxSeq::from_u64(seq);
        self.gap = self.gap.max(seq);
    }

    /// `max(trim, gap)`: cursors below it expired.
    fn boundary(&self) -> Option<MailboxSeq> {
        self.trim.max(self.gap)
    }
}

struct DispatchRow {
    receipt: DispatchReceipt,
    manifest_bytes: Vec<u8>,
    manifest: DispatchManifest,
    max_observed: u64,
    last_seen_millis: i64,
    observations: BTreeSet<u64>,
    completed: BTreeSet<ChunkId>,
}

impl DispatchRow {
    fn progress(&self) -> DispatchProgress {
        DispatchProgress {
            receipt: self.receipt,
            manifest: self.manifest.clone(),
            max_observed_offset: self.max_observed,
            completed: self.completed.iter().copied().collect(),
        }
    }
}

#[derive(Default)]
struct Inner {
    groups: HashMap<UserKey, BTreeMap<MailboxSeq, Vec<u8>>>,
    meta: HashMap<UserKey, UserMeta>,
    dispatches: HashMap<DispatchId, DispatchRow>,
    /// Every observed source offset per shard, with the dispatch observed there.
    sources: HashMap<ShardId, BTreeMap<u64, DispatchId>>,
    watermarks: HashMap<(ShardId, LaneId), u64>,
}

/// `MailboxStore` in memory. Cheap to clone handles share one state.
#[derive(Clone)]
pub struct MemoryMailboxStore {
    inner: Arc<Mutex<Inner>>,
    retention: MailboxRetention,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for MemoryMailboxStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryMailboxStore").field("retention", &self.retention).finish_non_exhaustive()
    }
}

impl MemoryMailboxStore {
    /// An empty store whose dispatched entries live per `retention`, reading time from `clock`.
    pub fn new(retention: MailboxRetention, clock: Arc<dyn Clock>) -> Self {
        Self { inner: Arc::default(), retention, clock }
    }

    /// Test sabotage: replaces a stored event group's bytes.
    pub fn sabotage_overwrite_group(&self, tenant: TenantId, user: UserId, seq: MailboxSeq, bytes: Vec<u8>) {
        lock(&self.inner).groups.entry((tenant, user)).or_default().insert(seq, bytes);
    }

    fn write_groups(&self, inner: &mut Inner, groups: Vec<EventGroup>) -> StoreResult<()> {
        let now = self.clock.now();
        // Stage every touched user's meta first, so a ledger overflow writes nothing.
        let mut staged: HashMap<UserKey, UserMeta> = HashMap::new();
        for g in &groups {
            let key = (g.tenant, g.user);
            let meta = staged.entry(key).or_insert_with(|| inner.meta.get(&key).cloned().unwrap_or_default());
            if let Some(gap) = meta.ledger.take_expired(now) {
                meta.raise_gap(gap);
            }
            if g.expires_at <= now {
                // Replay of an entry that already expired: it is not written, but no reader may
                // believe it still exists.
                meta.raise_gap(g.seq.as_u64());
            } else {
                meta.ledger.register(g.seq.as_u64(), g.expires_at).map_err(StoreError::InvariantViolation)?;
            }
        }
        inner.meta.extend(staged);
        for g in groups {
            if g.expires_at > now {
                let bytes = encode_event_group(&g);
                inner.groups.entry((g.tenant, g.user)).or_default().insert(g.seq, bytes);
            }
        }
        Ok(())
    }

    fn row<'a>(inner: &'a Inner, id: &DispatchId) -> StoreResult<&'a DispatchRow> {
        inner
            .dispatches
            .get(id)
            .ok_or_else(|| StoreError::NotFound(format!("dispatch {}/{} was never begun", id.message_id, id.shard.0)))
    }
}

#[async_trait]
impl MailboxStore for MemoryMailboxStore {
    async fn append_batch(&self, entries: &[MailboxEntry]) -> StoreResult<()> {
        let groups = canonical_groups(entries)?;
        let mut inner = lock(&self.inner);
        self.write_groups(&mut inner, groups)
    }

    async fn begin_dispatch(
        &self,
        epoch: ShardEpoch,
        manifest: &DispatchManifest,
        observed_offset: u64,
    ) -> StoreResult<DispatchReceipt> {
        let seq = crate::rules::dispatch_seq(epoch, manifest, observed_offset)?;
        let bytes = encode_manifest(manifest);
        let now = self.clock.now().0;
        let mut inner = lock(&self.inner);
        let shard = manifest.id.shard;
        if let Some(other) = inner.sources.get(&shard).and_then(|s| s.get(&observed_offset)) {
            if *other != manifest.id {
                return Err(StoreError::DispatchConflict(format!(
                    "offset {observed_offset} of shard {} was already observed as dispatch {}",
                    shard.0, other.message_id
                )));
            }
        }
        let receipt = match inner.dispatches.get_mut(&manifest.id) {
            Some(row) => {
                if row.manifest_bytes != bytes {
                    return Err(StoreError::DispatchConflict(format!(
                        "dispatch {}/{} arrived with a different manifest",
                        manifest.id.message_id, shard.0
                    )));
                }
                row.max_observed = row.max_observed.max(observed_offset);
                row.last_seen_millis = now;
                row.observations.insert(observed_offset);
                DispatchReceipt {
                    observed_offset,
                    duplicate: observed_offset != row.receipt.canonical_offset,
                    ..row.receipt
                }
            }
            None => {
                let receipt = DispatchReceipt {
                    id: manifest.id,
                    seq,
                    canonical_offset: observed_offset,
                    observed_offset,
                    duplicate: false,
                };
                let row = DispatchRow {
                    receipt,
                    manifest_bytes: bytes,
                    manifest: manifest.clone(),
                    max_observed: observed_offset,
                    last_seen_millis: now,
                    observations: BTreeSet::from([observed_offset]),
                    completed: BTreeSet::new(),
                };
                inner.dispatches.insert(manifest.id, row);
                receipt
            }
        };
        inner.sources.entry(shard).or_default().insert(observed_offset, manifest.id);
        Ok(receipt)
    }

    async fn append_chunk(
        &self,
        receipt: &DispatchReceipt,
        manifest: &DispatchManifest,
        chunk: ChunkId,
    ) -> StoreResult<usize> {
        let bytes = encode_manifest(manifest);
        let mut inner = lock(&self.inner);
        let row = Self::row(&inner, &receipt.id)?;
        if row.manifest_bytes != bytes {
            return Err(StoreError::DispatchConflict(format!(
                "chunk of dispatch {} carries a different manifest",
                receipt.id.message_id
            )));
        }
        if row.receipt.seq != receipt.seq {
            return Err(StoreError::Conflict(format!(
                "receipt seq {} is not the canonical {}",
                receipt.seq, row.receipt.seq
            )));
        }
        let recipients = manifest.chunk_recipients(chunk);
        if recipients.is_empty() {
            return Err(StoreError::InvalidInput(format!("lane {} has no chunk {}", chunk.lane.get(), chunk.index)));
        }
        let entries: Vec<MailboxEntry> =
            recipients.iter().map(|u| manifest.entry_for(*u, row.receipt.seq, &self.retention)).collect();
        let groups = canonical_groups(&entries)?;
        self.write_groups(&mut inner, groups)?;
        Ok(entries.len())
    }

    async fn mark_chunk_completed(&self, dispatch: DispatchId, chunk: ChunkId) -> StoreResult<()> {
        let mut inner = lock(&self.inner);
        Self::row(&inner, &dispatch)?;
        let row = inner.dispatches.get_mut(&dispatch).expect("checked above");
        if chunk.index >= row.manifest.chunk_counts()[chunk.lane.get() as usize] {
            return Err(StoreError::InvalidInput(format!("lane {} has no chunk {}", chunk.lane.get(), chunk.index)));
        }
        row.completed.insert(chunk);
        Ok(())
    }

    async fn chunk_completed(&self, dispatch: DispatchId, chunk: ChunkId) -> StoreResult<bool> {
        let inner = lock(&self.inner);
        Ok(inner.dispatches.get(&dispatch).is_some_and(|r| r.completed.contains(&chunk)))
    }

    async fn dispatch_progress(&self, dispatch: DispatchId) -> StoreResult<Option<DispatchProgress>> {
        Ok(lock(&self.inner).dispatches.get(&dispatch).map(DispatchRow::progress))
    }

    async fn range_scan(
        &self,
        tenant: TenantId,
        user: UserId,
        after: MailboxSeq,
        up_to: MailboxSeq,
        max_items: usize,
    ) -> StoreResult<MailboxPage> {
        if let Some(page) = range_preamble(after, up_to, max_items)? {
            return Ok(page);
        }
        let now = self.clock.now();
        let key = (tenant, user);
        let mut inner = lock(&self.inner);
        let Some(meta) = inner.meta.get_mut(&key) else {
            return Ok(MailboxPage { groups: Vec::new(), covered: up_to });
        };
        if let Some(gap) = meta.ledger.take_expired(now) {
            meta.raise_gap(gap);
        }
        if let Some(boundary) = meta.boundary() {
            if after < boundary {
                return Err(StoreError::CursorExpired { earliest: boundary });
            }
        }
        let mut groups = Vec::new();
        let mut items = 0usize;
        let stored = inner.groups.get(&key);
        for (seq, bytes) in stored
            .into_iter()
            .flat_map(|m| m.range((std::ops::Bound::Excluded(after), std::ops::Bound::Included(up_to))))
        {
            let group = crate::rules::accept_group(bytes, *seq, tenant, user, now)?;
            items += group.events.len();
            groups.push(group);
            if items >= max_items {
                let covered = groups.last().map_or(up_to, |g| g.seq);
                return Ok(MailboxPage { groups, covered });
            }
        }
        Ok(MailboxPage { groups, covered: up_to })
    }

    async fn truncate_before(&self, tenant: TenantId, user: UserId, through: MailboxSeq) -> StoreResult<MailboxSeq> {
        let mut inner = lock(&self.inner);
        let meta = inner.meta.entry((tenant, user)).or_default();
        let trim = meta.trim.map_or(through, |t| t.max(through));
        meta.trim = Some(trim);
        if let Some(groups) = inner.groups.get_mut(&(tenant, user)) {
            groups.retain(|seq, _| *seq > trim);
        }
        Ok(trim)
    }

    async fn lane_watermark(&self, shard: ShardId, lane: LaneId) -> StoreResult<LaneWatermark> {
        let through = lock(&self.inner).watermarks.get(&(shard, lane)).copied();
        Ok(LaneWatermark { shard, lane, through })
    }

    async fn advance_watermark(&self, shard: ShardId, lane: LaneId, through: u64) -> StoreResult<LaneWatermark> {
        let mut inner = lock(&self.inner);
        let current = inner.watermarks.get(&(shard, lane)).copied();
        if current.is_some_and(|w| through <= w) {
            return Ok(LaneWatermark { shard, lane, through: current });
        }
        let empty = BTreeMap::new();
        let sources = inner.sources.get(&shard).unwrap_or(&empty);
        if !sources.contains_key(&through) {
            return Err(StoreError::InvalidInput(format!(
                "no dispatch was observed at offset {through} of shard {}",
                shard.0
            )));
        }
        let from = current.map_or(std::ops::Bound::Unbounded, std::ops::Bound::Excluded);
        for (offset, id) in sources.range((from, std::ops::Bound::Included(through))) {
            let row = inner.dispatches.get(id).ok_or_else(|| {
                StoreError::CorruptEntry(format!(
                    "source offset {offset} names dispatch {} which is gone",
                    id.message_id
                ))
            })?;
            if !row.progress().lane_complete(lane) {
                return Err(StoreError::Conflict(format!(
                    "lane {} of shard {} is incomplete at offset {offset}",
                    lane.get(),
                    shard.0
                )));
            }
        }
        inner.watermarks.insert((shard, lane), through);
        Ok(LaneWatermark { shard, lane, through: Some(through) })
    }

    async fn gc_completed_dispatches(
        &self,
        shard: ShardId,
        seen_before_millis: i64,
        limit: usize,
    ) -> StoreResult<usize> {
        let mut inner = lock(&self.inner);
        let passed = |inner: &Inner, max: u64| {
            LaneId::all().all(|l| inner.watermarks.get(&(shard, l)).is_some_and(|w| *w >= max))
        };
        let victims: Vec<DispatchId> = inner
            .dispatches
            .iter()
            .filter(|(id, row)| {
                id.shard == shard && row.last_seen_millis < seen_before_millis && passed(&inner, row.max_observed)
            })
            .map(|(id, _)| *id)
            .take(limit)
            .collect();
        for id in &victims {
            if let Some(row) = inner.dispatches.remove(id) {
                if let Some(sources) = inner.sources.get_mut(&shard) {
                    for offset in &row.observations {
                        sources.remove(offset);
                    }
                }
            }
        }
        Ok(victims.len())
    }
}
