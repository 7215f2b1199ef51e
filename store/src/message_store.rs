//! The `MessageStore` contract: the durable commit state machine and conversation history.

use async_trait::async_trait;

use crate::error::{StoreError, StoreResult};
use crate::ids::{ConversationId, MessageId, TenantId, UnixMillis, UserId};
use crate::message::{
    Commit, CommitIntent, CommitKey, CommitRequest, CommitState, ConversationSummary, HistoryPage, HistoryQuery,
    Publication, ReadPosition,
};

/// How long a commit's auxiliary facts (the commit row and its recovery index entry) outlive
/// COMMITTED. Within this window an identical retry returns the first answer; afterwards the
/// request key may be reused as a new message.
pub const COMMIT_AUX_TTL_MILLIS: i64 = 2 * 60 * 60 * 1000;

/// Decides whether a viewer may read a conversation's history.
#[async_trait]
pub trait HistoryAuthorizer: Send + Sync {
    /// `Ok(())` when `viewer` may read `conversation`; `Err(StoreError::Forbidden)` otherwise.
    /// Called before any history byte is read.
    async fn authorize_history(
        &self,
        tenant: TenantId,
        conversation: ConversationId,
        viewer: UserId,
    ) -> StoreResult<()>;
}

/// What one GC pass did.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct GcReport {
    /// Items removed.
    pub removed: usize,
    /// Index entries whose record was already gone below the hot-tier lower bound (legacy
    /// leftovers of a trim), cleaned and reported.
    pub orphans_cleaned: usize,
}

/// The durable commit state machine (RESERVED → RECORDED → OUTBOXED → COMMITTED) and the
/// conversation history it produces.
///
/// Every backend (memory, Redis, Scylla) satisfies the same contract suite
/// (`qim_store::testsuite`). The store owns no Kafka publication and no acknowledgement: the
/// writer's committer drives the steps.
#[async_trait]
pub trait MessageStore: Send + Sync {
    /// Reserves `request`: on first sight allocates the conversation's next seq, takes
    /// `proposed_id` as the message id and the store's clock as `created_at`, writes the
    /// recovery index entry and the RESERVED commit.
    ///
    /// A replay with the same key and byte-identical request returns the stored commit in
    /// whatever state it has reached (the first intent, never a new seq). The same key with a
    /// different request is `Conflict`. A payload over the limit is `InvalidInput`.
    async fn reserve(&self, request: &CommitRequest, proposed_id: MessageId) -> StoreResult<Commit>;

    /// [`Self::reserve`] of a send whose sender must be a member of the conversation, as
    /// `members` (the authorizer history reads use) decides: otherwise `Forbidden`, and nothing
    /// is issued or written (no seq, no commit). A replay is refused too once its sender has left.
    ///
    /// The default asks `members` first, one more round trip; a backend that can answer within
    /// its reservation (Redis: the allocation script reads the member cache) asks `members`
    /// only when it can not.
    async fn reserve_from_member(
        &self,
        request: &CommitRequest,
        proposed_id: MessageId,
        members: &dyn HistoryAuthorizer,
    ) -> StoreResult<Commit> {
        members.authorize_history(request.key.tenant, request.conversation, request.key.sender).await?;
        self.reserve(request, proposed_id).await
    }

    /// [`Self::reserve_from_member`], then [`Self::put_record`] when the reservation is
    /// RESERVED: the send's first two steps, which a backend may take in fewer round trips
    /// (the writer's hot path). The answer is the commit as stored: RECORDED after a new
    /// reservation; a replay's in whatever state it has reached; RESERVED when another driver
    /// moved the commit on while it was being recorded (the caller drives it from there, as
    /// after a `Conflict` of `put_record`). Refusals are `reserve_from_member`'s; a failure
    /// after the reservation leaves it RESERVED for the recovery loop.
    async fn reserve_and_record(
        &self,
        request: &CommitRequest,
        proposed_id: MessageId,
        members: &dyn HistoryAuthorizer,
    ) -> StoreResult<Commit> {
        let reserved = self.reserve_from_member(request, proposed_id, members).await?;
        if reserved.state != CommitState::Reserved {
            return Ok(reserved);
        }
        match self.put_record(&reserved.intent).await {
            Err(StoreError::Conflict(_)) => Ok(reserved),
            recorded => recorded,
        }
    }

