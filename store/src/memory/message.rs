//! `MessageStore` in memory.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use super::lock;
use crate::clock::Clock;
use crate::codec::{decode_record, encode_intent, encode_record, encode_request};
use crate::error::{StoreError, StoreResult};
use crate::ids::{ConversationId, ConversationSeq, MessageId, TenantId, UnixMillis, UserId};
use crate::message::{
    Commit, CommitIntent, CommitKey, CommitRequest, CommitState, ConversationSummary, Direction, HistoryPage,
    HistoryQuery, MessageRecord, Publication, ReadPosition, MAX_PAGE_ITEMS, UNREAD_PRECISE_LIMIT,
};
use crate::message_store::{GcReport, HistoryAuthorizer, MessageStore, COMMIT_AUX_TTL_MILLIS};
use crate::retention::RetentionPolicy;
use crate::rules::{check_request, conflict, expect_message, expect_state, not_found};

type ConvKey = (TenantId, ConversationId);

struct StoredCommit {
    request_bytes: Vec<u8>,
    commit: Commit,
}

#[derive(Default)]
struct Inner {
    commits: HashMap<CommitKey, StoredCommit>,
    /// Highest seq ever issued per conversation.
    counters: HashMap<ConvKey, u64>,
    /// History index: the seqs present per conversation.
    index: HashMap<ConvKey, BTreeSet<u64>>,
    /// Record blobs.
    records: HashMap<(ConvKey, u64), Vec<u8>>,
    /// Expiry index: (expiry, conversation, seq).
    expiry: BTreeSet<(i64, ConvKey, u64)>,
    /// Recovery index: (created_at, key).
    recovery: BTreeSet<(i64, CommitKey)>,
}

/// `MessageStore` in memory. Cheap to clone handles share one state.
#[derive(Clone)]
pub struct MemoryMessageStore {
    inner: Arc<Mutex<Inner>>,
    policy: RetentionPolicy,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for MemoryMessageStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryMessageStore").field("policy", &self.policy).finish_non_exhaustive()
    }
}

impl MemoryMessageStore {
    /// An empty store applying `policy`, reading time from `clock`.
    pub fn new(policy: RetentionPolicy, clock: Arc<dyn Clock>) -> Self {
        Self { inner: Arc::default(), policy, clock }
    }

    /// Test sabotage: removes a record blob, leaving its index entry.
    pub fn sabotage_remove_record(&self, tenant: TenantId, conversation: ConversationId, seq: ConversationSeq) {
        lock(&self.inner).records.remove(&((tenant, conversation), seq.0));
    }

    /// Test sabotage: replaces a record blob with `bytes`.
    pub fn sabotage_overwrite_record(
        &self,
        tenant: TenantId,
        conversation: ConversationId,
        seq: ConversationSeq,
        bytes: Vec<u8>,
    ) {
        lock(&self.inner).records.insert(((tenant, conversation), seq.0), bytes);
    }
}

fn stored<'a>(inner: &'a mut Inner, key: &CommitKey) -> StoreResult<&'a mut StoredCommit> {
    inner.commits.get_mut(key).ok_or_else(|| not_found(key))
}

impl Inner {
    /// Reads and checks one indexed record: present, decodable, at its index position.
    fn record(&self, conv: ConvKey, seq: u64) -> StoreResult<MessageRecord> {
        let bytes = self.records.get(&(conv, seq)).ok_or_else(|| {
            StoreError::CorruptEntry(format!("history index holds seq {seq} of {} but its record is missing", conv.1))
        })?;
        let record = decode_record(bytes)?;
        if record.tenant != conv.0 || record.conversation != conv.1 || record.seq.0 != seq {
            return Err(StoreError::CorruptEntry(format!(
                "record at seq {seq} of {} belongs to seq {} of {}",
                conv.1, record.seq, record.conversation
            )));
        }
        Ok(record)
    }

    /// Live (unexpired) records of a conversation in index order, lazily.
    fn live<'a>(
        &'a self,
        conv: ConvKey,
        seqs: impl Iterator<Item = u64> + 'a,
        now: UnixMillis,
    ) -> impl Iterator<Item = StoreResult<MessageRecord>> + 'a {
        seqs.map(move |seq| self.record(conv, seq)).filter(move |r| !matches!(r, Ok(rec) if rec.is_expired(now)))
    }
}

