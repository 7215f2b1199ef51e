//! Opening the configured store backend: connect and prepare, then check readiness. Never
//! migrates (that is `qim-writer migrate`) and never falls back to another backend.

use std::sync::Arc;

use anyhow::{bail, Context};
use qim_store::clock::{Clock, SystemClock};
use qim_store::redis::{RedisMembershipStore, RedisMessageStore};
use qim_store::retention::RetentionPolicy;
use qim_store::scylla::{ScyllaConfig, ScyllaMembershipStore, ScyllaMessageStore};
use qim_store::service::http::ReadinessCheck;
use qim_store::tiered::TieredMessageStore;
use qim_store::{MembershipStore, MessageStore};

use crate::config::Backend;

/// The opened stores of one writer.
pub struct Stores {
    /// Commit state and history.
    pub messages: Arc<dyn MessageStore>,
    /// Conversation membership.
    pub members: Arc<dyn MembershipStore>,
    /// The Redis store itself when the backend is Redis (re-seeding needs it).
    pub redis: Option<RedisMessageStore>,
    /// Whether the backend can serve now.
    pub ready: ReadinessCheck,
}

/// Connects to `backend` and checks it is ready (schema present for Scylla). With Redis, history
/// reads go through [`TieredMessageStore`] (hot tier, then the archive), whose Redis store owns
/// the `hot_window_days` trim window.
pub async fn open(backend: &Backend, policy: RetentionPolicy, hot_window_days: u32) -> anyhow::Result<Stores> {
    match backend {
        Backend::Redis { redis: config, archive } => {
            let clock: Arc<dyn Clock> = Arc::new(SystemClock);
            let hot = RedisMessageStore::open(config, policy, clock.clone())
                .await
                .with_context(|| format!("opening the redis store at {}", config.url))?;
            let archive = open_scylla(archive, policy, clock.clone()).await?;
            let tiered = TieredMessageStore::new(hot.clone(), archive.clone(), hot_window_days, clock)
                .context("combining the hot tier and the archive")?;
            let (probe, archive_probe) = (hot.clone(), archive);
            let ready: ReadinessCheck = Arc::new(move || {
                let (probe, archive_probe) = (probe.clone(), archive_probe.clone());
                Box::pin(async move {
                    match probe.missing_seed_markers().await {
                        Ok(0) => {}
                        Ok(n) => return Err(format!("{n} redis slots are not seeded (re-seed pending)")),
                        Err(e) => return Err(e.to_string()),
                    }
                    scylla_ready(&archive_probe).await
                })
            });
            let members: Arc<dyn MembershipStore> =
                Arc::new(RedisMembershipStore::open(config).await.context("opening the redis membership store")?);
            Ok(Stores { messages: Arc::new(tiered), members, redis: Some(hot), ready })
        }
        Backend::Scylla(config) => {
            let store = open_scylla(config, policy, Arc::new(SystemClock)).await?;
            let probe = store.clone();
            let ready: ReadinessCheck = Arc::new(move || {
                let probe = probe.clone();
                Box::pin(async move { scylla_ready(&probe).await })
            });
            let members: Arc<dyn MembershipStore> =
                Arc::new(ScyllaMembershipStore::connect(config).await.context("opening the scylla membership store")?);
            Ok(Stores { messages: Arc::new(store), members, redis: None, ready })
        }
    }
}

/// Connects to a migrated Scylla keyspace; an unmigrated one is an error naming `migrate`.
async fn open_scylla(
    config: &ScyllaConfig,
    policy: RetentionPolicy,
    clock: Arc<dyn Clock>,
) -> anyhow::Result<ScyllaMessageStore> {
    let store = ScyllaMessageStore::connect(config, policy, clock).await.with_context(|| {
        format!("connecting to scylla keyspace {} (run `qim-writer migrate` first?)", config.keyspace)
    })?;
    let readiness = store.readiness().await.context("reading the scylla schema")?;
    if !readiness.is_ready() {
        bail!("scylla keyspace {} is not ready: {readiness:?}; run `qim-writer migrate`", config.keyspace);
    }
    Ok(store)
}

async fn scylla_ready(store: &ScyllaMessageStore) -> Result<(), String> {
    match store.readiness().await {
        Ok(r) if r.is_ready() => Ok(()),
        Ok(r) => Err(format!("{r:?}")),
        Err(e) => Err(e.to_string()),
    }
}
