//! `MessageStore` over two tiers (ADR-0018/0019): the Redis hot tier holds the commit state and
//! the recent history window, the Scylla archive holds every archived record until its
//! retention ends. Everything but history reads goes to the hot tier; history reads merge both.
//!
//! # Where a record is
//!
//! A committed record is in the hot tier from RECORDED until the trim removes it, which happens
//! only once it is older than the hot window *and* at or below the conversation's archived
//! watermark (the archiver raises the watermark after the archive holds the record). Hence, at
//! any moment, every live record is in at least one tier, and a record created less than
//! `window - TRIM_SAFETY_MARGIN` ago is always in the hot tier.
//!
//! # How a page is read
//!
//! The hot tier is read first, then the archive: a record trimmed between the two reads was
//! archived before it was trimmed, so the second read finds it (reading in the other order
//! could miss it). After Redis lost state the hot tier holds only part of a conversation's
//! recent history until the conversation's next send revalidated its seq lease (which writes
//! the recent records back, newest first); until then ([`HotTier::holds_recent_history`]) every
//! page merges both tiers. Otherwise seqs are issued in time order, so every seq above a hot
//! record created after `now - window + margin` is still in the hot tier:
//!
//! - `Older`: when the page's oldest hot record is that young, the archive is asked only for its
//!   earliest record: a full hot page is the answer (`has_more` also when the archive holds
//!   something below it), and so is a hot page that ran out when the archive holds nothing
//!   below it. Otherwise the archive page for the same query is read and merged.
//! - `Newer`: when the first hot record is that young and the archive holds nothing below it
//!   (or the anchor sits right below it), the hot page is the answer; otherwise both merge.
//!
//! Merging (see [`page`]) deduplicates by seq (the same seq in both tiers must be the same
//! record, else `CorruptEntry`), never places a record beyond the point where either tier's
//! page stopped with more to come, applies `max_items` and the byte budget (the first record
//! may exceed it, later ones never do) to the merged sequence, and drops expired records.
//! `earliest_available` is the lower of the two tiers' earliest live records.
//!
//! The authorizer is consulted once, before anything is read; the tiers are then read with an
//! internal allow-all authorizer.

mod membership;
mod page;

pub use self::membership::TieredMembershipStore;

use std::sync::Arc;

use async_trait::async_trait;

use crate::clock::Clock;
use crate::error::{StoreError, StoreResult};
use crate::ids::{ConversationId, MessageId, TenantId, UnixMillis, UserId, MILLIS_PER_DAY};
use crate::message::{
    Commit, CommitIntent, CommitKey, CommitRequest, ConversationSummary, Direction, HistoryPage, HistoryQuery,
    MessageRecord, Publication, ReadPosition, MAX_PAGE_ITEMS, UNREAD_PRECISE_LIMIT,
};
use crate::message_store::{GcReport, HistoryAuthorizer, MessageStore};
use crate::redis::RedisMessageStore;
use crate::scylla::ScyllaMessageStore;

/// How much younger than the hot window a record must be for the tiered store to rely on the
/// hot tier alone around it: covers clock skew between the trimming process and this one and a
/// trim pass in progress.
pub const TRIM_SAFETY_MARGIN_MILLIS: i64 = 60 * 60 * 1000;

/// The hot tier of a [`TieredMessageStore`]: a store that can tell whether it holds a
/// conversation's recent history whole.
#[async_trait]
pub trait HotTier: MessageStore {
    /// Whether every record written to this tier for the conversation since it last lost state
    /// is still there, and everything it lost was written back (`false` after Redis lost state,
    /// until the conversation's seq lease was revalidated). Readers trust the hot tier alone,
    /// without the archive, only when this was `true` before they read.
    async fn holds_recent_history(&self, tenant: TenantId, conversation: ConversationId) -> StoreResult<bool>;
}

#[async_trait]
impl HotTier for RedisMessageStore {
    async fn holds_recent_history(&self, tenant: TenantId, conversation: ConversationId) -> StoreResult<bool> {
        self.hot_tier_trusted(tenant, conversation).await
    }
}

/// The tiers are read after the caller's authorizer admitted the viewer.
struct AlreadyAuthorized;

#[async_trait]
impl HistoryAuthorizer for AlreadyAuthorized {
    async fn authorize_history(&self, _: TenantId, _: ConversationId, _: UserId) -> StoreResult<()> {
        Ok(())
    }
}

/// The Redis hot tier and the Scylla archive behind one `MessageStore` (see the module docs).
/// Cheap to clone.
#[derive(Clone)]
pub struct TieredMessageStore {
    hot: Arc<dyn HotTier>,
    archive: Arc<dyn MessageStore>,
    hot_window_millis: i64,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for TieredMessageStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TieredMessageStore").field("hot_window_millis", &self.hot_window_millis).finish_non_exhaustive()
    }
}

