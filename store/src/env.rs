//! The documented `QIM_*` environment contract.
//!
//! Each service publishes the variables it reads as a table of [`EnvVar`]s; the README's
//! configuration section and the compose stack are checked against these tables by tests, so the
//! code, the documentation and the deployment can not drift apart.

/// One documented environment variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EnvVar {
    /// The variable's name; always starts with `QIM_`.
    pub name: &'static str,
    /// The value used when the variable is unset; `None` means "no default" (see `doc`).
    pub default: Option<&'static str>,
    /// What the variable controls and which values are legal.
    pub doc: &'static str,
}

/// Variables read by every service that opens a store (backend selection and retention).
pub const STORE_ENV: &[EnvVar] = &[
    EnvVar {
        name: "QIM_STORE_BACKEND",
        default: Some("redis"),
        doc: "`redis` or `scylla`: where message and mailbox state lives. No silent fallback.",
    },
    EnvVar {
        name: "QIM_REDIS_URL",
        default: Some("redis://127.0.0.1:6379/0"),
        doc: "Redis hot tier (commit state, seq counters, 7-day history window).",
    },
    EnvVar {
        name: "QIM_REDIS_NAMESPACE",
        default: Some("qim"),
        doc: "Prefix of every Redis key (`[A-Za-z0-9_.-]`, at most 64 characters); services sharing data use the same one.",
    },
    EnvVar {
        name: "QIM_SCYLLA_HOSTS",
        default: Some("127.0.0.1:9042"),
        doc: "Comma-separated ScyllaDB/Cassandra contact points.",
    },
    EnvVar {
        name: "QIM_SCYLLA_KEYSPACE",
        default: Some("qim"),
        doc: "Keyspace; letters, digits and `_`, at most 48 characters, not starting with `_`.",
    },
    EnvVar {
        name: "QIM_SCYLLA_DC",
        default: Some("datacenter1"),
        doc: "Local data centre: replication and LOCAL_* consistency refer to it.",
    },
    EnvVar {
        name: "QIM_SCYLLA_RF",
        default: Some("3"),
        doc: "Replication factor in the local DC; production refuses less than 3.",
    },
    EnvVar {
        name: "QIM_SCYLLA_DEV_SINGLE_NODE",
        default: Some("false"),
        doc: "`true` allows `QIM_SCYLLA_RF` 1 or 2 on a single-node development cluster; never in production.",
    },
    EnvVar {
        name: "QIM_DEFAULT_HISTORY_RETENTION_DAYS",
        default: Some("30"),
        doc: "History retention of `default` messages in days, 1..=3650 (ADR-0019).",
    },
    EnvVar {
        name: "QIM_HOT_WINDOW_DAYS",
        default: Some("7"),
        doc: "Days of history kept in the Redis hot tier once archived.",
    },
];

/// Variables read by every service that talks to Kafka.
pub const KAFKA_ENV: &[EnvVar] = &[
    EnvVar {
        name: "QIM_KAFKA_BROKERS",
        default: Some("127.0.0.1:9092"),
        doc: "Kafka/Redpanda bootstrap servers, comma-separated.",
    },
    EnvVar {
        name: "QIM_MESSAGES_TOPIC",
        default: Some("qim.messages.v1"),
        doc: "Committed message records, key = conversation.",
    },
];

/// Variables of the archiver that the writer reads too: the archiver's consumer group, whose
/// committed offsets tell the writer where the archive ends in `qim.messages.v1` (what it must
/// restore from the topic itself after Redis lost state).
pub const ARCHIVER_GROUP_ENV: &[EnvVar] = &[EnvVar {
    name: "QIM_ARCHIVER_GROUP",
    default: Some("qim-archiver"),
    doc: "The archiver's Kafka consumer group (the writer reads its committed offsets after Redis lost state).",
}];

/// Variables read by every service that serves HTTP (`/metrics`, `/healthz`, `/readyz`, `/v1`).
pub const HTTP_ENV: &[EnvVar] = &[
    EnvVar {
        name: "QIM_API_TOKEN",
        default: None,
        doc: "Optional bearer token; when set, every `/v1` request must carry it.",
    },
    EnvVar { name: "QIM_LOG", default: Some("info"), doc: "Log filter in `tracing_subscriber::EnvFilter` syntax." },
    EnvVar {
        name: "QIM_STARTUP_TIMEOUT_SECS",
        default: Some("120"),
        doc:
            "How long start-up waits for Redis, Scylla and Kafka to answer, retrying each step with backoff (1..=3600).",
    },
];

/// Finds a variable in a list of tables.
pub fn find<'a>(tables: &[&'a [EnvVar]], name: &str) -> Option<&'a EnvVar> {
    tables.iter().flat_map(|t| t.iter()).find(|v| v.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_documented_variable_is_prefixed_and_unique() {
        let all: Vec<&EnvVar> =
            [STORE_ENV, KAFKA_ENV, ARCHIVER_GROUP_ENV, HTTP_ENV].iter().flat_map(|t| t.iter()).collect();
        let mut names: Vec<&str> = all.iter().map(|v| v.name).collect();
        names.sort_unstable();
        let before = names.len();
        names.dedup();
        assert_eq!(before, names.len(), "a variable is documented twice");
        assert!(all.iter().all(|v| v.name.starts_with("QIM_") && !v.doc.is_empty()));
    }
}
