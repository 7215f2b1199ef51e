//! One isolated pipeline run: its own Redis namespace, topics, keyspace, groups and ports.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use backon::{ExponentialBuilder, Retryable};
use qim_store::scylla::{migrate, ScyllaConfig};
use qim_store::StoreError;
use qim_testkit::ports::free_port;
use rdkafka::admin::AdminClient;
use rdkafka::client::DefaultClientContext;

use super::ServiceKind;
use crate::stack;

/// Directory under which each run keeps its logs (default: `<tmp>/qim-runs`).
pub const RUN_DIR_ENV: &str = "QIM_RUN_DIR";
/// The commit layout the runs' writers use (`sender` or `conversation`; unset: the default).
pub const COMMIT_LAYOUT_ENV: &str = "QIM_TEST_REDIS_COMMIT_LAYOUT";

/// How long [`PipelineEnv::migrate`] keeps sending a migration the server did not answer.
const MIGRATION_PATIENCE: Duration = Duration::from_secs(90);

/// Partitions of the run's messages topic.
pub const MESSAGE_PARTITIONS: i32 = 8;
/// Mailbox shards (= partitions of the run's dispatch topic).
pub const MAILBOX_SHARDS: u16 = 4;

/// The names and addresses of one isolated run. Nothing in it is shared with another run.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct PipelineEnv {
    /// The label the run was created with.
    pub label: String,
    /// The unique name everything else derives from.
    pub name: String,
    /// Kafka bootstrap servers.
    pub kafka_brokers: String,
    /// Redis URL.
    pub redis_url: String,
    /// Redis key prefix of the run.
    pub redis_namespace: String,
    /// The writer's `QIM_REDIS_COMMIT_LAYOUT`, from [`COMMIT_LAYOUT_ENV`] (unset: the writer's
    /// default), so the pipeline and fault suites can run in either commit layout.
    #[serde(default)]
    pub commit_layout: Option<String>,
    /// Cassandra contact points.
    pub scylla_hosts: Vec<String>,
    /// Cassandra local data centre.
    pub scylla_dc: String,
    /// Replication factor of the run's keyspace.
    pub scylla_rf: u32,
    /// The run's keyspace (migrated by [`PipelineEnv::fresh`]).
    pub keyspace: String,
    /// `qim.messages.v1` of the run.
    pub messages_topic: String,
    /// `qim.mailbox.dispatch.v1` of the run.
    pub dispatch_topic: String,
    /// The archiver's dead-letter topic.
    pub archiver_dlq_topic: String,
    /// The dispatcher's dead-letter topic.
    pub dispatcher_dlq_topic: String,
    /// The archiver's consumer group.
    pub archiver_group: String,
    /// The dispatcher's group prefix (`<prefix>.router`, `<prefix>.shards`).
    pub dispatcher_group: String,
    /// Mailbox shards.
    pub mailbox_shards: u16,
    /// Default retention in days (what the services are given).
    pub retention_days: u32,
    /// Loopback ports of the writer, archiver and dispatcher HTTP listeners.
    pub writer_port: u16,
    /// See `writer_port`.
    pub archiver_port: u16,
    /// See `writer_port`.
    pub dispatcher_port: u16,
    /// Where the services' logs go.
    pub run_dir: PathBuf,
}

impl PipelineEnv {
    /// Names a fresh run labelled `label` (lowercase letters, digits, `_`; at most 10
    /// characters are used), creates its topics (messages: 8 partitions, dispatch:
    /// [`MAILBOX_SHARDS`], both dead-letter topics: 1) and migrates its keyspace (RF from
    /// `QIM_TEST_SCYLLA_RF`, default 1, single-node development mode).
    ///
    /// # Errors
    ///
    /// A server is not reachable (named, with `deploy/local/stack up`), or creating a topic,
    /// the keyspace or the run directory failed.
    pub async fn fresh(label: &str) -> anyhow::Result<Self> {
        let rf = std::env::var("QIM_TEST_SCYLLA_RF").ok().map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
        let rf = rf.as_deref().unwrap_or("1").parse().context("QIM_TEST_SCYLLA_RF must be a number")?;
        Self::fresh_at(label, stack::Endpoints::from_env(), rf).await
    }

