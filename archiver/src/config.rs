//! The archiver's documented configuration, and its validated, typed form.

use std::net::SocketAddr;
use std::time::Duration;

use qim_runtime::env::{EnvVar, ARCHIVER_ENV, ARCHIVER_GROUP_ENV, HTTP_ENV, KAFKA_ENV, STORE_ENV};
use qim_runtime::settings::Settings;
use qim_store::redis::RedisConfig;
use qim_store::retention::RetentionPolicy;
use qim_store::scylla::ScyllaConfig;

/// Every variable the archiver reads, as documented in the README.
pub const ENVIRONMENT: &[&[EnvVar]] = &[STORE_ENV, KAFKA_ENV, ARCHIVER_GROUP_ENV, HTTP_ENV, ARCHIVER_ENV];

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
    /// Log filter.
    pub log: String,
    /// How long start-up steps may keep retrying their servers.
    pub startup_timeout: Duration,
}

impl ArchiverConfig {
    /// Validates and types `settings` (already checked against [`ENVIRONMENT`]).
    pub fn from_settings(s: &Settings) -> Result<Self, String> {
        let scylla = ScyllaConfig::production_from(s.lookup()).map_err(|e| e.to_string())?;
        let hot_tier = match s.required("QIM_STORE_BACKEND")? {
            "redis" => {
                let config = RedisConfig {
                    url: s.required("QIM_REDIS_URL")?.to_owned(),
                    namespace: s.required("QIM_REDIS_NAMESPACE")?.to_owned(),
                };
                config.validate().map_err(|e| format!("QIM_REDIS_NAMESPACE: {e}"))?;
                Some(config)
            }
            "scylla" => None,
            other => return Err(format!("QIM_STORE_BACKEND={other:?} must be `redis` or `scylla`")),
        };
        let policy =
            RetentionPolicy::from_env_value(s.get("QIM_DEFAULT_HISTORY_RETENTION_DAYS")).map_err(|e| e.to_string())?;
        Ok(Self {
            scylla,
            hot_tier,
            policy,
            hot_window_days: s.whole("QIM_HOT_WINDOW_DAYS")? as u32,
            kafka_brokers: s.required("QIM_KAFKA_BROKERS")?.to_owned(),
            messages_topic: s.required("QIM_MESSAGES_TOPIC")?.to_owned(),
            dlq_topic: s.required("QIM_DLQ_TOPIC")?.to_owned(),
            group: s.required("QIM_ARCHIVER_GROUP")?.to_owned(),
            batch: BatchLimits {
                max_records: s.whole("QIM_ARCHIVER_BATCH_RECORDS")? as usize,
                max_wait: Duration::from_millis(s.whole("QIM_ARCHIVER_BATCH_WAIT_MILLIS")?),
                write_concurrency: s.whole("QIM_ARCHIVER_WRITE_CONCURRENCY")? as usize,
            },
            hole_grace: s.seconds("QIM_ARCHIVER_HOLE_GRACE_SECS")?,
            trim_interval: s.seconds("QIM_ARCHIVER_TRIM_INTERVAL_SECS")?,
            http_addr: s.parse("QIM_ARCHIVER_HTTP_ADDR")?,
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

    fn config(pairs: &[(&str, &str)]) -> Result<ArchiverConfig, String> {
        let env: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let settings = Settings::resolve(ENVIRONMENT, &|n| env.get(n).cloned(), env.keys().cloned())?;
        ArchiverConfig::from_settings(&settings)
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
}
