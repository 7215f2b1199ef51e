//! The archiver's variables (one clap group: the shared groups and [`ArchiverArgs`]), and its
//! validated, typed configuration.

use std::net::SocketAddr;
use std::time::Duration;

use clap::Args;
use qim_runtime::env::{whole, ArchiverGroupArgs, CommonArgs, Environment, KafkaArgs, StoreArgs, StoreBackend, Whole};
use qim_store::redis::RedisConfig;
use qim_store::retention::RetentionPolicy;
use qim_store::scylla::ScyllaConfig;

/// Every variable the archiver reads (`run` and `replay` alike).
#[derive(Args, Clone, Debug)]
pub struct ArchiverEnv {
    #[command(flatten)]
    store: StoreArgs,
    #[command(flatten)]
    kafka: KafkaArgs,
    #[command(flatten)]
    archiver_group: ArchiverGroupArgs,
    #[command(flatten)]
    common: CommonArgs,
    #[command(flatten)]
    archiver: ArchiverArgs,
}

/// The variables only the archiver reads.
#[derive(Args, Clone, Debug)]
pub struct ArchiverArgs {
    /// Listen address of `/metrics`, `/healthz` and `/readyz`.
    #[arg(long, verbatim_doc_comment, env = "QIM_ARCHIVER_HTTP_ADDR", default_value = "127.0.0.1:8081")]
    archiver_http_addr: SocketAddr,
    /// Dead-letter topic for records that can not be decoded or validated.
    #[arg(long, verbatim_doc_comment, env = "QIM_DLQ_TOPIC", default_value = "qim.messages.dlq.v1")]
    dlq_topic: String,
    /// Most records one batch takes from all assigned partitions together.
    #[arg(long, verbatim_doc_comment, env = "QIM_ARCHIVER_BATCH_RECORDS", default_value = "1000", value_parser = whole(1, 10_000))]
    archiver_batch_records: Whole,
    /// Milliseconds a batch waits for more records after its first.
    #[arg(long, verbatim_doc_comment, env = "QIM_ARCHIVER_BATCH_WAIT_MILLIS", default_value = "20", value_parser = whole(1, 10_000))]
    archiver_batch_wait_millis: Whole,
    /// CQL writes in flight per partition batch.
    #[arg(long, verbatim_doc_comment, env = "QIM_ARCHIVER_WRITE_CONCURRENCY", default_value = "128", value_parser = whole(1, 4096))]
    archiver_write_concurrency: Whole,
    /// A seq missing from both tiers counts as a hole (not a record still being written) once a later seq is this many seconds old.
    #[arg(long, verbatim_doc_comment, env = "QIM_ARCHIVER_HOLE_GRACE_SECS", default_value = "600", value_parser = whole(1, 3600))]
    archiver_hole_grace_secs: Whole,
    /// Seconds between the archiver's trims of the hot tier's window up to the archived watermarks.
    #[arg(long, verbatim_doc_comment, env = "QIM_ARCHIVER_TRIM_INTERVAL_SECS", default_value = "30", value_parser = whole(1, 3600))]
    archiver_trim_interval_secs: Whole,
}

/// Batching and write limits of the consumer (and of `replay`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchLimits {
    /// Most records per batch.
    pub max_records: usize,
    /// How long a batch waits for more records after its first.
    pub max_wait: Duration,
    /// CQL writes in flight per partition batch.
    pub write_concurrency: usize,
}

/// The archiver's configuration, validated before anything connects.
#[derive(Clone, Debug)]
pub struct ArchiverConfig {
    /// The archive (always Scylla/Cassandra).
    pub scylla: ScyllaConfig,
    /// The hot tier, when `QIM_STORE_BACKEND=redis`: the archiver then maintains the archived
    /// watermarks and runs the hot-tier trim. `None` in Scylla mode (no hot tier exists).
    pub hot_tier: Option<RedisConfig>,
    /// History retention (must equal the writer's).
    pub policy: RetentionPolicy,
    /// Days of history the hot tier keeps once archived.
    pub hot_window_days: u32,
    /// Kafka bootstrap servers.
    pub kafka_brokers: String,
    /// The committed-message topic.
    pub messages_topic: String,
    /// The dead-letter topic.
    pub dlq_topic: String,
    /// The consumer group.
    pub group: String,
    /// Batching.
    pub batch: BatchLimits,
    /// A missing seq older than this (judged by the next present seq) is a hole.
    pub hole_grace: Duration,
    /// How often the trim runs.
    pub trim_interval: Duration,
    /// Listen address of the operational endpoints.
    pub http_addr: SocketAddr,
    /// Log filter and format.
    pub log: qim_runtime::telemetry::LogSettings,
    /// How long start-up steps may keep retrying their servers.
    pub startup_timeout: Duration,
}

