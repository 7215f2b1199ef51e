//! What the archiver reports, one type per event: each writes its log line and updates its
//! metrics (names in [`crate::metrics`]) in one place. Emitted with
//! [`qim_runtime::events::emit`].

use std::time::Duration;

use metrics::{counter, gauge, histogram};
use qim_runtime::events::InternalEvent;

use crate::batch::{Poison, Valid, CONFLICTING};
use crate::metrics::{
    ABANDONED, BATCHES, BATCH_SECONDS, CONSUMER_ERRORS, DEAD_LETTERS, END_TO_END_SECONDS, RECORDS, RETENTION_MISMATCH,
    RETRIES, TRIMMED, TRIM_WAITING, WATERMARK_ADVANCES, WATERMARK_ERRORS, WATERMARK_GAPS,
};

/// The Kafka consumer returned an error (the client reconnects by itself).
pub struct ConsumerFailed<'a> {
    /// What it said.
    pub error: &'a rdkafka::error::KafkaError,
}

impl InternalEvent for ConsumerFailed<'_> {
    fn emit(self) {
        counter!(CONSUMER_ERRORS).increment(1);
        tracing::warn!(error = %self.error, "kafka consumer error");
    }
}

/// A partition batch was given up before its offset was stored (it is consumed again).
pub struct BatchAbandoned {
    /// Its partition.
    pub partition: i32,
    /// `revoked` or `shutdown`.
    pub cause: &'static str,
    /// How many records it held.
    pub records: usize,
    /// Whether its rows were already durable (the partition was revoked after the last write).
    pub durable: bool,
}

impl InternalEvent for BatchAbandoned {
    fn emit(self) {
        counter!(ABANDONED, "cause" => self.cause).increment(1);
        let Self { partition, cause, records, durable } = self;
        if durable {
            tracing::info!(
                partition,
                cause,
                records,
                "batch durable but its partition was revoked; offset left to the next owner"
            );
        } else {
            tracing::info!(partition, cause, records, "batch abandoned before its offset was stored");
        }
    }
}

/// A step of a partition batch failed transiently; it is retried after `retry_in`.
pub struct BatchStepFailed<'a> {
    /// The batch's partition.
    pub partition: i32,
    /// `archive`, `high_water`, `dead_letter`, `watermark`.
    pub step: &'static str,
    /// What failed.
    pub error: &'a str,
    /// The pause before the next attempt.
    pub retry_in: Duration,
}

impl InternalEvent for BatchStepFailed<'_> {
    fn emit(self) {
        counter!(RETRIES, "step" => self.step).increment(1);
        let Self { partition, step, error, retry_in } = self;
        tracing::warn!(partition, step, %error, ?retry_in, "batch step failed");
    }
}

/// A partition batch whose steps had failed went through.
pub struct BatchStepRecovered {
    /// The batch's partition.
    pub partition: i32,
}

impl InternalEvent for BatchStepRecovered {
    fn emit(self) {
        tracing::info!(partition = self.partition, "batch step recovered");
    }
}

/// A partition batch is durable (its offset is stored next).
pub struct BatchDurable {
    /// From its first write to now, retries included.
    pub elapsed: Duration,
}

impl InternalEvent for BatchDurable {
    fn emit(self) {
        counter!(BATCHES).increment(1);
        histogram!(BATCH_SECONDS).record(self.elapsed.as_secs_f64());
    }
}

/// A batch's records were written to the archive.
pub struct RecordsArchived<'a> {
    /// The batch's valid records.
    pub records: &'a [Valid],
    /// Rows written (records already archived identically are not counted again).
    pub written: usize,
    /// Now, in milliseconds since the Unix epoch (for the end-to-end latency).
    pub now_ms: i64,
}

impl InternalEvent for RecordsArchived<'_> {
    fn emit(self) {
        for v in self.records {
            if let Some(ts) = v.timestamp_ms {
                histogram!(END_TO_END_SECONDS).record((self.now_ms - ts).max(0) as f64 / 1000.0);
            }
            if v.retention_mismatch {
                counter!(RETENTION_MISMATCH).increment(1);
            }
        }
        counter!(RECORDS, "outcome" => "archived").increment(self.written as u64);
    }
}

/// A record was refused: written to the dead-letter topic, or (replay) only reported.
pub struct RecordRefused<'a> {
    /// The record and why.
    pub poison: &'a Poison,
    /// Whether it went to the dead-letter topic.
    pub dead_lettered: bool,
}

impl InternalEvent for RecordRefused<'_> {
    fn emit(self) {
        let Self { poison: p, dead_lettered } = self;
        counter!(DEAD_LETTERS, "reason" => p.reason).increment(1);
        counter!(RECORDS, "outcome" => "dead_lettered").increment(1);
        let (partition, offset, detail) = (p.incoming.partition, p.incoming.offset, &p.detail);
        if p.reason == CONFLICTING {
            tracing::error!(partition, offset, %detail, dead_lettered, "record refused: its seq holds another archived record");
        } else {
            tracing::warn!(partition, offset, reason = p.reason, %detail, dead_lettered, "poison record");
        }
    }
}

/// A conversation's archived watermark was raised.
pub struct WatermarkAdvanced;

impl InternalEvent for WatermarkAdvanced {
    fn emit(self) {
        counter!(WATERMARK_ADVANCES).increment(1);
    }
}

/// A conversation's watermark could not be evaluated on its data; it stays where it is.
pub struct WatermarkNotEvaluated<'a> {
    /// The conversation.
    pub conversation: &'a qim_store::ids::ConversationId,
    /// Why.
    pub error: &'a qim_store::StoreError,
}

impl InternalEvent for WatermarkNotEvaluated<'_> {
    fn emit(self) {
        counter!(WATERMARK_ERRORS).increment(1);
        tracing::error!(conversation = %self.conversation, error = %self.error, "archived watermark not evaluated");
    }
}

/// How many conversations wait on a gap now.
pub struct WatermarkGaps {
    /// Their number.
    pub waiting: u64,
}

impl InternalEvent for WatermarkGaps {
    fn emit(self) {
        gauge!(WATERMARK_GAPS).set(self.waiting as f64);
    }
}

/// One trim call removed records from the hot tier.
pub struct HotTierTrimmed {
    /// Records removed.
    pub trimmed: usize,
    /// Records past the hot window left because the archive has not reached them.
    pub waiting_for_archive: usize,
}

impl InternalEvent for HotTierTrimmed {
    fn emit(self) {
        counter!(TRIMMED).increment(self.trimmed as u64);
        gauge!(TRIM_WAITING).set(self.waiting_for_archive as f64);
    }
}

/// A trim call failed; the next pass tries again.
pub struct HotTierTrimFailed<'a> {
    /// Why.
    pub error: &'a qim_store::StoreError,
}

impl InternalEvent for HotTierTrimFailed<'_> {
    fn emit(self) {
        tracing::warn!(error = %self.error, "trimming the hot tier failed, retrying next pass");
    }
}
