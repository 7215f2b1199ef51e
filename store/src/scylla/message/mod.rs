//! `MessageStore` on Scylla/Cassandra, per seed 000 (tables in [`super::schema`]).
//!
//! Behaves like the reference [`crate::memory::MemoryMessageStore`]; where CQL differs, the
//! guarantees hold for these reasons:
//!
//! - **First facts and ordered transitions are LWTs (LOCAL_SERIAL), nothing else is**: the
//!   RESERVED commit is `INSERT ... IF NOT EXISTS` (a clock-expired commit is taken over with
//!   `IF request_blob = <old> AND commit_blob = <old>`), seqs are allocated one at a time by `IF last_seq = ?` on
//!   `conversation_sequence` (initialised `IF NOT EXISTS`), and each state step is
//!   `UPDATE ... IF state = <predecessor>`. Records, index entries and the recovery index are
//!   same-value upserts at LOCAL_QUORUM.
//! - **Same key, same bytes → first answer; different bytes → `Conflict`**: the canonical
//!   request blob is stored with the commit and compared byte for byte; a lost reserve race
//!   reads the winner's row from the LWT answer (by column name).
//! - **Seqs never repeat**: a seq is issued only by a successful CAS from `n` to `n + 1`. A CAS
//!   with an unknown outcome or a lost reserve race leaves a hole, never a reuse. Reserves of one
//!   conversation queue on a per-process lock (which also caches `last_seq`), so one writer does
//!   not contend with itself in Paxos.
//! - **Crash between reserve and recovery is covered, however long the commit stays stuck**: the
//!   recovery entry is written *before* the reserve LWT, without TTL, and gets its TTL only once
//!   its commit finished; the scan resolves each entry against its commit, moves a durable cursor
//!   over finished entries, fences entries whose reserve never showed up, and moves entries that
//!   stay unfinished up so they never hold the cursor back for long (see `recovery.rs`,
//!   `entries.rs`).
//! - **Expiry**: records and index entries carry the same per-row TTL, computed from the
//!   injected clock at write time (`RetentionPolicy::remaining_ttl`; none for classes that never
//!   expire). Reads also compare `expires_at` with the injected clock, so a record is never
//!   returned past its expiry even before the server drops it. Commit facts get the 2 h
//!   auxiliary TTL at COMMITTED and are treated as gone by the clock after it. There is no
//!   `DELETE`: the `gc_*` methods count what expired since their last pass.
//! - **Reads never walk an expired prefix**: a per-bucket expiry bound (`history_bucket`, written
//!   before the CAS that issues a seq of the bucket) lets reads skip buckets whose records all
//!   expired, and a per-conversation floor (`history_floor`) moves over buckets that are fully
//!   issued and expired, so no read meets more than one bucket of expired index entries per
//!   query (see `buckets.rs`).

mod archive;
mod archive_requests;
mod aux_count;
mod buckets;
mod commit;
mod commit_row;
mod entries;
mod high_water;
mod history;
mod recent;
mod recovery;
mod seq;
mod statements;
mod ttl;

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicUsize};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use scylla::client::session::Session;

pub use self::archive::{
    aligned_ttl, archive_check, ArchiveConflict, ArchiveRefusal, ArchiveReport, TTL_SETTLE_BUDGET,
};
pub use self::recent::CLOCK_SKEW_MILLIS;
use self::statements::Statements;
use super::config::ScyllaConfig;
use super::cql::open_session;
use super::migrate::{readiness, Readiness};
use crate::clock::Clock;
use crate::error::StoreResult;
use crate::ids::{ConversationId, MessageId, TenantId, UnixMillis, UserId};
use crate::message::{
    Commit, CommitIntent, CommitKey, CommitRequest, ConversationSummary, HistoryPage, HistoryQuery, Publication,
    ReadPosition,
};
use crate::message_store::{GcReport, HistoryAuthorizer, MessageStore};
use crate::retention::RetentionPolicy;

/// A conversation's seq lock, holding the last `(last_seq, last_created_at)` this process saw
/// (`None`: unknown).
type SeqSlot = Arc<tokio::sync::Mutex<Option<(i64, Option<i64>)>>>;

/// More cached seq slots than this and idle ones are dropped.
const MAX_SEQ_SLOTS: usize = 10_000;

struct Inner {
    session: Session,
    config: ScyllaConfig,
    st: Statements,
    policy: RetentionPolicy,
    clock: Arc<dyn Clock>,
    seq_slots: Mutex<HashMap<(TenantId, ConversationId), SeqSlot>>,
    /// Bucket bounds this process wrote: `(tenant, conversation, bucket) → bound`.
    bounds: Mutex<HashMap<(TenantId, ConversationId, i64), i64>>,
    /// `gc_committed_auxiliary` has counted commits whose auxiliary TTL ended up to here.
    aux_counted_through: AtomicI64,
    /// `gc_expired_history` has counted records that expired up to here.
    history_counted_through: AtomicI64,
    /// Recovery entries one scan pass resolves at most.
    recovery_budget: AtomicUsize,
}

