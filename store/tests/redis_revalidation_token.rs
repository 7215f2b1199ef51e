//! The revalidation token of a conversation's seq lease: a revalidation that dies half-way (its
//! writer killed) blocks the conversation only for the token's short life, and one that takes
//! longer than that life keeps its token, so no second revalidation runs beside it.

use std::sync::Arc;
use std::time::{Duration, Instant};

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

/// Marks whose reads take `delay` (forever when `None`) before they answer from `inner`.
struct SlowMarks {
    inner: Arc<MemorySeqHighWater>,
    delay: Option<Duration>,
}

#[async_trait]
impl SeqHighWater for SlowMarks {
    async fn high_water(&self, tenant: TenantId, conversation: ConversationId) -> StoreResult<HighWater> {
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
    let stuck = open(&redis, Arc::new(SlowMarks { inner: marks.clone(), delay: None })).await;
    let dying = tokio::spawn(async move { send(&stuck, t, conv, "m1").await });
    tokio::time::sleep(Duration::from_millis(300)).await;
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
    let slow = open(&redis, Arc::new(SlowMarks { inner: marks.clone(), delay: Some(Duration::from_secs(8)) })).await;
    let first = tokio::spawn(async move { send(&slow, t, conv, "m1").await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let other = open(&redis, marks).await;
    let second = send(&other, t, conv, "m2").await;
    let first = first.await.expect("the slow send finishes");
    // Had the token lapsed, the second send would have revalidated beside the first and been
    // issued seq 1 first.
    assert_eq!((first, second), (1, 2), "the second send waited for the slow revalidation's lease");
}
