//! qim-archiver: consumes committed records from `qim.messages.v1` into the Scylla archive with
//! TTL = remaining retention (ADR-0019), maintains the archived watermarks that let the hot tier
//! trim past its window, and replays the topic on demand.
//!
//! - [`config`]: the documented environment and its typed form;
//! - [`source`]: the Kafka consumer and owned copies of its records;
//! - [`batch`]: decoding and classifying records (archive or dead-letter);
//! - [`pipeline`]: one partition batch: dead letters → archive → watermarks, with retries;
//! - [`consumer`]: the consumer loop of `run`; [`replay`]: the `replay` command;
//! - [`dlq`]: the dead-letter producer; [`watermark`]: the archived watermarks;
//! - [`hot_tier`]: the hot-tier trim and the watermark rechecks;
//! - [`serve`]: startup, run and shutdown; [`metrics`]: metric names; [`events`]: what the
//!   archiver reports, each event's log line and metrics in one place;
//! - [`failpoint`]: the crash points the fault-injection suite arms.

pub mod batch;
pub mod config;
pub mod consumer;
pub mod dlq;
pub mod events;
pub mod failpoint;
pub mod hot_tier;
pub mod metrics;
pub mod pipeline;
pub mod replay;
pub mod serve;
pub mod source;
pub mod watermark;
