//! The memory backend is the reference for the Redis mailbox store (the runner is
//! `qim_store::testsuite::differential`).
//!
//! Needs the local stack's Redis (`QIM_TEST_REDIS_URL`); fails, never skips, when it is missing.

use crate::shared_redis;

use std::sync::Arc;

use qim_store::clock::ManualClock;
use qim_store::mailbox::{MailboxRetention, ShardId};
use qim_store::redis::mailbox::RedisMailboxStore;
use qim_store::redis::RedisConfig;
use qim_store::testsuite::differential;
use shared_redis::{unique_namespace, unreachable, Cleanup};

/// A store in a fresh namespace (deleted by `cleanup`); panics (never skips) when Redis is
/// unreachable.
async fn open_at(
    url: &str,
    retention: MailboxRetention,
    clock: Arc<ManualClock>,
    cleanup: &Cleanup,
) -> RedisMailboxStore {
    let config = RedisConfig { url: url.to_owned(), namespace: unique_namespace() };
    cleanup.register(&config.namespace);
    RedisMailboxStore::open(&config, retention, clock).await.unwrap_or_else(|e| panic!("{}", unreachable(url, &e)))
}

/// 24 random runs of 300 steps, each in a fresh namespace.
#[tokio::test(flavor = "current_thread")]
async fn redis_answers_like_the_memory_reference() {
    let cleanup = Cleanup::default();
    let mut paths = differential::Paths::new();
    for seed in 0..24u64 {
        let clock = differential::clock();
        let redis = open_at(&shared_redis::url(), differential::retention(), clock.clone(), &cleanup).await;
        let seed = seed.wrapping_mul(0x2545_f491_4f6c_dd1d) ^ 0x51ed;
        differential::compare_with_memory(&redis, clock, seed, 300, ShardId(3), &mut paths).await;
    }
    differential::assert_every_path_reached(&paths);
}