impl TieredMessageStore {
    /// The writer's store: `hot` becomes the owner of the hot-tier window
    /// ([`RedisMessageStore::with_trim_window`]), so every COMMITTED record is registered for the
    /// trim (and long-lived ones skip the expiry index, ADR-0019 revision 2); `archive` serves
    /// what the trim removed. `hot_window_days` must be the `QIM_HOT_WINDOW_DAYS` the archiver's
    /// trim uses (1..=30).
    pub fn new(
        hot: RedisMessageStore,
        archive: ScyllaMessageStore,
        hot_window_days: u32,
        clock: Arc<dyn Clock>,
    ) -> StoreResult<Self> {
        let hot = hot.with_trim_window(hot_window_days);
        Self::from_parts(Arc::new(hot), Arc::new(archive), hot_window_days, clock)
    }

    /// Any two stores as the tiers (tests, tools). `hot` must already own the trim window if
    /// anything trims it.
    pub fn from_parts(
        hot: Arc<dyn HotTier>,
        archive: Arc<dyn MessageStore>,
        hot_window_days: u32,
        clock: Arc<dyn Clock>,
    ) -> StoreResult<Self> {
        if !(1..=30).contains(&hot_window_days) {
            return Err(StoreError::InvalidInput(format!("hot window of {hot_window_days} days is not in 1..=30")));
        }
        let hot_window_millis = i64::from(hot_window_days) * MILLIS_PER_DAY;
        Ok(Self { hot, archive, hot_window_millis, clock })
    }

    /// Whether `record` was created recently enough that no seq above it can have been trimmed.
    fn surely_untrimmed(&self, record: &MessageRecord, now: UnixMillis) -> bool {
        record.created_at.0 > now.0 - self.hot_window_millis + TRIM_SAFETY_MARGIN_MILLIS
    }

    /// One page, after authorization (see the module docs).
    async fn read_page(&self, query: &HistoryQuery) -> StoreResult<HistoryPage> {
        if query.max_items == 0 || query.max_items > MAX_PAGE_ITEMS {
            return Err(StoreError::InvalidInput(format!(
                "max_items must be 1..={MAX_PAGE_ITEMS}, got {}",
                query.max_items
            )));
        }
        let now = self.clock.now();
        // Asked first: trusted before the read means the read saw a complete hot tier.
        let trusted = self.hot.holds_recent_history(query.tenant, query.conversation).await?;
        let hot = self.hot.history_page(query, &AlreadyAuthorized).await?;
        if !trusted {
            return self.merged(query, hot, now).await;
        }
        // The hot record nearest the far end of the page; every seq above it is in the hot tier
        // when it is young enough.
        let edge = match query.direction {
            Direction::Older => hot.records.last(),
            Direction::Newer => hot.records.first(),
        };
        let Some(edge) = edge.filter(|r| self.surely_untrimmed(r, now)).map(|r| r.seq) else {
            return self.merged(query, hot, now).await;
        };
        let archive_earliest = self.archive_earliest(query, &hot).await?;
        let archive_below_edge = archive_earliest.is_some_and(|e| e < edge);
        let page_full = hot.has_more || hot.records.len() == query.max_items;
        let (complete, has_more) = match query.direction {
            Direction::Older => (page_full || !archive_below_edge, hot.has_more || archive_below_edge),
            Direction::Newer => {
                let anchor_touches_edge = query.anchor.is_some_and(|a| a.0.saturating_add(1) >= edge.0);
                (!archive_below_edge || anchor_touches_edge, hot.has_more)
            }
        };
        if !complete {
            return self.merged(query, hot, now).await;
        }
        let earliest_available = page::min_seq(hot.earliest_available, archive_earliest);
        let mut records = hot.records;
        records.retain(|r| !r.is_expired(now));
        Ok(HistoryPage { records, earliest_available, has_more })
    }

    /// The archive's page for the same query, merged with the hot page.
    async fn merged(&self, query: &HistoryQuery, hot: HistoryPage, now: UnixMillis) -> StoreResult<HistoryPage> {
        let archive = self.archive.history_page(query, &AlreadyAuthorized).await?;
        page::merge(query, hot, archive, now)
    }

