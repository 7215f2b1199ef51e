//! `created_at` on Redis comes from each store's hybrid logical clock and its conversation's clock:
//! two writers whose clocks are seconds apart, sending into one conversation, never give a later
//! seq an earlier `created_at` (on one server and on the cluster), the slow writer's clock moves
//! up to what it observed, a retry keeps its first `created_at`, and a conversation rebuilt after
//! Redis lost its state issues no `created_at` below its restored records'.
//!
//! Needs the local stack's Redis and its Redis Cluster (`deploy/local/stack up`, `stack cluster
//! up`); fails, never skips, when either is missing.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use qim_store::clock::ManualClock;
use qim_store::error::StoreResult;
use qim_store::ids::{ConversationId, TenantId, UnixMillis};
use qim_store::memory::MemorySeqHighWater;
use qim_store::message::PublishedRecord;
use qim_store::redis::message::RedisMessageStore;
use qim_store::redis::{RecentRecords, RedisConfig, SeqLeases};
use qim_store::retention::RetentionPolicy;
use qim_store::testsuite::fixtures::{
    fresh_conversation, fresh_message_id, fresh_tenant, published, request, user, T0,
};
use qim_store::testsuite::message::{commit_fully, skewed_writers_keep_created_at_in_seq_order};
use qim_store::MessageStore;

use crate::shared_redis::{cluster_url, unique_namespace, unreachable, url, wipe, Cleanup};

/// How far the slow writer's clock runs behind the fast one's.
const SKEW_MILLIS: i64 = 5_000;

/// The records a revalidation reads back from "the topic": whatever the test put there.
#[derive(Default)]
pub(crate) struct Topic(pub(crate) Mutex<Vec<PublishedRecord>>);

#[async_trait]
impl RecentRecords for Topic {
    async fn recent_records(
        &self,
        tenant: TenantId,
        conversation: ConversationId,
        _since: UnixMillis,
    ) -> StoreResult<Vec<PublishedRecord>> {
        let all = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        Ok(all.iter().filter(|p| p.record.tenant == tenant && p.record.conversation == conversation).cloned().collect())
    }
}

/// A writer: a store in `namespace` at `url` on its own clock, leasing from `marks`.
pub(crate) async fn writer(
    url: &str,
    namespace: &str,
    clock: Arc<ManualClock>,
    marks: Arc<MemorySeqHighWater>,
    topic: Arc<Topic>,
) -> RedisMessageStore {
    let config = RedisConfig { url: url.to_owned(), namespace: namespace.to_owned() };
    let store = RedisMessageStore::open(&config, RetentionPolicy::default(), clock)
        .await
        .unwrap_or_else(|e| panic!("{}", unreachable(url, &e)));
    store.with_seq_leases(SeqLeases::new(marks).with_recent_records(topic))
}

/// Two writers on one namespace: the fast one at [`T0`], the slow one [`SKEW_MILLIS`] behind.
struct Pair {
    fast: RedisMessageStore,
    slow: RedisMessageStore,
    clocks: [Arc<ManualClock>; 2],
}

async fn pair(url: &str, cleanup: &Cleanup) -> Pair {
    let namespace = unique_namespace();
    cleanup.register_at(url, &namespace);
    let (marks, topic) = (Arc::new(MemorySeqHighWater::default()), Arc::new(Topic::default()));
    let clocks = [Arc::new(ManualClock::new(T0)), Arc::new(ManualClock::new(UnixMillis(T0.0 - SKEW_MILLIS)))];
    let fast = writer(url, &namespace, clocks[0].clone(), marks.clone(), topic.clone()).await;
    let slow = writer(url, &namespace, clocks[1].clone(), marks, topic).await;
    Pair { fast, slow, clocks }
}

async fn skewed_writers_on(url: &str) {
    let cleanup = Cleanup::default();
    let Pair { fast, slow, clocks } = pair(url, &cleanup).await;
    let commits = skewed_writers_keep_created_at_in_seq_order([&fast, &slow], &clocks, 20).await;
    let (tenant, conversation) = (commits[0].intent.request.key.tenant, commits[0].intent.request.conversation);

    // The slow writer's hybrid clock observed the fast one's time: a conversation it alone
    // writes to starts there, not 5 s back.
    let probe = request(tenant, user(1), "probe", conversation, b"x");
    let fast_time = fast.reserve(&probe, fresh_message_id()).await.expect("reserve").intent.created_at;
    let alone = request(tenant, user(2), "alone", fresh_conversation(), b"x");
    let alone = slow.reserve(&alone, fresh_message_id()).await.expect("reserve").intent.created_at;
    assert!(alone.0 >= fast_time.0 - 100, "the slow writer stamped {} after seeing {}", alone.0, fast_time.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skewed_writers_keep_created_at_in_seq_order_on_one_server() {
    skewed_writers_on(&url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skewed_writers_keep_created_at_in_seq_order_on_the_cluster() {
    skewed_writers_on(&cluster_url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_on_the_other_writer_gets_the_first_created_at() {
    let cleanup = Cleanup::default();
    let Pair { fast, slow, .. } = pair(&url(), &cleanup).await;
    let (tenant, conversation) = (fresh_tenant(), fresh_conversation());
    let r = request(tenant, user(1), "once", conversation, b"hello");
    let first = fast.reserve(&r, fresh_message_id()).await.expect("reserve");
    let again = slow.reserve(&r, fresh_message_id()).await.expect("the retry is answered");
    assert_eq!(again.intent, first.intent, "the retry got another seq, id or created_at");
    // The slow writer's next send in that conversation is no earlier than the first.
    let next = commit_fully(&slow, &request(tenant, user(1), "next", conversation, b"x")).await;
    assert!(next.intent.seq > first.intent.seq && next.intent.created_at >= first.intent.created_at);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversation_rebuilt_after_a_redis_loss_issues_no_earlier_created_at() {
    let cleanup = Cleanup::default();
    let namespace = unique_namespace();
    cleanup.register(&namespace);
    let (marks, topic) = (Arc::new(MemorySeqHighWater::default()), Arc::new(Topic::default()));
    let fast = writer(&url(), &namespace, Arc::new(ManualClock::new(T0)), marks.clone(), topic.clone()).await;
    let (tenant, conversation) = (fresh_tenant(), fresh_conversation());
    let sent = commit_fully(&fast, &request(tenant, user(1), "before", conversation, b"x")).await;
    let policy = RetentionPolicy::default();
    let expires = policy.expires_at(sent.intent.request.retention, sent.intent.created_at);
    topic.0.lock().unwrap().extend(published(&[sent.intent.record(expires)]));

    assert!(wipe(&namespace) > 0, "the namespace held keys to lose");
    // A writer 5 s behind, in a fresh process (a fresh hybrid clock), sends first after the loss.
    let slow_clock = Arc::new(ManualClock::new(UnixMillis(T0.0 - SKEW_MILLIS)));
    let slow = writer(&url(), &namespace, slow_clock, marks, topic).await;
    let after = commit_fully(&slow, &request(tenant, user(2), "after", conversation, b"y")).await;
    assert!(after.intent.seq > sent.intent.seq, "a seq was reissued");
    assert!(
        after.intent.created_at >= sent.intent.created_at,
        "created_at went back from {} to {} across the loss",
        sent.intent.created_at.0,
        after.intent.created_at.0
    );
}
