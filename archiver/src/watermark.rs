//! The archived watermark per conversation: the highest seq such that every seq at or below it
//! is archived or is a hole (ADR-0019: the hot-tier trim never passes it, so a stalled archiver
//! stops the trim and never loses unarchived data).
//!
//! # Contiguity
//!
//! Seqs have legal holes (a reserve that lost a race or crashed consumed a number that never got
//! a record), so "contiguous" can not mean "every number". The evidence is the two tiers
//! themselves, read at LOCAL_QUORUM (archive) and from the hot tier's history index:
//! - a seq in the archive is archived;
//! - a seq in the hot tier only is a record not archived yet: the watermark stops below it;
//! - a seq in neither is either a hole or a record still being written (RESERVED, not yet
//!   RECORDED, e.g. a commit the writer's recovery will finish). It counts as a hole once the
//!   next present seq was created more than `QIM_ARCHIVER_HOLE_GRACE_SECS` ago: seqs are issued
//!   in time order, so a reservation below it is at least that old, and the writer's recovery
//!   finishes unfinished commits within seconds. Until then the watermark waits. Records that
//!   expired (and left the hot tier) are in neither tier either: they are past retention, so
//!   passing them loses nothing readable.
//!
//! Should a record ever be recorded after its seq was judged a hole (every writer down for
//! longer than the grace), the trim could remove it from the hot tier before the archiver
//! reaches it once it is past the window; it is still published and archived afterwards (the
//! publication happens after RECORDED and reads the intent), so it is late in history reads,
//! not lost.
//!
//! # Fast and slow path
//!
//! After a batch is durable, each conversation's archived seqs are compared with the watermark
//! in force (cached; the cache only ever lags Redis): when they extend it contiguously, it is
//! raised without reading anything. Otherwise (or while the conversation is known to wait on a
//! gap) both tiers are read above the watermark and walked as above. A conversation whose
//! watermark still waits with archived records above it is put on the persistent gap schedule
//! (`qim_store::redis::ArchiveGaps`), which a loop revisits, so the decision survives restarts
//! and quiet conversations. Raising is monotonic (`record_archived_watermark`), so any number of
//! archivers may evaluate any conversation: every raise is backed by durable archive rows.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures_util::stream::{self, TryStreamExt};
use qim_runtime::events::emit;
use qim_store::clock::Clock;
use qim_store::ids::{ConversationId, ConversationSeq, TenantId, UnixMillis, UserId};
use qim_store::message::{Direction, HistoryQuery, MessageRecord, MAX_PAGE_ITEMS};
use qim_store::redis::{ArchiveGaps, RedisMessageStore};
use qim_store::scylla::ScyllaMessageStore;
use qim_store::{HistoryAuthorizer, MessageStore, StoreResult};

use crate::events::{WatermarkAdvanced, WatermarkGaps, WatermarkNotEvaluated};

type Conv = (TenantId, ConversationId);

/// Pages of each tier one evaluation reads at most before it reschedules itself.
const MAX_ROUNDS: usize = 8;
/// A conversation is evaluated at most this often from the batch path; more often, it is
/// scheduled for the recheck loop instead.
const MIN_REEVALUATION: Duration = Duration::from_secs(2);
/// Conversations evaluated or raised at once.
const CONCURRENCY: usize = 32;
/// More cached watermarks than this and the cache starts over.
const MAX_CACHED: usize = 200_000;

/// What a tier says about one seq.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Presence {
    /// In the archive.
    pub archived: bool,
    /// The record's creation time (ms).
    pub created_at: i64,
}

/// Why a walk stopped before the end of what it saw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Block {
    /// Seqs missing from both tiers right below a record created less than the grace ago;
    /// look again at `due` (ms).
    YoungHole {
        /// When the missing seqs count as holes.
        due: i64,
    },
    /// A record in the hot tier only.
    Unarchived {
        /// Its seq.
        seq: u64,
    },
}

/// Where a walk ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Walk {
    /// The highest contiguous archived seq found.
    pub watermark: u64,
    /// Why it stopped, if it did not reach the end of `present`.
    pub blocked: Option<Block>,
}

/// Walks `present` (seqs above `start` in both tiers) upward from `start` (see the module docs).
pub fn walk(start: u64, present: &BTreeMap<u64, Presence>, now: i64, grace_millis: i64) -> Walk {
    let mut watermark = start;
    for (&seq, p) in present.range(start.saturating_add(1)..) {
        if seq > watermark + 1 && p.created_at > now - grace_millis {
            return Walk { watermark, blocked: Some(Block::YoungHole { due: p.created_at + grace_millis }) };
        }
        if !p.archived {
            return Walk { watermark, blocked: Some(Block::Unarchived { seq }) };
        }
        watermark = seq;
    }
    Walk { watermark, blocked: None }
}

/// The fast path: how far sorted, deduplicated `seqs` extend `watermark` contiguously, and
/// whether any seq lies beyond that.
pub fn extend(watermark: u64, seqs: &[u64]) -> (u64, bool) {
    let mut w = watermark;
    for &s in seqs {
        if s <= w {
            continue;
        }
        if s != w + 1 {
            return (w, true);
        }
        w = s;
    }
    (w, false)
}

