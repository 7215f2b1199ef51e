//! Opening the configured store backend: connect and prepare, then check readiness. Never
//! migrates (that is `qim-writer migrate`) and never falls back to another backend.

use std::sync::Arc;

use anyhow::{bail, Context};
use qim_store::clock::SystemClock;
use qim_store::redis::{RedisMembershipStore, RedisMessageStore};
use qim_store::retention::RetentionPolicy;
use qim_store::scylla::{ScyllaMembershipStore, ScyllaMessageStore};
use qim_store::service::http::ReadinessCheck;
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

/// Connects to `backend` and checks it is ready (schema present for Scylla).
pub async fn open(backend: &Backend, policy: RetentionPolicy) -> anyhow::Result<Stores> {
    match backend {
        Backend::Redis(config) => {
            let store = RedisMessageStore::open(config, policy, Arc::new(SystemClock))
                .await
                .with_context(|| format!("opening the redis store at {}", config.url))?;
            let probe = store.clone();
            let ready: ReadinessCheck = Arc::new(move || {
                let probe = probe.clone();
                Box::pin(async move {
                    match probe.missing_seed_markers().await {
                        Ok(0) => Ok(()),
                        Ok(n) => Err(format!("{n} redis slots are not seeded (re-seed pending)")),
                        Err(e) => Err(e.to_string()),
                    }
                })
            });
            let members: Arc<dyn MembershipStore> =
                Arc::new(RedisMembershipStore::open(config).await.context("opening the redis membership store")?);
            Ok(Stores { messages: Arc::new(store.clone()), members, redis: Some(store), ready })
        }
        Backend::Scylla(config) => {
            let store =
                ScyllaMessageStore::connect(config, policy, Arc::new(SystemClock)).await.with_context(|| {
                    format!("connecting to scylla keyspace {} (run `qim-writer migrate` first?)", config.keyspace)
                })?;
            let readiness = store.readiness().await.context("reading the scylla schema")?;
            if !readiness.is_ready() {
                bail!("scylla keyspace {} is not ready: {readiness:?}; run `qim-writer migrate`", config.keyspace);
            }
            let probe = store.clone();
            let ready: ReadinessCheck = Arc::new(move || {
                let probe = probe.clone();
                Box::pin(async move {
                    match probe.readiness().await {
                        Ok(r) if r.is_ready() => Ok(()),
                        Ok(r) => Err(format!("{r:?}")),
                        Err(e) => Err(e.to_string()),
                    }
                })
            });
            let members: Arc<dyn MembershipStore> =
                Arc::new(ScyllaMembershipStore::connect(config).await.context("opening the scylla membership store")?);
            Ok(Stores { messages: Arc::new(store), members, redis: None, ready })
        }
    }
}
