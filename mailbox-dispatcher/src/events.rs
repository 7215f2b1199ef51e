//! What the dispatcher reports, one type per event: each writes its log line and updates its
//! metrics (names in [`crate::metrics`]) in one place. Emitted with
//! [`qim_runtime::events::emit`].

use std::time::Duration;

use metrics::{counter, gauge, histogram};
use qim_runtime::events::InternalEvent;
use qim_store::mailbox::{LaneId, ShardId};
use qim_store::StoreError;

use crate::metrics::{
    CHUNK_BATCH_CHUNKS, CHUNK_SECONDS, DEAD_LETTERS, DISPATCHES, DISPATCHES_COLLECTED, DUPLICATES_ABSORBED,
    END_TO_END_SECONDS, ENTRIES_WRITTEN, LANE_WATERMARK_LAG, MARK_BATCH_CHUNKS, MARK_SECONDS, RETRIES, ROUTER_FANOUT,
    ROUTER_FANOUT_SHARDS, ROUTER_MESSAGES, SHARD_RESYNCS, WATERMARK_ADVANCES,
};

/// A message became readable in every recipient's mailbox of a shard (see
/// [`crate::worker::readable`]).
pub struct MessageReadable {
    /// Since the message was created.
    pub since_created: Duration,
}

impl InternalEvent for MessageReadable {
    fn emit(self) {
        histogram!(END_TO_END_SECONDS).record(self.since_created);
    }
}

/// A refused record reached its dead-letter topic.
pub struct DeadLettered<'a> {
    /// The topic it was refused from.
    pub topic: &'a str,
    /// `topic/partition/offset` of the refused record.
    pub source: &'a str,
    /// Why it was refused.
    pub reason: &'a str,
}

impl InternalEvent for DeadLettered<'_> {
    fn emit(self) {
        counter!(DEAD_LETTERS, "topic" => self.topic.to_owned()).increment(1);
        tracing::warn!(source = %self.source, reason = self.reason, "record dead-lettered");
    }
}

/// Writing a dead letter failed; it is retried.
pub struct DeadLetterFailed<'a> {
    /// `topic/partition/offset` of the refused record.
    pub source: &'a str,
    /// What failed.
    pub error: &'a dyn std::fmt::Display,
}

impl InternalEvent for DeadLetterFailed<'_> {
    fn emit(self) {
        tracing::warn!(error = %self.error, source = %self.source, "dead-lettering failed, retrying");
    }
}

/// A store step failed and is retried (a refusal too: the dispatcher fails closed).
pub struct StoreStepFailed<'a> {
    /// The step (`begin_dispatch`, `append_chunks`, ...).
    pub step: &'static str,
    /// What the store answered.
    pub error: &'a StoreError,
}

impl InternalEvent for StoreStepFailed<'_> {
    fn emit(self) {
        let Self { step, error } = self;
        let kind = error.kind();
        counter!(RETRIES, "step" => step, "kind" => kind.as_str()).increment(1);
        if kind.is_retryable() {
            // The backend's own error (a timeout, a refused connection, a redirect) says why.
            let cause = std::error::Error::source(error).map(ToString::to_string).unwrap_or_default();
            tracing::warn!(step, %error, cause, "store step failed, retrying");
        } else {
            tracing::error!(step, %error, "store step refused, retrying until fixed (failing closed)");
        }
    }
}

/// Producing a dispatch record failed; it is retried.
pub struct DispatchProduceFailed<'a> {
    /// The dispatch topic's partition (the shard).
    pub partition: i32,
    /// What failed.
    pub error: &'a str,
}

impl InternalEvent for DispatchProduceFailed<'_> {
    fn emit(self) {
        counter!(RETRIES, "step" => "produce_dispatch", "kind" => "unavailable").increment(1);
        tracing::warn!(error = %self.error, partition = self.partition, "producing a dispatch record failed, retrying");
    }
}

/// The router finished a message: its dispatch records are acknowledged (or it had no members).
pub struct MessageRouted {
    /// Recipients over all its dispatch records.
    pub recipients: usize,
    /// Dispatch records (shards with recipients).
    pub shards: usize,
}

impl InternalEvent for MessageRouted {
    fn emit(self) {
        histogram!(ROUTER_FANOUT).record(self.recipients as f64);
        histogram!(ROUTER_FANOUT_SHARDS).record(self.shards as f64);
        let outcome = if self.shards == 0 { "no_members" } else { "routed" };
        counter!(ROUTER_MESSAGES, "outcome" => outcome).increment(1);
    }
}

/// The router dead-lettered a message it could not route.
pub struct MessageRefused;

impl InternalEvent for MessageRefused {
    fn emit(self) {
        counter!(ROUTER_MESSAGES, "outcome" => "dead_lettered").increment(1);
    }
}

