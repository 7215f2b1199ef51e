//! One shard's pipeline: the records of one dispatch partition, in offset order, through
//! begin → 64 lanes of chunks → page-wise lane watermarks → stored offsets.
//!
//! - **Begin** runs in log order, one store call for the records queued since the last call (see
//!   [`super::begins`]), never two of one dispatch id at once, so the first observation of a
//!   dispatch is always begun before its duplicates.
//! - **Chunks** (at most 256 recipients each) wait in one queue per lane and are written in
//!   batches of one lane each (see [`super::lanes`]): a lane whose writes are held never holds
//!   up the others.
//! - **Marks**: a lane batch's chunks, once written, are marked complete by the shard's next mark
//!   call, one at a time over every lane (see [`super::marks`]).
//! - **Watermarks** advance page-wise: every `advance_every`, each lane whose complete prefix
//!   grew is advanced to the highest source of that prefix (see [`super::window`]), all such
//!   lanes in one `advance_watermarks` call; the store checks every source it passes, so even a
//!   wrong target can not pass incomplete work.
//! - **Offsets** are stored, in order, once a record is complete in every lane (its entries and
//!   chunk completions are durable) *and* every lane's watermark passed it. A new owner of the
//!   partition (after a rebalance, a shutdown or a crash) therefore reads again every record a
//!   watermark has not passed, and its own pages move the watermarks on: a lane is never left
//!   behind because the partition went quiet.
//! - **Memory** is bounded: at most [`MAX_WINDOW_RECORDS`] records or [`MAX_WINDOW_BYTES`] of
//!   record bytes in flight; beyond that the pipeline stops reading its input, the worker's
//!   channel fills and the consumer stops polling (backpressure).
//!
//! Revocation cancels the partition's token: nothing new starts, steps already started finish
//! (their retries stop), nothing more is stored. A store found behind the pipeline (it lost
//! state: [`super::resync`]) ends the pipeline the same way, after which the partition is read
//! again from where the store's watermarks are, by a new pipeline. Shutdown stops intake, finishes the records
//! already received, advances the watermarks over them (one last page) and stores their offsets
//! (the worker revokes everything if that takes too long).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use qim_runtime::events::emit;
use qim_store::ids::UnixMillis;
use qim_store::mailbox::{ChunkId, LaneId, LaneWatermark, ShardFence, ShardId, CHUNK_MAX_RECIPIENTS, LANES};
use qim_store::{ErrorKind, StoreResult};
use rdkafka::consumer::Consumer;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::begins::{BeginBatch, BeginQueue};
use super::lanes::LaneQueues;
use super::marks::{mark_chunks, MarkQueue, MarksDone};
use super::readable::Readability;
use super::resync::{next_after, seek_back, Arrival, Resync};
use super::steps::{advance, begin, read_watermarks, write_chunks, Begun, ChunkJob, ChunksDone, Record, ShardContext};
use super::window::Window;

use crate::events::{
    DispatchesCollected, LaneWatermarkLag, MessageReadable, WatermarkAdvanceFailed, WatermarkAdvanced,
};

/// Most records in flight per shard.
pub const MAX_WINDOW_RECORDS: usize = 1024;
/// Most record bytes in flight per shard (one larger record is still admitted alone).
pub const MAX_WINDOW_BYTES: usize = 8 << 20;
/// How often completed dispatches are collected.
const GC_EVERY: Duration = Duration::from_secs(300);
/// Most dispatches collected per pass.
const GC_LIMIT: usize = 1_000;

const LANE_COUNT: usize = LANES as usize;

/// A finished task of the pipeline.
pub(super) enum Done {
    /// `(offset, outcome)` of each record of one begin call, in log order, and the call's
    /// dispatch keys.
    Begin(Vec<(u64, Begun)>, Vec<Vec<u8>>),
    Chunks(ChunksDone),
    Marks(MarksDone),
    Advance(Vec<(LaneId, StoreResult<LaneWatermark>)>),
    Watermarks(StoreResult<Vec<LaneWatermark>>),
    /// The watermarks read after the store was found to have lost state.
    RewindWatermarks(StoreResult<Vec<LaneWatermark>>),
    Incarnation(StoreResult<String>),
    Gc(StoreResult<usize>),
}

