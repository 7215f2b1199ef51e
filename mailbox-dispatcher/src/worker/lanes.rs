//! The chunks of a shard waiting to be written, one queue per lane, taken as batches round robin
//! over the lanes: at most [`LANE_MAX_IN_FLIGHT`] batches per lane and `chunks_in_flight` per
//! shard, so a 10 000-recipient group occupies its lanes' queues, never the whole shard, and
//! every other lane keeps moving. A batch takes one lane's queued chunks in order up to
//! [`BATCH_MAX_ENTRIES`] entries and [`BATCH_MAX_CHUNKS`] chunks, so a small group's
//! one-recipient chunks of many records cost the store one write.

use std::collections::VecDeque;

use qim_store::mailbox::{LaneId, LANES};

use super::steps::ChunkJob;

/// Most chunk batches of one lane in flight.
pub const LANE_MAX_IN_FLIGHT: usize = 4;
/// Most entries one chunk batch writes (one whole chunk is always taken, whatever its size).
pub const BATCH_MAX_ENTRIES: usize = 64;
/// Most chunks in one batch.
pub const BATCH_MAX_CHUNKS: usize = 64;

const LANE_COUNT: usize = LANES as usize;

/// The lanes' queues of chunks to write, and the batches in flight.
pub struct LaneQueues {
    queues: Vec<VecDeque<ChunkJob>>,
    running: [usize; LANE_COUNT],
    next: usize,
    batches: usize,
}

impl Default for LaneQueues {
    fn default() -> Self {
        Self {
            queues: (0..LANE_COUNT).map(|_| VecDeque::new()).collect(),
            running: [0; LANE_COUNT],
            next: 0,
            batches: 0,
        }
    }
}

impl LaneQueues {
    /// Queues a chunk of `lane` to write.
    pub fn push(&mut self, lane: LaneId, job: ChunkJob) {
        self.queues[usize::from(lane.get())].push_back(job);
    }

    /// Whether no chunk waits.
    pub fn is_empty(&self) -> bool {
        self.queues.iter().all(VecDeque::is_empty)
    }

    /// The next batch (its lane and chunks), within `max_batches` in flight per shard and
    /// [`LANE_MAX_IN_FLIGHT`] per lane, from the lane after the last batch's.
    pub fn next_batch(&mut self, max_batches: usize) -> Option<(LaneId, Vec<ChunkJob>)> {
        if self.batches >= max_batches {
            return None;
        }
        let lane = (0..LANE_COUNT)
            .map(|i| (self.next + i) % LANE_COUNT)
            .find(|l| !self.queues[*l].is_empty() && self.running[*l] < LANE_MAX_IN_FLIGHT)?;
        let queue = &mut self.queues[lane];
        let mut batch: Vec<ChunkJob> = queue.pop_front().into_iter().collect();
        let mut entries = batch.iter().map(|j| j.entries).sum::<usize>();
        while let Some(next) = queue.front() {
            if batch.len() >= BATCH_MAX_CHUNKS || entries + next.entries > BATCH_MAX_ENTRIES {
                break;
            }
            entries += next.entries;
            batch.extend(queue.pop_front());
        }
        self.next = (lane + 1) % LANE_COUNT;
        self.running[lane] += 1;
        self.batches += 1;
        Some((LaneId::new(lane as u8).expect("a lane index"), batch))
    }

    /// A batch of `lane` ended.
    pub fn answered(&mut self, lane: LaneId) {
        self.running[usize::from(lane.get())] -= 1;
        self.batches -= 1;
    }
}
