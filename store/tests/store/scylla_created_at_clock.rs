//! `created_at` in Scylla mode comes with the seq from the conversation's clock
//! (`conversation_sequence.last_created_at`, moved by the same CAS): two writers whose clocks are
//! seconds apart, sending into one conversation one after the other and at once, never give a
//! later seq an earlier `created_at`; a retry on the other writer keeps the first `created_at`;
//! a sequence row written before the clock column existed keeps counting.
//!
//! Needs the local stack's Cassandra (`deploy/local/stack up`); fails, never skips, without it.

use std::sync::Arc;

use qim_store::clock::{Clock, ManualClock};
use qim_store::ids::UnixMillis;
use qim_store::testsuite::fixtures::{fresh_conversation, fresh_message_id, fresh_tenant, request, user, T0};
use qim_store::testsuite::message::{commit_fully, skewed_writers_keep_created_at_in_seq_order};
use qim_store::MessageStore;

use crate::scylla_support::{connect, default_policy, isolated_stores};

/// How far the slow writer's clock runs behind the fast one's.
const SKEW_MILLIS: i64 = 5_000;

/// The fast writer at [`T0`] and the slow one [`SKEW_MILLIS`] behind, on one keyspace.
async fn pair() -> ([qim_store::scylla::ScyllaMessageStore; 2], [Arc<ManualClock>; 2], qim_store::scylla::ScyllaConfig)
{
    let clocks = [Arc::new(ManualClock::new(T0)), Arc::new(ManualClock::new(UnixMillis(T0.0 - SKEW_MILLIS)))];
    let dyn_clocks: Vec<Arc<dyn Clock>> = clocks.iter().map(|c| c.clone() as Arc<dyn Clock>).collect();
    let (mut stores, config) = isolated_stores(default_policy(), dyn_clocks).await;
    let slow = stores.pop().expect("two stores");
    let fast = stores.pop().expect("two stores");
    ([fast, slow], clocks, config)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skewed_scylla_writers_keep_created_at_in_seq_order() {
    let ([fast, slow], clocks, _) = pair().await;
    skewed_writers_keep_created_at_in_seq_order([&fast, &slow], &clocks, 10).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_on_the_other_scylla_writer_gets_the_first_created_at() {
    let ([fast, slow], _, _) = pair().await;
    let (tenant, conversation) = (fresh_tenant(), fresh_conversation());
    let r = request(tenant, user(1), "once", conversation, b"hello");
    let first = fast.reserve(&r, fresh_message_id()).await.expect("reserve");
    let again = slow.reserve(&r, fresh_message_id()).await.expect("the retry is answered");
    assert_eq!(again.intent, first.intent, "the retry got another seq, id or created_at");
    let next = commit_fully(&slow, &request(tenant, user(1), "next", conversation, b"x")).await;
    assert!(next.intent.seq > first.intent.seq);
    assert_eq!(next.intent.created_at, first.intent.created_at, "the slow writer takes the conversation's clock");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sequence_row_from_before_the_clock_column_keeps_counting() {
    let ([fast, slow], _, config) = pair().await;
    let (tenant, conversation) = (fresh_tenant(), fresh_conversation());
    let session = connect(&config).await;
    session
        .query_unpaged(
            format!(
                "INSERT INTO {}.conversation_sequence (tenant_id, conversation_id, last_seq) VALUES (?, ?, 5)",
                config.keyspace
            ),
            (&tenant.0[..], &conversation.0[..]),
        )
        .await
        .expect("a sequence row without a clock");
    let sixth = commit_fully(&slow, &request(tenant, user(1), "sixth", conversation, b"x")).await;
    assert_eq!((sixth.intent.seq.0, sixth.intent.created_at), (6, UnixMillis(T0.0 - SKEW_MILLIS)));
    let seventh = commit_fully(&fast, &request(tenant, user(1), "seventh", conversation, b"x")).await;
    assert_eq!((seventh.intent.seq.0, seventh.intent.created_at), (7, T0));
    let eighth = commit_fully(&slow, &request(tenant, user(1), "eighth", conversation, b"x")).await;
    assert_eq!((eighth.intent.seq.0, eighth.intent.created_at), (8, T0), "the slow writer takes the clock");
}
