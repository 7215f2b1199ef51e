//! The writer's documented configuration, and its validated, typed form.

use std::net::SocketAddr;
use std::time::Duration;

use qim_runtime::env::{EnvVar, ARCHIVER_GROUP_ENV, HTTP_ENV, KAFKA_ENV, STORE_ENV, WRITER_ENV};
use qim_runtime::settings::Settings;
use qim_store::redis::RedisConfig;
use qim_store::retention::RetentionPolicy;
use qim_store::scylla::ScyllaConfig;

/// Every variable the writer reads, as documented in the README.
pub const ENVIRONMENT: &[&[EnvVar]] = &[STORE_ENV, KAFKA_ENV, ARCHIVER_GROUP_ENV, HTTP_ENV, WRITER_ENV];

/// Where the writer keeps commit state and history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Backend {
    /// Redis as the hot tier (commit state, seq counters, the recent window) with the Scylla
    /// archive behind it for older history: the default.
    Redis {
        /// The hot tier.
        redis: RedisConfig,
        /// The archive the archiver fills (history older than the hot window is read there).
        archive: ScyllaConfig,
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

/// The writer's configuration, validated before anything connects.
#[derive(Clone, Debug)]
pub struct WriterConfig {
    /// The store backend.
    pub backend: Backend,
    /// Kafka bootstrap servers.
    pub kafka_brokers: String,
    /// The committed-message topic.
    pub messages_topic: String,
    /// The archiver's consumer group: its committed offsets end the archived part of the topic.
    pub archiver_group: String,
    /// Seqs per durable lease (Redis backend).
    pub seq_lease_block: u64,
    /// History retention.
    pub policy: RetentionPolicy,
    /// Days the hot tier keeps archived history.
    pub hot_window_days: u32,
    /// HTTP listen address.
    pub http_addr: SocketAddr,
    /// Largest message body in bytes.
    pub max_body_bytes: usize,
    /// Commits in flight at once.
    pub max_in_flight: usize,
    /// Commits unfinished for longer than this are driven by the recovery loop.
    pub recovery_grace: Duration,
    /// How often the recovery loop runs.
    pub recovery_interval: Duration,
    /// Optional bearer token for `/v1`.
    pub api_token: Option<String>,
    /// Log filter.
    pub log: String,
    /// How long start-up steps may keep retrying their servers.
    pub startup_timeout: Duration,
}

impl WriterConfig {
    /// Validates and types `settings` (already checked against [`ENVIRONMENT`]).
    pub fn from_settings(s: &Settings) -> Result<Self, String> {
        let backend = match s.required("QIM_STORE_BACKEND")? {
            "redis" => Backend::Redis {
                redis: RedisConfig {
                    url: s.required("QIM_REDIS_URL")?.to_owned(),
                    namespace: s.required("QIM_REDIS_NAMESPACE")?.to_owned(),
                },
                archive: ScyllaConfig::production_from(s.lookup()).map_err(|e| e.to_string())?,
            },
            "scylla" => Backend::Scylla(ScyllaConfig::production_from(s.lookup()).map_err(|e| e.to_string())?),
            other => return Err(format!("QIM_STORE_BACKEND={other:?} must be `redis` or `scylla`")),
        };
        if let Backend::Redis { redis, .. } = &backend {
            redis.validate().map_err(|e| format!("QIM_REDIS_NAMESPACE: {e}"))?;
        }
        let policy =
            RetentionPolicy::from_env_value(s.get("QIM_DEFAULT_HISTORY_RETENTION_DAYS")).map_err(|e| e.to_string())?;
        Ok(Self {
            backend,
            kafka_brokers: s.required("QIM_KAFKA_BROKERS")?.to_owned(),
            messages_topic: s.required("QIM_MESSAGES_TOPIC")?.to_owned(),
            archiver_group: s.required("QIM_ARCHIVER_GROUP")?.to_owned(),
            seq_lease_block: s.whole("QIM_SEQ_LEASE_BLOCK")?,
            policy,
            hot_window_days: s.whole("QIM_HOT_WINDOW_DAYS")? as u32,
            http_addr: s.parse("QIM_WRITER_HTTP_ADDR")?,
            max_body_bytes: s.whole("QIM_MAX_BODY_BYTES")? as usize,
            max_in_flight: s.whole("QIM_MAX_IN_FLIGHT_COMMITS")? as usize,
            recovery_grace: s.seconds("QIM_RECOVERY_GRACE_SECS")?,
            recovery_interval: s.seconds("QIM_RECOVERY_INTERVAL_SECS")?,
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
