//! Every `QIM_*` variable some qim service reads, so a service accepts a sibling's variable
//! from a shared environment file and refuses only names no service reads.
//!
//! Generated from the three services' [`Environment`](super::Environment) commands by
//! `tests/tests/pipeline/readme_config.rs`, which fails with the text to paste when this list differs
//! (or rewrites it with `QIM_BLESS=1`); it is not edited by hand.

/// The variables, sorted.
pub const QIM_VARIABLES: &[&str] = &[
    "QIM_API_TOKEN",
    "QIM_ARCHIVER_BATCH_RECORDS",
    "QIM_ARCHIVER_BATCH_WAIT_MILLIS",
    "QIM_ARCHIVER_GROUP",
    "QIM_ARCHIVER_HOLE_GRACE_SECS",
    "QIM_ARCHIVER_HTTP_ADDR",
    "QIM_ARCHIVER_TRIM_INTERVAL_SECS",
    "QIM_ARCHIVER_WRITE_CONCURRENCY",
    "QIM_DEFAULT_HISTORY_RETENTION_DAYS",
    "QIM_DISPATCHER_DLQ_TOPIC",
    "QIM_DISPATCHER_GROUP",
    "QIM_DISPATCHER_HTTP_ADDR",
    "QIM_DISPATCH_ADVANCE_MILLIS",
    "QIM_DISPATCH_CHUNKS_IN_FLIGHT",
    "QIM_DISPATCH_KEEP_HOURS",
    "QIM_DISPATCH_TOPIC",
    "QIM_DLQ_TOPIC",
    "QIM_HOT_WINDOW_DAYS",
    "QIM_KAFKA_BROKERS",
    "QIM_LOG",
    "QIM_MAILBOX_EPOCH",
    "QIM_MAILBOX_RETENTION_DAYS",
    "QIM_MAILBOX_SHARDS",
    "QIM_MAX_BODY_BYTES",
    "QIM_MAX_IN_FLIGHT_COMMITS",
    "QIM_MESSAGES_TOPIC",
    "QIM_RECOVERY_GRACE_SECS",
    "QIM_RECOVERY_INTERVAL_SECS",
    "QIM_REDIS_NAMESPACE",
    "QIM_REDIS_URL",
    "QIM_SCYLLA_DC",
    "QIM_SCYLLA_DEV_SINGLE_NODE",
    "QIM_SCYLLA_HOSTS",
    "QIM_SCYLLA_KEYSPACE",
    "QIM_SCYLLA_RF",
    "QIM_SEQ_LEASE_BLOCK",
    "QIM_STARTUP_TIMEOUT_SECS",
    "QIM_STORE_BACKEND",
    "QIM_WRITER_HTTP_ADDR",
];