    /// Writes the record and history index for `intent` (byte-identical to the reserved
    /// intent), then moves RESERVED → RECORDED. Any other state, or a different intent, is
    /// `Conflict`; an unknown key is `NotFound`.
    async fn put_record(&self, intent: &CommitIntent) -> StoreResult<Commit>;

    /// Stores where the record was published and moves RECORDED → OUTBOXED. The message id must
    /// match; any other state is `Conflict`.
    async fn mark_outbox_published(
        &self,
        key: &CommitKey,
        message_id: MessageId,
        publication: Publication,
    ) -> StoreResult<Commit>;

    /// Moves OUTBOXED → COMMITTED (the client may now be answered) and registers the record's
    /// expiry with the hot tier's expiry index. Any other state is `Conflict`.
    async fn mark_committed(&self, key: &CommitKey, message_id: MessageId) -> StoreResult<Commit>;

    /// [`Self::mark_outbox_published`], then [`Self::mark_committed`], with their contracts:
    /// RECORDED → OUTBOXED → COMMITTED. Either each transition is its own durable step, OUTBOXED
    /// first (a failure between them leaves OUTBOXED for the recovery loop), or a backend stores
    /// both at once, atomically (a failure leaves RECORDED, which the recovery loop publishes
    /// again). Never COMMITTED without the publication.
    async fn mark_outbox_published_and_committed(
        &self,
        key: &CommitKey,
        message_id: MessageId,
        publication: Publication,
    ) -> StoreResult<Commit> {
        self.mark_outbox_published(key, message_id, publication).await?;
        self.mark_committed(key, message_id).await
    }

    /// The commit stored under `key`, if any (within the auxiliary TTL).
    async fn load_commit(&self, key: &CommitKey) -> StoreResult<Option<Commit>>;

    /// The commit of `request`'s key, if any; `Conflict` when it was made for different bytes.
    async fn load_commit_for_request(&self, request: &CommitRequest) -> StoreResult<Option<Commit>>;

    /// Up to `limit` commits not yet COMMITTED whose `created_at` is before `cutoff`, oldest
    /// first, for the recovery loop to drive forward.
    async fn scan_recoverable_commits(&self, cutoff: UnixMillis, limit: usize) -> StoreResult<Vec<Commit>>;

    /// Removes up to `limit` auxiliary facts of commits COMMITTED more than
    /// [`COMMIT_AUX_TTL_MILLIS`] ago (TTL-managed backends count what already expired).
    async fn gc_committed_auxiliary(&self, limit: usize) -> StoreResult<GcReport>;

    /// Deletes up to `limit` history records whose expiry has passed, with their index entries.
    async fn gc_expired_history(&self, limit: usize) -> StoreResult<GcReport>;

    /// One page of history after `authorizer` admitted the viewer. Reads the index from the
    /// anchor in `query.direction`, at most `max_items` records within `max_bytes` of payload
    /// (the first record may exceed the budget, later ones never do). Never returns an expired
    /// record. An index entry without its record (or the reverse, or a record that contradicts
    /// its index position) is `CorruptEntry`.
    async fn history_page(&self, query: &HistoryQuery, authorizer: &dyn HistoryAuthorizer) -> StoreResult<HistoryPage>;

    /// Unread summaries of `positions` for `viewer`: messages after `read_through` sent by
    /// others, Normal or Edited. Exact up to [`crate::message::UNREAD_PRECISE_LIMIT`] candidate
    /// seqs; beyond, the cap with `unread_precise = false`.
    async fn conversation_summaries(
        &self,
        tenant: TenantId,
        viewer: UserId,
        positions: &[ReadPosition],
    ) -> StoreResult<Vec<ConversationSummary>>;
}
