//! Redis loses the writer's state (every key of its namespace, seed markers included) while the
//! writer runs: the next send re-seeds the seq counters from `qim.messages.v1` before it is
//! given a seq, so no seq is reissued, and the hot tier's history and the recent commits are
//! written back from the same pass (DESIGN invariant 7).

mod support;

use qim_store::ids::{ConversationId, TenantId, UserId};
use qim_writer::config::Backend;
use support::{create_topic, fresh, send_body, Kind, TestWriter};

/// Deletes every key of `namespace` (SCAN, never KEYS: the shared Redis may hold millions).
async fn wipe_namespace(url: &str, namespace: &str) -> usize {
    let client = redis::Client::open(url).unwrap();
    let mut con = client.get_multiplexed_async_connection().await.expect("redis answers");
    let (mut cursor, mut wiped) = (0u64, 0);
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{namespace}:*"))
            .arg("COUNT")
            .arg(10_000)
            .query_async(&mut con)
            .await
            .unwrap();
        if !keys.is_empty() {
            redis::cmd("DEL").arg(&keys).query_async::<()>(&mut con).await.unwrap();
            wiped += keys.len();
        }
        if next == 0 {
            return wiped;
        }
        cursor = next;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_redis_lost_its_state_the_next_seq_continues_from_kafka() {
    let topic = create_topic().await;
    let w = TestWriter::start(support::config(Kind::Redis, &topic).await).await;
    let (tenant, conversation, alice) = (fresh(TenantId), fresh(ConversationId), fresh(UserId));
    for n in 1..=3 {
        let (status, answer) =
            w.post("/v1/messages", &send_body(tenant, conversation, alice, &format!("a{n}"), "x")).await;
        assert_eq!((status, answer["conversation_seq"].as_u64()), (200, Some(n)), "{answer}");
    }
    let Backend::Redis { redis, .. } = &w.config.backend else { unreachable!() };
    let wiped = wipe_namespace(&redis.url, &redis.namespace).await;
    assert!(wiped > 0, "the writer's state was in its namespace");
    let (status, readyz) = w.get("/readyz").await;
    assert_eq!(status, 503, "not ready while unseeded: {readyz}");
    let (status, answer) = w.post("/v1/messages", &send_body(tenant, conversation, alice, "a4", "x")).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["conversation_seq"], 4, "seqs 1..=3 are never issued again");
    let (status, _) = w.get("/readyz").await;
    assert_eq!(status, 200, "ready again once re-seeded");
    // The commits were written back as well: a retry of an acknowledged send gets its answer.
    let (status, retry) = w.post("/v1/messages", &send_body(tenant, conversation, alice, "a2", "x")).await;
    assert_eq!((status, retry["conversation_seq"].as_u64()), (200, Some(2)), "{retry}");
    // The history from before the loss was written back into the hot tier (membership lived in
    // the same Redis: admit the reader again).
    w.add_members(tenant, conversation, &[alice]).await;
    let (status, page) = w
        .get(&format!("/v1/tenants/{tenant}/conversations/{conversation}/messages?viewer={alice}&direction=newer"))
        .await;
    assert_eq!(status, 200, "{page}");
    let seqs: Vec<u64> = page["records"].as_array().unwrap().iter().filter_map(|r| r["seq"].as_u64()).collect();
    assert_eq!(seqs, vec![1, 2, 3, 4], "{page}");
    let metrics = w.http.get(format!("{}/metrics", w.base)).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("qim_writer_reseeds_total"), "the re-seed is counted");
    assert!(metrics.contains("qim_writer_hot_tier_restored_total 3"), "three records restored: {metrics}");
    w.stop().await.unwrap();
}
