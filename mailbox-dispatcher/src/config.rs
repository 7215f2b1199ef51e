//! The mailbox dispatcher's variables (one clap group: the shared groups and
//! [`DispatcherArgs`]), and its validated, typed configuration; a bad value names its variable.

use std::net::SocketAddr;
use std::time::Duration;

use clap::Args;
use qim_runtime::auth::AuthConfig;
use qim_runtime::env::groups::mailbox_retention;
use qim_runtime::env::{whole, AuthArgs, CommonArgs, Environment, KafkaArgs, StoreArgs, StoreBackend, Whole};
use qim_store::mailbox::{MailboxRetention, ShardEpoch};
use qim_store::redis::RedisConfig;
use qim_store::scylla::ScyllaConfig;

/// Every variable the mailbox dispatcher reads.
#[derive(Args, Clone, Debug)]
pub struct DispatcherEnv {
    #[command(flatten)]
    store: StoreArgs,
    #[command(flatten)]
    kafka: KafkaArgs,
    #[command(flatten)]
    auth: AuthArgs,
    #[command(flatten)]
    common: CommonArgs,
    #[command(flatten)]
    dispatcher: DispatcherArgs,
}

/// The variables only the mailbox dispatcher reads.
#[derive(Args, Clone, Debug)]
pub struct DispatcherArgs {
    /// Listen address of the mailbox read API and `/metrics`.
    #[arg(long, verbatim_doc_comment, env = "QIM_DISPATCHER_HTTP_ADDR", default_value = "127.0.0.1:8082")]
    dispatcher_http_addr: SocketAddr,
    /// Mailbox shards = partitions of the dispatch topic; 64 lanes per shard, fixed.
    #[arg(long, verbatim_doc_comment, env = "QIM_MAILBOX_SHARDS", default_value = "8", value_parser = whole(1, 1024))]
    mailbox_shards: Whole,
    /// Per-shard dispatch records, partition = shard.
    #[arg(long, verbatim_doc_comment, env = "QIM_DISPATCH_TOPIC", default_value = "qim.mailbox.dispatch.v1")]
    dispatch_topic: String,
    /// Days a mailbox entry lives (1..=30, to the end of that UTC day); older cursors get 410.
    #[arg(long, verbatim_doc_comment, env = "QIM_MAILBOX_RETENTION_DAYS", default_value = "30", value_parser = mailbox_retention)]
    mailbox_retention_days: MailboxRetention,
    /// Kafka consumer group prefix: the router joins `<group>.router`, shard workers `<group>.shards`.
    #[arg(long, verbatim_doc_comment, env = "QIM_DISPATCHER_GROUP", default_value = "qim-mailbox-dispatcher")]
    dispatcher_group: String,
    /// Dead-letter topic for messages and dispatch records the dispatcher refuses (undecodable, conflicting).
    #[arg(long, verbatim_doc_comment, env = "QIM_DISPATCHER_DLQ_TOPIC", default_value = "qim.mailbox.dlq.v1")]
    dispatcher_dlq_topic: String,
    /// Shard epoch of mailbox seqs; raise it only when the dispatch topic restarts its offsets.
    #[arg(long, verbatim_doc_comment, env = "QIM_MAILBOX_EPOCH", default_value = "0", value_parser = whole(0, u16::MAX as u64))]
    mailbox_epoch: Whole,
    /// Chunk batches (of up to 256 entries: one large chunk, or the small chunks of a lane taken together) one shard writes at once.
    #[arg(long, verbatim_doc_comment, env = "QIM_DISPATCH_CHUNKS_IN_FLIGHT", default_value = "32", value_parser = whole(1, 1024))]
    dispatch_chunks_in_flight: Whole,
    /// Milliseconds between lane watermark advances: entries become readable up to this much after they are written; longer pages cost the store fewer reads.
    #[arg(long, verbatim_doc_comment, env = "QIM_DISPATCH_ADVANCE_MILLIS", default_value = "250", value_parser = whole(10, 10_000))]
    dispatch_advance_millis: Whole,
    /// Hours a completed dispatch is remembered after it was last seen; duplicates later than that are renumbered.
    #[arg(long, verbatim_doc_comment, env = "QIM_DISPATCH_KEEP_HOURS", default_value = "24", value_parser = whole(1, 336))]
    dispatch_keep_hours: Whole,
}

/// Where mailbox state (and membership) lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Backend {
    /// Redis: the default. Membership is durable in the Scylla keyspace and cached in Redis.
    Redis {
        /// Mailboxes, dispatch bookkeeping, watermarks and the member cache.
        redis: RedisConfig,
        /// The keyspace holding the durable membership table (the writer's archive).
        members: ScyllaConfig,
    },
    /// ScyllaDB / Cassandra.
    Scylla(ScyllaConfig),
}

impl Backend {
    /// `redis` or `scylla`, for logs.
    pub fn name(&self) -> &'static str {
        match self {
            Backend::Redis { .. } => "redis",
            Backend::Scylla(_) => "scylla",
        }
    }
}

/// Kafka names and sizes the dispatcher works with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KafkaConfig {
    /// Bootstrap servers.
    pub brokers: String,
    /// Committed messages (the router's input).
    pub messages_topic: String,
    /// Dispatch records (the router's output, the shard workers' input).
    pub dispatch_topic: String,
    /// Refused records.
    pub dlq_topic: String,
    /// Consumer group prefix.
    pub group: String,
}

impl KafkaConfig {
    /// The router's consumer group.
    pub fn router_group(&self) -> String {
        format!("{}.router", self.group)
    }

