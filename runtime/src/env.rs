//! The documented `QIM_*` environment contract.
//!
//! Each service publishes the variables it reads as a table of [`EnvVar`]s; the README's
//! configuration section and the compose stack are checked against these tables by tests, so the
//! code, the documentation and the deployment can not drift apart.

use qim_store::scylla::config as scylla;

/// One documented environment variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EnvVar {
    /// The variable's name; always starts with `QIM_`.
    pub name: &'static str,
    /// The value used when the variable is unset; `None` means "no default" (see `doc`).
    pub default: Option<&'static str>,
    /// What the variable controls and which values are legal.
    pub doc: &'static str,
    /// `Some((lo, hi))`: a whole number in `lo..=hi`. Checked by `check-config` and at start-up,
    /// and shown after `doc` in `--help` and the README ([`EnvVar::describe`]).
    pub range: Option<(u64, u64)>,
}

impl EnvVar {
    /// `doc`, followed by the legal range when there is one.
    pub fn describe(&self) -> String {
        match self.range {
            Some((lo, hi)) => format!("{} A whole number in {lo}..={hi}.", self.doc),
            None => self.doc.to_owned(),
        }
    }
}

/// Variables read by every service that opens a store (backend selection and retention).
pub const STORE_ENV: &[EnvVar] = &[
    EnvVar {
        name: "QIM_STORE_BACKEND",
        default: Some("redis"),
        doc: "`redis` or `scylla`: where message and mailbox state lives. No silent fallback.",
        range: None,
    },
    EnvVar {
        name: "QIM_REDIS_URL",
        default: Some("redis://127.0.0.1:6379/0"),
        doc: "Redis hot tier (commit state, seq counters, 7-day history window).",
        range: None,
    },
    EnvVar {
        name: "QIM_REDIS_NAMESPACE",
        default: Some("qim"),
        doc: "Prefix of every Redis key (`[A-Za-z0-9_.-]`, at most 64 characters); services sharing data use the same one.",
        range: None,
    },
    EnvVar {
        name: "QIM_SCYLLA_HOSTS",
        default: Some(scylla::DEFAULT_HOSTS),
        doc: "Comma-separated ScyllaDB/Cassandra contact points.",
        range: None,
    },
    EnvVar {
        name: "QIM_SCYLLA_KEYSPACE",
        default: Some(scylla::DEFAULT_KEYSPACE),
        doc: "Keyspace; letters, digits and `_`, at most 48 characters, not starting with `_`.",
        range: None,
    },
    EnvVar {
        name: "QIM_SCYLLA_DC",
        default: Some(scylla::DEFAULT_DC),
        doc: "Local data centre: replication and LOCAL_* consistency refer to it.",
        range: None,
    },
    EnvVar {
        name: "QIM_SCYLLA_RF",
        default: Some(scylla::DEFAULT_RF),
        doc: "Replication factor in the local DC; production refuses less than 3.",
        range: None,
    },
    EnvVar {
        name: "QIM_SCYLLA_DEV_SINGLE_NODE",
        default: Some(scylla::DEFAULT_DEV_SINGLE_NODE),
        doc: "`true` allows `QIM_SCYLLA_RF` 1 or 2 on a single-node development cluster; never in production.",
        range: None,
    },
    EnvVar {
        name: "QIM_DEFAULT_HISTORY_RETENTION_DAYS",
        default: Some("30"),
        doc: "History retention of `default` messages in days, 1..=3650 (ADR-0019).",
        range: None,
    },
    EnvVar {
        name: "QIM_HOT_WINDOW_DAYS",
        default: Some("7"),
        doc: "Days of history kept in the Redis hot tier once archived.",
        range: Some((1, 30)),
    },
];

/// Variables read by every service that talks to Kafka.
pub const KAFKA_ENV: &[EnvVar] = &[
    EnvVar {
        name: "QIM_KAFKA_BROKERS",
        default: Some("127.0.0.1:9092"),
        doc: "Kafka/Redpanda bootstrap servers, comma-separated.",
        range: None,
    },
    EnvVar {
        name: "QIM_MESSAGES_TOPIC",
        default: Some("qim.messages.v1"),
        doc: "Committed message records, key = conversation.",
        range: None,
    },
];

/// Variables of the archiver that the writer reads too: the archiver's consumer group, whose
/// committed offsets tell the writer where the archive ends in `qim.messages.v1` (what it must
/// restore from the topic itself after Redis lost state).
pub const ARCHIVER_GROUP_ENV: &[EnvVar] = &[EnvVar {
    name: "QIM_ARCHIVER_GROUP",
    default: Some("qim-archiver"),
    doc: "The archiver's Kafka consumer group; the writer reads its committed offsets to find the unarchived tail of the topic after a Redis loss.",
    range: None,
}];

