//! The whole path through the public APIs: members added through the writer's admin API, two
//! messages sent (one retried) through the writer, and every member reads exactly those two
//! entries, in conversation order, from the dispatcher's mailbox API; a non-member's send between
//! them is refused and reaches no mailbox.

use crate::support;

use std::time::Duration;

use qim_mailbox_dispatcher::config::Backend;
use qim_store::ids::{ConversationId, TenantId, UserId};
use qim_testkit::tokens::user_token;
use qim_writer::config::{Backend as WriterBackend, WriterEnv};
use serde_json::{json, Value};
use support::{fresh, operator_token, users, Fixture, Kind};

async fn members_added_and_messages_sent_through_the_writer(kind: Kind) {
    let f = Fixture::new(kind).await;
    let backend = match &f.config.backend {
        // The writer reads older history from a Scylla archive behind its Redis hot tier.
        Backend::Redis { redis, members } => WriterBackend::Redis { redis: redis.clone(), archive: members.clone() },
        Backend::Scylla(s) => WriterBackend::Scylla(s.clone()),
    };
    // The writer's defaults, from its variable definitions, with this test's topic and port.
    let topic = f.config.kafka.messages_topic.clone();
    let brokers = support::brokers();
    let archiver_group = format!("{topic}.archiver");
    // The Scylla variables name the keyspace of the backend set below (they have no defaults).
    let scylla = match &backend {
        WriterBackend::Redis { archive: s, .. } | WriterBackend::Scylla(s) => s.clone(),
    };
    let (hosts, rf) = (scylla.hosts.join(","), scylla.replication_factor.to_string());
    let mut config = qim_runtime::env::resolve_pairs::<WriterEnv>(&[
        ("QIM_SCYLLA_HOSTS", &hosts),
        ("QIM_SCYLLA_KEYSPACE", &scylla.keyspace),
        ("QIM_SCYLLA_DC", &scylla.local_dc),
        ("QIM_SCYLLA_RF", &rf),
        ("QIM_SCYLLA_DEV_SINGLE_NODE", "true"),
        ("QIM_KAFKA_BROKERS", &brokers),
        ("QIM_MESSAGES_TOPIC", &topic),
        ("QIM_ARCHIVER_GROUP", &archiver_group),
        ("QIM_WRITER_HTTP_ADDR", "127.0.0.1:0"),
        ("QIM_RECOVERY_GRACE_SECS", "1"),
        ("QIM_RECOVERY_INTERVAL_SECS", "1"),
        ("QIM_AUTH_HS256_SECRET", qim_testkit::tokens::TEST_HS256_SECRET),
        ("QIM_LOG", "warn"),
    ])
    .expect("the writer's test configuration");
    config.backend = backend;
    let stop_writer = tokio_util::sync::CancellationToken::new();
    let writer = qim_writer::serve::start(config, stop_writer.clone()).await.expect("the writer starts");
    let w = format!("http://{}", writer.addr);
    let d = f.start().await;
    let (tenant, conversation) = (fresh(TenantId), fresh(ConversationId));
    let token = operator_token(&tenant.to_hex());
    let http = reqwest::Client::new();
    let post = |path: String, body: Value| {
        let (http, token) = (http.clone(), token.clone());
        async move {
            let r = http.post(path).bearer_auth(token).json(&body).send().await.unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap_or(Value::Null))
        }
    };

    let members = users(40);
    let hex: Vec<String> = members.iter().map(|u| u.to_hex()).collect();
    let (status, body) =
        post(format!("{w}/v1/tenants/{tenant}/conversations/{conversation}/members/add"), json!({ "users": hex }))
            .await;
    assert_eq!(status, 200, "{body}");

    let send = |client_id: &str, text: &str| {
        json!({ "tenant": tenant.to_hex(), "conversation": conversation.to_hex(), "sender": members[0].to_hex(),
                "client_message_id": client_id, "body": text })
    };
    let (status, first) = post(format!("{w}/v1/messages"), send("c-1", "hello")).await;
    assert_eq!(status, 200, "{first}");
    let (status, again) = post(format!("{w}/v1/messages"), send("c-1", "hello")).await;
    assert_eq!((status, &again), (200, &first), "a retry is answered identically");
    // A non-member's send, with a valid token of their own: refused, so it takes no seq (the
    // next send is seq 2) and reaches no mailbox (each member's page below holds c-1 and c-2
    // only, and neither does the outsider's own).
    let outsider = fresh(UserId);
    let outsider_token = user_token(&tenant.to_hex(), &outsider.to_hex(), "send read");
    let mut refused = send("x-1", "let me in");
    refused["sender"] = outsider.to_hex().into();
    let r = http.post(format!("{w}/v1/messages")).bearer_auth(&outsider_token).json(&refused).send().await.unwrap();
    assert_eq!(r.status(), 403, "a non-member's send: {}", r.text().await.unwrap_or_default());
    let (status, second) = post(format!("{w}/v1/messages"), send("c-2", "world")).await;
    assert_eq!((status, second["conversation_seq"].as_u64()), (200, Some(2)), "{second}");
    let want = [first["message_id"].clone(), second["message_id"].clone()];

    for u in &members {
        let path = format!("/v1/tenants/{tenant}/users/{u}/mailbox");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        let page = loop {
            let (status, page) = d.get(&path).await;
            assert_eq!(status, 200, "{page}");
            if page["entries"].as_array().is_some_and(|e| e.len() >= 2) {
                break page;
            }
            assert!(tokio::time::Instant::now() < deadline, "{u} did not read both messages within 60 s: {page}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let got: Vec<Value> = page["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["events"][0]["message"]["message_id"].clone())
            .collect();
        assert_eq!(got, want, "{u}: each message once, in conversation order");
        let seqs: Vec<u64> = page["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["events"][0]["message"]["seq"].as_u64().unwrap())
            .collect();
        assert_eq!(seqs, [first["conversation_seq"].as_u64().unwrap(), second["conversation_seq"].as_u64().unwrap()]);
    }
    let (status, page) = d.get(&format!("/v1/tenants/{tenant}/users/{outsider}/mailbox")).await;
    assert_eq!((status, page["entries"].as_array().map(Vec::len)), (200, Some(0)), "{page}");
    d.stop().await;
    stop_writer.cancel();
    writer.wait().await.expect("the writer stops cleanly");
}

both_backends!(members_added_and_messages_sent_through_the_writer);
