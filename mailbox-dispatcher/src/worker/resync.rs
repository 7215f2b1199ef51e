//! Noticing that the store lost part of a shard's state (Redis flushed, restarted without its
//! last writes, restored from an older snapshot, failed over to a replica that missed writes),
//! and where the shard's log must be read again from.
//!
//! The store's lane watermarks say which records it holds everything of: every lane passed
//! `next - 1`, so reading the log again from `next` rebuilds whatever it lost above (the same
//! entries at the same mailbox seqs: a dispatch's seq comes from its first observed offset, and
//! every write is a same-value upsert). Two signs that the store is behind the pipeline:
//!
//! - at start, the first record delivered (from the group's committed offset) is above `next`:
//!   offsets are committed only after every lane's watermark passed them, so the store has lost
//!   watermarks it once had;
//! - while running, the store keeps refusing to advance a lane over work this pipeline wrote
//!   and saw completed (`Conflict`: incomplete; `InvalidInput`: no dispatch observed there):
//!   it lost the chunk completions or receipts. A refusal can only be this, so a few in a row
//!   ([`STRIKES`]) are enough.

use qim_store::mailbox::LaneWatermark;
use qim_store::{ErrorKind, StoreError};

/// Consecutive refused advances after which the store is taken to have lost state.
pub const STRIKES: u32 = 3;

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
}

impl Resync {
    /// Knowledge of a pipeline that follows a rewind.
    pub fn after_rewind() -> Self {
        Self { after_rewind: true, ..Self::default() }
    }

    /// A record at `offset` arrived.
    pub fn received(&mut self, offset: u64) {
        self.first.get_or_insert(offset);
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

#[cfg(test)]
mod tests {
    use qim_store::mailbox::{LaneId, ShardId};

    use super::*;

    fn wm(lane: u8, through: Option<u64>) -> LaneWatermark {
        LaneWatermark { shard: ShardId(0), lane: LaneId::new(lane).unwrap(), through }
    }

    #[test]
    fn the_store_is_behind_when_the_first_record_is_past_its_watermarks() {
        let mut r = Resync::default();
        r.started_at(&[wm(0, Some(9)), wm(1, Some(4))]);
        assert_eq!(r.behind_at_start(), None, "no record yet");
        r.received(5);
        assert_eq!(r.behind_at_start(), None, "reading from where every lane is");
        let mut r = Resync::default();
        r.received(12);
        r.started_at(&[wm(0, Some(9)), wm(1, Some(4))]);
        assert_eq!(r.behind_at_start(), Some(5), "lane 1 lost 5..12");
        let mut wiped = Resync::default();
        wiped.received(300);
        wiped.started_at(&[wm(0, None), wm(1, None)]);
        assert_eq!(wiped.behind_at_start(), Some(0), "a wiped store holds nothing");
        let mut again = Resync::after_rewind();
        again.received(300);
        again.started_at(&[wm(0, None)]);
        assert_eq!(again.behind_at_start(), None, "the log starts at 300 now: nothing further back to read");
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
