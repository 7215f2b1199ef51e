//! Running dispatchers against the local stack (real Kafka, Redis and Cassandra). Every test
//! gets its own topics, consumer groups and Redis namespace or Scylla keyspace, so tests run in
//! parallel with each other and with other suites. A missing server fails the test, naming it.

#![allow(dead_code)]

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use qim_mailbox_dispatcher::backend::{self, Stores};
use qim_mailbox_dispatcher::config::{Backend, DispatcherConfig, KafkaConfig};
use qim_mailbox_dispatcher::serve::{start_with, RunningDispatcher};
use qim_runtime::kafka::messages::message_record;
use qim_store::codec::encode_manifest;
use qim_store::ids::{ClientMessageId, ConversationId, ConversationSeq, MessageId, TenantId, UnixMillis, UserId};
use qim_store::mailbox::{DispatchManifest, LaneId, MailboxRetention, MailboxSeq, ShardEpoch, ShardId, LANES};
use qim_store::message::{MessageKind, MessageRecord};
use qim_store::redis::RedisConfig;
use qim_store::retention::RetentionClass;
use qim_store::scylla::{open_session, ScyllaConfig};
use qim_store::testsuite::scylla_keyspace::{describe, migrate_retrying};
use qim_store::topic::{dispatch_key, encode_message};
use qim_store::{MailboxStore, MembershipStore};
use rdkafka::admin::{AdminClient, AdminOptions};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::util::Timeout;
use tokio_util::sync::CancellationToken;

pub use qim_testkit::stack::{kafka_brokers as brokers, redis_url, unique_name as unique, START_HINT as HINT};
pub use qim_testkit::tokens::operator_token;

/// The dispatchers' authentication: the test HS256 secret, no rate limits.
pub fn test_auth() -> qim_runtime::auth::AuthConfig {
    let secret = qim_testkit::tokens::TEST_HS256_SECRET.as_bytes().to_vec();
    qim_runtime::auth::AuthConfig {
        keys: Some(qim_runtime::auth::KeySource::Hs256 { secret }),
        ..qim_runtime::auth::AuthConfig::disabled()
    }
}

/// An operator token of the tenant `path` names; of some other tenant when that is no tenant id
/// (a test of the path's validation, which answers before the token's tenant is compared).
pub fn token_for(path: &str) -> String {
    let tenant = qim_testkit::tokens::tenant_in_path(path).expect("a /v1/tenants/{tenant}/ path");
    match TenantId::from_hex(tenant) {
        Ok(_) => operator_token(tenant),
        Err(_) => operator_token(&TenantId([0; 16]).to_hex()),
    }
}
pub const SHARDS: u16 = 8;
pub const EPOCH: ShardEpoch = ShardEpoch(0);

pub fn fresh<T>(make: fn([u8; 16]) -> T) -> T {
    make(*uuid::Uuid::new_v4().as_bytes())
}

/// `n` fresh users.
pub fn users(n: usize) -> Vec<UserId> {
    (0..n).map(|_| fresh(UserId)).collect()
}

/// Which MailboxStore backend a test runs against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Redis,
    Scylla,
}

