//! Redis loses the writer's state (every key of its namespace) while the writer runs, with no
//! archiver: the writer stays ready (sends resume per conversation, lazily), the next send to a
//! conversation revalidates its seq lease against the durable high-water mark, so no seq is
//! reissued, and writes the conversation's records and recent commits back from the topic's
//! unarchived tail (the archiver's group has committed nothing, so that is the whole topic).
//! Membership is durable in the archive keyspace: nobody is added again (DESIGN invariants 7, 9).

use crate::support;

use qim_store::ids::{ConversationId, TenantId, UserId};
use qim_testkit::metrics::Exposition;
use qim_writer::config::Backend;
use support::{create_topic, fresh, send_body, Kind, TestWriter};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_redis_lost_its_state_sends_resume_above_the_durable_mark_and_history_comes_back() {
    let topic = create_topic().await;
    let w = TestWriter::start(support::config(Kind::Redis, &topic).await).await;
    let (tenant, conversation, alice) = (fresh(TenantId), fresh(ConversationId), fresh(UserId));
    w.add_members(tenant, conversation, &[alice]).await;
    for n in 1..=3 {
        let (status, answer) =
            w.post("/v1/messages", &send_body(tenant, conversation, alice, &format!("a{n}"), "x")).await;
        assert_eq!((status, answer["conversation_seq"].as_u64()), (200, Some(n)), "{answer}");
    }
    let Backend::Redis { redis, .. } = &w.config.backend else { unreachable!() };
    let wiped = qim_testkit::redis::wipe_namespace(&redis.url, &redis.namespace).await.expect("wiping the namespace");
    assert!(wiped > 0, "the writer's state was in its namespace");
    let (status, readyz) = w.get("/readyz").await;
    assert_eq!(status, 200, "a Redis loss does not take the writer out of service: {readyz}");

    // The member is still a member (the durable membership table): history answers. (Its
    // records are in no archive here, nothing runs one; they come back with the next send.)
    let history = format!("/v1/tenants/{tenant}/conversations/{conversation}/messages?viewer={alice}&direction=newer");
    let (status, page) = w.get(&history).await;
    assert_eq!(status, 200, "{page}");

    let (status, answer) = w.post("/v1/messages", &send_body(tenant, conversation, alice, "a4", "x")).await;
    assert_eq!(status, 200, "{answer}");
    let next = answer["conversation_seq"].as_u64().unwrap();
    assert_eq!(
        next,
        qim_store::redis::DEFAULT_LEASE_BLOCK + 1,
        "above the durable mark: seqs 1..=3 are never issued again"
    );
    // The conversation's records and commits came back from the topic: a retry of an
    // acknowledged send gets its answer, and uses up no seq.
    let (status, retry) = w.post("/v1/messages", &send_body(tenant, conversation, alice, "a2", "x")).await;
    assert_eq!((status, retry["conversation_seq"].as_u64()), (200, Some(2)), "{retry}");
    let (status, answer) = w.post("/v1/messages", &send_body(tenant, conversation, alice, "a5", "x")).await;
    assert_eq!((status, answer["conversation_seq"].as_u64()), (200, Some(next + 1)), "no hole: {answer}");
    let (status, page) = w.get(&history).await;
    assert_eq!(status, 200, "{page}");
    let seqs: Vec<u64> = page["records"].as_array().unwrap().iter().filter_map(|r| r["seq"].as_u64()).collect();
    assert_eq!(seqs, vec![1, 2, 3, next, next + 1], "{page}");
    let text = w.http.get(format!("{}/metrics", w.base)).send().await.unwrap().text().await.unwrap();
    let metrics = Exposition::parse(&text);
    assert_eq!(metrics.sum("qim_store_seq_leases_total", &[("step", "revalidated")]), 1.0, "{text}");
    assert_eq!(metrics.sum("qim_store_hot_tier_records_restored_total", &[]), 3.0, "three records restored");
    w.stop().await.unwrap();
}
