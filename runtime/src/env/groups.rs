//! The variable groups several services read, each defined once here and flattened into the
//! services' environments (each service's own group lives in its `config.rs`).
//!
//! Every field is one `QIM_*` variable: its doc comment is the help, `default_value` its
//! default, the value parser its legal values.

use clap::{ArgAction, Args, ValueEnum};
use qim_store::mailbox::MailboxRetention;
use qim_store::redis::RedisConfig;
use qim_store::retention::RetentionPolicy;
use qim_store::scylla::config as scylla;
use qim_store::scylla::ScyllaConfig;

use super::whole::{whole, Whole};

/// Where message and mailbox state lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum StoreBackend {
    /// Redis, with the Scylla archive behind it.
    Redis,
    /// ScyllaDB / Cassandra.
    Scylla,
}

/// Backend selection, connections and retention: read by every service that opens a store.
#[derive(Args, Clone, Debug)]
pub struct StoreArgs {
    /// `redis` or `scylla`: where message and mailbox state lives. No silent fallback.
    #[arg(long, verbatim_doc_comment, env = "QIM_STORE_BACKEND", default_value = "redis", hide_possible_values = true)]
    pub store_backend: StoreBackend,
    /// Redis hot tier (commit state, seq counters, 7-day history window): `redis://host:port/db` for one server, `redis+cluster://host:port,host:port` (any reachable seed nodes) for a Redis Cluster.
    #[arg(long, verbatim_doc_comment, env = "QIM_REDIS_URL", default_value = "redis://127.0.0.1:6379/0", value_parser = redis_url)]
    pub redis_url: String,
    /// Prefix of every Redis key (`[A-Za-z0-9_.-]`, at most 64 characters); services sharing data use the same one.
    #[arg(long, verbatim_doc_comment, env = "QIM_REDIS_NAMESPACE", default_value = "qim", value_parser = redis_namespace)]
    pub redis_namespace: String,
    /// Required, no default (every service reads Scylla in both modes): comma-separated ScyllaDB/Cassandra contact points, `host:port` each.
    #[arg(long, verbatim_doc_comment, env = scylla::HOSTS_VAR)]
    pub scylla_hosts: Option<String>,
    /// Required, no default: the keyspace; letters, digits and `_`, at most 48 characters, not starting with `_`.
    #[arg(long, verbatim_doc_comment, env = scylla::KEYSPACE_VAR)]
    pub scylla_keyspace: Option<String>,
    /// Required, no default: the local data centre; replication and LOCAL_* consistency refer to it.
    #[arg(long, verbatim_doc_comment, env = scylla::DC_VAR)]
    pub scylla_dc: Option<String>,
    /// Required, no default: the replication factor in the local DC; production refuses less than 3.
    #[arg(long, verbatim_doc_comment, env = scylla::RF_VAR)]
    pub scylla_rf: Option<String>,
    /// `true` allows `QIM_SCYLLA_RF` 1 or 2 on a single-node development cluster; never in production.
    #[arg(long, verbatim_doc_comment, env = scylla::DEV_SINGLE_NODE_VAR, default_value = scylla::DEFAULT_DEV_SINGLE_NODE, action = ArgAction::Set)]
    pub scylla_dev_single_node: bool,
    /// History retention of `default` messages in days, 1..=3650 (ADR-0019).
    #[arg(long, verbatim_doc_comment, env = "QIM_DEFAULT_HISTORY_RETENTION_DAYS", default_value = "30", value_parser = retention)]
    pub default_history_retention_days: RetentionPolicy,
    /// Days of history kept in the Redis hot tier once archived.
    #[arg(long, verbatim_doc_comment, env = "QIM_HOT_WINDOW_DAYS", default_value = "7", value_parser = whole(1, 30))]
    pub hot_window_days: Whole,
}

impl StoreArgs {
    /// The Redis settings (checked by their parsers).
    pub fn redis(&self) -> RedisConfig {
        RedisConfig { url: self.redis_url.clone(), namespace: self.redis_namespace.clone() }
    }