    /// The shard workers' consumer group.
    pub fn shard_group(&self) -> String {
        format!("{}.shards", self.group)
    }
}

/// The dispatcher's configuration, validated before anything connects.
#[derive(Clone, Debug)]
pub struct DispatcherConfig {
    /// The store backend.
    pub backend: Backend,
    /// Kafka topics and group.
    pub kafka: KafkaConfig,
    /// Mailbox shards (= dispatch topic partitions).
    pub shards: u16,
    /// The shard epoch of every seq this deployment issues.
    pub epoch: ShardEpoch,
    /// How long entries live.
    pub retention: MailboxRetention,
    /// Chunks in flight per shard.
    pub chunks_in_flight: usize,
    /// How long a completed dispatch is remembered after it was last seen.
    pub keep_dispatches: Duration,
    /// How often lane watermarks advance.
    pub advance_every: Duration,
    /// HTTP listen address.
    pub http_addr: SocketAddr,
    /// Who may call `/v1`, and how often.
    pub auth: AuthConfig,
    /// Log filter and format.
    pub log: qim_runtime::telemetry::LogSettings,
    /// How long start-up steps may keep retrying their servers.
    pub startup_timeout: Duration,
}

impl Environment for DispatcherEnv {
    type Config = DispatcherConfig;

    fn config(&self) -> Result<DispatcherConfig, String> {
        let backend = match self.store.store_backend {
            StoreBackend::Redis => Backend::Redis { redis: self.store.redis(), members: self.store.scylla()? },
            StoreBackend::Scylla => Backend::Scylla(self.store.scylla()?),
        };
        let d = &self.dispatcher;
        // The ranges of the `Whole`s fit the narrower types, so these casts never truncate.
        Ok(DispatcherConfig {
            backend,
            kafka: KafkaConfig {
                brokers: self.kafka.kafka_brokers.clone(),
                messages_topic: self.kafka.messages_topic.clone(),
                dispatch_topic: d.dispatch_topic.clone(),
                dlq_topic: d.dispatcher_dlq_topic.clone(),
                group: d.dispatcher_group.clone(),
            },
            shards: d.mailbox_shards.get() as u16,
            epoch: ShardEpoch(d.mailbox_epoch.get() as u16),
            retention: d.mailbox_retention_days,
            chunks_in_flight: d.dispatch_chunks_in_flight.get() as usize,
            keep_dispatches: Duration::from_secs(d.dispatch_keep_hours.get() * 3600),
            advance_every: d.dispatch_advance_millis.millis(),
            http_addr: d.dispatcher_http_addr,
            auth: self.auth.config()?,
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
    fn config(pairs: &[(&str, &str)]) -> Result<DispatcherConfig, String> {
        qim_runtime::env::resolve_pairs::<DispatcherEnv>(&[SCYLLA, pairs].concat())
    }

    #[test]
    fn the_scylla_cluster_must_be_named_in_both_backends() {
        for backend in ["redis", "scylla"] {
            let pairs = [("QIM_STORE_BACKEND", backend), ("QIM_AUTH_DISABLED", "true")];
            let err = qim_runtime::env::resolve_pairs::<DispatcherEnv>(&pairs).unwrap_err();
            for (name, _) in SCYLLA {
                assert!(err.contains(name), "{backend}: {name} not named in {err}");
            }
        }
    }

    #[test]
    fn the_defaults_make_a_redis_dispatcher_with_eight_shards() {
        let c = config(&[("QIM_AUTH_DISABLED", "true")]).unwrap();
        assert_eq!(c.backend.name(), "redis");
        assert_eq!((c.shards, c.epoch, c.chunks_in_flight), (8, ShardEpoch(0), 32));
        assert_eq!(c.kafka.router_group(), "qim-mailbox-dispatcher.router");
        assert_eq!(c.kafka.shard_group(), "qim-mailbox-dispatcher.shards");
        assert_eq!(c.keep_dispatches, Duration::from_secs(86_400));
        assert!(c.auth.keys.is_none());
    }

    #[test]
    fn the_api_needs_a_key_or_an_explicit_opt_out() {
        let err = config(&[]).unwrap_err();
        assert!(err.contains("QIM_AUTH_HS256_SECRET") && err.contains("QIM_AUTH_DISABLED"), "{err}");
        let err = config(&[("QIM_AUTH_HS256_SECRET", "short")]).unwrap_err();
        assert!(err.contains("32"), "{err}");
        let c = config(&[("QIM_AUTH_HS256_SECRET", &"k".repeat(32)), ("QIM_RATE_LIMIT_USER_PER_SEC", "0")]).unwrap();
        assert!(c.auth.keys.is_some());
        assert_eq!(c.auth.limits.per_user, None, "0 is unlimited");
    }

    #[test]
    fn bad_values_name_their_variable() {
        for (name, value) in [
            ("QIM_MAILBOX_SHARDS", "0"),
            ("QIM_MAILBOX_EPOCH", "70000"),
            ("QIM_DISPATCH_CHUNKS_IN_FLIGHT", "0"),
            ("QIM_DISPATCH_KEEP_HOURS", "400"),
            ("QIM_DISPATCH_ADVANCE_MILLIS", "5"),
            ("QIM_MAILBOX_RETENTION_DAYS", "31"),
            ("QIM_REDIS_NAMESPACE", "a:b"),
        ] {
            let err = config(&[(name, value)]).unwrap_err();
            assert!(err.contains(name), "{name}={value}: {err}");
        }
    }
}