/// Variables read by every service that serves HTTP (`/metrics`, `/healthz`, `/readyz`, `/v1`).
pub const HTTP_ENV: &[EnvVar] = &[
    EnvVar {
        name: "QIM_API_TOKEN",
        default: None,
        doc: "Optional bearer token; when set, every `/v1` request must carry it.",
        range: None,
    },
    EnvVar {
        name: "QIM_LOG",
        default: Some("info"),
        doc: "Log filter in `tracing_subscriber::EnvFilter` syntax.",
        range: None,
    },
    EnvVar {
        name: "QIM_STARTUP_TIMEOUT_SECS",
        default: Some("120"),
        doc: "Seconds start-up waits for Redis, Scylla and Kafka to answer, retrying each step with backoff; a step that can not succeed by retrying (an unmigrated keyspace, a topic with the wrong partitions) fails at once.",
        range: Some((1, 3600)),
    },
];

/// Finds a variable in a list of tables.
pub fn find<'a>(tables: &[&'a [EnvVar]], name: &str) -> Option<&'a EnvVar> {
    tables.iter().flat_map(|t| t.iter()).find(|v| v.name == name)
}

/// Variables only the writer reads.
pub const WRITER_ENV: &[EnvVar] = &[
    EnvVar {
        name: "QIM_WRITER_HTTP_ADDR",
        default: Some("127.0.0.1:8080"),
        doc: "Listen address of the writer's HTTP API and `/metrics`.",
        range: None,
    },
    EnvVar {
        name: "QIM_MAX_BODY_BYTES",
        default: Some("65536"),
        doc: "Largest accepted message body; larger requests get 413.",
        range: Some((1, qim_store::message::MAX_PAYLOAD_BYTES as u64)),
    },
    EnvVar {
        name: "QIM_MAX_IN_FLIGHT_COMMITS",
        default: Some("1024"),
        doc: "Commits in flight at once; further sends wait.",
        range: Some((1, 1_000_000)),
    },
    EnvVar {
        name: "QIM_RECOVERY_GRACE_SECS",
        default: Some("30"),
        doc: "The recovery loop drives commits left unfinished for longer than this many seconds.",
        range: Some((1, 3600)),
    },
    EnvVar {
        name: "QIM_RECOVERY_INTERVAL_SECS",
        default: Some("5"),
        doc: "Seconds between the writer's recovery scans for unfinished commits.",
        range: Some((1, 3600)),
    },
    EnvVar {
        name: "QIM_SEQ_LEASE_BLOCK",
        default: Some("64"),
        doc: "Seqs one durable lease covers: after a Redis loss a conversation skips at most this many; the durable high-water mark is raised once per this many sends.",
        range: Some((2, 1_000_000)),
    },
];

/// Variables only the archiver reads.
pub const ARCHIVER_ENV: &[EnvVar] = &[
    EnvVar {
        name: "QIM_ARCHIVER_HTTP_ADDR",
        default: Some("127.0.0.1:8081"),
        doc: "Listen address of `/metrics`, `/healthz` and `/readyz`.",
        range: None,
    },
    EnvVar {
        name: "QIM_DLQ_TOPIC",
        default: Some("qim.messages.dlq.v1"),
        doc: "Dead-letter topic for records that can not be decoded or validated.",
        range: None,
    },
    EnvVar {
        name: "QIM_ARCHIVER_BATCH_RECORDS",
        default: Some("1000"),
        doc: "Most records one batch takes from all assigned partitions together.",
        range: Some((1, 10_000)),
    },
    EnvVar {
        name: "QIM_ARCHIVER_BATCH_WAIT_MILLIS",
        default: Some("20"),
        doc: "Milliseconds a batch waits for more records after its first.",
        range: Some((1, 10_000)),
    },
    EnvVar {
        name: "QIM_ARCHIVER_WRITE_CONCURRENCY",
        default: Some("128"),
        doc: "CQL writes in flight per partition batch.",
        range: Some((1, 4096)),
    },
    EnvVar {
        name: "QIM_ARCHIVER_HOLE_GRACE_SECS",
        default: Some("600"),
        doc: "A seq missing from both tiers counts as a hole (not a record still being written) once a later seq is this many seconds old.",
        range: Some((1, 3600)),
    },
    EnvVar {
        name: "QIM_ARCHIVER_TRIM_INTERVAL_SECS",
        default: Some("30"),
        doc: "Seconds between the archiver's trims of the hot tier's window up to the archived watermarks.",
        range: Some((1, 3600)),
    },
];

