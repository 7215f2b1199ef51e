//! The Redis backend: the default store and the hot tier.
//!
//! Atomic steps are Lua scripts kept as `.lua` files under `scripts/` and invoked through
//! `redis::Script` (EVALSHA, reloaded on NOSCRIPT). Key layout: see [`message`] and [`mailbox`].
//! Every key of one conversation, and of one user's mailbox, shares a hash tag, so the same
//! scripts run unchanged on Redis Cluster.

pub mod archive_gaps;
pub mod connection;
pub mod index_shard;
pub mod mailbox;
pub mod membership;
pub mod membership_cache;
pub mod message;
mod script_sources;
mod tick;
pub mod writer_id;

pub use archive_gaps::ArchiveGaps;
pub use connection::{RedisConnection, Topology};
pub use mailbox::RedisMailboxStore;
pub use membership::RedisMembershipStore;
pub use membership_cache::RedisMembershipCache;
pub use message::{
    CommitLayout, RecentRecords, RedisMessageStore, RestoreReport, SeqLeases, TrimReport, DEFAULT_LEASE_BLOCK,
};
pub use writer_id::{Renewal, WriterId, WriterIdLease, DEFAULT_WRITER_ID_LIFE, WRITER_IDS};

use std::time::Duration;

use redis::Script;

use crate::error::StoreError;

/// How to reach Redis and which key namespace to use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RedisConfig {
    /// `redis://host:port/db` for one server, `redis+cluster://host:port,host:port` for a
    /// Redis Cluster ([`Topology`]).
    pub url: String,
    /// Prefix of every key (`qim` in services; unique per test store).
    pub namespace: String,
}

impl RedisConfig {
    /// Checks the namespace: 1..=64 characters of `[A-Za-z0-9_.-]` (no `{`, `}` or `:`, which
    /// carry meaning in the key layout).
    pub fn validate(&self) -> Result<(), String> {
        let ok = !self.namespace.is_empty()
            && self.namespace.len() <= 64
            && self.namespace.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b));
        if !ok {
            return Err(format!("redis namespace {:?} must be 1..=64 characters of [A-Za-z0-9_.-]", self.namespace));
        }
        Ok(())
    }
}

/// How long one command (or pipeline) may wait for its reply before it fails as
/// `Unavailable`: long enough for a Redis that is busy (serving a backlog, rewriting its AOF),
/// short enough that a dead one is noticed. (redis-rs's own default is 500 ms.)
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one connection attempt may take.
pub const CONNECTION_TIMEOUT: Duration = Duration::from_secs(5);

/// `scripts/serving_prelude.lua`: `serving()`, the copy of the data a script runs on.
const SERVING_PRELUDE: &str = include_str!("scripts/serving_prelude.lua");

/// A script whose `body` may call `serving()` (see `scripts/serving_prelude.lua`): what a
/// lease, a member cache or a shard's incarnation is stamped with, and checked against.
pub(crate) fn serving_script(body: &str) -> Script {
    script(&[SERVING_PRELUDE, body].concat())
}

/// A script of the store: `Script::new`, with its source remembered by its hash so that a
/// server which lost it (a restart, a failover, `SCRIPT FLUSH`) is sent `EVAL` of the source in
/// place of the failed `EVALSHA`, on the same node ([`connection`]), never a `SCRIPT LOAD` to
/// every node (which a cluster refuses while a dead master is still in its slot map;
/// [`script_sources`]).
pub(crate) fn script(source: &str) -> Script {
    let script = Script::new(source);
    script_sources::remember_script(script.get_hash(), source);
    script
}

/// Opens a self-reconnecting connection (multiplexed: many commands in flight at once) to the
/// single server or the cluster `config.url` names.
pub async fn connect(config: &RedisConfig) -> Result<RedisConnection, StoreError> {
    config.validate().map_err(StoreError::InvalidInput)?;
    RedisConnection::open(&config.url).await
}

/// [`connect`], then a `PING` and a check that the servers are of the topology the URL names:
/// a store opened with it is known to answer.
pub async fn connect_checked(config: &RedisConfig) -> Result<RedisConnection, StoreError> {
    let mut con = connect(config).await?;
    let _: String = redis::cmd("PING")
        .query_async(&mut con)
        .await
        .map_err(|e| redis_error(&format!("pinging redis at {}", config.url), e))?;
    con.check_topology(&config.url).await?;
    Ok(con)
}

/// Maps a Redis failure to a store error: I/O, connection and cluster-down failures are
/// `Unavailable`; a script's `condition failed`/`corrupt` replies are decoded by the callers.
pub(crate) fn redis_error(what: &str, err: redis::RedisError) -> StoreError {
    StoreError::unavailable(what.to_owned(), err)
}
