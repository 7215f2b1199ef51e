//! The membership contract suite against the Redis backend, plus checks of its key layout and
//! of failing closed on data that is not what the layout says.
//!
//! Needs a running Redis: `QIM_TEST_REDIS_URL` (default `redis://127.0.0.1:6379/0`), started on
//! our machines by `deploy/local/stack up`. An unreachable Redis fails the tests; they never skip.

use std::sync::Arc;

use async_trait::async_trait;
use qim_store::redis::{RedisConfig, RedisMembershipStore};
use qim_store::testsuite::MembershipHarness;
use qim_store::MembershipStore;

use crate::shared_redis;

use shared_redis::{unique_namespace, unreachable, Cleanup};

/// Opens a store in a fresh namespace (deleted by `cleanup`); panics (never skips) when Redis is
/// unreachable.
async fn open_store(cleanup: &Cleanup) -> (RedisMembershipStore, RedisConfig) {
    open_store_at(shared_redis::url(), cleanup).await
}

/// [`open_store`] on the Redis (or cluster) at `url`.
async fn open_store_at(url: String, cleanup: &Cleanup) -> (RedisMembershipStore, RedisConfig) {
    let config = RedisConfig { url: url.clone(), namespace: unique_namespace() };
    cleanup.register_at(&url, &config.namespace);
    match RedisMembershipStore::open(&config).await {
        Ok(store) => (store, config),
        Err(e) => panic!("{}", unreachable(&url, &e)),
    }
}

/// Opens Redis stores, each in a fresh namespace.
struct Redis {
    url: String,
    cleanup: Cleanup,
}

impl Default for Redis {
    fn default() -> Self {
        Self::on(shared_redis::url())
    }
}

impl Redis {
    /// Stores on the Redis (or cluster) at `url`.
    fn on(url: String) -> Self {
        Self { url, cleanup: Cleanup::default() }
    }
}

#[async_trait]
impl MembershipHarness for Redis {
    async fn open(&self) -> Arc<dyn MembershipStore> {
        Arc::new(open_store_at(self.url.clone(), &self.cleanup).await.0)
    }
}

mod contract {
    use super::*;
    qim_store::membership_store_contract_suite!(Redis::default());
}

/// The same suite on the Redis Cluster.
mod contract_on_cluster {
    use super::*;
    qim_store::membership_store_contract_suite!(Redis::on(shared_redis::cluster_url()));
}

/// Redis-specific checks beyond the shared contract.
mod redis_specific {
    use super::*;
    use qim_store::clock::ManualClock;
    use qim_store::redis::RedisMessageStore;
    use qim_store::retention::RetentionPolicy;
    use qim_store::testsuite::fixtures::{assert_kind, fresh_conversation, fresh_tenant, user, T0};
    use qim_store::ErrorKind;

    async fn raw(config: &RedisConfig) -> redis::aio::MultiplexedConnection {
        let client = redis::Client::open(config.url.as_str()).expect("redis url");
        client.get_multiplexed_async_connection().await.unwrap_or_else(|e| panic!("{}", unreachable(&config.url, &e)))
    }