/// One shard's pipeline (see the module docs).
pub struct Pipeline {
    pub(super) ctx: Arc<ShardContext>,
    pub(super) shard: ShardId,
    revoked: CancellationToken,
    shutdown: CancellationToken,
    pub(super) window: Window,
    readable: Readability,
    to_begin: BeginQueue,
    lanes: LaneQueues,
    to_mark: MarkQueue,
    advancing: [bool; LANE_COUNT],
    advanced: [Option<u64>; LANE_COUNT],
    watermarks_known: bool,
    /// Shutdown's last page of watermark advances was started.
    last_page: bool,
    gc_running: bool,
    last_gc: Instant,
    dirty: bool,
    pub(super) tasks: JoinSet<Done>,
    /// Whether the store is behind this pipeline (see [`super::resync`]).
    pub(super) resync: Resync,
    /// Set once the store was found behind: read the log again from this offset.
    pub(super) rewind_to: Option<u64>,
    /// Stops the retries of started steps: on revocation (a child of `revoked`) and on a rewind
    /// (a step refused because the store lost its dispatch would retry forever).
    pub(super) steps: CancellationToken,
    /// The watermarks are being read again to find where to rewind to.
    pub(super) rewind_reading: bool,
    /// The store's incarnation of the shard when this pipeline took it over: its bookkeeping
    /// writes are fenced with it, and a change means the store may have lost state (see
    /// [`super::resync`]).
    pub(super) fence: Arc<ShardFence>,
    /// An incarnation read is under way.
    pub(super) checking_incarnation: bool,
}

impl Pipeline {
    /// A pipeline for the shard `fence` holds (see [`super::resync::take_over`]); `revoked` is
    /// its partition's token. After a rewind, `resume_at`
    /// is the offset the consumer was sought to: records received before it are dropped.
    pub fn new(
        ctx: Arc<ShardContext>,
        fence: ShardFence,
        revoked: CancellationToken,
        shutdown: CancellationToken,
        resume_at: Option<u64>,
    ) -> Self {
        Self {
            steps: revoked.child_token(),
            ctx,
            shard: fence.shard,
            revoked,
            shutdown,
            window: Window::default(),
            readable: Readability::default(),
            to_begin: BeginQueue::default(),
            lanes: LaneQueues::default(),
            to_mark: MarkQueue::default(),
            advancing: [false; LANE_COUNT],
            advanced: [None; LANE_COUNT],
            watermarks_known: false,
            last_page: false,
            gc_running: false,
            last_gc: Instant::now(),
            dirty: false,
            tasks: JoinSet::new(),
            resync: resume_at.map_or_else(Resync::default, Resync::after_rewind),
            rewind_to: None,
            rewind_reading: false,
            fence: Arc::new(fence),
            checking_incarnation: false,
        }
    }

    /// Whether nothing new may start: revoked, or rewinding.
    fn stopped(&self) -> bool {
        self.revoked.is_cancelled() || self.rewind_to.is_some()
    }