    /// The production Scylla settings; the error names the variable at fault (one of the four
    /// required ones unset, naming every unset one, or an RF below 3 without
    /// `QIM_SCYLLA_DEV_SINGLE_NODE=true`, say). Every service calls it in both backends: the
    /// Redis backend reads Scylla too (the archive, membership).
    pub fn scylla(&self) -> Result<ScyllaConfig, String> {
        let dev = if self.scylla_dev_single_node { "true" } else { "false" };
        ScyllaConfig::production_from(|var| match var {
            scylla::HOSTS_VAR => self.scylla_hosts.clone(),
            scylla::KEYSPACE_VAR => self.scylla_keyspace.clone(),
            scylla::DC_VAR => self.scylla_dc.clone(),
            scylla::RF_VAR => self.scylla_rf.clone(),
            scylla::DEV_SINGLE_NODE_VAR => Some(dev.to_owned()),
            _ => None,
        })
        .map_err(|e| e.to_string())
    }
}

/// Kafka connection and the committed-message topic: read by every service.
#[derive(Args, Clone, Debug)]
pub struct KafkaArgs {
    /// Kafka/Redpanda bootstrap servers, comma-separated.
    #[arg(long, verbatim_doc_comment, env = "QIM_KAFKA_BROKERS", default_value = "127.0.0.1:9092")]
    pub kafka_brokers: String,
    /// Committed message records, key = conversation.
    #[arg(long, verbatim_doc_comment, env = "QIM_MESSAGES_TOPIC", default_value = "qim.messages.v1")]
    pub messages_topic: String,
}

/// The archiver's consumer group, which the writer reads too: its committed offsets tell the
/// writer where the archive ends in `qim.messages.v1`.
#[derive(Args, Clone, Debug)]
pub struct ArchiverGroupArgs {
    /// The archiver's Kafka consumer group; the writer reads its committed offsets to find the unarchived tail of the topic after a Redis loss.
    #[arg(long, verbatim_doc_comment, env = "QIM_ARCHIVER_GROUP", default_value = "qim-archiver")]
    pub archiver_group: String,
}

/// Logs and the start-up deadline: read by every service.
#[derive(Args, Clone, Debug)]
pub struct CommonArgs {
    /// Log filter in `tracing_subscriber::EnvFilter` syntax.
    #[arg(long, verbatim_doc_comment, env = "QIM_LOG", default_value = "info")]
    pub log: String,
    /// Log lines as `text` (human-readable) or `json` (one object per line, for log collectors).
    #[arg(long, verbatim_doc_comment, env = "QIM_LOG_FORMAT", default_value = "text", value_enum)]
    pub log_format: crate::telemetry::LogFormat,
    /// Seconds start-up waits for Redis, Scylla and Kafka to answer, retrying each step with backoff; a step that can not succeed by retrying (an unmigrated keyspace, a topic with the wrong partitions) fails at once.
    #[arg(long, verbatim_doc_comment, env = "QIM_STARTUP_TIMEOUT_SECS", default_value = "120", value_parser = whole(1, 3600))]
    pub startup_timeout_secs: Whole,
}

impl CommonArgs {
    /// The log settings these arguments name.
    pub fn log_settings(&self) -> crate::telemetry::LogSettings {
        crate::telemetry::LogSettings { filter: self.log.clone(), format: self.log_format }
    }
}

fn redis_url(value: &str) -> Result<String, String> {
    qim_store::redis::Topology::parse(value).map(|_| value.to_owned())
}

fn redis_namespace(value: &str) -> Result<String, String> {
    RedisConfig { url: String::new(), namespace: value.to_owned() }.validate().map(|()| value.to_owned())
}

fn retention(value: &str) -> Result<RetentionPolicy, String> {
    RetentionPolicy::from_env_value(Some(value)).map_err(|e| e.to_string())
}

/// The value parser of `QIM_MAILBOX_RETENTION_DAYS` (its bounds belong to [`MailboxRetention`]).
pub fn mailbox_retention(value: &str) -> Result<MailboxRetention, String> {
    let days = value.trim().parse::<u32>().map_err(|_| "must be a whole number of days".to_owned())?;
    MailboxRetention::days(days)
}