    /// One ZSET per conversation under the conversation's hash tag (the one the message store's
    /// keys carry), raw 16-byte members, all scores 0; removing the last member drops the key.
    #[tokio::test]
    async fn one_sorted_set_of_raw_ids_with_score_zero() {
        let cleanup = Cleanup::default();
        let (store, config) = open_store(&cleanup).await;
        let (t, c) = (fresh_tenant(), fresh_conversation());
        let key = store.members_key(t, c);
        assert_eq!(key, format!("{}:{{c:{}{}}}:members", config.namespace, t.to_hex(), c.to_hex()));
        let clock = Arc::new(ManualClock::new(T0));
        let messages = RedisMessageStore::open(&config, RetentionPolicy::default(), clock).await.unwrap();
        let index = messages.index_key(t, c);
        let tag = |k: &str| k[..k.find('}').expect("a hash tag") + 1].to_owned();
        assert_eq!(tag(&key), tag(&index), "membership shares the conversation's hash tag");

        store.add_members(t, c, &[user(2), user(1)]).await.unwrap();
        let mut con = raw(&config).await;
        let kind: String = redis::cmd("TYPE").arg(&key).query_async(&mut con).await.unwrap();
        assert_eq!(kind, "zset");
        let entries: Vec<(Vec<u8>, f64)> =
            redis::cmd("ZRANGE").arg(&key).arg(0).arg(-1).arg("WITHSCORES").query_async(&mut con).await.unwrap();
        assert_eq!(entries, vec![(user(1).0.to_vec(), 0.0), (user(2).0.to_vec(), 0.0)]);
        let ttl: i64 = redis::cmd("PTTL").arg(&key).query_async(&mut con).await.unwrap();
        assert_eq!(ttl, -1, "membership never expires");
        store.remove_members(t, c, &[user(1), user(2)]).await.unwrap();
        let exists: i64 = redis::cmd("EXISTS").arg(&key).query_async(&mut con).await.unwrap();
        assert_eq!(exists, 0, "an emptied conversation leaves no key");
    }

    /// Concurrent adds of the same users count each user exactly once between them.
    #[tokio::test]
    async fn concurrent_adds_count_each_user_once() {
        let cleanup = Cleanup::default();
        let (store, _) = open_store(&cleanup).await;
        let (t, c) = (fresh_tenant(), fresh_conversation());
        let users: Vec<_> = (0..1000).map(user).collect();
        let (a, b) = tokio::join!(store.add_members(t, c, &users), store.add_members(t, c, &users));
        assert_eq!(a.unwrap() + b.unwrap(), users.len());
    }

    /// A member that is not a 16-byte id, a score other than 0 and a key of another type are
    /// `CorruptEntry`.
    #[tokio::test]
    async fn stored_data_outside_the_layout_fails_closed() {
        let cleanup = Cleanup::default();
        let (store, config) = open_store(&cleanup).await;
        let mut con = raw(&config).await;
        let t = fresh_tenant();

        let c = fresh_conversation();
        store.add_members(t, c, &[user(1)]).await.unwrap();
        redis::cmd("ZADD")
            .arg(store.members_key(t, c))
            .arg(0)
            .arg(b"short".as_slice())
            .query_async::<i64>(&mut con)
            .await
            .unwrap();
        assert_kind(store.members_page(t, c, None, 10).await, ErrorKind::CorruptEntry, "a 5-byte member");

        let c = fresh_conversation();
        store.add_members(t, c, &[user(1), user(2)]).await.unwrap();
        redis::cmd("ZADD")
            .arg(store.members_key(t, c))
            .arg(7)
            .arg(&user(1).0[..])
            .query_async::<i64>(&mut con)
            .await
            .unwrap();
        assert_kind(store.is_member(t, c, user(1)).await, ErrorKind::CorruptEntry, "a score of 7");
        assert!(store.is_member(t, c, user(2)).await.unwrap(), "the other member is fine");

        let c = fresh_conversation();
        redis::cmd("SET").arg(store.members_key(t, c)).arg("x").query_async::<()>(&mut con).await.unwrap();
        assert_kind(store.is_member(t, c, user(1)).await, ErrorKind::CorruptEntry, "a string key: is_member");
        assert_kind(store.members_page(t, c, None, 10).await, ErrorKind::CorruptEntry, "a string key: page");
        assert_kind(store.add_members(t, c, &[user(1)]).await, ErrorKind::CorruptEntry, "a string key: add");
        assert_kind(store.remove_members(t, c, &[user(1)]).await, ErrorKind::CorruptEntry, "a string key: remove");
    }

    /// Redis missing is `Unavailable`, and the harness names Redis and the stack command.
    #[tokio::test]
    async fn unreachable_redis_is_unavailable() {
        let config = RedisConfig { url: "redis://127.0.0.1:1/0".to_owned(), namespace: unique_namespace() };
        let err = RedisMembershipStore::open(&config).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
        let message = unreachable(&config.url, &err);
        assert!(message.contains("Redis") && message.contains("`deploy/local/stack up`"), "{message}");
    }
}
