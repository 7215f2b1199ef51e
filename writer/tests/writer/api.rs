//! The writer's HTTP API against real Redis, Kafka and Cassandra, on both backends: idempotent
//! retry, conflict, history paging, authorization, bad input, tenant isolation, summaries and
//! the operational endpoints.

use crate::support;

use qim_store::ids::{ConversationId, TenantId, UserId};
use serde_json::{json, Value};
use support::{create_topic, fresh, read_topic, send_body, Kind, TestWriter};

both!(
    a_send_is_answered_once_committed_and_a_retry_gets_the_same_answer,
    the_same_key_with_other_content_is_a_conflict,
    history_pages_through_the_api_for_members_only,
    bad_input_gets_a_machine_readable_4xx,
    tenants_are_isolated,
    summaries_count_unread_messages_of_others,
    concurrent_identical_sends_get_one_answer,
);

async fn writer(kind: Kind) -> (TestWriter, String) {
    let topic = create_topic().await;
    (TestWriter::start(support::config(kind, &topic).await).await, topic)
}

fn ids() -> (TenantId, ConversationId, UserId, UserId) {
    (fresh(TenantId), fresh(ConversationId), fresh(UserId), fresh(UserId))
}

async fn a_send_is_answered_once_committed_and_a_retry_gets_the_same_answer(kind: Kind) {
    let (w, topic) = writer(kind).await;
    let (tenant, conversation, alice, _) = ids();
    let body = send_body(tenant, conversation, alice, "c-1", "hello");
    let (status, first) = w.post("/v1/messages", &body).await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["conversation_seq"], 1);
    let (status, again) = w.post("/v1/messages", &body).await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(again, first, "an identical retry gets the first answer");
    let (_, second) = w.post("/v1/messages", &send_body(tenant, conversation, alice, "c-2", "again")).await;
    assert_eq!(second["conversation_seq"], 2);
    let mut records = read_topic(&topic);
    // Publication is at least once: the recovery loop (1 s grace here) may publish a slow send's
    // commit again, identically. Consumers take the first; so does this check.
    records.sort_by_key(|r| r.seq);
    records.dedup();
    assert_eq!(records.len(), 2, "one record per committed message (identical duplicates aside): {records:?}");
    let r = records.iter().find(|r| r.client_message_id.as_str() == "c-1").expect("c-1 published");
    assert_eq!(r.message_id.to_hex(), first["message_id"].as_str().unwrap());
    assert_eq!((r.seq.0, r.created_at.0), (1, first["created_at"].as_i64().unwrap()));
    assert!(r.expires_at.is_some(), "a default-retention record carries its expiry");
    w.stop().await.expect("a clean shutdown");
}

async fn the_same_key_with_other_content_is_a_conflict(kind: Kind) {
    let (w, _) = writer(kind).await;
    let (tenant, conversation, alice, _) = ids();
    let (status, _) = w.post("/v1/messages", &send_body(tenant, conversation, alice, "k", "one")).await;
    assert_eq!(status, 200);
    let (status, body) = w.post("/v1/messages", &send_body(tenant, conversation, alice, "k", "two")).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], "conflict");
    w.stop().await.unwrap();
}

async fn history_pages_through_the_api_for_members_only(kind: Kind) {
    let (w, _) = writer(kind).await;
    let (tenant, conversation, alice, mallory) = ids();
    w.add_members(tenant, conversation, &[alice]).await;
    for n in 1..=5 {
        let (status, body) = w
            .post("/v1/messages", &send_body(tenant, conversation, alice, &format!("m{n}"), &format!("body {n}")))
            .await;
        assert_eq!(status, 200, "{body}");
    }
    let base = format!("/v1/tenants/{tenant}/conversations/{conversation}/messages");
    let (status, page) = w.get(&format!("{base}?viewer={alice}&direction=older&max_items=2")).await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(seqs(&page), [5, 4]);
    assert_eq!((page["has_more"].as_bool(), page["earliest_available"].as_u64()), (Some(true), Some(1)));
    let (_, page) = w.get(&format!("{base}?viewer={alice}&direction=older&anchor=4&max_items=10")).await;
    assert_eq!(seqs(&page), [3, 2, 1]);
    assert_eq!(page["has_more"], false);
    let (_, page) = w.get(&format!("{base}?viewer={alice}&direction=newer&anchor=2&max_items=2")).await;
    assert_eq!(seqs(&page), [3, 4]);
    assert_eq!(page["records"][0]["body"], "body 3");
    let (status, body) = w.get(&format!("{base}?viewer={mallory}")).await;
    assert_eq!((status, body["error"]["code"].as_str()), (403, Some("forbidden")), "{body}");
    w.stop().await.unwrap();
}

fn seqs(page: &Value) -> Vec<u64> {
    page["records"].as_array().unwrap().iter().map(|r| r["seq"].as_u64().unwrap()).collect()
}