    /// [`Self::fresh`] on the servers `at`, with a keyspace of replication factor `rf`
    /// (single-node development mode below 3): e.g. [`stack::Endpoints::rf3`] and 3 for the
    /// three-node mode.
    ///
    /// # Errors
    ///
    /// As [`Self::fresh`].
    pub async fn fresh_at(label: &str, at: stack::Endpoints, rf: u32) -> anyhow::Result<Self> {
        let clean: String = label
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
            .map(|c| c.to_ascii_lowercase())
            .take(10)
            .collect();
        let clean = if clean.starts_with(|c: char| c.is_ascii_lowercase()) { clean } else { format!("r{clean}") };
        let name = stack::unique_name(&format!("e2e_{}", &clean[..clean.len().min(12)]));
        let env = |var: &str, default: &str| {
            std::env::var(var).ok().map(|v| v.trim().to_owned()).filter(|v| !v.is_empty()).unwrap_or(default.to_owned())
        };
        let run_dir =
            PathBuf::from(env(RUN_DIR_ENV, &std::env::temp_dir().join("qim-runs").to_string_lossy())).join(&name);
        std::fs::create_dir_all(&run_dir)
            .with_context(|| format!("creating the run directory {}", run_dir.display()))?;
        let this = Self {
            label: label.to_owned(),
            kafka_brokers: at.kafka_brokers,
            redis_url: at.redis_url,
            redis_namespace: name.clone(),
            commit_layout: std::env::var(COMMIT_LAYOUT_ENV).ok().map(|v| v.trim().to_owned()).filter(|v| !v.is_empty()),
            scylla_hosts: at.scylla_hosts,
            scylla_dc: env("QIM_TEST_SCYLLA_DC", "datacenter1"),
            scylla_rf: rf,
            keyspace: name.clone(),
            messages_topic: format!("{name}.messages"),
            dispatch_topic: format!("{name}.dispatch"),
            archiver_dlq_topic: format!("{name}.messages_dlq"),
            dispatcher_dlq_topic: format!("{name}.mailbox_dlq"),
            archiver_group: format!("{name}.archiver"),
            dispatcher_group: format!("{name}.dispatcher"),
            mailbox_shards: MAILBOX_SHARDS,
            retention_days: 30,
            writer_port: free_port(),
            archiver_port: free_port(),
            dispatcher_port: free_port(),
            run_dir,
            name,
        };
        stack::connect_redis().await?;
        this.create_topics().await?;
        this.migrate().await?;
        Ok(this)
    }

    /// The `QIM_*` variables `kind` runs with in this run (complete: the child's inherited
    /// `QIM_*` variables are removed).
    pub fn service_env(&self, kind: ServiceKind) -> Vec<(String, String)> {
        let mut v: Vec<(&str, String)> = vec![
            ("QIM_STORE_BACKEND", "redis".into()),
            ("QIM_REDIS_URL", self.redis_url.clone()),
            ("QIM_REDIS_NAMESPACE", self.redis_namespace.clone()),
            ("QIM_SCYLLA_HOSTS", self.scylla_hosts.join(",")),
            ("QIM_SCYLLA_KEYSPACE", self.keyspace.clone()),
            ("QIM_SCYLLA_DC", self.scylla_dc.clone()),
            ("QIM_SCYLLA_RF", self.scylla_rf.to_string()),
            ("QIM_SCYLLA_DEV_SINGLE_NODE", (self.scylla_rf < 3).to_string()),
            ("QIM_DEFAULT_HISTORY_RETENTION_DAYS", self.retention_days.to_string()),
            ("QIM_KAFKA_BROKERS", self.kafka_brokers.clone()),
            ("QIM_MESSAGES_TOPIC", self.messages_topic.clone()),
            ("QIM_LOG", "info".into()),
        ];
        match kind {
            ServiceKind::Writer => v.extend([
                (kind.http_addr_var(), format!("127.0.0.1:{}", self.writer_port)),
                // The harness drives the pipeline, not its API's authorization (the writer's and
                // the dispatcher's `auth_matrix` tests do): no tokens, no rate limits.
                ("QIM_AUTH_DISABLED", "true".into()),
                ("QIM_ARCHIVER_GROUP", self.archiver_group.clone()),
                ("QIM_RECOVERY_GRACE_SECS", "5".into()),
                ("QIM_RECOVERY_INTERVAL_SECS", "1".into()),
            ]),

            ServiceKind::Archiver => v.extend([
                (kind.http_addr_var(), format!("127.0.0.1:{}", self.archiver_port)),
                ("QIM_ARCHIVER_GROUP", self.archiver_group.clone()),
                ("QIM_DLQ_TOPIC", self.archiver_dlq_topic.clone()),
                ("QIM_ARCHIVER_HOLE_GRACE_SECS", "10".into()),
                ("QIM_ARCHIVER_TRIM_INTERVAL_SECS", "5".into()),
            ]),
            ServiceKind::Dispatcher => v.extend([
                (kind.http_addr_var(), format!("127.0.0.1:{}", self.dispatcher_port)),
                ("QIM_AUTH_DISABLED", "true".into()),
                ("QIM_MAILBOX_SHARDS", self.mailbox_shards.to_string()),
                ("QIM_DISPATCH_TOPIC", self.dispatch_topic.clone()),
                ("QIM_DISPATCHER_GROUP", self.dispatcher_group.clone()),
                ("QIM_DISPATCHER_DLQ_TOPIC", self.dispatcher_dlq_topic.clone()),
            ]),
        }
        if let (ServiceKind::Writer, Some(layout)) = (kind, &self.commit_layout) {
            v.push(("QIM_REDIS_COMMIT_LAYOUT", layout.clone()));
        }
        v.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
    }

