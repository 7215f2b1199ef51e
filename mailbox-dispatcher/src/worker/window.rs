//! The bookkeeping of one shard's records in flight: which offsets are begun, which lanes of
//! each are complete, how far each lane may advance its watermark, and which offsets may be
//! stored. Pure (no I/O), so every rule is unit-tested.
//!
//! A *source* is an offset `begin_dispatch` recorded (first observations and duplicates); only a
//! source can be a watermark target. A refused record (dead-lettered) is not a source: it never
//! blocks a lane and is never a target.
//!
//! A lane's target is the highest source of the longest prefix of the window in which every
//! record's lane work is complete; since slots leave the window only when complete in every
//! lane, the popped prefix counts for every lane. A duplicate whose first observation is still
//! in the window is complete in a lane exactly when that first observation is.

use std::collections::{BTreeMap, HashMap, VecDeque};

use qim_store::mailbox::{ChunkId, DispatchId, LaneId, LANES};

/// Chunks still to complete, per lane.
pub type LaneCounts = [u32; LANES as usize];

#[derive(Clone, Debug, PartialEq, Eq)]
enum State {
    /// Received, `begin_dispatch` not done yet: blocks every lane.
    Beginning,
    /// Refused (dead-lettered): not a source, blocks nothing.
    Skipped,
    /// A source with lane work of its own.
    Work { id: DispatchId, remaining: Box<LaneCounts> },
    /// A source duplicating the `Work` slot at this offset.
    DupOf(u64),
}

#[derive(Clone, Debug)]
struct Slot {
    state: State,
    weight: usize,
}

/// The records of one shard in flight, by offset.
#[derive(Debug, Default)]
pub struct Window {
    slots: BTreeMap<u64, Slot>,
    work_at: HashMap<DispatchId, u64>,
    popped_source: Option<u64>,
    weight: usize,
    highest: Option<u64>,
    /// Popped offsets not stored yet, each with the highest source at or below it (`None`:
    /// none), in order.
    unstored: VecDeque<(u64, Option<u64>)>,
}

impl Window {
    /// Records in the window.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether nothing is in flight.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Whether another record may enter: always when empty (so one record heavier than the
    /// bound still passes), else below both bounds.
    pub fn has_room(&self, max_records: usize, max_weight: usize) -> bool {
        self.slots.is_empty() || (self.slots.len() < max_records && self.weight < max_weight)
    }

    /// The highest offset ever received.
    pub fn highest(&self) -> Option<u64> {
        self.highest
    }

    /// A received record at `offset` (above every earlier one) of `weight` (its size: what it
    /// holds in memory while in flight).
    pub fn push(&mut self, offset: u64, weight: usize) {
        debug_assert!(self.highest.is_none_or(|h| offset > h), "offsets arrive in order");
        self.highest = Some(offset);
        self.weight += weight;
        self.slots.insert(offset, Slot { state: State::Beginning, weight });
    }

    /// The record at `offset` was refused.
    pub fn skip(&mut self, offset: u64) {
        self.set(offset, State::Skipped);
    }

    /// The record at `offset` is a source whose own chunks `remaining` must complete.
    pub fn work(&mut self, offset: u64, id: DispatchId, remaining: LaneCounts) {
        self.work_at.entry(id).or_insert(offset);
        self.set(offset, State::Work { id, remaining: Box::new(remaining) });
    }

    /// The record at `offset` duplicates the `Work` slot at `first`.
    pub fn dup_of(&mut self, offset: u64, first: u64) {
        self.set(offset, State::DupOf(first));
    }

    /// The offset of a `Work` slot of dispatch `id` still in the window.
    pub fn work_of(&self, id: &DispatchId) -> Option<u64> {
        self.work_at.get(id).copied()
    }

    /// One chunk of the `Work` slot at `offset` completed.
    pub fn chunk_done(&mut self, offset: u64, chunk: ChunkId) {
        if let Some(Slot { state: State::Work { remaining, .. }, .. }) = self.slots.get_mut(&offset) {
            let left = &mut remaining[chunk.lane.get() as usize];
            *left = left.saturating_sub(1);
        }
    }

    fn set(&mut self, offset: u64, state: State) {
        if let Some(slot) = self.slots.get_mut(&offset) {
            slot.state = state;
        }
    }

    fn lane_complete(&self, slot: &Slot, lane: LaneId) -> bool {
        match &slot.state {
            State::Beginning => false,
            State::Skipped => true,
            State::Work { remaining, .. } => remaining[lane.get() as usize] == 0,
            // A first observation leaves the window only once complete everywhere.
            State::DupOf(first) => self.slots.get(first).is_none_or(|s| self.lane_complete(s, lane)),
        }
    }

    fn is_source(slot: &Slot) -> bool {
        matches!(slot.state, State::Work { .. } | State::DupOf(_))
    }

    /// The highest source this lane's watermark may advance to.
    pub fn lane_target(&self, lane: LaneId) -> Option<u64> {
        let mut target = self.popped_source;
        for (offset, slot) in &self.slots {
            if !self.lane_complete(slot, lane) {
                break;
            }
            if Self::is_source(slot) {
                target = Some(*offset);
            }
        }
        target
    }

    /// Removes the prefix complete in every lane; returns its last offset. It may be stored once
    /// the watermarks passed it (see [`Self::storable`]).
    pub fn pop_complete(&mut self) -> Option<u64> {
        let mut last = None;
        while let Some((&offset, slot)) = self.slots.first_key_value() {
            if !LaneId::all().all(|l| self.lane_complete(slot, l)) {
                break;
            }
            let slot = self.slots.remove(&offset).expect("just seen");
            self.weight -= slot.weight;
            if Self::is_source(&slot) {
                self.popped_source = Some(offset);
            }
            if let State::Work { id, .. } = slot.state {
                if self.work_at.get(&id) == Some(&offset) {
                    self.work_at.remove(&id);
                }
            }
            self.unstored.push_back((offset, self.popped_source));
            last = Some(offset);
        }
        last
    }