    /// Runs until revoked (then until every started step finished) or shut down (then until
    /// every received record is done), or until the store is found behind: then, once every
    /// started step finished, seeks the partition to where the store's watermarks are and
    /// returns that offset (a new pipeline takes over from there). Its `input` is closed before
    /// that seek.
    pub async fn run(mut self, mut input: mpsc::Receiver<Record>) -> Option<u64> {
        self.check_incarnation();
        let (store, shard) = (Arc::clone(&self.ctx.store), self.shard);
        self.tasks.spawn(async move { Done::Watermarks(read_watermarks(store, shard).await) });
        let mut tick = tokio::time::interval(self.ctx.advance_every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut closed = false;
        loop {
            let revoked = self.stopped();
            let intake_stopped = revoked || self.shutdown.is_cancelled() || closed;
            if !revoked {
                // After a shutdown, what was already received is still finished.
                self.start_begins();
                self.start_chunks();
                self.start_marks();
            }
            let idle = self.to_begin.is_empty() && self.lanes.is_empty() && self.to_mark.is_empty();
            if intake_stopped && self.tasks.is_empty() && (revoked || idle) {
                if revoked || self.last_page {
                    break;
                }
                // Shutdown: one last page, so the watermarks pass everything finished here and
                // its offsets can be stored.
                self.last_page = true;
                self.dirty = true;
                self.advance_page();
                continue;
            }
            let room = self.window.has_room(MAX_WINDOW_RECORDS, MAX_WINDOW_BYTES);
            tokio::select! {
                Some(done) = self.tasks.join_next(), if !self.tasks.is_empty() => match done {
                    Ok(done) => self.finished(done),
                    Err(e) => match e.try_into_panic() {
                        Ok(panic) => std::panic::resume_unwind(panic),
                        Err(e) => tracing::warn!(shard = shard.0, error = %e, "a pipeline task was cancelled"),
                    },
                },
                received = input.recv(), if !intake_stopped && room => match received {
                    Some(record) if self.window.highest().is_some_and(|h| record.offset <= h) => {
                        // Delivered again without a rebalance (the consumer fell back): that
                        // offset is already in flight or done here.
                        tracing::warn!(shard = shard.0, offset = record.offset, "record received twice, skipped");
                    }
                    Some(record) => match self.resync.arrived(record.offset) {
                        Arrival::Drop => {
                            tracing::debug!(shard = shard.0, offset = record.offset, "record from before the rewind, dropped");
                        }
                        Arrival::SeekAgain(at) => self.seek_again(at),
                        Arrival::Take => self.take(record),
                    },
                    None => closed = true,
                },
                _ = tick.tick() => self.tick(),
                () = self.revoked.cancelled(), if !revoked => {}
                () = self.shutdown.cancelled(), if !intake_stopped => {}
            }
            self.store_completed();
        }
        self.store_passed();
        if let (Some(to), false) = (self.rewind_to, self.revoked.is_cancelled()) {
            // Closed before the seek: a record fetched after it can not be handed to this
            // pipeline, which would drop it; the consumer loop gives it to the next one.
            input.close();
            return seek_back(&self.ctx, self.shard, to).await;
        }
        let why = if self.revoked.is_cancelled() && !self.shutdown.is_cancelled() { "revoked" } else { "shutdown" };
        tracing::info!(shard = shard.0, why, left_in_flight = self.window.len(), "shard pipeline stopped");
        // The shard's lag is its next owner's to report: a gauge left at its last value here
        // would show a lag that no longer moves on this instance for as long as it runs.
        emit(LaneWatermarkLag { shard: self.shard, lag: 0 });
        None
    }

    /// Puts a received record in the window, to be begun.
    fn take(&mut self, record: Record) {
        if let Some(to) = self.resync.behind_at_start() {
            self.rewind(to);
        }
        let weight = record.value.as_ref().map_or(0, Vec::len);
        self.window.push(record.offset, weight);
        self.to_begin.push(record);
    }

    /// Starts begin calls in log order (see [`BeginQueue`]).
    fn start_begins(&mut self) {
        while !self.stopped() {
            let Some(BeginBatch { records, keys }) = self.to_begin.next_batch() else { return };
            let (ctx, fence, cancel) = (Arc::clone(&self.ctx), Arc::clone(&self.fence), self.steps.clone());
            self.tasks.spawn(async move {
                let begun = begin(ctx, fence, &records, cancel).await;
                Done::Begin(records.iter().map(|r| r.offset).zip(begun).collect(), keys)
            });
        }
    }

    /// Starts chunk batches (see [`LaneQueues`]).
    fn start_chunks(&mut self) {
        while let Some((lane, batch)) = self.lanes.next_batch(self.ctx.chunks_in_flight) {
            let (store, cancel) = (Arc::clone(&self.ctx.store), self.steps.clone());
            self.tasks.spawn(async move { Done::Chunks(write_chunks(store, lane, batch, cancel).await) });
        }
    }

    /// Starts the next mark call of written chunks (see [`MarkQueue`]).
    fn start_marks(&mut self) {
        if self.stopped() {
            return;
        }
        if let Some(chunks) = self.to_mark.next_batch() {
            let (store, fence, cancel) = (Arc::clone(&self.ctx.store), Arc::clone(&self.fence), self.steps.clone());
            self.tasks.spawn(async move { Done::Marks(mark_chunks(store, fence, chunks, cancel).await) });
        }
    }

    fn finished(&mut self, done: Done) {
        match done {
            Done::Begin(begun, keys) => {
                self.to_begin.answered(&keys);
                for (offset, begun) in begun {
                    self.begun(offset, begun);
                }
            }
            Done::Chunks(c) => {
                self.lanes.answered(c.lane);
                if c.written {
                    self.to_mark.push(c.chunks);
                } else if c.lost_dispatch {
                    self.store_lost_state("a chunk write found its dispatch gone");
                }
            }
            Done::Marks(m) => {
                self.to_mark.answered();
                if m.completed {
                    for (offset, _, chunk) in m.chunks {
                        self.window.chunk_done(offset, chunk);
                    }
                    self.dirty = true;
                } else if m.lost_state {
                    self.store_lost_state("a chunk mark found its dispatch gone or its fence broken");
                }
            }
            Done::Advance(results) => {
                for (lane, result) in results {
                    let l = usize::from(lane.get());
                    self.advancing[l] = false;
                    if matches!(&result, Err(e) if e.kind() == ErrorKind::StateLost) {
                        self.store_lost_state("an advance found the fence broken");
                    } else if self.resync.advance_answered(&result) {
                        self.store_lost_state("advances over completed work were refused");
                    }
                    match result {
                        Ok(wm) => {
                            self.advanced[l] = self.advanced[l].max(wm.through);
                            emit(WatermarkAdvanced { shard: self.shard });
                        }
                        Err(error) => emit(WatermarkAdvanceFailed { shard: self.shard, lane, error: &error }),
                    }
                }
            }
            Done::RewindWatermarks(Ok(wms)) => {
                self.rewind_reading = false;
                self.resync.lost = false;
                self.rewind(next_after(&wms));
            }
            Done::RewindWatermarks(Err(e)) => {
                self.rewind_reading = false;
                tracing::warn!(shard = self.shard.0, error = %e, "reading lane watermarks to rewind to failed; again next page");
            }
            Done::Watermarks(Ok(wms)) => {
                self.resync.started_at(&wms);
                if let Some(to) = self.resync.behind_at_start() {
                    self.rewind(to);
                }
                for wm in wms {
                    let l = usize::from(wm.lane.get());
                    self.advanced[l] = self.advanced[l].max(wm.through);
                }
                self.watermarks_known = true;
            }
            Done::Watermarks(Err(e)) => {
                tracing::warn!(shard = self.shard.0, error = %e, "reading lane watermarks failed (lag unknown until they advance)");
            }
            Done::Incarnation(result) => self.incarnation_read(result),
            Done::Gc(result) => {
                self.gc_running = false;
                emit(DispatchesCollected { shard: self.shard, result: &result });
            }
        }
    }

    /// Places a begun record in the window and queues its chunks.
    fn begun(&mut self, offset: u64, begun: Begun) {
        match begun {
            Begun::Abandoned => {}
            Begun::StateLost => self.store_lost_state("a begin found the fence broken"),
            Begun::Refused => {
                self.window.skip(offset);
                self.dirty = true;
            }
            Begun::Dispatch { receipt, manifest, completed } => {
                let first = self.window.work_of(&receipt.id);
                if let (Some(_), Some(first)) = (&completed, first) {
                    // A duplicate of a record still in flight here: it completes with it.
                    self.window.dup_of(offset, first);
                    self.dirty = true;
                    return;
                }
                if completed.is_none() {
                    self.readable.observed(offset, manifest.message.created_at);
                }
                let done: HashSet<ChunkId> = completed.unwrap_or_default().into_iter().collect();
                let sizes = manifest.lane_sizes();
                let counts = sizes.map(|n| n.div_ceil(CHUNK_MAX_RECIPIENTS) as u32);
                let mut remaining = counts;
                for lane in LaneId::all() {
                    let l = usize::from(lane.get());
                    for index in 0..counts[l] {
                        let chunk = ChunkId { lane, index };
                        if done.contains(&chunk) {
                            remaining[l] -= 1;
                        } else {
                            let before = index as usize * CHUNK_MAX_RECIPIENTS;
                            let entries = (sizes[l] - before).min(CHUNK_MAX_RECIPIENTS);
                            let job = ChunkJob { offset, receipt, manifest: Arc::clone(&manifest), chunk, entries };
                            self.lanes.push(lane, job);
                        }
                    }
                }
                self.window.work(offset, receipt.id, remaining);
                self.dirty = true;
            }
        }
    }

    /// One page: check the store's incarnation, advance every lane whose complete prefix grew;
    /// report lag; collect.
    fn tick(&mut self) {
        if self.stopped() {
            return;
        }
        if self.resync.lost {
            self.store_lost_state("reading the watermarks to rewind to again");
        }
        self.check_incarnation();
        self.advance_page();
        if self.watermarks_known {
            if let Some(highest) = self.window.highest() {
                let lowest = self.advanced.iter().map(|w| w.map_or(0, |w| w + 1)).min().unwrap_or(0);
                let lag = (highest + 1).saturating_sub(lowest);
                emit(LaneWatermarkLag { shard: self.shard, lag });
            }
        }
        if !self.gc_running && self.last_gc.elapsed() >= GC_EVERY {
            self.gc_running = true;
            self.last_gc = Instant::now();
            let (store, shard) = (Arc::clone(&self.ctx.store), self.shard);
            let keep = i64::try_from(self.ctx.keep.as_millis()).unwrap_or(i64::MAX);
            let before = qim_store::ids::UnixMillis::now().0.saturating_sub(keep);
            self.tasks.spawn(async move { Done::Gc(store.gc_completed_dispatches(shard, before, GC_LIMIT).await) });
        }
    }

    /// Advances every lane whose complete prefix grew past its watermark (one task, one store
    /// call for all of them).
    fn advance_page(&mut self) {
        if !self.dirty {
            return;
        }
        self.dirty = false;
        let mut targets = Vec::new();
        for lane in LaneId::all() {
            let l = usize::from(lane.get());
            if self.advancing[l] {
                self.dirty = true; // look again once it finished
                continue;
            }
            let Some(target) = self.window.lane_target(lane) else { continue };
            if self.advanced[l].is_some_and(|w| w >= target) {
                continue;
            }
            self.advancing[l] = true;
            targets.push((lane, target));
        }
        if !targets.is_empty() {
            let (store, fence) = (Arc::clone(&self.ctx.store), Arc::clone(&self.fence));
            self.tasks.spawn(async move { Done::Advance(advance(store, fence, targets).await) });
        }
    }

    /// Takes the complete prefix out of the window, then stores what the watermarks passed.
    fn store_completed(&mut self) {
        if self.window.pop_complete().is_some() {
            self.dirty = true;
        }
        self.store_passed();
    }

    /// Stores the highest complete offset every lane's watermark passed (see
    /// [`Window::storable`]), unless the partition was revoked.
    fn store_passed(&mut self) {
        let passed = self.advanced.iter().copied().min().flatten();
        if let Some(passed) = passed {
            let now = UnixMillis::now();
            for created_at in self.readable.passed(passed) {
                emit(MessageReadable { since_created: Duration::from_millis((now.0 - created_at.0).max(0) as u64) });
            }
        }
        let Some(last) = self.window.storable(passed) else { return };
        if self.stopped() {
            return;
        }
        let offset = i64::try_from(last).unwrap_or(i64::MAX);
        let partition = i32::from(self.shard.0);
        crate::failpoint::crash_point("dispatcher::worker_before_store_offset");
        if let Err(e) = self.ctx.consumer.store_offset(&self.ctx.kafka.dispatch_topic, partition, offset) {
            tracing::debug!(shard = self.shard.0, offset, error = %e, "storing an offset failed (revoked?)");
        }
    }
}