async fn bad_input_gets_a_machine_readable_4xx(kind: Kind) {
    let (w, _) = writer(kind).await;
    let (tenant, conversation, alice, _) = ids();
    let url = format!("{}/v1/messages", w.base);
    let token = support::operator_token(&tenant.to_hex());
    let raw = |body: &'static str| {
        w.http.post(&url).bearer_auth(&token).header("content-type", "application/json").body(body).send()
    };
    let r = raw("{not json").await.unwrap();
    assert_eq!(r.status(), 400);
    assert_eq!(r.json::<Value>().await.unwrap()["error"]["code"], "invalid_json");
    let mut short_id = send_body(tenant, conversation, alice, "x", "b");
    short_id["tenant"] = json!("abcd");
    let mut bad_kind = send_body(tenant, conversation, alice, "x", "b");
    bad_kind["kind"] = json!("shout");
    let mut bad_retention = send_body(tenant, conversation, alice, "x", "b");
    bad_retention["retention"] = json!("forever");
    let mut unknown_field = send_body(tenant, conversation, alice, "x", "b");
    unknown_field["colour"] = json!("red");
    for (case, body, code) in [
        ("short id", short_id, "invalid_request"),
        ("unknown kind", bad_kind, "invalid_request"),
        ("unknown retention", bad_retention, "invalid_request"),
        ("unknown field", unknown_field, "invalid_json"),
        ("empty client id", send_body(tenant, conversation, alice, "", "b"), "invalid_request"),
    ] {
        let (status, answer) = w.post_as(&token, "/v1/messages", &body).await;
        assert_eq!((status, answer["error"]["code"].as_str()), (400, Some(code)), "{case}: {answer}");
    }
    let big = "x".repeat(w.config.max_body_bytes + 1);
    let (status, answer) = w.post("/v1/messages", &send_body(tenant, conversation, alice, "big", &big)).await;
    assert_eq!((status, answer["error"]["code"].as_str()), (413, Some("payload_too_large")), "{answer}");
    let r = w.http.post(&url).json(&send_body(tenant, conversation, alice, "x", "b")).send().await.unwrap();
    assert_eq!(r.status(), 401, "no token");
    let r = w.http.post(&url).bearer_auth("wrong").json(&send_body(tenant, conversation, alice, "x", "b")).send();
    assert_eq!(r.await.unwrap().status(), 401, "wrong token");
    let (status, _) = w.get(&format!("/v1/tenants/{tenant}/conversations/{conversation}/messages?viewer=zz")).await;
    assert_eq!(status, 400);
    let (status, _) =
        w.get(&format!("/v1/tenants/{tenant}/conversations/{conversation}/messages?viewer={alice}&max_items=0")).await;
    assert_eq!(status, 400);
    // Nothing of the refused requests was committed: the first real send gets seq 1.
    let (_, ok) = w.post("/v1/messages", &send_body(tenant, conversation, alice, "x", "b")).await;
    assert_eq!(ok["conversation_seq"], 1, "{ok}");
    for probe in ["/healthz", "/readyz", "/metrics"] {
        let r = w.http.get(format!("{}{probe}", w.base)).send().await.unwrap();
        assert_eq!(r.status(), 200, "{probe} needs no token");
    }
    w.stop().await.unwrap();
}

async fn tenants_are_isolated(kind: Kind) {
    let (w, _) = writer(kind).await;
    let (tenant, conversation, alice, _) = ids();
    let other = fresh(TenantId);
    w.add_members(tenant, conversation, &[alice]).await;
    w.add_members(other, conversation, &[alice]).await;
    let (status, _) = w.post("/v1/messages", &send_body(tenant, conversation, alice, "t1", "secret")).await;
    assert_eq!(status, 200);
    let (status, page) =
        w.get(&format!("/v1/tenants/{other}/conversations/{conversation}/messages?viewer={alice}")).await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(page["records"], json!([]), "the other tenant's conversation with the same id is empty");
    // The same client message id under the other tenant is a different message.
    let (_, there) = w.post("/v1/messages", &send_body(other, conversation, alice, "t1", "secret")).await;
    assert_eq!(there["conversation_seq"], 1, "{there}");
    w.stop().await.unwrap();
}

async fn summaries_count_unread_messages_of_others(kind: Kind) {
    let (w, _) = writer(kind).await;
    let (tenant, conversation, alice, bob) = ids();
    w.add_members(tenant, conversation, &[alice, bob]).await;
    for (n, sender) in [alice, bob, bob].into_iter().enumerate() {
        let (status, _) =
            w.post("/v1/messages", &send_body(tenant, conversation, sender, &format!("s{n}"), "hi")).await;
        assert_eq!(status, 200);
    }
    let body = json!({ "viewer": alice.to_hex(), "positions": [{ "conversation": conversation.to_hex(), "read_through": 0 }] });
    let (status, answer) = w.post(&format!("/v1/tenants/{tenant}/summaries"), &body).await;
    assert_eq!(status, 200, "{answer}");
    let s = &answer["summaries"][0];
    assert_eq!((s["last_seq"].as_u64(), s["unread"].as_u64()), (Some(3), Some(2)), "{answer}");
    let outsider =
        json!({ "viewer": fresh(UserId).to_hex(), "positions": [{ "conversation": conversation.to_hex() }] });
    let (status, _) = w.post(&format!("/v1/tenants/{tenant}/summaries"), &outsider).await;
    assert_eq!(status, 403);
    w.stop().await.unwrap();
}

async fn concurrent_identical_sends_get_one_answer(kind: Kind) {
    let (w, topic) = writer(kind).await;
    let (tenant, conversation, alice, _) = ids();
    let body = send_body(tenant, conversation, alice, "same", "racing");
    let racers: Vec<_> = (0..8)
        .map(|_| {
            let (client, body) = (w.client.clone(), body.clone());
            tokio::spawn(async move { client.post("/v1/messages", &body).await })
        })
        .collect();
    let mut answers = Vec::new();
    for r in racers {
        answers.push(r.await.unwrap());
    }
    for (status, answer) in &answers {
        assert_eq!(*status, 200, "{answer}");
        assert_eq!(answer, &answers[0].1, "every racer gets the first commit's answer");
    }
    let records = read_topic(&topic);
    // The racers after the first wait for it to land and replay it: one publication, never a
    // second driver's duplicate.
    assert_eq!(records.len(), 1, "one publication for the key: {records:?}");
    assert_eq!(records[0].seq.0, answers[0].1["conversation_seq"].as_u64().unwrap());
    w.stop().await.unwrap();
}
