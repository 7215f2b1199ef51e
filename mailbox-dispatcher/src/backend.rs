//! Opening the configured backend: the mailbox store and the membership store (the one the
//! writer's admin API writes: the Scylla keyspace's membership table, cached in Redis in the same
//! `QIM_REDIS_NAMESPACE` when the backend is Redis), then a readiness check. Never migrates (that is `qim-mailbox-dispatcher migrate`) and never falls back to
//! another backend.

use std::sync::Arc;

use anyhow::{bail, Context};
use qim_runtime::http::ReadinessCheck;
use qim_store::clock::SystemClock;
use qim_store::mailbox::MailboxRetention;
use qim_store::redis::{RedisMailboxStore, RedisMembershipCache};
use qim_store::scylla::{open_session, readiness, ScyllaConfig, ScyllaMailboxStore, ScyllaMembershipStore};
use qim_store::tiered::TieredMembershipStore;
use qim_store::{MailboxStore, MembershipStore};
use scylla::client::session::Session;

use crate::config::Backend;

/// The opened stores of one dispatcher.
pub struct Stores {
    /// Mailboxes, dispatch bookkeeping and watermarks.
    pub mailbox: Arc<dyn MailboxStore>,
    /// Conversation membership (written by the writer's admin API).
    pub members: Arc<dyn MembershipStore>,
    /// Whether the backend can serve now.
    pub ready: ReadinessCheck,
    /// The Scylla mailbox store itself, for its LWT counter (benchmarks).
    pub scylla: Option<ScyllaMailboxStore>,
}

/// Connects to `backend` and checks it is ready (the schema present, for Scylla).
pub async fn open(backend: &Backend, retention: MailboxRetention) -> anyhow::Result<Stores> {
    match backend {
        Backend::Redis { redis: config, members: members_config } => {
            let store = RedisMailboxStore::open(config, retention, Arc::new(SystemClock))
                .await
                .with_context(|| format!("opening the redis mailbox store at {}", config.url))?;
            let members = members_tiered(config, members_config).await?;
            let url = config.url.clone();
            let ready: ReadinessCheck = Arc::new(move || {
                let url = url.clone();
                Box::pin(async move { ping_redis(&url).await })
            });
            ping_redis(&config.url).await.map_err(|e| anyhow::Error::new(qim_runtime::startup::Unreachable(e)))?;
            Ok(Stores { mailbox: Arc::new(store), members, ready, scylla: None })
        }
        Backend::Scylla(config) => {
            let session = Arc::new(
                open_session(config)
                    .await
                    .with_context(|| format!("connecting to scylla for keyspace {}", config.keyspace))?,
            );
            let schema = readiness(&session, config).await.context("reading the scylla schema")?;
            if !schema.is_ready() {
                bail!(
                    "scylla keyspace {} is not ready: {schema:?}; run `qim-mailbox-dispatcher migrate`",
                    config.keyspace
                );
            }
            let store =
                ScyllaMailboxStore::connect(Arc::clone(&session), &config.keyspace, retention, Arc::new(SystemClock))
                    .await
                    .with_context(|| format!("preparing the mailbox statements in keyspace {}", config.keyspace))?;
            let members = members_scylla(&session, config).await?;
            let (probe, config) = (Arc::clone(&session), config.clone());
            let ready: ReadinessCheck = Arc::new(move || {
                let (probe, config) = (Arc::clone(&probe), config.clone());
                Box::pin(async move {
                    match readiness(&probe, &config).await {
                        Ok(r) if r.is_ready() => Ok(()),
                        Ok(r) => Err(format!("{r:?}")),
                        Err(e) => Err(e.to_string()),
                    }
                })
            });
            Ok(Stores { mailbox: Arc::new(store.clone()), members, ready, scylla: Some(store) })
        }
    }
}

async fn ping_redis(url: &str) -> Result<(), String> {
    let mut conn = qim_store::redis::RedisConnection::open(url).await.map_err(|e| e.to_string())?;
    redis::cmd("PING").query_async::<String>(&mut conn).await.map(drop).map_err(|e| format!("redis at {url}: {e}"))
}

/// Membership durable in `durable`'s keyspace (the writer's archive), cached in `redis`.
async fn members_tiered(
    redis: &qim_store::redis::RedisConfig,
    durable: &ScyllaConfig,
) -> anyhow::Result<Arc<dyn MembershipStore>> {
    let table = ScyllaMembershipStore::connect(durable)
        .await
        .with_context(|| format!("opening the membership table in keyspace {}", durable.keyspace))?;
    let cache = RedisMembershipCache::open(redis)
        .await
        .with_context(|| format!("opening the member cache at {}", redis.url))?;
    Ok(Arc::new(TieredMembershipStore::new(table, cache)))
}

async fn members_scylla(session: &Arc<Session>, config: &ScyllaConfig) -> anyhow::Result<Arc<dyn MembershipStore>> {
    let store = ScyllaMembershipStore::with_session(Arc::clone(session), config)
        .await
        .with_context(|| format!("preparing the membership statements in keyspace {}", config.keyspace))?;
    Ok(Arc::new(store))
}
