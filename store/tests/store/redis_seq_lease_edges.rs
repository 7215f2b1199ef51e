//! Seq leases at their edges, each test on private `redis-server`s: the revalidation token (a
//! revalidation that dies half-way, its writer killed, blocks the conversation only for the
//! token's short life; one that takes longer than that life keeps its token, so no second
//! revalidation runs beside it), and a failed-over master that gets an older copy of its own
//! lease back by resyncing from the new master.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use tokio::sync::Notify;

use async_trait::async_trait;
use qim_store::error::StoreResult;
use qim_store::ids::{ConversationId, TenantId};
use qim_store::memory::MemorySeqHighWater;
use qim_store::redis::{RedisConfig, RedisMessageStore, SeqLeases};
use qim_store::retention::RetentionPolicy;
use qim_store::testsuite::fixtures::{clock, fresh_conversation, fresh_tenant, request, user};
use qim_store::testsuite::message::commit_fully;
use qim_store::testsuite::private_redis::PrivateRedis;
use qim_store::{HighWater, SeqHighWater};

/// Marks whose reads take `delay` (forever when `None`) before they answer from `inner`; each
/// read, as it begins, notifies `reading`.
struct SlowMarks {
    inner: Arc<MemorySeqHighWater>,
    delay: Option<Duration>,
    reading: Arc<Notify>,
}

impl SlowMarks {
    fn new(inner: Arc<MemorySeqHighWater>, delay: Option<Duration>) -> (Arc<Self>, Arc<Notify>) {
        let reading = Arc::new(Notify::new());
        (Arc::new(Self { inner, delay, reading: reading.clone() }), reading)
    }
}

/// Waits until a send holding the conversation's revalidation token reads the marks.
async fn revalidating(reading: &Notify) {
    tokio::time::timeout(Duration::from_secs(10), reading.notified())
        .await
        .expect("the first send began its revalidation within 10 s");
}

#[async_trait]
impl SeqHighWater for SlowMarks {
    async fn high_water(&self, tenant: TenantId, conversation: ConversationId) -> StoreResult<HighWater> {
        self.reading.notify_one();
        match self.delay {
            Some(delay) => tokio::time::sleep(delay).await,
            None => std::future::pending::<()>().await,
        }
        self.inner.high_water(tenant, conversation).await
    }

    async fn advance_high_water(
        &self,
        tenant: TenantId,
        conversation: ConversationId,
        expected: &HighWater,
        to: &HighWater,
    ) -> StoreResult<Option<HighWater>> {
        self.inner.advance_high_water(tenant, conversation, expected, to).await
    }
}

async fn open(redis: &PrivateRedis, marks: Arc<dyn SeqHighWater>) -> RedisMessageStore {
    let config = RedisConfig { url: redis.url(), namespace: "qim".into() };
    let store =
        RedisMessageStore::open(&config, RetentionPolicy::default(), clock()).await.expect("private redis answers");
    store.with_seq_leases(SeqLeases::new(marks))
}