/// Emits `#[tokio::test]`s of `$body(kind)` for both backends.
#[macro_export]
macro_rules! both_backends {
    ($body:ident) => {
        mod $body {
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn redis() {
                super::$body(super::support::Kind::Redis).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn scylla() {
                super::$body(super::support::Kind::Scylla).await;
            }
        }
    };
}

/// A fresh, migrated Scylla keyspace (RF from the test environment).
pub async fn scylla_keyspace() -> ScyllaConfig {
    let config = ScyllaConfig::test_from_env().unwrap_or_else(|e| panic!("{e}"));
    let session = open_session(&config).await.unwrap_or_else(|e| panic!("{}; {HINT}", describe(&e)));
    migrate_retrying(&session, &config).await;
    config
}

/// One test's world: its topics, group, namespace or keyspace.
pub struct Fixture {
    pub kind: Kind,
    pub config: DispatcherConfig,
    producer: FutureProducer,
}

impl Fixture {
    pub async fn new(kind: Kind) -> Self {
        if let Ok(filter) = std::env::var("TEST_LOG") {
            let _ = qim_runtime::telemetry::init_logs(&qim_runtime::telemetry::LogSettings::text(&filter));
        }
        let name = unique("disp");
        let kafka = KafkaConfig {
            brokers: brokers(),
            messages_topic: format!("{name}.messages"),
            dispatch_topic: format!("{name}.dispatch"),
            dlq_topic: format!("{name}.dlq"),
            group: name.clone(),
        };
        qim_testkit::kafka::require_topics(&[
            (&kafka.messages_topic, 4),
            (&kafka.dispatch_topic, i32::from(SHARDS)),
            (&kafka.dlq_topic, 1),
        ])
        .await;
        let backend = match kind {
            Kind::Redis => Backend::Redis {
                redis: RedisConfig { url: redis_url(), namespace: name.clone() },
                members: scylla_keyspace().await,
            },
            Kind::Scylla => Backend::Scylla(scylla_keyspace().await),
        };
        let config = DispatcherConfig {
            backend,
            kafka,
            shards: SHARDS,
            epoch: EPOCH,
            retention: MailboxRetention::default(),
            chunks_in_flight: 32,
            keep_dispatches: Duration::from_secs(86_400),
            advance_every: Duration::from_millis(100),
            http_addr: "127.0.0.1:0".parse().unwrap(),
            auth: test_auth(),
            log: qim_runtime::telemetry::LogSettings::text("warn"),
            startup_timeout: std::time::Duration::from_secs(30),
        };
        let producer = ClientConfig::new()
            .set("bootstrap.servers", brokers())
            .set("enable.idempotence", "true")
            .set("acks", "all")
            .create()
            .expect("a test producer");
        Self { kind, config, producer }
    }

    /// The stores the dispatcher would open (a fresh connection).
    pub async fn stores(&self) -> Stores {
        backend::open(&self.config.backend, self.config.retention)
            .await
            .unwrap_or_else(|e| panic!("opening the {:?} stores: {e:#}; {HINT}", self.kind))
    }

    pub async fn mailbox(&self) -> Arc<dyn MailboxStore> {
        self.stores().await.mailbox
    }

    pub async fn members(&self) -> Arc<dyn MembershipStore> {
        self.stores().await.members
    }

    /// Starts a dispatcher in this process.
    pub async fn start(&self) -> TestDispatcher {
        let shutdown = CancellationToken::new();
        let metrics = qim_runtime::telemetry::install_metrics();
        let running = start_with(self.config.clone(), self.stores().await, metrics, shutdown.clone())
            .await
            .unwrap_or_else(|e| panic!("starting the dispatcher: {e:#}; {HINT}"));
        let base = format!("http://{}", running.addr);
        TestDispatcher { base, shutdown, running: Some(running), http: reqwest::Client::new() }
    }

    /// The environment that makes the binary run this fixture.
    pub fn binary_env(&self, port: u16) -> Vec<(&'static str, String)> {
        let k = &self.config.kafka;
        let mut env = vec![
            ("QIM_KAFKA_BROKERS", k.brokers.clone()),
            ("QIM_MESSAGES_TOPIC", k.messages_topic.clone()),
            ("QIM_DISPATCH_TOPIC", k.dispatch_topic.clone()),
            ("QIM_DISPATCHER_DLQ_TOPIC", k.dlq_topic.clone()),
            ("QIM_DISPATCHER_GROUP", k.group.clone()),
            ("QIM_MAILBOX_SHARDS", SHARDS.to_string()),
            ("QIM_DISPATCHER_HTTP_ADDR", format!("127.0.0.1:{port}")),
            qim_testkit::tokens::hs256_env(),
            ("QIM_RATE_LIMIT_TENANT_PER_SEC", "0".to_owned()),
            ("QIM_RATE_LIMIT_USER_PER_SEC", "0".to_owned()),
            ("QIM_LOG", "warn".to_owned()),
        ];
        match &self.config.backend {
            Backend::Redis { redis: r, members: s } => env.extend([
                ("QIM_STORE_BACKEND", "redis".to_owned()),
                ("QIM_REDIS_URL", r.url.clone()),
                ("QIM_REDIS_NAMESPACE", r.namespace.clone()),
                ("QIM_SCYLLA_HOSTS", s.hosts.join(",")),
                ("QIM_SCYLLA_KEYSPACE", s.keyspace.clone()),
                ("QIM_SCYLLA_DC", s.local_dc.clone()),
                ("QIM_SCYLLA_RF", s.replication_factor.to_string()),
                ("QIM_SCYLLA_DEV_SINGLE_NODE", "true".to_owned()),
            ]),
            Backend::Scylla(s) => env.extend([
                ("QIM_STORE_BACKEND", "scylla".to_owned()),
                ("QIM_SCYLLA_HOSTS", s.hosts.join(",")),
                ("QIM_SCYLLA_KEYSPACE", s.keyspace.clone()),
                ("QIM_SCYLLA_DC", s.local_dc.clone()),
                ("QIM_SCYLLA_RF", s.replication_factor.to_string()),
                ("QIM_SCYLLA_DEV_SINGLE_NODE", "true".to_owned()),
            ]),
        }
        env
    }

    /// Starts the `qim-mailbox-dispatcher` binary on `port`.
    pub fn spawn(&self, port: u16) -> Spawned {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_qim-mailbox-dispatcher"));
        cmd.arg("run").env_clear().env("PATH", std::env::var("PATH").unwrap_or_default());
        for (k, v) in self.binary_env(port) {
            cmd.env(k, v);
        }
        Spawned(cmd.stdout(Stdio::null()).stderr(Stdio::inherit()).spawn().expect("spawning the dispatcher binary"))
    }

    /// Produces a committed message as the writer does.
    pub async fn produce_message(&self, record: &MessageRecord) {
        let m = encode_message(record);
        let r = message_record(&self.config.kafka.messages_topic, &m);
        self.producer.send(r, Timeout::After(Duration::from_secs(30))).await.expect("producing a message");
    }

    /// Produces a dispatch record as the router does; returns its offset.
    pub async fn produce_dispatch(&self, manifest: &DispatchManifest) -> u64 {
        self.produce_raw_dispatch(
            i32::from(manifest.id.shard.0),
            &dispatch_key(&manifest.id),
            &encode_manifest(manifest),
        )
        .await
    }

    /// Produces arbitrary bytes to a dispatch partition, with the header [`TEST_HEADER`]; returns
    /// the offset.
    pub async fn produce_raw_dispatch(&self, partition: i32, key: &[u8], value: &[u8]) -> u64 {
        let headers = OwnedHeaders::new().insert(Header { key: TEST_HEADER, value: Some(TEST_HEADER_VALUE) });
        let r = FutureRecord::to(&self.config.kafka.dispatch_topic)
            .partition(partition)
            .key(key)
            .payload(value)
            .headers(headers);
        let d = self.producer.send(r, Timeout::After(Duration::from_secs(30))).await.expect("producing a dispatch");
        u64::try_from(d.offset).unwrap()
    }
}

/// A header every dispatch record the fixture produces carries (a dead letter keeps it).
pub const TEST_HEADER: &str = "qim-test-producer";
/// [`TEST_HEADER`]'s value.
pub const TEST_HEADER_VALUE: &[u8] = b"dispatcher-test-support";

/// A spawned dispatcher binary, killed when dropped: a test that fails midway must not leave it
/// running (and loading the machine) through the rest of the suite.
pub struct Spawned(Child);

impl std::ops::Deref for Spawned {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for Spawned {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        // Already killed and reaped by the test in the normal case: both calls are then no-ops.
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Fixture {
    /// Removes what the test created: its topics, and its Redis namespace or generated Scylla
    /// keyspace. The stack is shared and long-lived; left behind, these pile up (a Redis of
    /// millions of keys makes every namespace cleanup walk slow, a Kafka of thousands of
    /// partitions starts in minutes).
    fn drop(&mut self) {
        let config = self.config.clone();
        let cleanup = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else { return };
            rt.block_on(remove(config));
        });
        let _ = cleanup.join();
    }
}

async fn remove(config: DispatcherConfig) {
    let k = &config.kafka;
    if let Ok(admin) =
        ClientConfig::new().set("bootstrap.servers", &k.brokers).create::<AdminClient<DefaultClientContext>>()
    {
        let topics = [k.messages_topic.as_str(), k.dispatch_topic.as_str(), k.dlq_topic.as_str()];
        let _ = tokio::time::timeout(Duration::from_secs(10), admin.delete_topics(&topics, &AdminOptions::new())).await;
    }
    match &config.backend {
        Backend::Redis { redis: r, .. } => {
            let _ = qim_testkit::redis::wipe_namespace(&r.url, &r.namespace).await;
        }
        // Only a keyspace generated for this test (an explicit one may be shared).
        Backend::Scylla(s) if std::env::var(qim_store::scylla::config::TEST_KEYSPACE_VAR).is_err() => {
            if let Ok(session) = open_session(s).await {
                let _ = session.query_unpaged(format!("DROP KEYSPACE IF EXISTS {}", s.keyspace), &[]).await;
            }
        }
        Backend::Scylla(_) => {}
    }
}

/// A dispatcher running in this process.
pub struct TestDispatcher {
    pub base: String,
    pub shutdown: CancellationToken,
    running: Option<RunningDispatcher>,
    http: reqwest::Client,
}

impl TestDispatcher {
    pub async fn stop(mut self) {
        self.shutdown.cancel();
        self.running.take().unwrap().wait().await.expect("the dispatcher stops cleanly");
    }

    pub async fn get(&self, path: &str) -> (u16, serde_json::Value) {
        get(&self.http, &self.base, path).await
    }

    pub async fn post(&self, path: &str, body: &serde_json::Value) -> (u16, serde_json::Value) {
        let r = self.http.post(format!("{}{path}", self.base)).bearer_auth(token_for(path)).json(body).send();
        let r = r.await.unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(serde_json::Value::Null))
    }
}