/// `MessageStore` on Scylla/Cassandra (see the module docs). Cheap to clone.
#[derive(Clone)]
pub struct ScyllaMessageStore {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for ScyllaMessageStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScyllaMessageStore")
            .field("keyspace", &self.inner.config.keyspace)
            .field("policy", &self.inner.policy)
            .finish_non_exhaustive()
    }
}

impl ScyllaMessageStore {
    /// Opens a session to `config` and prepares every statement. Changes no schema: against a
    /// keyspace that was never migrated this fails (`Unavailable`, naming the statement).
    pub async fn connect(config: &ScyllaConfig, policy: RetentionPolicy, clock: Arc<dyn Clock>) -> StoreResult<Self> {
        let session = open_session(config).await?;
        Self::with_session(session, config, policy, clock).await
    }

    /// Like [`Self::connect`], on an open session.
    pub async fn with_session(
        session: Session,
        config: &ScyllaConfig,
        policy: RetentionPolicy,
        clock: Arc<dyn Clock>,
    ) -> StoreResult<Self> {
        super::config::validate_keyspace(&config.keyspace).map_err(crate::error::StoreError::InvalidInput)?;
        let st = Statements::prepare(&session, &config.keyspace).await?;
        let now = clock.now().0;
        Ok(Self {
            inner: Arc::new(Inner {
                session,
                config: config.clone(),
                st,
                policy,
                clock,
                seq_slots: Mutex::default(),
                bounds: Mutex::default(),
                aux_counted_through: AtomicI64::new(now),
                history_counted_through: AtomicI64::new(now),
                recovery_budget: AtomicUsize::new(recovery::MAX_ENTRIES_PER_PASS),
            }),
        })
    }

    /// Re-reads the schema (keyspace, replication, tables): see [`super::readiness`].
    pub async fn readiness(&self) -> StoreResult<Readiness> {
        readiness(&self.inner.session, &self.inner.config).await
    }

    /// The driver session (for tests and tools that inspect rows directly).
    pub fn session(&self) -> &Session {
        &self.inner.session
    }

    /// The configuration this store was opened with.
    pub fn config(&self) -> &ScyllaConfig {
        &self.inner.config
    }

    fn now(&self) -> UnixMillis {
        self.inner.clock.now()
    }
}

#[async_trait]
impl MessageStore for ScyllaMessageStore {
    async fn reserve(&self, request: &CommitRequest, proposed_id: MessageId) -> StoreResult<Commit> {
        self.reserve_impl(request, proposed_id).await
    }

    async fn put_record(&self, intent: &CommitIntent) -> StoreResult<Commit> {
        self.put_record_impl(intent).await
    }

    async fn mark_outbox_published(
        &self,
        key: &CommitKey,
        message_id: MessageId,
        publication: Publication,
    ) -> StoreResult<Commit> {
        self.mark_outbox_published_impl(key, message_id, publication).await
    }

    async fn mark_committed(&self, key: &CommitKey, message_id: MessageId) -> StoreResult<Commit> {
        self.mark_committed_impl(key, message_id).await
    }

    async fn load_commit(&self, key: &CommitKey) -> StoreResult<Option<Commit>> {
        self.load_commit_impl(key).await
    }

    async fn load_commit_for_request(&self, request: &CommitRequest) -> StoreResult<Option<Commit>> {
        self.load_commit_for_request_impl(request).await
    }

    async fn scan_recoverable_commits(&self, cutoff: UnixMillis, limit: usize) -> StoreResult<Vec<Commit>> {
        self.scan_recoverable_commits_impl(cutoff, limit).await
    }

    async fn gc_committed_auxiliary(&self, limit: usize) -> StoreResult<GcReport> {
        self.gc_committed_auxiliary_impl(limit).await
    }

    async fn gc_expired_history(&self, limit: usize) -> StoreResult<GcReport> {
        self.gc_expired_history_impl(limit).await
    }

    async fn history_page(&self, query: &HistoryQuery, authorizer: &dyn HistoryAuthorizer) -> StoreResult<HistoryPage> {
        self.history_page_impl(query, authorizer).await
    }

    async fn conversation_summaries(
        &self,
        tenant: TenantId,
        viewer: UserId,
        positions: &[ReadPosition],
    ) -> StoreResult<Vec<ConversationSummary>> {
        self.conversation_summaries_impl(tenant, viewer, positions).await
    }
}
