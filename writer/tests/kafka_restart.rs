//! Kafka killed (SIGKILL) and restarted while sends stream through the writer: no acknowledged
//! message is lost. Sends that fail during the outage are retried with the same client message
//! id (the client's contract); every acknowledged answer must be in the topic with the same seq
//! and message id, and in the conversation's history.
//!
//! It runs on the fault stack (`qim_testkit::fault_stack`): the Kafka it restarts is not the one
//! the other tests use.

mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use qim_store::ids::{ConversationId, TenantId, UserId};
use qim_testkit::fault_stack::FaultStack;
use serde_json::Value;
use support::{create_topic, fresh, read_topic, send_body, Kind, TestWriter};

const MESSAGES: usize = 200;
const KILL_AFTER: usize = 40;

/// `deploy/local/stack ARGS` on the fault stack.
fn stack(args: &[&str]) {
    FaultStack::locate().run(args).unwrap_or_else(|e| panic!("{e:#}"));
}

#[test]
fn no_acknowledged_message_is_lost_across_a_kafka_restart() {
    qim_testkit::fault_stack::run_test(2, kafka_restart());
}

async fn kafka_restart() {
    let topic = create_topic().await;
    let mut config = support::config(Kind::Redis, &topic).await;
    config.max_in_flight = 16;
    let w = TestWriter::start(config).await;
    let (tenant, conversation, alice) = (fresh(TenantId), fresh(ConversationId), fresh(UserId));
    w.add_members(tenant, conversation, &[alice]).await;
    let mut acked: BTreeMap<String, Value> = BTreeMap::new();
    let mut refused = 0;
    let mut killed = false;
    let deadline = Instant::now() + Duration::from_secs(240);
    for n in 0..MESSAGES {
        let client_id = format!("k{n}");
        loop {
            assert!(Instant::now() < deadline, "sends did not recover after the Kafka restart");
            let (status, answer) =
                w.post("/v1/messages", &send_body(tenant, conversation, alice, &client_id, "x")).await;
            if status == 200 {
                acked.insert(client_id.clone(), answer);
                break;
            }
            assert_eq!(status, 503, "only unavailability is expected: {answer}");
            refused += 1;
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        if n == KILL_AFTER && !killed {
            killed = true;
            // Kill in the background so sends are in flight while the broker dies and returns.
            tokio::task::spawn_blocking(|| {
                stack(&["kill", "kafka"]);
                std::thread::sleep(Duration::from_secs(2)); // the outage: the broker stays dead this long
                stack(&["up"]);
            });
        }
    }
    eprintln!("{} acknowledged, {refused} refused during the outage", acked.len());
    let published = read_topic(&topic);
    for (client_id, answer) in &acked {
        let found: Vec<_> = published.iter().filter(|r| r.client_message_id.as_str() == client_id).collect();
        assert!(!found.is_empty(), "acknowledged {client_id} is missing from Kafka");
        for r in found {
            assert_eq!(r.seq.0, answer["conversation_seq"].as_u64().unwrap(), "{client_id}");
            assert_eq!(r.message_id.to_hex(), answer["message_id"].as_str().unwrap(), "{client_id}");
        }
    }
    let (status, page) = w
        .get(&format!("/v1/tenants/{tenant}/conversations/{conversation}/messages?viewer={alice}&max_items=500"))
        .await;
    assert_eq!(status, 200, "{page}");
    let in_history = page["records"].as_array().unwrap().len();
    assert_eq!(in_history, MESSAGES, "every acknowledged message is in the history");
    w.stop().await.unwrap();
    stack(&["up"]);
}