pub async fn get(http: &reqwest::Client, base: &str, path: &str) -> (u16, serde_json::Value) {
    let r = http.get(format!("{base}{path}")).bearer_auth(token_for(path)).send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(serde_json::Value::Null))
}

/// A committed message of `conversation` sent by `sender`.
pub fn message(tenant: TenantId, conversation: ConversationId, seq: u64, sender: UserId) -> MessageRecord {
    MessageRecord {
        tenant,
        conversation,
        seq: ConversationSeq(seq),
        message_id: fresh(MessageId),
        sender,
        client_message_id: ClientMessageId::new(format!("c-{seq}")).unwrap(),
        kind: MessageKind::Normal,
        retention: RetentionClass::Default,
        created_at: UnixMillis::now(),
        expires_at: None,
        payload: format!("message {seq}").into_bytes(),
    }
}

/// Adds `users` to the conversation, 1000 per call.
pub async fn add_members(
    members: &dyn MembershipStore,
    tenant: TenantId,
    conversation: ConversationId,
    users: &[UserId],
) {
    for batch in users.chunks(qim_store::MAX_MEMBERS_PER_CALL) {
        members.add_members(tenant, conversation, batch).await.expect("adding members");
    }
}

/// Every entry of `user`'s mailbox (ignoring watermarks): `(seq, message id)` pairs.
pub async fn mailbox_of(store: &dyn MailboxStore, tenant: TenantId, user: UserId) -> Vec<(MailboxSeq, MessageId)> {
    let top = MailboxSeq::new(EPOCH, (1 << 47) - 1).unwrap();
    let page = store.range_scan(tenant, user, MailboxSeq::origin(EPOCH), top, 10_000).await.expect("range scan");
    page.groups.iter().flat_map(|g| g.events.iter().map(move |e| (g.seq, e.message.message_id))).collect()
}

