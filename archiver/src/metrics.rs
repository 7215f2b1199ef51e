//! The archiver's metric names (Prometheus), in one place. Labels are low-cardinality: an
//! outcome or reason from a fixed set, or a partition number.

use qim_runtime::kafka::consumer::ConsumerMetrics;

/// Counter, label `outcome`: `archived`, `dead_lettered`.
pub const RECORDS: &str = "qim_archiver_records_total";
/// Counter: partition batches made durable (offsets stored afterwards).
pub const BATCHES: &str = "qim_archiver_batches_total";
/// Histogram (seconds): one partition batch from its first write to its offset stored,
/// retries included.
pub const BATCH_SECONDS: &str = "qim_archiver_batch_seconds";
/// Histogram (seconds): the Kafka record's timestamp to the moment its archive rows were
/// acknowledged.
pub const END_TO_END_SECONDS: &str = "qim_archiver_end_to_end_seconds";
/// Gauge, labels `consumer` (`archiver`) and `partition`: records of the topic not yet stored
/// as consumed by this group.
pub const CONSUMER_LAG: &str = "qim_archiver_consumer_lag";
/// Counter, labels `consumer` (`archiver`) and `event` (`assign`, `revoke`, `error`): rebalance
/// callbacks of the group consumer.
pub const REBALANCES: &str = "qim_archiver_rebalances_total";
/// The group consumer's metrics.
pub const CONSUMER: ConsumerMetrics = ConsumerMetrics { lag: CONSUMER_LAG, rebalances: REBALANCES };
/// Counter, label `reason`: records sent to the dead-letter topic.
pub const DEAD_LETTERS: &str = "qim_archiver_dead_letters_total";
/// Counter, label `step`: `dead_letter`, `archive`, `watermark`: transient failures retried.
pub const RETRIES: &str = "qim_archiver_retries_total";
/// Counter, label `cause`: `revoked`, `shutdown`: partition batches given up before their
/// offset was stored (they are consumed again).
pub const ABANDONED: &str = "qim_archiver_batches_abandoned_total";
/// Counter: default records whose expiry differs from this process's retention policy (the
/// writer and the archiver disagree on `QIM_DEFAULT_HISTORY_RETENTION_DAYS`).
pub const RETENTION_MISMATCH: &str = "qim_archiver_retention_mismatch_total";
/// Counter: errors returned by the Kafka consumer (the client reconnects by itself).
pub const CONSUMER_ERRORS: &str = "qim_archiver_consumer_errors_total";
/// Counter: archived watermarks raised.
pub const WATERMARK_ADVANCES: &str = "qim_archiver_watermark_advances_total";
/// Counter: watermark evaluations that failed on data (not availability); the watermark stays.
pub const WATERMARK_ERRORS: &str = "qim_archiver_watermark_errors_total";
/// Gauge: conversations whose watermark waits on a gap (young hole or unarchived record).
pub const WATERMARK_GAPS: &str = "qim_archiver_watermark_gaps";
/// Counter: records the trim removed from the hot tier.
pub const TRIMMED: &str = "qim_archiver_trimmed_total";
/// Gauge: records past the hot window the last trim pass left because the archive has not
/// reached them.
pub const TRIM_WAITING: &str = "qim_archiver_trim_waiting_for_archive";

/// Describes every metric once at startup, so `/metrics` documents them.
pub fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
    describe_counter!(RECORDS, "Records consumed, by outcome.");
    describe_counter!(BATCHES, "Partition batches made durable.");
    describe_histogram!(BATCH_SECONDS, Unit::Seconds, "Partition batch latency, retries included.");
    describe_histogram!(END_TO_END_SECONDS, Unit::Seconds, "Kafka record timestamp to archived.");
    describe_gauge!(CONSUMER_LAG, "Records not yet consumed, per partition.");
    describe_counter!(REBALANCES, "Consumer group rebalance callbacks, by event.");
    describe_counter!(DEAD_LETTERS, "Records sent to the dead-letter topic, by reason.");
    describe_counter!(RETRIES, "Transient failures retried, by step.");
    describe_counter!(ABANDONED, "Partition batches given up before their offset was stored, by cause.");
    describe_counter!(RETENTION_MISMATCH, "Records whose expiry differs from this archiver's retention policy.");
    describe_counter!(CONSUMER_ERRORS, "Errors returned by the Kafka consumer.");
    describe_counter!(WATERMARK_ADVANCES, "Archived watermarks raised.");
    describe_counter!(WATERMARK_ERRORS, "Watermark evaluations that failed on data.");
    describe_gauge!(WATERMARK_GAPS, "Conversations whose watermark waits on a gap.");
    describe_counter!(TRIMMED, "Records trimmed from the hot tier.");
    describe_gauge!(TRIM_WAITING, "Records past the hot window waiting for the archive.");
}
