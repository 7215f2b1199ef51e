//! The mailbox dispatcher's documented configuration, and its validated, typed form.
//!
//! Everything is read and checked before anything connects (see
//! [`qim_runtime::settings::Settings`]); a bad value names its variable.

use std::net::SocketAddr;
use std::time::Duration;

use qim_runtime::env::{EnvVar, DISPATCHER_ENV, HTTP_ENV, KAFKA_ENV, STORE_ENV};
use qim_runtime::settings::Settings;
use qim_store::mailbox::{MailboxRetention, ShardEpoch};
use qim_store::redis::RedisConfig;
use qim_store::scylla::ScyllaConfig;

/// Every variable the mailbox dispatcher reads, as documented in the README.
pub const ENVIRONMENT: &[&[EnvVar]] = &[STORE_ENV, KAFKA_ENV, HTTP_ENV, DISPATCHER_ENV];

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
    /// Optional bearer token for `/v1`.
    pub api_token: Option<String>,
    /// Log filter.
    pub log: String,
    /// How long start-up steps may keep retrying their servers.
    pub startup_timeout: Duration,
}

impl DispatcherConfig {
    /// Validates and types `s` (already checked against [`ENVIRONMENT`]).
    pub fn from_settings(s: &Settings) -> Result<Self, String> {
        let backend = match s.required("QIM_STORE_BACKEND")? {
            "redis" => {
                let redis = RedisConfig {
                    url: s.required("QIM_REDIS_URL")?.to_owned(),
                    namespace: s.required("QIM_REDIS_NAMESPACE")?.to_owned(),
                };
                redis.validate().map_err(|e| format!("QIM_REDIS_NAMESPACE: {e}"))?;
                let members = ScyllaConfig::production_from(s.lookup()).map_err(|e| e.to_string())?;
                Backend::Redis { redis, members }
            }
            "scylla" => Backend::Scylla(ScyllaConfig::production_from(s.lookup()).map_err(|e| e.to_string())?),
            other => return Err(format!("QIM_STORE_BACKEND={other:?} must be `redis` or `scylla`")),
        };
        // Ranges come from the ENVIRONMENT table, so these casts never truncate.
        let shards = s.whole("QIM_MAILBOX_SHARDS")? as u16;
        let retention = MailboxRetention::days(s.parse("QIM_MAILBOX_RETENTION_DAYS")?)?;
        let chunks_in_flight = s.whole("QIM_DISPATCH_CHUNKS_IN_FLIGHT")? as usize;
        let keep_hours = s.whole("QIM_DISPATCH_KEEP_HOURS")?;
        let advance_millis = s.whole("QIM_DISPATCH_ADVANCE_MILLIS")?;
        Ok(Self {
            backend,
            kafka: KafkaConfig {
                brokers: s.required("QIM_KAFKA_BROKERS")?.to_owned(),
                messages_topic: s.required("QIM_MESSAGES_TOPIC")?.to_owned(),
                dispatch_topic: s.required("QIM_DISPATCH_TOPIC")?.to_owned(),
                dlq_topic: s.required("QIM_DISPATCHER_DLQ_TOPIC")?.to_owned(),
                group: s.required("QIM_DISPATCHER_GROUP")?.to_owned(),
            },
            shards,
            epoch: ShardEpoch(s.whole("QIM_MAILBOX_EPOCH")? as u16),
            retention,
            chunks_in_flight,
            keep_dispatches: Duration::from_secs(keep_hours * 3600),
            advance_every: Duration::from_millis(advance_millis),
            http_addr: s.parse("QIM_DISPATCHER_HTTP_ADDR")?,
            api_token: s.get("QIM_API_TOKEN").filter(|t| !t.is_empty()).map(str::to_owned),
            log: s.required("QIM_LOG")?.to_owned(),
            startup_timeout: s.startup_timeout()?,
        })
    }

    /// Reads and validates the process environment.
    pub fn from_env() -> Result<Self, String> {
        Self::from_settings(&Settings::from_process(ENVIRONMENT)?)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn config(pairs: &[(&str, &str)]) -> Result<DispatcherConfig, String> {
        let env: HashMap<String, String> = pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        let settings = Settings::resolve(ENVIRONMENT, &|n| env.get(n).cloned(), env.keys().cloned())?;
        DispatcherConfig::from_settings(&settings)
    }

    #[test]
    fn the_defaults_make_a_redis_dispatcher_with_eight_shards() {
        let c = config(&[]).unwrap();
        assert_eq!(c.backend.name(), "redis");
        assert_eq!((c.shards, c.epoch, c.chunks_in_flight), (8, ShardEpoch(0), 32));
        assert_eq!(c.kafka.router_group(), "qim-mailbox-dispatcher.router");
        assert_eq!(c.kafka.shard_group(), "qim-mailbox-dispatcher.shards");
        assert_eq!(c.keep_dispatches, Duration::from_secs(86_400));
        assert!(c.api_token.is_none());
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
