//! Starting writers against the local stack (real Redis, Kafka and Cassandra), and a small
//! JSON client. Every test gets its own Redis namespace and its own Kafka topic, so tests in one
//! binary run in parallel without seeing each other. A missing server fails the test, naming it.

#![allow(dead_code)]

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use qim_runtime::auth::{AuthConfig, KeySource};
use qim_runtime::kafka::messages::decode;
use qim_store::ids::{ConversationId, TenantId, UserId};
use qim_store::message::MessageRecord;
use qim_store::redis::RedisConfig;
use qim_store::retention::RetentionPolicy;
use qim_store::scylla::ScyllaConfig;
use qim_writer::config::{Backend, WriterConfig};
use qim_writer::serve::{start, RunningWriter};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

pub use qim_testkit::stack::{kafka_brokers as brokers, redis_url, unique_name as unique, START_HINT as HINT};
pub use qim_testkit::tokens::operator_token;

/// The writers' authentication: the test HS256 secret, no rate limits.
pub fn test_auth() -> AuthConfig {
    let secret = qim_testkit::tokens::TEST_HS256_SECRET.as_bytes().to_vec();
    AuthConfig { keys: Some(KeySource::Hs256 { secret }), ..AuthConfig::disabled() }
}

pub fn fresh<T>(make: fn([u8; 16]) -> T) -> T {
    make(*uuid::Uuid::new_v4().as_bytes())
}

/// Creates a 3-partition topic, ready to use; fails naming Kafka when it does not answer.
pub async fn create_topic() -> String {
    let topic = unique("writer_test");
    qim_testkit::kafka::require_topics(&[(&topic, 3)]).await;
    topic
}

/// Which backend a test runs against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Redis,
    Scylla,
}

/// The test keyspace of this binary, migrated once.
async fn scylla_config() -> ScyllaConfig {
    qim_store::testsuite::scylla_keyspace::migrated_test_keyspace().await
}

/// A writer configuration for one test: its own namespace and topic, port 0, fast recovery.
pub async fn config(kind: Kind, topic: &str) -> WriterConfig {
    let backend = match kind {
        Kind::Redis => Backend::Redis {
            redis: RedisConfig { url: redis_url(), namespace: unique("wt") },
            archive: scylla_config().await,
        },
        Kind::Scylla => Backend::Scylla(scylla_config().await),
    };
    WriterConfig {
        backend,
        kafka_brokers: brokers(),
        producer: qim_writer::publisher::ProducerTuning::default(),
        messages_topic: topic.to_owned(),
        archiver_group: format!("{}.archiver", topic),
        seq_lease_block: qim_store::redis::DEFAULT_LEASE_BLOCK,
        commit_layout: qim_store::redis::CommitLayout::default(),
        group_commit: true,
        policy: RetentionPolicy::with_default_days(30).unwrap(),
        hot_window_days: 7,
        http_addr: "127.0.0.1:0".parse().unwrap(),
        max_body_bytes: 4096,
        max_in_flight: 64,
        recovery_grace: Duration::from_secs(1),
        recovery_interval: Duration::from_secs(1),
        auth: test_auth(),
        log: qim_runtime::telemetry::LogSettings::text("warn"),
        startup_timeout: std::time::Duration::from_secs(30),
    }
}

/// A JSON client of one writer, calling with an operator token (`gateway admin`) of the tenant
/// each request names. Before a sender's first send to a conversation it adds the sender as a
/// member, as the IM's conversation set-up would: tests of authorization itself make their own
/// requests.
#[derive(Clone)]
pub struct Client {
    pub base: String,
    pub http: reqwest::Client,
    /// Senders already joined; held across a join so a racing send waits for it.
    joined: std::sync::Arc<tokio::sync::Mutex<std::collections::HashSet<String>>>,
}

impl Client {
    pub fn new(base: &str) -> Self {
        Self { base: base.to_owned(), http: reqwest::Client::new(), joined: Default::default() }
    }

    pub async fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        self.post_as(&operator_token(&tenant_of(path, body)), path, body).await
    }

    /// [`post`](Self::post) with `token`.
    pub async fn post_as(&self, token: &str, path: &str, body: &Value) -> (u16, Value) {
        if path == "/v1/messages" {
            self.join_sender(body).await;
        }
        let r = self.http.post(format!("{}{path}", self.base)).bearer_auth(token).json(body).send().await.unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        let token = operator_token(&tenant_of(path, &Value::Null));
        let r = self.http.get(format!("{}{path}", self.base)).bearer_auth(token).send().await.unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    /// Adds a send body's sender to its conversation, once per client.
    async fn join_sender(&self, body: &Value) {
        let (Some(tenant), Some(conversation), Some(sender)) =
            (body["tenant"].as_str(), body["conversation"].as_str(), body["sender"].as_str())
        else {
            return; // a malformed body, sent as is
        };
        let mut joined = self.joined.lock().await;
        if !joined.insert(format!("{tenant}/{conversation}/{sender}")) {
            return;
        }
        let path = format!("/v1/tenants/{tenant}/conversations/{conversation}/members/add");
        let r = self.http.post(format!("{}{path}", self.base)).bearer_auth(operator_token(tenant));
        // Ids that are not hex are refused here and again by the send, which the test checks.
        let _ = r.json(&json!({ "users": [sender] })).send().await;
    }

    pub async fn add_members(&self, tenant: TenantId, conversation: ConversationId, users: &[UserId]) {
        let users: Vec<String> = users.iter().map(UserId::to_hex).collect();
        let path = format!("/v1/tenants/{tenant}/conversations/{conversation}/members/add");
        let (status, body) = self.post(&path, &json!({ "users": users })).await;
        assert_eq!(status, 200, "{body}");
    }
}