    /// `http://127.0.0.1:<port>` of `kind`.
    pub fn base_url(&self, kind: ServiceKind) -> String {
        let port = match kind {
            ServiceKind::Writer => self.writer_port,
            ServiceKind::Archiver => self.archiver_port,
            ServiceKind::Dispatcher => self.dispatcher_port,
        };
        format!("http://127.0.0.1:{port}")
    }

    /// The Scylla settings of the run's keyspace (for opening the archive or a session).
    pub fn scylla_config(&self) -> qim_store::scylla::ScyllaConfig {
        qim_store::scylla::ScyllaConfig {
            hosts: self.scylla_hosts.clone(),
            keyspace: self.keyspace.clone(),
            local_dc: self.scylla_dc.clone(),
            replication_factor: self.scylla_rf,
        }
    }

    /// The Redis settings of the run's namespace.
    pub fn redis_config(&self) -> qim_store::redis::RedisConfig {
        qim_store::redis::RedisConfig { url: self.redis_url.clone(), namespace: self.redis_namespace.clone() }
    }

    /// A Kafka admin client for the run's brokers.
    pub fn kafka_admin(&self) -> anyhow::Result<AdminClient<DefaultClientContext>> {
        stack::kafka_config()
            .set("bootstrap.servers", &self.kafka_brokers)
            .create()
            .context("creating a Kafka admin client")
    }

    async fn create_topics(&self) -> anyhow::Result<()> {
        stack::connect_kafka_at(&self.kafka_brokers).await?;
        let config = stack::kafka_config_at(&self.kafka_brokers);
        let specs = [
            (self.messages_topic.as_str(), MESSAGE_PARTITIONS),
            (self.dispatch_topic.as_str(), i32::from(self.mailbox_shards)),
            (self.archiver_dlq_topic.as_str(), 1),
            (self.dispatcher_dlq_topic.as_str(), 1),
        ];
        qim_testkit::kafka::create_topics_with(&config, &specs).await.context("creating the run's topics")
    }

    /// Creates (or verifies) the run's keyspace and tables. The first call of a process also drops
    /// the keyspaces of finished runs ([`qim_testkit::scylla::sweep_leftover_keyspaces`]) and
    /// their Redis namespaces ([`qim_testkit::redis::sweep_leftover_namespaces`]), so a finished
    /// demo's or test's state lasts about ten minutes after its process exits.
    ///
    /// # Errors
    ///
    /// Cassandra does not answer, or refuses the keyspace.
    pub async fn migrate(&self) -> anyhow::Result<()> {
        static SWEPT: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();
        let session = stack::connect_scylla_at(&self.scylla_hosts).await?;
        if !stack::swept_by_the_runner() {
            SWEPT
                .get_or_init(|| async {
                    qim_testkit::scylla::sweep_leftover_keyspaces(&session, stack::MIN_AGE).await;
                    qim_testkit::redis::sweep_leftover_namespaces(&self.redis_url, stack::MIN_AGE).await;
                })
                .await;
        }
        let vars = self.service_env(ServiceKind::Archiver);
        let lookup = move |name: &str| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
        let config = ScyllaConfig::production_from(&lookup).context("the run's keyspace settings")?;
        // A single node busy with a whole test run's load times out on schema changes now and
        // then; every statement of the migration is idempotent, so a timed-out one is sent again.
        let backoff = ExponentialBuilder::default()
            .with_min_delay(Duration::from_millis(500))
            .with_max_delay(Duration::from_secs(5))
            .with_jitter()
            .without_max_times()
            .with_total_delay(Some(MIGRATION_PATIENCE));
        (|| migrate(&session, &config))
            .retry(backoff)
            .when(|e: &StoreError| e.kind().is_retryable())
            .notify(|e, pause| eprintln!("migrating keyspace {} again in {pause:?}: {e}", config.keyspace))
            .await
            .with_context(|| format!("migrating the run's keyspace {}", config.keyspace))
    }
}