/// The tiers are read by the archiver itself, not on behalf of a viewer.
struct Internal;

#[async_trait]
impl HistoryAuthorizer for Internal {
    async fn authorize_history(&self, _: TenantId, _: ConversationId, _: UserId) -> StoreResult<()> {
        Ok(())
    }
}

/// Maintains the archived watermarks of the conversations it sees (see the module docs).
pub struct Watermarks {
    hot: RedisMessageStore,
    archive: ScyllaMessageStore,
    gaps: ArchiveGaps,
    grace_millis: i64,
    clock: Arc<dyn Clock>,
    known: Mutex<HashMap<Conv, u64>>,
    pending: Mutex<HashMap<Conv, Instant>>,
}

impl Watermarks {
    /// Watermarks over these tiers, calling a missing seq a hole after `grace`.
    pub fn new(
        hot: RedisMessageStore,
        archive: ScyllaMessageStore,
        gaps: ArchiveGaps,
        grace: Duration,
        clock: Arc<dyn Clock>,
    ) -> Self {
        let grace_millis = i64::try_from(grace.as_millis()).unwrap_or(i64::MAX);
        Self { hot, archive, gaps, grace_millis, clock, known: Mutex::default(), pending: Mutex::default() }
    }

    fn remember(&self, conv: Conv, watermark: u64) {
        let mut known = self.known.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if known.len() >= MAX_CACHED {
            known.clear();
        }
        let entry = known.entry(conv).or_default();
        *entry = (*entry).max(watermark);
    }

    fn cached(&self, conv: Conv) -> Option<u64> {
        self.known.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(&conv).copied()
    }

    /// Whether the batch path may evaluate `conv` now (and notes that it does).
    fn may_evaluate(&self, conv: Conv) -> bool {
        let mut pending = self.pending.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match pending.get(&conv) {
            Some(at) if at.elapsed() < MIN_REEVALUATION => false,
            _ => {
                pending.insert(conv, Instant::now());
                true
            }
        }
    }

    fn is_pending(&self, conv: Conv) -> bool {
        self.pending.lock().unwrap_or_else(std::sync::PoisonError::into_inner).contains_key(&conv)
    }

    async fn raise(&self, (tenant, conversation): Conv, through: u64) -> StoreResult<u64> {
        let in_force = self.hot.record_archived_watermark(tenant, conversation, ConversationSeq(through)).await?.0;
        self.remember((tenant, conversation), in_force);
        Ok(in_force)
    }

    /// Called after `records` are durable in the archive: raises each conversation's watermark
    /// as far as the evidence allows. `Unavailable` means "retry"; a conversation whose tiers
    /// hold contradictory data is reported (metric, error log) and left where it is.
    pub async fn observe(&self, records: &[MessageRecord]) -> StoreResult<()> {
        let mut by_conv: HashMap<Conv, Vec<u64>> = HashMap::new();
        for r in records {
            by_conv.entry((r.tenant, r.conversation)).or_default().push(r.seq.0);
        }
        stream::iter(by_conv.into_iter().map(Ok))
            .try_for_each_concurrent(CONCURRENCY, |(conv, mut seqs)| async move {
                seqs.sort_unstable();
                seqs.dedup();
                self.observe_one(conv, &seqs).await.or_else(|e| tolerate(conv, e))
            })
            .await
    }

    async fn observe_one(&self, conv: Conv, seqs: &[u64]) -> StoreResult<()> {
        let watermark = match self.cached(conv) {
            Some(w) => w,
            None => self.raise(conv, 0).await?,
        };
        let (extended, beyond) = extend(watermark, seqs);
        if extended > watermark {
            self.raise(conv, extended).await?;
            emit(WatermarkAdvanced);
        }
        if !beyond && !self.is_pending(conv) {
            return Ok(());
        }
        if self.may_evaluate(conv) {
            self.evaluate(conv).await
        } else {
            let soon = self.clock.now().plus_millis(MIN_REEVALUATION.as_millis() as i64);
            self.gaps.schedule(conv.0, conv.1, soon).await
        }
    }