/// The mailboxes of `users` (as [`mailbox_of`]), in their order, read [`READS_AT_ONCE`] at a
/// time: a test's final check reads thousands of mailboxes, and one at a time it spent as long
/// reading as the dispatcher spent writing.
pub async fn mailboxes_of(
    store: &dyn MailboxStore,
    tenant: TenantId,
    users: impl IntoIterator<Item = UserId>,
) -> Vec<(UserId, Vec<(MailboxSeq, MessageId)>)> {
    futures_util::stream::iter(users)
        .map(|u| async move { (u, mailbox_of(store, tenant, u).await) })
        .buffered(READS_AT_ONCE)
        .collect()
        .await
}

/// How many mailbox reads [`mailboxes_of`] keeps in flight.
pub const READS_AT_ONCE: usize = 16;

/// Every lane watermark of `shard`. A read the store answers `Unavailable` (a loaded Cassandra
/// timing a query out while the dispatcher under test writes) is tried again for up to 30 s;
/// any other failure, or one that lasts, fails the test.
pub async fn watermarks(store: &dyn MailboxStore, shard: ShardId) -> Vec<Option<u64>> {
    let mut out = Vec::with_capacity(usize::from(LANES));
    for lane in LaneId::all() {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let through = loop {
            match store.lane_watermark(shard, lane).await {
                Ok(w) => break w.through,
                Err(e) if e.kind().is_retryable() && std::time::Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => panic!("reading lane {} of shard {}: {e:?}", lane.get(), shard.0),
            }
        };
        out.push(through);
    }
    out
}