impl Environment for ArchiverEnv {
    type Config = ArchiverConfig;

    fn config(&self) -> Result<ArchiverConfig, String> {
        let hot_tier = match self.store.store_backend {
            StoreBackend::Redis => Some(self.store.redis()),
            StoreBackend::Scylla => None,
        };
        let a = &self.archiver;
        // The ranges of the `Whole`s fit the narrower types, so these casts never truncate.
        Ok(ArchiverConfig {
            scylla: self.store.scylla()?,
            hot_tier,
            policy: self.store.default_history_retention_days,
            hot_window_days: self.store.hot_window_days.get() as u32,
            kafka_brokers: self.kafka.kafka_brokers.clone(),
            messages_topic: self.kafka.messages_topic.clone(),
            dlq_topic: a.dlq_topic.clone(),
            group: self.archiver_group.archiver_group.clone(),
            batch: BatchLimits {
                max_records: a.archiver_batch_records.get() as usize,
                max_wait: a.archiver_batch_wait_millis.millis(),
                write_concurrency: a.archiver_write_concurrency.get() as usize,
            },
            hole_grace: a.archiver_hole_grace_secs.secs(),
            trim_interval: a.archiver_trim_interval_secs.secs(),
            http_addr: a.archiver_http_addr,
            log: self.common.log_settings(),
            startup_timeout: self.common.startup_timeout_secs.secs(),
        })
    }

    fn store(&self) -> &StoreArgs {
        &self.store
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Scylla variables every service needs (they have no defaults).
    const SCYLLA: &[(&str, &str)] = &[
        ("QIM_SCYLLA_HOSTS", "10.0.0.1:9042"),
        ("QIM_SCYLLA_KEYSPACE", "qim"),
        ("QIM_SCYLLA_DC", "dc1"),
        ("QIM_SCYLLA_RF", "3"),
    ];

    /// The configuration of [`SCYLLA`] and `pairs`.
    fn config(pairs: &[(&str, &str)]) -> Result<ArchiverConfig, String> {
        qim_runtime::env::resolve_pairs::<ArchiverEnv>(&[SCYLLA, pairs].concat())
    }

    #[test]
    fn defaults_give_a_redis_hot_tier_and_thirty_days() {
        let c = config(&[]).unwrap();
        assert!(c.hot_tier.is_some());
        assert_eq!(c.policy.default_days(), Some(30));
        assert_eq!(c.batch.max_records, 1000);
        assert_eq!(c.hole_grace, Duration::from_secs(600));
        assert_eq!(c.group, "qim-archiver");
    }

    #[test]
    fn scylla_mode_has_no_hot_tier_and_bad_values_name_their_variable() {
        let c = config(&[("QIM_STORE_BACKEND", "scylla")]).unwrap();
        assert!(c.hot_tier.is_none());
        for (name, value) in [
            ("QIM_ARCHIVER_BATCH_RECORDS", "0"),
            ("QIM_ARCHIVER_BATCH_WAIT_MILLIS", "100000"),
            ("QIM_ARCHIVER_WRITE_CONCURRENCY", "x"),
            ("QIM_ARCHIVER_HOLE_GRACE_SECS", "0"),
            ("QIM_DEFAULT_HISTORY_RETENTION_DAYS", "0"),
        ] {
            let err = config(&[(name, value)]).unwrap_err();
            assert!(err.contains(name), "{name}={value}: {err}");
        }
    }

    #[test]
    fn the_archive_cluster_must_be_named_in_both_backends() {
        for backend in ["redis", "scylla"] {
            let err = qim_runtime::env::resolve_pairs::<ArchiverEnv>(&[("QIM_STORE_BACKEND", backend)]).unwrap_err();
            for (name, _) in SCYLLA {
                assert!(err.contains(name), "{backend}: {name} not named in {err}");
            }
        }
    }
}