async fn send(store: &RedisMessageStore, tenant: TenantId, conv: ConversationId, id: &str) -> u64 {
    commit_fully(store, &request(tenant, user(1), id, conv, b"hello")).await.intent.seq.0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revalidation_that_died_half_way_blocks_its_conversation_only_briefly() {
    let redis = PrivateRedis::start();
    let marks = Arc::new(MemorySeqHighWater::default());
    let (t, conv) = (fresh_tenant(), fresh_conversation());
    let (stuck_marks, reading) = SlowMarks::new(marks.clone(), None);
    let stuck = open(&redis, stuck_marks).await;
    let dying = tokio::spawn(async move { send(&stuck, t, conv, "m1").await });
    revalidating(&reading).await;
    // What SIGKILL does to a writer: it holds the token and never installs nor gives it back.
    dying.abort();
    let _ = dying.await;
    let healthy = open(&redis, marks).await;
    let began = Instant::now();
    assert_eq!(send(&healthy, t, conv, "m2").await, 1);
    let waited = began.elapsed();
    assert!(waited < Duration::from_secs(12), "a dead revalidation blocked its conversation for {waited:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revalidation_slower_than_its_token_life_keeps_the_token() {
    let redis = PrivateRedis::start();
    let marks = Arc::new(MemorySeqHighWater::default());
    let (t, conv) = (fresh_tenant(), fresh_conversation());
    // Slower than the token's life (6 s) unless it is renewed.
    let (slow_marks, reading) = SlowMarks::new(marks.clone(), Some(Duration::from_secs(8)));
    let slow = open(&redis, slow_marks).await;
    let first = tokio::spawn(async move { send(&slow, t, conv, "m1").await });
    revalidating(&reading).await;
    let other = open(&redis, marks).await;
    let second = send(&other, t, conv, "m2").await;
    let first = first.await.expect("the slow send finishes");
    // Had the token lapsed, the second send would have revalidated beside the first and been
    // issued seq 1 first.
    assert_eq!((first, second), (1, 2), "the second send waited for the slow revalidation's lease");
}

async fn raw(redis: &PrivateRedis) -> MultiplexedConnection {
    let client = redis::Client::open(redis.url()).expect("url");
    client.get_multiplexed_async_connection().await.expect("private redis answers")
}

/// Makes `replica` a replica of `master` and waits until it holds everything `master` holds.
async fn replicate(replica: &PrivateRedis, master: &PrivateRedis) {
    let url = redis::parse_redis_url(&master.url()).expect("a redis url");
    let port = url.port().expect("a port").to_string();
    let mut r = raw(replica).await;
    redis::cmd("REPLICAOF").arg("127.0.0.1").arg(&port).query_async::<()>(&mut r).await.expect("replicaof");
    let mut m = raw(master).await;
    for _ in 0..200 {
        let info: String = redis::cmd("INFO").arg("replication").query_async(&mut r).await.expect("info");
        if info.contains("master_link_status:up") {
            let acked: i64 = redis::cmd("WAIT").arg(1).arg(5_000).query_async(&mut m).await.expect("wait");
            assert_eq!(acked, 1, "the replica acknowledged every write");
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the replica never caught up with its master");
}

/// What a failover does to `replica`: it stops replicating and takes writes.
async fn promote(replica: &PrivateRedis) {
    redis::cmd("REPLICAOF").arg("NO").arg("ONE").query_async::<()>(&mut raw(replica).await).await.expect("promote");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_over_master_that_resynced_an_older_copy_never_reissues_a_seq() {
    let (p, q) = (PrivateRedis::start(), PrivateRedis::start());
    let marks = Arc::new(MemorySeqHighWater::default());
    let (t, conv) = (fresh_tenant(), fresh_conversation());
    let on_p = open(&p, marks.clone()).await;
    for i in 1..=10 {
        assert_eq!(send(&on_p, t, conv, &format!("a{i}")).await, i);
    }
    replicate(&q, &p).await;
    // The failover: q takes over with seqs 1–10, while p, not knowing, goes on issuing (above
    // 64: p's replication id changed when q first attached, which made p revalidate).
    promote(&q).await;
    let mut issued: Vec<u64> = Vec::new();
    for i in 1..=10 {
        issued.push(send(&on_p, t, conv, &format!("b{i}")).await);
    }
    let highest = *issued.last().expect("ten seqs");
    assert!(issued[0] > 10 && highest == issued[0] + 9, "contiguous above the first ten: {issued:?}");
    // The failback: p resyncs from q (p's own lease of those seqs comes back, with the counter
    // at 10, in the same process) and is promoted again.
    replicate(&p, &q).await;
    promote(&p).await;
    let on_p = open(&p, marks).await;
    let next = send(&on_p, t, conv, "c1").await;
    assert!(next > highest, "seq {next} was issued before the failback (up to {highest})");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_names_the_servers_run_id_and_replication_id() {
    let redis = PrivateRedis::start();
    let store = open(&redis, Arc::new(MemorySeqHighWater::default())).await;
    let (t, conv) = (fresh_tenant(), fresh_conversation());
    assert_eq!(send(&store, t, conv, "a1").await, 1);
    let mut r = raw(&redis).await;
    let field = |text: &str, name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name).and_then(|v| v.strip_prefix(':')))
            .map(|v| v.trim().to_owned())
            .unwrap_or_else(|| panic!("INFO names no {name}"))
    };
    let server: String = redis::cmd("INFO").arg("server").query_async(&mut r).await.expect("info server");
    let replication: String = redis::cmd("INFO").arg("replication").query_async(&mut r).await.expect("info");
    let expected = format!("{}{}", field(&server, "run_id"), field(&replication, "master_replid"));
    let keys: Vec<String> = redis::cmd("KEYS").arg("qim:*:lease").query_async(&mut r).await.expect("keys");
    assert_eq!(keys.len(), 1, "one conversation holds one lease: {keys:?}");
    let lease: String = redis::cmd("GET").arg(&keys[0]).query_async(&mut r).await.expect("get");
    assert_eq!(lease.split(':').next(), Some(expected.as_str()), "the lease {lease:?} names this copy of the data");
}
