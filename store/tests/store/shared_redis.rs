//! The shared Redis of the local stack, for tests that need only a fresh key namespace each:
//! where it is, how a test fails when it is missing, and cleaning namespaces up afterwards.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// The variable naming the Redis under test.
pub const URL_VAR: &str = "QIM_TEST_REDIS_URL";
/// Database 1 of the local stack's Redis: these suites' own. Each test removes its namespace, so
/// the keyspace walk that finds a namespace's keys covers only the namespaces of tests still
/// running, whatever services, demos and other suites leave in database 0 (millions of keys on
/// a long-lived stack made that walk cost seconds per test).
const DEFAULT_URL: &str = "redis://127.0.0.1:6379/1";

/// `QIM_TEST_REDIS_URL`, or database 1 of the local stack's Redis.
pub fn url() -> String {
    std::env::var(URL_VAR).ok().filter(|u| !u.trim().is_empty()).unwrap_or_else(|| DEFAULT_URL.to_owned())
}

/// Why a test fails when Redis is missing: names Redis, the variable and how to start it.
pub fn unreachable(url: &str, err: &dyn std::fmt::Display) -> String {
    format!(
        "Redis is unreachable at {url} ({URL_VAR}): {err}; start the local stack with `deploy/local/stack up` \
         (these tests never skip)"
    )
}

/// The local stack's Redis Cluster (`deploy/local/stack cluster up`), or
/// `QIM_TEST_REDIS_CLUSTER_URL`: where the contract suites run a second time.
#[allow(dead_code)] // not every test binary runs on the cluster
pub fn cluster_url() -> String {
    qim_testkit::stack::redis_cluster_url()
}

/// A namespace no other store (in this or another test process) uses.
pub fn unique_namespace() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    format!("qimtest_{}_{n}_{nanos}", std::process::id())
}

/// Deletes every key of the namespaces it was given when dropped (at the end of a test, also
/// when it panicked), so test runs do not pile up in the shared Redis.
#[derive(Default)]
pub struct Cleanup(Mutex<Vec<(String, String)>>);

impl Cleanup {
    /// Deletes `namespace`'s keys on the shared Redis ([`url`]) when this is dropped.
    pub fn register(&self, namespace: &str) {
        self.register_at(&url(), namespace);
    }

    /// Deletes `namespace`'s keys on the Redis (or cluster) at `url` when this is dropped.
    pub fn register_at(&self, url: &str, namespace: &str) {
        let mut all = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        all.push((url.to_owned(), namespace.to_owned()));
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let namespaces = std::mem::take(self.0.get_mut().unwrap_or_else(std::sync::PoisonError::into_inner));
        if namespaces.is_empty() {
            return;
        }
        for (url, ns) in namespaces {
            let _ = qim_testkit::redis::wipe_namespace_blocking(&url, &ns);
        }
    }
}

/// Deletes every key of `namespace` now (a test's "Redis lost everything").
#[allow(dead_code)] // not every test binary loses Redis state
pub fn wipe(namespace: &str) -> usize {
    qim_testkit::redis::wipe_namespace_blocking(&url(), namespace)
        .unwrap_or_else(|e| panic!("wiping {namespace}: {e:#}"))
}

/// The members of every shard of a sharded index (`RedisMessageStore::recovery_keys` and the
/// like), shard after shard.
#[allow(dead_code)] // not every test binary reads the indexes
pub async fn zrange_all(con: &mut impl redis::aio::ConnectionLike, shards: Vec<String>) -> Vec<String> {
    let mut all = Vec::new();
    for key in shards {
        let members: Vec<String> = redis::cmd("ZRANGE").arg(&key).arg(0).arg(-1).query_async(con).await.unwrap();
        all.extend(members);
    }
    all
}

/// The entries of every shard of a sharded index together.
#[allow(dead_code)] // not every test binary reads the indexes
pub async fn zcard_all(con: &mut impl redis::aio::ConnectionLike, shards: Vec<String>) -> i64 {
    let mut total = 0;
    for key in shards {
        total += redis::cmd("ZCARD").arg(&key).query_async::<i64>(con).await.unwrap();
    }
    total
}