/// Variables only the mailbox dispatcher reads.
pub const DISPATCHER_ENV: &[EnvVar] = &[
    EnvVar {
        name: "QIM_DISPATCHER_HTTP_ADDR",
        default: Some("127.0.0.1:8082"),
        doc: "Listen address of the mailbox read API and `/metrics`.",
        range: None,
    },
    EnvVar {
        name: "QIM_MAILBOX_SHARDS",
        default: Some("8"),
        doc: "Mailbox shards = partitions of the dispatch topic; 64 lanes per shard, fixed.",
        range: Some((1, 1024)),
    },
    EnvVar {
        name: "QIM_DISPATCH_TOPIC",
        default: Some("qim.mailbox.dispatch.v1"),
        doc: "Per-shard dispatch records, partition = shard.",
        range: None,
    },
    EnvVar {
        name: "QIM_MAILBOX_RETENTION_DAYS",
        default: Some("30"),
        doc: "Days a mailbox entry lives (1..=30, to the end of that UTC day); older cursors get 410.",
        range: None,
    },
    EnvVar {
        name: "QIM_DISPATCHER_GROUP",
        default: Some("qim-mailbox-dispatcher"),
        doc: "Kafka consumer group prefix: the router joins `<group>.router`, shard workers `<group>.shards`.",
        range: None,
    },
    EnvVar {
        name: "QIM_DISPATCHER_DLQ_TOPIC",
        default: Some("qim.mailbox.dlq.v1"),
        doc: "Dead-letter topic for messages and dispatch records the dispatcher refuses (undecodable, conflicting).",
        range: None,
    },
    EnvVar {
        name: "QIM_MAILBOX_EPOCH",
        default: Some("0"),
        doc: "Shard epoch of mailbox seqs; raise it only when the dispatch topic restarts its offsets.",
        range: Some((0, u16::MAX as u64)),
    },
    EnvVar {
        name: "QIM_DISPATCH_CHUNKS_IN_FLIGHT",
        default: Some("32"),
        doc: "Chunk batches (of up to 256 entries: one large chunk, or the small chunks of a lane taken together) one shard writes at once.",
        range: Some((1, 1024)),
    },
    EnvVar {
        name: "QIM_DISPATCH_ADVANCE_MILLIS",
        default: Some("250"),
        doc: "Milliseconds between lane watermark advances: entries become readable up to this much after they are written; longer pages cost the store fewer reads.",
        range: Some((10, 10_000)),
    },
    EnvVar {
        name: "QIM_DISPATCH_KEEP_HOURS",
        default: Some("24"),
        doc: "Hours a completed dispatch is remembered after it was last seen; duplicates later than that are renumbered.",
        range: Some((1, 336)),
    },
];

/// Every variable of every qim service: a shared environment file may set any of them, and a
/// service ignores its siblings' (a `QIM_*` name in none of these is refused as a typo).
pub const ALL_SERVICES: &[&[EnvVar]] =
    &[STORE_ENV, KAFKA_ENV, ARCHIVER_GROUP_ENV, HTTP_ENV, WRITER_ENV, ARCHIVER_ENV, DISPATCHER_ENV];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_documented_variable_is_prefixed_and_unique() {
        let all: Vec<&EnvVar> = ALL_SERVICES.iter().flat_map(|t| t.iter()).collect();
        let mut names: Vec<&str> = all.iter().map(|v| v.name).collect();
        names.sort_unstable();
        let before = names.len();
        names.dedup();
        assert_eq!(before, names.len(), "a variable is documented twice");
        assert!(all.iter().all(|v| v.name.starts_with("QIM_") && !v.doc.is_empty()));
    }

    #[test]
    fn every_duration_and_count_has_its_range_and_every_default_is_inside_it() {
        // The retention days are checked by their domain types (`RetentionPolicy`,
        // `MailboxRetention`), which own those bounds.
        let by_domain = ["QIM_DEFAULT_HISTORY_RETENTION_DAYS", "QIM_MAILBOX_RETENTION_DAYS"];
        for var in ALL_SERVICES.iter().flat_map(|t| t.iter()) {
            let numeric = ["_SECS", "_MILLIS", "_HOURS", "_DAYS", "_BYTES", "_RECORDS", "_CONCURRENCY", "_BLOCK"]
                .iter()
                .any(|suffix| var.name.ends_with(suffix));
            if numeric && !by_domain.contains(&var.name) {
                assert!(var.range.is_some(), "{} has no range", var.name);
            }
            if let (Some((lo, hi)), Some(default)) = (var.range, var.default) {
                let n: u64 = default.parse().unwrap_or_else(|_| panic!("{} default {default:?}", var.name));
                assert!((lo..=hi).contains(&n), "{} default {n} outside {lo}..={hi}", var.name);
            }
        }
    }
}
