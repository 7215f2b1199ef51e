//! The writer's variables (one clap group: the shared groups and [`WriterArgs`]), and its
//! validated, typed configuration.

use std::net::SocketAddr;
use std::time::Duration;

use clap::Args;
use qim_runtime::auth::AuthConfig;
use qim_runtime::env::{
    whole, ArchiverGroupArgs, AuthArgs, CommonArgs, Environment, KafkaArgs, StoreArgs, StoreBackend, Whole,
};
use qim_store::message::MAX_PAYLOAD_BYTES;
use qim_store::redis::{CommitLayout, RedisConfig};
use qim_store::retention::RetentionPolicy;
use qim_store::scylla::ScyllaConfig;

use crate::publisher::{Compression, ProducerTuning};

/// Every variable the writer reads.
#[derive(Args, Clone, Debug)]
pub struct WriterEnv {
    #[command(flatten)]
    store: StoreArgs,
    #[command(flatten)]
    kafka: KafkaArgs,
    #[command(flatten)]
    archiver_group: ArchiverGroupArgs,
    #[command(flatten)]
    auth: AuthArgs,
    #[command(flatten)]
    common: CommonArgs,
    #[command(flatten)]
    writer: WriterArgs,
}

/// The variables only the writer reads.
#[derive(Args, Clone, Debug)]
pub struct WriterArgs {
    /// Listen address of the writer's HTTP API and `/metrics`.
    #[arg(long, verbatim_doc_comment, env = "QIM_WRITER_HTTP_ADDR", default_value = "127.0.0.1:8080")]
    writer_http_addr: SocketAddr,
    /// Largest accepted message body; larger requests get 413.
    #[arg(long, verbatim_doc_comment, env = "QIM_MAX_BODY_BYTES", default_value = "65536", value_parser = whole(1, MAX_PAYLOAD_BYTES as u64))]
    max_body_bytes: Whole,
    /// Commits in flight at once; further sends wait.
    #[arg(long, verbatim_doc_comment, env = "QIM_MAX_IN_FLIGHT_COMMITS", default_value = "1024", value_parser = whole(1, 1_000_000))]
    max_in_flight_commits: Whole,
    /// The recovery loop drives commits left unfinished for longer than this many seconds.
    #[arg(long, verbatim_doc_comment, env = "QIM_RECOVERY_GRACE_SECS", default_value = "30", value_parser = whole(1, 3600))]
    recovery_grace_secs: Whole,
    /// Seconds between the writer's recovery scans for unfinished commits.
    #[arg(long, verbatim_doc_comment, env = "QIM_RECOVERY_INTERVAL_SECS", default_value = "5", value_parser = whole(1, 3600))]
    recovery_interval_secs: Whole,
    /// Seqs one durable lease covers: after a Redis loss a conversation skips at most this many; the durable high-water mark is raised once per this many sends.
    #[arg(long, verbatim_doc_comment, env = "QIM_SEQ_LEASE_BLOCK", default_value = "64", value_parser = whole(2, 1_000_000))]
    seq_lease_block: Whole,
    /// Milliseconds a produced record waits for others to share its Kafka batch (`linger.ms`).
    #[arg(long, verbatim_doc_comment, env = "QIM_WRITER_KAFKA_LINGER_MS", default_value = "2", value_parser = whole(0, 1000))]
    writer_kafka_linger_ms: Whole,
    /// Compression of the writer's Kafka batches (`compression.type`): `none`, `gzip`, `snappy` or `lz4`.
    #[arg(long, verbatim_doc_comment, env = "QIM_WRITER_KAFKA_COMPRESSION", default_value = "lz4", value_enum)]
    writer_kafka_compression: Compression,
    /// Where the Redis backend creates new sends' commits: `sender` (the sender's slot, five round trips per send) or `conversation` (the group-commit layout, three; not yet the default). Either reads both, so a fleet may mix them.
    #[arg(long, verbatim_doc_comment, env = "QIM_REDIS_COMMIT_LAYOUT", default_value = "sender", value_enum)]
    redis_commit_layout: CommitLayoutArg,
    /// Whether sends in flight at once share their Redis round trips (group commit): each step of every waiting send goes out as one pipeline per tick (one per slot on a cluster), and a slot's script calls of a tick become one call (in the `conversation` layout, one seq script per conversation). `false` gives every send its own round trips.
    #[arg(long, verbatim_doc_comment, env = "QIM_REDIS_GROUP_COMMIT", default_value = "true", action = clap::ArgAction::Set)]
    redis_group_commit: bool,
}

/// The values of `QIM_REDIS_COMMIT_LAYOUT`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum CommitLayoutArg {
    /// [`CommitLayout::InSenderSlot`].
    Sender,
    /// [`CommitLayout::InConversationSlot`].
    Conversation,
}

impl From<CommitLayoutArg> for CommitLayout {
    fn from(arg: CommitLayoutArg) -> Self {
        match arg {
            CommitLayoutArg::Sender => CommitLayout::InSenderSlot,
            CommitLayoutArg::Conversation => CommitLayout::InConversationSlot,
        }
    }
}

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
    /// How the producer batches.
    pub producer: ProducerTuning,
    /// The committed-message topic.
    pub messages_topic: String,
    /// The archiver's consumer group: its committed offsets end the archived part of the topic.
    pub archiver_group: String,
    /// Seqs per durable lease (Redis backend).
    pub seq_lease_block: u64,
    /// Where the Redis backend creates new sends' commits.
    pub commit_layout: CommitLayout,
    /// Whether sends in flight share their Redis round trips (Redis backend).
    pub group_commit: bool,
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
    /// Who may call `/v1`, and how often.
    pub auth: AuthConfig,
    /// Log filter and format.
    pub log: qim_runtime::telemetry::LogSettings,
    /// How long start-up steps may keep retrying their servers.
    pub startup_timeout: Duration,
}

impl Environment for WriterEnv {
    type Config = WriterConfig;

    fn config(&self) -> Result<WriterConfig, String> {
        let backend = match self.store.store_backend {
            StoreBackend::Redis => Backend::Redis { redis: self.store.redis(), archive: self.store.scylla()? },
            StoreBackend::Scylla => Backend::Scylla(self.store.scylla()?),
        };
        let w = &self.writer;
        // The ranges of the `Whole`s fit the narrower types, so these casts never truncate.
        Ok(WriterConfig {
            backend,
            kafka_brokers: self.kafka.kafka_brokers.clone(),
            producer: ProducerTuning {
                linger: Duration::from_millis(w.writer_kafka_linger_ms.get()),
                compression: w.writer_kafka_compression,
            },
            messages_topic: self.kafka.messages_topic.clone(),
            archiver_group: self.archiver_group.archiver_group.clone(),
            seq_lease_block: w.seq_lease_block.get(),
            commit_layout: w.redis_commit_layout.into(),
            group_commit: w.redis_group_commit,
            policy: self.store.default_history_retention_days,
            hot_window_days: self.store.hot_window_days.get() as u32,
            http_addr: w.writer_http_addr,
            max_body_bytes: w.max_body_bytes.get() as usize,
            max_in_flight: w.max_in_flight_commits.get() as usize,
            recovery_grace: w.recovery_grace_secs.secs(),
            recovery_interval: w.recovery_interval_secs.secs(),
            auth: self.auth.config()?,
            log: self.common.log_settings(),
            startup_timeout: self.common.startup_timeout_secs.secs(),
        })
    }

    fn store(&self) -> &StoreArgs {
        &self.store
    }
}
