//! The dispatcher's metric names (Prometheus), in one place. Labels are low-cardinality: shard
//! numbers (bounded by `QIM_MAILBOX_SHARDS`), outcomes and error kinds, never ids.

use qim_runtime::kafka::consumer::ConsumerMetrics;

/// Counter, label `outcome`: `routed` (dispatch records acknowledged), `no_members`,
/// `dead_lettered` (undecodable message).
pub const ROUTER_MESSAGES: &str = "qim_dispatcher_router_messages_total";
/// Histogram: recipients of one routed message (its conversation's members).
pub const ROUTER_FANOUT: &str = "qim_dispatcher_router_fanout_recipients";
/// Histogram: dispatch records (shards with recipients) one routed message produced.
pub const ROUTER_FANOUT_SHARDS: &str = "qim_dispatcher_router_fanout_shards";
/// Counter, label `outcome`: `begun` (first observation), `duplicate`, `conflict` and
/// `invalid` (both dead-lettered).
pub const DISPATCHES: &str = "qim_dispatcher_dispatches_total";
/// Counter: duplicate dispatch records absorbed (they reused the first receipt).
pub const DUPLICATES_ABSORBED: &str = "qim_dispatcher_duplicates_absorbed_total";
/// Counter: mailbox entries written (a replayed chunk counts again).
pub const ENTRIES_WRITTEN: &str = "qim_dispatcher_entries_written_total";
/// Histogram (seconds): one batch of chunks (of one lane) written.
pub const CHUNK_SECONDS: &str = "qim_dispatcher_chunk_seconds";
/// Histogram: chunks in one batch (small groups' one-recipient chunks of a lane travel together).
pub const CHUNK_BATCH_CHUNKS: &str = "qim_dispatcher_chunk_batch_chunks";
/// Histogram (seconds): one call marking written chunks complete (all lanes of a shard).
pub const MARK_SECONDS: &str = "qim_dispatcher_mark_seconds";
/// Histogram: chunks marked complete in one call.
pub const MARK_BATCH_CHUNKS: &str = "qim_dispatcher_mark_batch_chunks";
/// Gauge, label `shard`: highest observed offset minus the lowest lane watermark of the shard
/// (offset distance; 0 when every lane passed everything observed, and 0 once this instance
/// stopped owning the shard: its new owner reports it).
pub const LANE_WATERMARK_LAG: &str = "qim_dispatcher_lane_watermark_lag";
/// Histogram (seconds): from a message's creation (its commit at the writer) until every lane
/// watermark of a shard it was dispatched to passed its dispatch record, i.e. until it is
/// readable in every recipient's mailbox of that shard (first observations only).
pub const END_TO_END_SECONDS: &str = "qim_dispatcher_end_to_end_seconds";
/// Counter, label `shard`: lane watermark advances written.
pub const WATERMARK_ADVANCES: &str = "qim_dispatcher_watermark_advances_total";
/// Counter, label `shard`: times the store was found to have lost a shard's state (Redis
/// flushed, restarted without its last writes, restored, failed over) and the shard's log was
/// read again from the store's watermarks.
pub const SHARD_RESYNCS: &str = "qim_dispatcher_shard_resyncs_total";
/// Counter, labels `step` and `kind`: store or Kafka failures that were retried.
pub const RETRIES: &str = "qim_dispatcher_retries_total";
/// Counter, label `topic`: records written to the dead-letter topic.
pub const DEAD_LETTERS: &str = "qim_dispatcher_dead_letters_total";
/// Counter, labels `consumer` (`router`, `shards`) and `event` (`assign`, `revoke`, `error`).
pub const REBALANCES: &str = "qim_dispatcher_rebalances_total";
/// Gauge, labels `consumer` (`router`, `shards`) and `partition`: records of the consumer's
/// topic not yet stored as consumed by its group (held partitions only).
pub const CONSUMER_LAG: &str = "qim_dispatcher_consumer_lag";
/// The group consumers' metrics.
pub const CONSUMER: ConsumerMetrics = ConsumerMetrics { lag: CONSUMER_LAG, rebalances: REBALANCES };
/// Counter: completed dispatches forgotten by GC.
pub const DISPATCHES_COLLECTED: &str = "qim_dispatcher_dispatches_collected_total";
/// Counter, labels `route` and `status`: HTTP requests answered.
pub const HTTP_REQUESTS: &str = "qim_dispatcher_http_requests_total";

/// Describes every metric once at startup, so `/metrics` documents them.
pub fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
    qim_runtime::auth::metrics::describe();
    describe_counter!(ROUTER_MESSAGES, "Committed messages the router handled, by outcome.");
    describe_histogram!(ROUTER_FANOUT, "Recipients of one routed message.");
    describe_histogram!(ROUTER_FANOUT_SHARDS, "Dispatch records one routed message produced.");
    describe_counter!(DISPATCHES, "Dispatch records the shard workers observed, by outcome.");
    describe_counter!(DUPLICATES_ABSORBED, "Duplicate dispatch records that reused the first receipt.");
    describe_counter!(ENTRIES_WRITTEN, "Mailbox entries written.");
    describe_histogram!(CHUNK_SECONDS, Unit::Seconds, "Latency of one batch of chunks of a lane: its entries written.");
    describe_histogram!(CHUNK_BATCH_CHUNKS, "Chunks written together in one batch.");
    describe_histogram!(MARK_SECONDS, Unit::Seconds, "Latency of one call marking a shard's written chunks complete.");
    describe_histogram!(MARK_BATCH_CHUNKS, "Chunks marked complete together in one call.");
    describe_gauge!(LANE_WATERMARK_LAG, "Highest observed offset minus the lowest lane watermark, per shard.");
    describe_histogram!(
        END_TO_END_SECONDS,
        Unit::Seconds,
        "Message creation to readable in every recipient's mailbox of a shard (lane watermarks passed)."
    );
    describe_counter!(WATERMARK_ADVANCES, "Lane watermark advances written, per shard.");
    describe_counter!(SHARD_RESYNCS, "Times a shard's log was read again because the store lost its state.");
    describe_counter!(RETRIES, "Failed store or Kafka steps that were retried, by step and error kind.");
    describe_counter!(DEAD_LETTERS, "Records written to the dead-letter topic.");
    describe_counter!(REBALANCES, "Consumer group rebalances, by consumer and event.");
    describe_gauge!(CONSUMER_LAG, "Records not yet consumed, by consumer and partition.");
    describe_counter!(DISPATCHES_COLLECTED, "Completed dispatches forgotten by GC.");
    describe_counter!(HTTP_REQUESTS, "HTTP requests by route and status.");
}