    /// The archive's earliest live seq (none needed when the hot tier already starts at 1).
    async fn archive_earliest(
        &self,
        query: &HistoryQuery,
        hot: &HistoryPage,
    ) -> StoreResult<Option<crate::ids::ConversationSeq>> {
        if hot.earliest_available.is_some_and(|e| e.0 == 1) {
            return Ok(None);
        }
        let probe =
            HistoryQuery { direction: Direction::Newer, anchor: None, max_items: 1, max_bytes: 0, ..query.clone() };
        Ok(self.archive.history_page(&probe, &AlreadyAuthorized).await?.earliest_available)
    }

    /// One conversation's unread summary from the newest records of both tiers.
    async fn summary(&self, tenant: TenantId, viewer: UserId, p: &ReadPosition) -> StoreResult<ConversationSummary> {
        let window = UNREAD_PRECISE_LIMIT as usize + 1;
        let query = HistoryQuery {
            tenant,
            conversation: p.conversation,
            viewer,
            direction: Direction::Older,
            anchor: None,
            max_items: window,
            max_bytes: usize::MAX,
        };
        let page = self.read_page(&query).await?;
        let newer: Vec<&MessageRecord> = page.records.iter().take_while(|r| r.seq > p.read_through).collect();
        let (unread, unread_precise) = if newer.len() > UNREAD_PRECISE_LIMIT as usize {
            (UNREAD_PRECISE_LIMIT, false)
        } else {
            let n = newer.iter().filter(|r| r.sender != viewer && r.kind.counts_as_unread()).count();
            (u32::try_from(n).unwrap_or(UNREAD_PRECISE_LIMIT), true)
        };
        let last_seq = page.records.first().map(|r| r.seq);
        Ok(ConversationSummary { conversation: p.conversation, last_seq, unread, unread_precise })
    }
}

#[async_trait]
impl MessageStore for TieredMessageStore {
    async fn reserve(&self, request: &CommitRequest, proposed_id: MessageId) -> StoreResult<Commit> {
        self.hot.reserve(request, proposed_id).await
    }

    async fn reserve_from_member(
        &self,
        request: &CommitRequest,
        proposed_id: MessageId,
        members: &dyn HistoryAuthorizer,
    ) -> StoreResult<Commit> {
        self.hot.reserve_from_member(request, proposed_id, members).await
    }

    async fn reserve_and_record(
        &self,
        request: &CommitRequest,
        proposed_id: MessageId,
        members: &dyn HistoryAuthorizer,
    ) -> StoreResult<Commit> {
        self.hot.reserve_and_record(request, proposed_id, members).await
    }

    async fn put_record(&self, intent: &CommitIntent) -> StoreResult<Commit> {
        self.hot.put_record(intent).await
    }

    async fn mark_outbox_published(
        &self,
        key: &CommitKey,
        message_id: MessageId,
        publication: Publication,
    ) -> StoreResult<Commit> {
        self.hot.mark_outbox_published(key, message_id, publication).await
    }

    async fn mark_committed(&self, key: &CommitKey, message_id: MessageId) -> StoreResult<Commit> {
        self.hot.mark_committed(key, message_id).await
    }

    async fn mark_outbox_published_and_committed(
        &self,
        key: &CommitKey,
        message_id: MessageId,
        publication: Publication,
    ) -> StoreResult<Commit> {
        self.hot.mark_outbox_published_and_committed(key, message_id, publication).await
    }

    async fn load_commit(&self, key: &CommitKey) -> StoreResult<Option<Commit>> {
        self.hot.load_commit(key).await
    }

    async fn load_commit_for_request(&self, request: &CommitRequest) -> StoreResult<Option<Commit>> {
        self.hot.load_commit_for_request(request).await
    }

    async fn scan_recoverable_commits(&self, cutoff: UnixMillis, limit: usize) -> StoreResult<Vec<Commit>> {
        self.hot.scan_recoverable_commits(cutoff, limit).await
    }

    async fn gc_committed_auxiliary(&self, limit: usize) -> StoreResult<GcReport> {
        self.hot.gc_committed_auxiliary(limit).await
    }

    /// The hot tier's expiry drain; archive rows expire by their own TTL.
    async fn gc_expired_history(&self, limit: usize) -> StoreResult<GcReport> {
        self.hot.gc_expired_history(limit).await
    }

    async fn history_page(&self, query: &HistoryQuery, authorizer: &dyn HistoryAuthorizer) -> StoreResult<HistoryPage> {
        authorizer.authorize_history(query.tenant, query.conversation, query.viewer).await?;
        self.read_page(query).await
    }

    async fn conversation_summaries(
        &self,
        tenant: TenantId,
        viewer: UserId,
        positions: &[ReadPosition],
    ) -> StoreResult<Vec<ConversationSummary>> {
        let mut out = Vec::with_capacity(positions.len());
        for p in positions {
            out.push(self.summary(tenant, viewer, p).await?);
        }
        Ok(out)
    }
}