#[async_trait]
impl MessageStore for MemoryMessageStore {
    async fn reserve(&self, request: &CommitRequest, proposed_id: MessageId) -> StoreResult<Commit> {
        check_request(request)?;
        let request_bytes = encode_request(request);
        let mut inner = lock(&self.inner);
        if let Some(existing) = inner.commits.get(&request.key) {
            if existing.request_bytes != request_bytes {
                return Err(conflict(&request.key, "the same key was reserved for different content"));
            }
            return Ok(existing.commit.clone());
        }
        let conv = (request.key.tenant, request.conversation);
        let counter = inner.counters.entry(conv).or_insert(0);
        *counter += 1;
        let seq = ConversationSeq(*counter);
        let created_at = self.clock.now();
        let intent =
            CommitIntent { request: request.clone(), seq, message_id: proposed_id, created_at, publication: None };
        let commit = Commit { intent, state: CommitState::Reserved, committed_at: None };
        inner.recovery.insert((created_at.0, request.key.clone()));
        inner.commits.insert(request.key.clone(), StoredCommit { request_bytes, commit: commit.clone() });
        Ok(commit)
    }

    async fn put_record(&self, intent: &CommitIntent) -> StoreResult<Commit> {
        let key = &intent.request.key;
        let expires_at = self.policy.expires_at(intent.request.retention, intent.created_at);
        let mut inner = lock(&self.inner);
        let entry = stored(&mut inner, key)?;
        if encode_intent(&entry.commit.intent) != encode_intent(intent) {
            return Err(conflict(key, "the intent differs from the reserved one"));
        }
        expect_state(key, &entry.commit, CommitState::Reserved)?;
        entry.commit.state = CommitState::Recorded;
        let commit = entry.commit.clone();
        let conv = (key.tenant, intent.request.conversation);
        let blob = encode_record(&intent.record(expires_at));
        inner.records.insert((conv, intent.seq.0), blob);
        inner.index.entry(conv).or_default().insert(intent.seq.0);
        Ok(commit)
    }

    async fn mark_outbox_published(
        &self,
        key: &CommitKey,
        message_id: MessageId,
        publication: Publication,
    ) -> StoreResult<Commit> {
        crate::rules::check_publication(publication)?;
        let mut inner = lock(&self.inner);
        let entry = stored(&mut inner, key)?;
        expect_message(key, &entry.commit, message_id)?;
        expect_state(key, &entry.commit, CommitState::Recorded)?;
        entry.commit.intent.publication = Some(publication);
        entry.commit.state = CommitState::Outboxed;
        Ok(entry.commit.clone())
    }

    async fn mark_committed(&self, key: &CommitKey, message_id: MessageId) -> StoreResult<Commit> {
        let now = self.clock.now();
        let mut inner = lock(&self.inner);
        let entry = stored(&mut inner, key)?;
        expect_message(key, &entry.commit, message_id)?;
        expect_state(key, &entry.commit, CommitState::Outboxed)?;
        entry.commit.state = CommitState::Committed;
        entry.commit.committed_at = Some(now);
        let commit = entry.commit.clone();
        let intent = &commit.intent;
        if let Some(expiry) = self.policy.expires_at(intent.request.retention, intent.created_at) {
            inner.expiry.insert((expiry.0, (key.tenant, intent.request.conversation), intent.seq.0));
        }
        inner.recovery.remove(&(intent.created_at.0, key.clone()));
        Ok(commit)
    }

    async fn load_commit(&self, key: &CommitKey) -> StoreResult<Option<Commit>> {
        Ok(lock(&self.inner).commits.get(key).map(|s| s.commit.clone()))
    }

    async fn load_commit_for_request(&self, request: &CommitRequest) -> StoreResult<Option<Commit>> {
        let request_bytes = encode_request(request);
        let inner = lock(&self.inner);
        match inner.commits.get(&request.key) {
            None => Ok(None),
            Some(s) if s.request_bytes == request_bytes => Ok(Some(s.commit.clone())),
            Some(_) => Err(conflict(&request.key, "the key belongs to a different request")),
        }
    }

    async fn scan_recoverable_commits(&self, cutoff: UnixMillis, limit: usize) -> StoreResult<Vec<Commit>> {
        let inner = lock(&self.inner);
        Ok(inner
            .recovery
            .iter()
            .take_while(|(created, _)| *created < cutoff.0)
            .filter_map(|(_, key)| inner.commits.get(key))
            .filter(|s| s.commit.state.is_recoverable())
            .take(limit)
            .map(|s| s.commit.clone())
            .collect())
    }

    async fn gc_committed_auxiliary(&self, limit: usize) -> StoreResult<GcReport> {
        let now = self.clock.now();
        let mut inner = lock(&self.inner);
        let done: Vec<CommitKey> = inner
            .commits
            .iter()
            .filter(|(_, s)| s.commit.committed_at.is_some_and(|at| at.plus_millis(COMMIT_AUX_TTL_MILLIS) <= now))
            .map(|(k, _)| k.clone())
            .take(limit)
            .collect();
        for key in &done {
            if let Some(s) = inner.commits.remove(key) {
                inner.recovery.remove(&(s.commit.intent.created_at.0, key.clone()));
            }
        }
        Ok(GcReport { removed: done.len(), orphans_cleaned: 0 })
    }