/// A writer running in this process, and a client for it.
pub struct TestWriter {
    pub config: WriterConfig,
    pub client: Client,
    pub shutdown: CancellationToken,
    running: Option<RunningWriter>,
}

impl std::ops::Deref for TestWriter {
    type Target = Client;

    fn deref(&self) -> &Client {
        &self.client
    }
}

impl TestWriter {
    pub async fn start(config: WriterConfig) -> Self {
        let shutdown = CancellationToken::new();
        let running = start(config.clone(), shutdown.clone()).await.unwrap_or_else(|e| panic!("{e:#}; {HINT}"));
        let client = Client::new(&format!("http://{}", running.addr));
        Self { config, client, shutdown, running: Some(running) }
    }

    /// Graceful stop; returns what the writer's task returned.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        self.shutdown.cancel();
        self.running.take().unwrap().wait().await
    }
}

/// A send body.
pub fn send_body(tenant: TenantId, conversation: ConversationId, sender: UserId, client_id: &str, body: &str) -> Value {
    json!({
        "tenant": tenant.to_hex(),
        "conversation": conversation.to_hex(),
        "sender": sender.to_hex(),
        "client_message_id": client_id,
        "kind": "normal",
        "body": body,
        "retention": "default",
    })
}

/// Every record of `topic`, read from the beginning to the current end.
pub fn read_topic(topic: &str) -> Vec<MessageRecord> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers())
        .set("group.id", unique("reader"))
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let timeout = Duration::from_secs(10);
    let mut list = TopicPartitionList::new();
    let mut ends = std::collections::HashMap::new();
    for p in 0..3 {
        let (_, high) = consumer.fetch_watermarks(topic, p, timeout).expect("watermarks");
        if high > 0 {
            ends.insert(p, high);
            list.add_partition_offset(topic, p, Offset::Beginning).unwrap();
        }
    }
    let mut out = Vec::new();
    if ends.is_empty() {
        return out;
    }
    consumer.assign(&list).unwrap();
    while !ends.is_empty() {
        let m = consumer.poll(timeout).expect("records within 10 s").expect("a record");
        out.push(decode(&m).expect("the writer publishes valid records"));
        if ends.get(&m.partition()).is_some_and(|h| m.offset() + 1 >= *h) {
            ends.remove(&m.partition());
        }
    }
    out
}

/// Runs the real binary; `failpoints` as the `FAILPOINTS` variable.
pub fn spawn_writer(config: &WriterConfig, port: u16, failpoints: Option<&str>) -> Child {
    let Backend::Redis { redis, archive } = &config.backend else { unreachable!("the binary case runs on redis") };
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_qim-writer"));
    for (name, _) in std::env::vars().filter(|(k, _)| k.starts_with("QIM_") || k == "FAILPOINTS") {
        cmd.env_remove(name);
    }
    cmd.arg("serve")
        .env("QIM_STORE_BACKEND", "redis")
        .env("QIM_REDIS_URL", &redis.url)
        .env("QIM_REDIS_NAMESPACE", &redis.namespace)
        .env("QIM_SCYLLA_HOSTS", archive.hosts.join(","))
        .env("QIM_SCYLLA_KEYSPACE", &archive.keyspace)
        .env("QIM_SCYLLA_DC", &archive.local_dc)
        .env("QIM_SCYLLA_RF", archive.replication_factor.to_string())
        .env("QIM_SCYLLA_DEV_SINGLE_NODE", "true")
        .env("QIM_KAFKA_BROKERS", &config.kafka_brokers)
        .env("QIM_MESSAGES_TOPIC", &config.messages_topic)
        .env("QIM_WRITER_HTTP_ADDR", format!("127.0.0.1:{port}"))
        .env(qim_testkit::tokens::hs256_env().0, qim_testkit::tokens::hs256_env().1)
        .env("QIM_RATE_LIMIT_TENANT_PER_SEC", "0")
        .env("QIM_RATE_LIMIT_USER_PER_SEC", "0")
        .env("QIM_RECOVERY_GRACE_SECS", "1")
        .env("QIM_RECOVERY_INTERVAL_SECS", "1")
        .env("QIM_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    if let Some(f) = failpoints {
        cmd.env("FAILPOINTS", f);
    }
    cmd.spawn().expect("starting qim-writer")
}

pub async fn wait_ready(base: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !reqwest::get(format!("{base}/readyz")).await.is_ok_and(|r| r.status() == 200) {
        assert!(Instant::now() < deadline, "qim-writer did not become ready at {base}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The tenant a request names: the path's `/v1/tenants/{tenant}/`, else the body's `tenant`.
pub fn tenant_of(path: &str, body: &Value) -> String {
    match qim_testkit::tokens::tenant_in_path(path) {
        Some(tenant) => tenant.to_owned(),
        None => body["tenant"].as_str().unwrap_or_default().to_owned(),
    }
}
