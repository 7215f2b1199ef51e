//! Opening the configured store backend: connect and prepare, then check readiness, each step
//! retried while its server is unavailable (until the start-up deadline). Never migrates (that
//! is `qim-writer migrate`) and never falls back to another backend.

use std::sync::Arc;

use anyhow::Context;
use qim_runtime::http::ReadinessCheck;
use qim_runtime::startup::{open_scylla_messages, Startup};
use qim_store::clock::{Clock, SystemClock};
use qim_store::redis::{RedisMembershipCache, RedisMessageStore, SeqLeases};
use qim_store::retention::RetentionPolicy;
use qim_store::scylla::{ScyllaConfig, ScyllaMembershipStore, ScyllaMessageStore};
use qim_store::tiered::{TieredMembershipStore, TieredMessageStore};
use qim_store::{MembershipStore, MessageStore};

use crate::config::{Backend, WriterConfig};
use crate::recent::ArchiveAndTail;
use crate::tail::TailScanner;

/// The opened stores of one writer.
pub struct Stores {
    /// Commit state and history.
    pub messages: Arc<dyn MessageStore>,
    /// Conversation membership.
    pub members: Arc<dyn MembershipStore>,
    /// Whether the backend can serve now.
    pub ready: ReadinessCheck,
}

/// Connects to the configured backend and checks it is ready (schema present for Scylla). With
/// Redis, history reads go through [`TieredMessageStore`] (hot tier, then the archive), whose
/// Redis store owns the hot-window trim and leases its seqs from the archive's durable
/// high-water marks, restoring a conversation's recent records from the archive and the
/// topic's unarchived tail when Redis lost them (DESIGN invariant 7); membership lives in the
/// archive keyspace, cached in Redis ([`TieredMembershipStore`], invariant 9).
pub async fn open(config: &WriterConfig, startup: &Startup) -> anyhow::Result<Stores> {
    let policy = config.policy;
    match &config.backend {
        Backend::Redis { redis, archive: archive_config } => {
            let clock: Arc<dyn Clock> = Arc::new(SystemClock);
            let archive = startup
                .step("connecting to the scylla archive", || open_scylla(archive_config, policy, clock.clone()))
                .await?;
            let tail =
                Arc::new(TailScanner::new(&config.kafka_brokers, &config.messages_topic, &config.archiver_group));
            let leases = SeqLeases::new(Arc::new(archive.clone()))
                .with_block(config.seq_lease_block)
                .with_recent_records(Arc::new(ArchiveAndTail::new(archive.clone(), tail)));
            let hot = startup
                .step("connecting to the redis hot tier", || async {
                    RedisMessageStore::open(redis, policy, clock.clone())
                        .await
                        .with_context(|| format!("opening the redis store at {}", redis.url))
                })
                .await?
                .with_seq_leases(leases)
                .with_commit_layout(config.commit_layout)
                .with_group_commit(config.group_commit);
            let tiered = TieredMessageStore::new(hot.clone(), archive.clone(), config.hot_window_days, clock)
                .context("combining the hot tier and the archive")?;
            let members: Arc<dyn MembershipStore> = Arc::new(TieredMembershipStore::new(
                startup
                    .step("connecting to the membership table", || async {
                        ScyllaMembershipStore::connect(archive_config)
                            .await
                            .context("opening the scylla membership store")
                    })
                    .await?,
                startup
                    .step("connecting to the redis member cache", || async {
                        RedisMembershipCache::open(redis).await.context("opening the redis member cache")
                    })
                    .await?,
            ));
            let (probe, archive_probe) = (hot, archive);
            let ready: ReadinessCheck = Arc::new(move || {
                let (probe, archive_probe) = (probe.clone(), archive_probe.clone());
                Box::pin(async move {
                    probe.ping().await.map_err(|e| e.to_string())?;
                    scylla_ready(&archive_probe).await
                })
            });
            Ok(Stores { messages: Arc::new(tiered), members, ready })
        }
        Backend::Scylla(config) => {
            let clock: Arc<dyn Clock> = Arc::new(SystemClock);
            let store = startup.step("connecting to scylla", || open_scylla(config, policy, clock.clone())).await?;
            let probe = store.clone();
            let ready: ReadinessCheck = Arc::new(move || {
                let probe = probe.clone();
                Box::pin(async move { scylla_ready(&probe).await })
            });
            let members: Arc<dyn MembershipStore> = Arc::new(
                startup
                    .step("connecting to the membership table", || async {
                        ScyllaMembershipStore::connect(config).await.context("opening the scylla membership store")
                    })
                    .await?,
            );
            Ok(Stores { messages: Arc::new(store), members, ready })
        }
    }
}

/// Connects to a migrated Scylla keyspace; an unmigrated one is an error naming `migrate`.
async fn open_scylla(
    config: &ScyllaConfig,
    policy: RetentionPolicy,
    clock: Arc<dyn Clock>,
) -> anyhow::Result<ScyllaMessageStore> {
    open_scylla_messages(config, policy, clock, "qim-writer migrate").await
}

async fn scylla_ready(store: &ScyllaMessageStore) -> Result<(), String> {
    match store.readiness().await {
        Ok(r) if r.is_ready() => Ok(()),
        Ok(r) => Err(format!("{r:?}")),
        Err(e) => Err(e.to_string()),
    }
}