    async fn gc_expired_history(&self, limit: usize) -> StoreResult<GcReport> {
        let now = self.clock.now();
        let mut inner = lock(&self.inner);
        let due: Vec<(i64, ConvKey, u64)> =
            inner.expiry.iter().take_while(|(at, _, _)| *at <= now.0).take(limit).copied().collect();
        let mut report = GcReport::default();
        for member in due {
            let (_, conv, seq) = member;
            let had_record = inner.records.remove(&(conv, seq)).is_some();
            let had_index = inner.index.get_mut(&conv).is_some_and(|s| s.remove(&seq));
            if !had_record && !had_index {
                // The memory tier never trims, so its lower bound is 0: a member whose record and
                // index are both gone was not removed by us.
                return Err(StoreError::CorruptEntry(format!(
                    "expiry index names seq {seq} of {} but record and index are missing",
                    conv.1
                )));
            }
            inner.expiry.remove(&member);
            report.removed += 1;
        }
        Ok(report)
    }

    async fn history_page(&self, query: &HistoryQuery, authorizer: &dyn HistoryAuthorizer) -> StoreResult<HistoryPage> {
        authorizer.authorize_history(query.tenant, query.conversation, query.viewer).await?;
        if query.max_items == 0 || query.max_items > MAX_PAGE_ITEMS {
            return Err(StoreError::InvalidInput(format!(
                "max_items must be 1..={MAX_PAGE_ITEMS}, got {}",
                query.max_items
            )));
        }
        let now = self.clock.now();
        let conv = (query.tenant, query.conversation);
        let inner = lock(&self.inner);
        let empty = BTreeSet::new();
        let index = inner.index.get(&conv).unwrap_or(&empty);
        let earliest_available = inner.live(conv, index.iter().copied(), now).next().transpose()?.map(|r| r.seq);
        let mut candidates: Box<dyn Iterator<Item = StoreResult<MessageRecord>>> = match (query.direction, query.anchor)
        {
            (Direction::Older, None) => Box::new(inner.live(conv, index.iter().rev().copied(), now)),
            (Direction::Older, Some(a)) => Box::new(inner.live(conv, index.range(..a.0).rev().copied(), now)),
            (Direction::Newer, None) => Box::new(inner.live(conv, index.iter().copied(), now)),
            (Direction::Newer, Some(a)) => {
                Box::new(inner.live(conv, index.range(a.0.saturating_add(1)..).copied(), now))
            }
        };
        let mut records = Vec::new();
        let mut bytes = 0usize;
        let mut has_more = false;
        for candidate in candidates.by_ref() {
            let record = candidate?;
            let fits = records.is_empty()
                || (records.len() < query.max_items && bytes + record.page_bytes() <= query.max_bytes);
            if !fits {
                has_more = true;
                break;
            }
            bytes += record.page_bytes();
            records.push(record);
        }
        Ok(HistoryPage { records, earliest_available, has_more })
    }

    async fn conversation_summaries(
        &self,
        tenant: TenantId,
        viewer: UserId,
        positions: &[ReadPosition],
    ) -> StoreResult<Vec<ConversationSummary>> {
        let now = self.clock.now();
        let inner = lock(&self.inner);
        let empty = BTreeSet::new();
        positions
            .iter()
            .map(|p| {
                let conv = (tenant, p.conversation);
                let index = inner.index.get(&conv).unwrap_or(&empty);
                let newer: Vec<MessageRecord> = inner
                    .live(conv, index.range(p.read_through.0.saturating_add(1)..).rev().copied(), now)
                    .take(UNREAD_PRECISE_LIMIT as usize + 1)
                    .collect::<StoreResult<_>>()?;
                let last_seq = match newer.first() {
                    Some(r) => Some(r.seq),
                    None => inner.live(conv, index.iter().rev().copied(), now).next().transpose()?.map(|r| r.seq),
                };
                let (unread, unread_precise) = if newer.len() > UNREAD_PRECISE_LIMIT as usize {
                    (UNREAD_PRECISE_LIMIT, false)
                } else {
                    let n = newer.iter().filter(|r| r.sender != viewer && r.kind.counts_as_unread()).count();
                    (n as u32, true)
                };
                Ok(ConversationSummary { conversation: p.conversation, last_seq, unread, unread_precise })
            })
            .collect()
    }
}