    /// Reads both tiers above the watermark, raises it as far as the module docs allow, and
    /// schedules or clears the conversation's gap.
    pub async fn evaluate(&self, conv: Conv) -> StoreResult<()> {
        let (tenant, conversation) = conv;
        let now = self.clock.now().0;
        let start = self.raise(conv, 0).await?;
        let mut watermark = start;
        let mut blocked = None;
        let mut archived_above = false;
        let mut exhausted = false;
        for _ in 0..MAX_ROUNDS {
            let query = HistoryQuery {
                tenant,
                conversation,
                viewer: UserId([0; 16]),
                direction: Direction::Newer,
                anchor: (watermark > 0).then_some(ConversationSeq(watermark)),
                max_items: MAX_PAGE_ITEMS,
                max_bytes: usize::MAX,
            };
            let hot = self.hot.history_page(&query, &Internal).await?;
            let archive = self.archive.history_page(&query, &Internal).await?;
            // Beyond the last record of a page that has more, that tier is unknown.
            let cut = [&hot, &archive]
                .iter()
                .filter(|p| p.has_more)
                .filter_map(|p| p.records.last().map(|r| r.seq.0))
                .min()
                .unwrap_or(u64::MAX);
            let mut present = BTreeMap::new();
            for r in hot.records.iter().filter(|r| r.seq.0 <= cut) {
                present.insert(r.seq.0, Presence { archived: false, created_at: r.created_at.0 });
            }
            for r in archive.records.iter().filter(|r| r.seq.0 <= cut) {
                present.insert(r.seq.0, Presence { archived: true, created_at: r.created_at.0 });
            }
            let step = walk(watermark, &present, now, self.grace_millis);
            watermark = step.watermark;
            archived_above = present.range(watermark.saturating_add(1)..).any(|(_, p)| p.archived);
            blocked = step.blocked;
            if blocked.is_some() || cut == u64::MAX {
                exhausted = true;
                break;
            }
        }
        if watermark > start {
            self.raise(conv, watermark).await?;
            emit(WatermarkAdvanced);
        }
        let due = match (exhausted, blocked) {
            (false, _) => Some(now),
            (true, _) if !archived_above => None,
            (true, Some(Block::YoungHole { due })) => Some(due),
            (true, Some(Block::Unarchived { .. }) | None) => Some(now + self.grace_millis),
        };
        match due {
            Some(at) => self.gaps.reschedule(tenant, conversation, UnixMillis(at)).await?,
            None => {
                self.gaps.clear(tenant, conversation).await?;
                self.pending.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(&conv);
            }
        }
        tracing::debug!(%conversation, start, watermark, ?blocked, ?due, "watermark evaluated");
        Ok(())
    }

    /// Evaluates up to `limit` conversations whose scheduled look is due; returns how many.
    pub async fn recheck_due(&self, limit: usize) -> StoreResult<usize> {
        let due = self.gaps.due(self.clock.now(), limit).await?;
        let n = due.len();
        stream::iter(due.into_iter().map(Ok))
            .try_for_each_concurrent(CONCURRENCY, |conv| async move {
                self.evaluate(conv).await.or_else(|e| tolerate(conv, e))
            })
            .await?;
        emit(WatermarkGaps { waiting: self.gaps.len().await? });
        Ok(n)
    }
}

/// Availability errors propagate (the caller retries); anything else is a data problem of one
/// conversation: reported, and its watermark stays where it is (the hot tier keeps the data).
fn tolerate(conv: Conv, e: qim_store::StoreError) -> StoreResult<()> {
    if e.kind().is_retryable() {
        return Err(e);
    }
    emit(WatermarkNotEvaluated { conversation: &conv.1, error: &e });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const GRACE: i64 = 600_000;
    const NOW: i64 = 10_000_000;

    fn present(items: &[(u64, bool, i64)]) -> BTreeMap<u64, Presence> {
        items.iter().map(|&(s, archived, created_at)| (s, Presence { archived, created_at })).collect()
    }

    #[test]
    fn contiguous_archived_seqs_raise_the_watermark() {
        let p = present(&[(1, true, 0), (2, true, 0), (3, true, NOW)]);
        assert_eq!(walk(0, &p, NOW, GRACE), Walk { watermark: 3, blocked: None });
        assert_eq!(walk(2, &p, NOW, GRACE), Walk { watermark: 3, blocked: None });
    }

    #[test]
    fn an_unarchived_record_stops_the_watermark_below_it() {
        let p = present(&[(1, true, 0), (2, false, 0), (3, true, 0)]);
        assert_eq!(walk(0, &p, NOW, GRACE), Walk { watermark: 1, blocked: Some(Block::Unarchived { seq: 2 }) });
    }

    #[test]
    fn a_missing_seq_is_a_hole_only_once_the_next_record_is_older_than_the_grace() {
        let young = present(&[(1, true, 0), (3, true, NOW - 1000)]);
        let w = walk(0, &young, NOW, GRACE);
        assert_eq!(w, Walk { watermark: 1, blocked: Some(Block::YoungHole { due: NOW - 1000 + GRACE }) });
        let old = present(&[(1, true, 0), (3, true, NOW - GRACE - 1), (7, true, NOW - GRACE)]);
        assert_eq!(walk(0, &old, NOW, GRACE), Walk { watermark: 7, blocked: None });
        // Leading holes (seq 1 consumed by contention) are judged the same way.
        assert_eq!(walk(0, &present(&[(2, true, 0)]), NOW, GRACE).watermark, 2);
    }

    #[test]
    fn the_fast_path_takes_only_a_contiguous_extension() {
        assert_eq!(extend(3, &[4, 5, 6]), (6, false));
        assert_eq!(extend(3, &[1, 2, 3]), (3, false), "replays change nothing");
        assert_eq!(extend(3, &[2, 4, 6]), (4, true));
        assert_eq!(extend(3, &[5]), (3, true));
        assert_eq!(extend(0, &[]), (0, false));
    }
}