/// A dispatch record was begun: first observed, or absorbed as a duplicate of an earlier one.
pub struct DispatchBegun {
    /// Its shard.
    pub shard: ShardId,
    /// Its offset.
    pub offset: u64,
    /// `Some(first offset)` when it duplicates the dispatch observed there.
    pub duplicate_of: Option<u64>,
}

impl InternalEvent for DispatchBegun {
    fn emit(self) {
        let Some(canonical) = self.duplicate_of else {
            counter!(DISPATCHES, "outcome" => "begun").increment(1);
            return;
        };
        counter!(DISPATCHES, "outcome" => "duplicate").increment(1);
        counter!(DUPLICATES_ABSORBED).increment(1);
        tracing::debug!(shard = self.shard.0, offset = self.offset, canonical, "duplicate absorbed");
    }
}

/// A dispatch record was refused (`conflict` or `invalid`) and dead-lettered.
pub struct DispatchRefused {
    /// `conflict` or `invalid`.
    pub outcome: &'static str,
}

impl InternalEvent for DispatchRefused {
    fn emit(self) {
        counter!(DISPATCHES, "outcome" => self.outcome).increment(1);
    }
}

/// One lane's batch of chunks was written (its completion is marked by the shard's next mark
/// call).
pub struct ChunksWritten {
    /// Mailbox entries written.
    pub entries: usize,
    /// Chunks in the batch.
    pub chunks: usize,
    /// The write's duration.
    pub elapsed: Duration,
}

impl InternalEvent for ChunksWritten {
    fn emit(self) {
        counter!(ENTRIES_WRITTEN).increment(self.entries as u64);
        histogram!(CHUNK_SECONDS).record(self.elapsed.as_secs_f64());
        histogram!(CHUNK_BATCH_CHUNKS).record(self.chunks as f64);
    }
}

/// Written chunks of one shard, of any lanes, were marked complete in one call.
pub struct ChunksMarked {
    /// Chunks marked.
    pub chunks: usize,
    /// The call's duration.
    pub elapsed: Duration,
}

impl InternalEvent for ChunksMarked {
    fn emit(self) {
        histogram!(MARK_SECONDS).record(self.elapsed.as_secs_f64());
        histogram!(MARK_BATCH_CHUNKS).record(self.chunks as f64);
    }
}

/// A lane's watermark moved.
pub struct WatermarkAdvanced {
    /// The lane's shard.
    pub shard: ShardId,
}

impl InternalEvent for WatermarkAdvanced {
    fn emit(self) {
        counter!(WATERMARK_ADVANCES, "shard" => self.shard.0.to_string()).increment(1);
    }
}

/// A lane's watermark advance failed; the next page tries again.
pub struct WatermarkAdvanceFailed<'a> {
    /// The lane's shard.
    pub shard: ShardId,
    /// The lane.
    pub lane: LaneId,
    /// What the store answered.
    pub error: &'a StoreError,
}

impl InternalEvent for WatermarkAdvanceFailed<'_> {
    fn emit(self) {
        tracing::warn!(shard = self.shard.0, lane = self.lane.get(), error = %self.error, "watermark advance failed, retrying next page");
    }
}

/// How far a shard's lowest lane watermark is behind its highest observed offset.
pub struct LaneWatermarkLag {
    /// The shard.
    pub shard: ShardId,
    /// The distance, in offsets.
    pub lag: u64,
}

impl InternalEvent for LaneWatermarkLag {
    fn emit(self) {
        gauge!(LANE_WATERMARK_LAG, "shard" => self.shard.0.to_string()).set(self.lag as f64);
    }
}

/// Completed dispatches were collected (or collecting them failed).
pub struct DispatchesCollected<'a> {
    /// The shard.
    pub shard: ShardId,
    /// How many went, or what failed.
    pub result: &'a Result<usize, StoreError>,
}

impl InternalEvent for DispatchesCollected<'_> {
    fn emit(self) {
        match self.result {
            Ok(n) => counter!(DISPATCHES_COLLECTED).increment(*n as u64),
            Err(error) => tracing::warn!(shard = self.shard.0, %error, "collecting completed dispatches failed"),
        }
    }
}

/// The store lost a shard's state: its log is dispatched again from the store's watermarks.
pub struct ShardResync {
    /// The shard.
    pub shard: ShardId,
    /// The offset the log is read again from.
    pub from: u64,
    /// The highest offset this pipeline had received.
    pub received_up_to: Option<u64>,
}

impl InternalEvent for ShardResync {
    fn emit(self) {
        counter!(SHARD_RESYNCS, "shard" => self.shard.0.to_string()).increment(1);
        tracing::error!(
            shard = self.shard.0,
            from = self.from,
            received_up_to = ?self.received_up_to,
            "the mailbox store lost this shard's state; dispatching its log again from the store's watermarks"
        );
    }
}
