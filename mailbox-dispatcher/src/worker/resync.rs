//! Noticing that the store lost part of a shard's state (Redis flushed, restarted without its
//! last writes, restored from an older snapshot, failed over to a replica that missed writes),
//! and where the shard's log must be read again from.
//!
//! The store's lane watermarks say which records it holds everything of: every lane passed
//! `next - 1`, so reading the log again from `next` rebuilds whatever it lost above (the same
//! entries at the same mailbox seqs: a dispatch's seq comes from its first observed offset, and
//! every write is a same-value upsert). Signs that the store is behind the pipeline:
//!
//! - a fenced write was refused (`StateLost`): every begin, chunk mark and advance names the
//!   store's incarnation of the shard the pipeline took it over in ([`take_over`]), and the
//!   store writes nothing once it is another. This is what keeps a pipeline from building on a
//!   rolled-back store between the loss and the moment it notices: an advance over
//!   observations the store forgot would skip their holes for good, a duplicate begun first
//!   would fix the dispatch's seq at the wrong offset;
//! - the store's incarnation of the shard changed (`MailboxStore::shard_incarnation`, read
//!   every page: Redis flushed, restarted, failed over or restored), for a pipeline with
//!   nothing to write;
//! - at start, the first record delivered (from the group's committed offset) is above `next`:
//!   offsets are committed only after every lane's watermark passed them, so the store has lost
//!   watermarks it once had;
//! - while running, the store keeps refusing to advance a lane over work this pipeline wrote
//!   and saw completed (`Conflict`: incomplete; `InvalidInput`: no dispatch observed there):
//!   it lost the chunk completions or receipts. A refusal can only be this, so a few in a row
//!   ([`STRIKES`]) are enough;
//! - a chunk step finds a dispatch this pipeline began unknown to the store (`NotFound`).
//!
//! The pipeline then stops its steps (their retries could never succeed), reads the store's
//! watermarks (again on every page until a read succeeds), and ends by seeking the partition
//! back to them. The next pipeline drops what arrives before the offset sought (records fetched
//! before the seek); if that offset does not arrive among the next [`STALE_RECORDS`] (the log
//! no longer holds it: retention), it seeks again, to where the log now begins.

use std::sync::Arc;
use std::time::Duration;

use qim_store::mailbox::{LaneWatermark, ShardFence, ShardId};
use qim_store::{ErrorKind, StoreError};
use rdkafka::consumer::Consumer;
use tokio_util::sync::CancellationToken;

use super::steps::ShardContext;

use crate::retry::{never, retry_store};

/// Consecutive refused advances after which the store is taken to have lost state.
pub const STRIKES: u32 = 3;

/// Records other than the one sought that a pipeline after a rewind drops before it seeks
/// again: more than were ever buffered before the seek (one pipeline's channel).
pub const STALE_RECORDS: u32 = super::CHANNEL as u32;

/// What a pipeline does with a record it received.
#[derive(Debug, PartialEq, Eq)]
pub enum Arrival {
    /// Dispatch it.
    Take,
    /// From before the seek of the rewind this pipeline follows.
    Drop,
    /// The offset sought did not arrive: seek there again (at most as far back as the log goes).
    SeekAgain(u64),
}

/// The first offset the store does not hold everything of, by its lane watermarks.
pub fn next_after(watermarks: &[LaneWatermark]) -> u64 {
    watermarks.iter().map(|w| w.through.map_or(0, |t| t + 1)).min().unwrap_or(0)
}

/// What one pipeline knows about whether its store is behind it.
#[derive(Debug, Default)]
pub struct Resync {
    first: Option<u64>,
    start_next: Option<u64>,
    strikes: u32,
    /// This pipeline starts where a rewind sought the log (at most as far back as the log
    /// still goes): starting there again is the point, not a sign.
    after_rewind: bool,
    /// The offset a rewind sought the log to, until the record there arrives.
    resume_at: Option<u64>,
    /// Records dropped while waiting for `resume_at`.
    dropped: u32,
    /// The store was found to have lost state, and where its watermarks are is not known yet.
    pub lost: bool,
}

impl Resync {
    /// Knowledge of a pipeline that follows a rewind, which sought the log to `at`.
    pub fn after_rewind(at: u64) -> Self {
        Self { after_rewind: true, resume_at: Some(at), ..Self::default() }
    }

    /// A record at `offset` arrived: whether to dispatch it.
    pub fn arrived(&mut self, offset: u64) -> Arrival {
        match self.resume_at {
            Some(at) if offset == at => self.resume_at = None,
            Some(at) if offset < at => return Arrival::Drop,
            Some(at) => {
                self.dropped += 1;
                if self.dropped > STALE_RECORDS {
                    self.dropped = 0;
                    return Arrival::SeekAgain(at);
                }
                return Arrival::Drop;
            }
            None => {}
        }
        self.first.get_or_insert(offset);
        Arrival::Take
    }

    /// The store's watermarks, read when the pipeline started.
    pub fn started_at(&mut self, watermarks: &[LaneWatermark]) {
        self.start_next = Some(next_after(watermarks));
    }

    /// Where to read again from, if the first record came after what the store holds.
    pub fn behind_at_start(&self) -> Option<u64> {
        match (self.first, self.start_next) {
            (Some(first), Some(next)) if next < first && !self.after_rewind => Some(next),
            _ => None,
        }
    }