    /// The highest popped offset that may be stored now that every lane's watermark is at least
    /// `passed` (`None`: some lane has none): every source at or below it is passed. Storing
    /// only then means a new owner (after a rebalance, a shutdown or a crash) reads again every
    /// record some watermark has not passed, so its own pages move that watermark on.
    pub fn storable(&mut self, passed: Option<u64>) -> Option<u64> {
        let mut last = None;
        while let Some(&(offset, source)) = self.unstored.front() {
            if source.is_some_and(|s| passed.is_none_or(|p| p < s)) {
                break;
            }
            last = Some(offset);
            self.unstored.pop_front();
        }
        last
    }
}

#[cfg(test)]
mod tests {
    use qim_store::ids::MessageId;
    use qim_store::mailbox::ShardId;

    use super::*;

    fn id(n: u8) -> DispatchId {
        DispatchId { message_id: MessageId([n; 16]), shard: ShardId(0) }
    }

    fn lane(n: u8) -> LaneId {
        LaneId::new(n).unwrap()
    }

    fn counts(pairs: &[(u8, u32)]) -> LaneCounts {
        let mut c = [0; LANES as usize];
        for (l, n) in pairs {
            c[*l as usize] = *n;
        }
        c
    }

    #[test]
    fn lanes_advance_independently_and_never_past_incomplete_work() {
        let mut w = Window::default();
        w.push(10, 3);
        w.push(11, 3);
        w.work(10, id(1), counts(&[(0, 2), (1, 1)]));
        w.work(11, id(2), counts(&[(1, 1)]));
        assert_eq!(w.lane_target(lane(0)), None, "lane 0 waits for both chunks of offset 10");
        assert_eq!(w.lane_target(lane(1)), None);
        assert_eq!(w.lane_target(lane(5)), Some(11), "a lane without work passes both");
        w.chunk_done(11, ChunkId { lane: lane(1), index: 0 });
        assert_eq!(w.lane_target(lane(1)), None, "offset 10 still holds lane 1");
        w.chunk_done(10, ChunkId { lane: lane(1), index: 0 });
        assert_eq!(w.lane_target(lane(1)), Some(11));
        assert_eq!(w.lane_target(lane(0)), None);
        assert_eq!(w.pop_complete(), None, "offset 10 is incomplete in lane 0");
        w.chunk_done(10, ChunkId { lane: lane(0), index: 0 });
        w.chunk_done(10, ChunkId { lane: lane(0), index: 1 });
        assert_eq!(w.pop_complete(), Some(11));
        assert!(w.is_empty());
        assert_eq!(w.lane_target(lane(0)), Some(11), "the popped prefix counts for every lane");
    }

    #[test]
    fn a_beginning_record_blocks_every_lane_and_a_refused_one_none() {
        let mut w = Window::default();
        w.push(1, 1);
        w.push(2, 1);
        w.push(3, 1);
        w.work(1, id(1), counts(&[]));
        assert_eq!(w.lane_target(lane(0)), Some(1));
        w.work(3, id(3), counts(&[]));
        assert_eq!(w.lane_target(lane(0)), Some(1), "offset 2 is not begun yet");
        w.skip(2);
        assert_eq!(w.lane_target(lane(0)), Some(3), "a refused record is passed, never targeted");
        assert_eq!(w.pop_complete(), Some(3));
    }

    #[test]
    fn a_duplicate_completes_with_its_first_observation() {
        let mut w = Window::default();
        w.push(5, 2);
        w.push(8, 2);
        w.work(5, id(7), counts(&[(3, 1)]));
        assert_eq!(w.work_of(&id(7)), Some(5));
        w.dup_of(8, 5);
        assert_eq!(w.lane_target(lane(3)), None);
        assert_eq!(w.lane_target(lane(4)), Some(8));
        w.chunk_done(5, ChunkId { lane: lane(3), index: 0 });
        assert_eq!(w.lane_target(lane(3)), Some(8));
        assert_eq!(w.pop_complete(), Some(8));
        assert_eq!(w.work_of(&id(7)), None);
    }

    #[test]
    fn offsets_are_storable_only_once_every_watermark_passed_their_sources() {
        let mut w = Window::default();
        for o in [1, 2, 3] {
            w.push(o, 1);
        }
        w.work(1, id(1), counts(&[]));
        w.skip(2);
        w.work(3, id(3), counts(&[]));
        assert_eq!(w.pop_complete(), Some(3));
        assert_eq!(w.storable(None), None, "a lane without a watermark passed nothing");
        assert_eq!(w.storable(Some(2)), Some(2), "offset 2 is refused: only source 1 must be passed");
        assert_eq!(w.storable(Some(2)), None);
        assert_eq!(w.storable(Some(3)), Some(3));
        let mut w = Window::default();
        w.push(7, 1);
        w.skip(7);
        w.pop_complete();
        assert_eq!(w.storable(None), Some(7), "no source below: nothing to pass");
    }

    #[test]
    fn room_is_bounded_by_records_and_weight() {
        let mut w = Window::default();
        assert!(w.has_room(2, 10));
        w.push(0, 50);
        assert!(!w.has_room(2, 10), "over the weight bound");
        let mut w = Window::default();
        w.push(0, 1);
        w.push(1, 1);
        assert!(!w.has_room(2, 10), "over the record bound");
        w.skip(0);
        w.skip(1);
        w.pop_complete();
        assert!(w.has_room(2, 10));
        assert_eq!(w.highest(), Some(1));
    }
}