/// Polls `check` every 100 ms until it returns `true`, or panics naming `what` after `timeout`.
pub async fn wait_for<F, Fut>(what: &str, timeout: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if check().await {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out after {timeout:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until the router's and the shard workers' consumer groups are each stable with
/// `members` members: the rebalance finished and every partition has its owner.
pub async fn wait_groups_settled(kafka: &KafkaConfig, members: usize) {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let consumer: BaseConsumer = ClientConfig::new().set("bootstrap.servers", brokers()).create().unwrap();
    for group in [kafka.router_group(), kafka.shard_group()] {
        let what = format!("group {group} stable with {members} members");
        wait_for(&what, Duration::from_secs(60), || {
            let settled = consumer
                .fetch_group_list(Some(&group), Duration::from_secs(5))
                .is_ok_and(|list| list.groups().iter().any(|g| g.state() == "Stable" && g.members().len() == members));
            std::future::ready(settled)
        })
        .await;
    }
}

/// Polls `measure` every 100 ms until it reports done. `measure` answers `(done, progress)`,
/// `progress` any number that grows while the work advances (a sum of watermarks). Panics naming
/// `what` when `progress` stood still for `stall`, or after `cap` in all: slow machines get as
/// long as they keep advancing, a stuck pipeline still fails.
pub async fn wait_while_progressing<F, Fut>(what: &str, stall: Duration, cap: Duration, mut measure: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = (bool, u64)>,
{
    let started = tokio::time::Instant::now();
    let (mut last, mut moved_at) = (None, started);
    loop {
        let (done, progress) = measure().await;
        if done {
            return;
        }
        let now = tokio::time::Instant::now();
        if last != Some(progress) {
            (last, moved_at) = (Some(progress), now);
        }
        assert!(
            now - moved_at < stall,
            "no progress for {stall:?} (stuck at {progress}, {:?} in all) waiting for {what}",
            now - started
        );
        assert!(now - started < cap, "still not done after {cap:?} (at {progress}) waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub use qim_testkit::ports::free_port;

/// Waits until `/healthz` of a spawned binary answers.
pub async fn wait_healthy(port: u16) {
    let http = reqwest::Client::new();
    wait_for("the dispatcher binary to answer /healthz", Duration::from_secs(60), || {
        let http = http.clone();
        async move { http.get(format!("http://127.0.0.1:{port}/healthz")).send().await.is_ok_and(|r| r.status() == 200) }
    })
    .await;
}