    /// An advance came back: `true` once refusals say the store lost this shard's state.
    pub fn advance_answered(&mut self, result: &Result<LaneWatermark, StoreError>) -> bool {
        match result {
            Ok(_) => self.strikes = 0,
            Err(e) if matches!(e.kind(), ErrorKind::Conflict | ErrorKind::InvalidInput) => self.strikes += 1,
            Err(_) => {}
        }
        self.strikes >= STRIKES
    }
}

/// Takes `shard` over: reads the store's incarnation of it (retried until it answers), the
/// fence of every bookkeeping write of the pipeline that follows. `None` when `stop` fired
/// first.
pub async fn take_over(ctx: &ShardContext, shard: ShardId, stop: &CancellationToken) -> Option<ShardFence> {
    let read = retry_store("shard_incarnation", stop, never, || ctx.store.shard_incarnation(shard)).await?;
    read.ok().map(|incarnation| ShardFence { shard, incarnation })
}

/// Seeks `shard`'s partition back to `to` (at least its first retained offset), for a new
/// pipeline to read on from there; the offset sought, or `None` when the seek failed (the
/// partition is then read on from where it was, and the next pipeline finds the store behind
/// again).
pub async fn seek_back(ctx: &ShardContext, shard: ShardId, to: u64) -> Option<u64> {
    let (consumer, topic) = (Arc::clone(&ctx.consumer), ctx.kafka.dispatch_topic.clone());
    let partition = i32::from(shard.0);
    let sought = tokio::task::spawn_blocking(move || -> Result<u64, String> {
        let timeout = Duration::from_secs(10);
        let (low, _) = consumer.fetch_watermarks(&topic, partition, timeout).map_err(|e| e.to_string())?;
        let to = to.max(u64::try_from(low).unwrap_or(0));
        let offset = rdkafka::Offset::Offset(i64::try_from(to).unwrap_or(i64::MAX));
        consumer.seek(&topic, partition, offset, timeout).map_err(|e| e.to_string())?;
        Ok(to)
    })
    .await
    .map_err(|e| format!("the seek task failed: {e}"))
    .and_then(|r| r);
    match sought {
        Ok(to) => {
            tracing::info!(shard = shard.0, to, "shard log sought back for the store's lost state");
            Some(to)
        }
        Err(e) => {
            tracing::warn!(shard = shard.0, error = %e, "seeking the shard's log back failed");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use qim_store::mailbox::LaneId;

    use super::*;

    fn wm(lane: u8, through: Option<u64>) -> LaneWatermark {
        LaneWatermark { shard: ShardId(0), lane: LaneId::new(lane).unwrap(), through }
    }

    #[test]
    fn the_store_is_behind_when_the_first_record_is_past_its_watermarks() {
        let mut r = Resync::default();
        r.started_at(&[wm(0, Some(9)), wm(1, Some(4))]);
        assert_eq!(r.behind_at_start(), None, "no record yet");
        assert_eq!(r.arrived(5), Arrival::Take);
        assert_eq!(r.behind_at_start(), None, "reading from where every lane is");
        let mut r = Resync::default();
        assert_eq!(r.arrived(12), Arrival::Take);
        r.started_at(&[wm(0, Some(9)), wm(1, Some(4))]);
        assert_eq!(r.behind_at_start(), Some(5), "lane 1 lost 5..12");
        let mut wiped = Resync::default();
        assert_eq!(wiped.arrived(300), Arrival::Take);
        wiped.started_at(&[wm(0, None), wm(1, None)]);
        assert_eq!(wiped.behind_at_start(), Some(0), "a wiped store holds nothing");
        let mut again = Resync::after_rewind(300);
        assert_eq!(again.arrived(300), Arrival::Take);
        again.started_at(&[wm(0, None)]);
        assert_eq!(again.behind_at_start(), None, "the log starts at 300 now: nothing further back to read");
    }

    #[test]
    fn after_a_rewind_records_before_the_sought_one_are_dropped_until_it_arrives() {
        let mut r = Resync::after_rewind(100);
        assert_eq!(r.arrived(640), Arrival::Drop, "fetched before the seek");
        assert_eq!(r.arrived(99), Arrival::Drop);
        assert_eq!(r.arrived(100), Arrival::Take, "the sought record");
        assert_eq!(r.arrived(101), Arrival::Take);
        assert_eq!(r.arrived(640), Arrival::Take, "after it, everything is taken");
    }

    #[test]
    fn a_sought_offset_that_never_arrives_means_seeking_again() {
        let mut r = Resync::after_rewind(100);
        for offset in 0..u64::from(STALE_RECORDS) {
            assert_eq!(r.arrived(500 + offset), Arrival::Drop);
        }
        assert_eq!(r.arrived(500 + u64::from(STALE_RECORDS)), Arrival::SeekAgain(100));
    }

    #[test]
    fn refusals_in_a_row_mean_lost_state_and_any_success_resets_them() {
        let mut r = Resync::default();
        let refused = Err(StoreError::Conflict("incomplete".into()));
        assert!(!r.advance_answered(&refused));
        assert!(!r.advance_answered(&refused));
        assert!(!r.advance_answered(&Ok(wm(0, Some(1)))), "a success resets");
        assert!(!r.advance_answered(&Err(StoreError::unavailable("down".to_owned(), std::io::Error::other("x")))));
        assert!(!r.advance_answered(&refused));
        assert!(!r.advance_answered(&refused));
        assert!(r.advance_answered(&Err(StoreError::InvalidInput("no dispatch observed".into()))));
    }
}
