//! Archivers against the local stack (real Kafka, Cassandra and Redis): a fresh topic,
//! dead-letter topic, consumer group and Redis namespace per test, one migrated keyspace per
//! test binary, records produced the way the writer produces them, and readers of what the
//! archive holds. A missing server fails the test, naming it.

#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use qim_archiver::config::{ArchiverConfig, BatchLimits};
use qim_archiver::serve::{start, RunningArchiver};
use qim_store::clock::{Clock, SystemClock};
use qim_store::ids::{
    ClientMessageId, ConversationId, ConversationSeq, MessageId, TenantId, UnixMillis, UserId, MILLIS_PER_DAY,
};
use qim_store::message::{MessageKind, MessageRecord};
use qim_store::redis::RedisConfig;
use qim_store::retention::{RetentionClass, RetentionPolicy};
use qim_store::scylla::schema::SEQ_BUCKET_SIZE;
use qim_store::scylla::{ScyllaConfig, ScyllaMessageStore};
use qim_store::topic::{encode_message, HEADER_MESSAGE_ID, HEADER_SCHEMA};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::util::Timeout;
use rdkafka::TopicPartitionList;
use scylla::client::session::Session;
use tokio_util::sync::CancellationToken;

pub use qim_testkit::stack::{kafka_brokers as brokers, redis_url, unique_name as unique, START_HINT as HINT};

/// 16 fresh bytes.
pub fn fresh<T>(make: fn([u8; 16]) -> T) -> T {
    make(qim_store::testsuite::fixtures::fresh_bytes())
}

/// Creates a topic, ready to use; fails naming Kafka when it does not answer.
pub async fn create_topic(prefix: &str, partitions: i32) -> String {
    let topic = unique(prefix);
    qim_testkit::kafka::require_topics(&[(&topic, partitions)]).await;
    topic
}

/// The test keyspace of this binary, migrated once.
pub async fn scylla_config() -> ScyllaConfig {
    qim_store::testsuite::scylla_keyspace::migrated_test_keyspace().await
}

/// An archive store on the test keyspace (its own session: sessions belong to one runtime).
pub async fn archive(policy: RetentionPolicy) -> ScyllaMessageStore {
    let config = scylla_config().await;
    ScyllaMessageStore::connect(&config, policy, Arc::new(SystemClock)).await.unwrap_or_else(|e| panic!("{e}; {HINT}"))
}

/// An archiver configuration for one test: its own topics, group and namespace, port 0.
pub async fn config(topic: &str, dlq: &str, policy: RetentionPolicy) -> ArchiverConfig {
    ArchiverConfig {
        scylla: scylla_config().await,
        hot_tier: Some(RedisConfig { url: redis_url(), namespace: unique("at").replace('-', "_") }),
        policy,
        hot_window_days: 7,
        kafka_brokers: brokers(),
        messages_topic: topic.to_owned(),
        dlq_topic: dlq.to_owned(),
        group: unique("a_test"),
        batch: BatchLimits { max_records: 200, max_wait: Duration::from_millis(20), write_concurrency: 64 },
        hole_grace: Duration::from_secs(600),
        trim_interval: Duration::from_secs(1),
        http_addr: "127.0.0.1:0".parse().unwrap(),
        log: qim_runtime::telemetry::LogSettings::text("warn"),
        startup_timeout: std::time::Duration::from_secs(30),
    }
}

/// The environment that makes the `qim-archiver` binary run with `config`.
pub fn binary_env(config: &ArchiverConfig) -> Vec<(String, String)> {
    let redis = config.hot_tier.as_ref().expect("tests use the redis backend");
    [
        ("QIM_STORE_BACKEND", "redis".to_owned()),
        ("QIM_REDIS_URL", redis.url.clone()),
        ("QIM_REDIS_NAMESPACE", redis.namespace.clone()),
        ("QIM_SCYLLA_HOSTS", config.scylla.hosts.join(",")),
        ("QIM_SCYLLA_KEYSPACE", config.scylla.keyspace.clone()),
        ("QIM_SCYLLA_DC", config.scylla.local_dc.clone()),
        ("QIM_SCYLLA_RF", config.scylla.replication_factor.to_string()),
        ("QIM_SCYLLA_DEV_SINGLE_NODE", "true".to_owned()),
        ("QIM_DEFAULT_HISTORY_RETENTION_DAYS", config.policy.default_days().unwrap_or(30).to_string()),
        ("QIM_KAFKA_BROKERS", config.kafka_brokers.clone()),
        ("QIM_MESSAGES_TOPIC", config.messages_topic.clone()),
        ("QIM_DLQ_TOPIC", config.dlq_topic.clone()),
        ("QIM_ARCHIVER_GROUP", config.group.clone()),
        ("QIM_ARCHIVER_BATCH_RECORDS", config.batch.max_records.to_string()),
        ("QIM_ARCHIVER_HTTP_ADDR", "127.0.0.1:0".to_owned()),
        ("QIM_LOG", "info".to_owned()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

/// An archiver running in this process.
pub struct TestArchiver {
    pub addr: std::net::SocketAddr,
    pub shutdown: CancellationToken,
    running: Option<RunningArchiver>,
}

impl TestArchiver {
    pub async fn start(config: ArchiverConfig) -> Self {
        let shutdown = CancellationToken::new();
        let running = start(config, shutdown.clone()).await.unwrap_or_else(|e| panic!("{e:#}; {HINT}"));
        Self { addr: running.addr, shutdown, running: Some(running) }
    }

    /// Graceful stop; returns what the archiver's task returned.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        self.shutdown.cancel();
        self.running.take().unwrap().wait().await
    }

    /// The `/metrics` page, parsed.
    pub async fn metrics(&self) -> qim_testkit::metrics::Exposition {
        let text = reqwest::get(format!("http://{}/metrics", self.addr)).await.unwrap().text().await.unwrap();
        qim_testkit::metrics::Exposition::parse(&text)
    }
}

/// A committed-looking record of `conversation` at `seq`, created at `created_at`, with the
/// expiry `policy` gives its class.
pub fn record(
    tenant: TenantId,
    conversation: ConversationId,
    seq: u64,
    retention: RetentionClass,
    created_at: UnixMillis,
    policy: &RetentionPolicy,
) -> MessageRecord {
    MessageRecord {
        tenant,
        conversation,
        seq: ConversationSeq(seq),
        message_id: fresh(MessageId),
        sender: UserId([7; 16]),
        client_message_id: ClientMessageId::new(format!("c-{seq}")).unwrap(),
        kind: MessageKind::Normal,
        retention,
        created_at,
        expires_at: policy.expires_at(retention, created_at),
        payload: format!("payload of {seq}").into_bytes(),
    }
}

/// `n` Default records of one conversation, seqs 1..=n, created now.
pub fn conversation(n: u64, policy: &RetentionPolicy) -> Vec<MessageRecord> {
    let (tenant, conversation) = (fresh(TenantId), fresh(ConversationId));
    let now = UnixMillis::now();
    (1..=n).map(|s| record(tenant, conversation, s, RetentionClass::Default, now, policy)).collect()
}

pub fn producer() -> FutureProducer {
    ClientConfig::new()
        .set("bootstrap.servers", brokers())
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "5")
        .create()
        .expect("a producer")
}

/// Produces `records` to `topic` exactly as the writer does (key, value, headers), in order.
pub async fn produce(topic: &str, records: &[MessageRecord]) {
    let producer = producer();
    let mut pending = Vec::new();
    for r in records {
        let m = encode_message(r);
        let headers = OwnedHeaders::new()
            .insert(Header { key: HEADER_SCHEMA, value: Some(m.schema.as_bytes()) })
            .insert(Header { key: HEADER_MESSAGE_ID, value: Some(m.message_id.as_bytes()) });
        let record = FutureRecord::to(topic).key(&m.key[..]).payload(&m.value).headers(headers);
        pending.push(producer.send_result(record).unwrap_or_else(|(e, _)| panic!("queueing a record: {e}")));
    }
    for p in pending {
        p.await.expect("delivery").unwrap_or_else(|(e, _)| panic!("delivering to {topic}: {e}; {HINT}"));
    }
}

/// Produces one raw record.
pub async fn produce_raw(topic: &str, key: Option<&[u8]>, value: Option<&[u8]>, headers: &[(&str, &[u8])]) {
    let producer = producer();
    let mut owned = OwnedHeaders::new();
    for (k, v) in headers {
        owned = owned.insert(Header { key: k, value: Some(*v) });
    }
    let mut record: FutureRecord<'_, [u8], [u8]> = FutureRecord::to(topic).headers(owned);
    if let Some(k) = key {
        record = record.key(k);
    }
    if let Some(v) = value {
        record = record.payload(v);
    }
    producer.send(record, Timeout::After(Duration::from_secs(20))).await.unwrap_or_else(|(e, _)| panic!("{e}"));
}

/// The offsets `group` committed on `topic`, by partition (absent: nothing committed).
pub fn committed(group: &str, topic: &str, partitions: i32) -> HashMap<i32, i64> {
    let consumer: BaseConsumer =
        ClientConfig::new().set("bootstrap.servers", brokers()).set("group.id", group).create().unwrap();
    let mut list = TopicPartitionList::new();
    for p in 0..partitions {
        list.add_partition(topic, p);
    }
    // While the group's coordinator moves or loads (a rebalance, a broker busy with other tests'
    // groups) the broker answers NotCoordinator or CoordinatorLoadInProgress: asked again.
    let deadline = Instant::now() + Duration::from_secs(60);
    let committed = loop {
        match consumer.committed_offsets(list.clone(), Duration::from_secs(10)) {
            Ok(c) => break c,
            Err(e) if Instant::now() < deadline => {
                eprintln!("committed offsets of {group}: {e}; asking again");
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => panic!("committed offsets of {group}: {e}"),
        }
    };
    committed
        .elements()
        .iter()
        .filter_map(|e| match e.offset() {
            rdkafka::Offset::Offset(o) => Some((e.partition(), o)),
            _ => None,
        })
        .collect()
}

/// Polls `check` every 200 ms until it holds or `timeout` passes (then panics with `what`).
pub async fn wait_for<F, Fut>(what: &str, timeout: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    while !check().await {
        assert!(Instant::now() < deadline, "timed out after {timeout:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// One archived record's rows as stored, with the TTLs the server reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stored {
    pub blob: Vec<u8>,
    pub record_ttl: Option<i32>,
    pub index_expires_at: Option<i64>,
    pub index_ttl: Option<i32>,
}

/// The rows of `(tenant, conversation, seq)`, if the record row exists.
pub async fn stored(session: &Session, ks: &str, r: &MessageRecord) -> Option<Stored> {
    // `TTL()` counts down in whole seconds of the server's clock: two reads that straddle a
    // second boundary would show rows that expire together one second apart. Read again until
    // both reads fall in one second.
    loop {
        let second = |t: std::time::SystemTime| t.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
        let before = second(std::time::SystemTime::now());
        let found = stored_once(session, ks, r).await;
        if second(std::time::SystemTime::now()) == before {
            return found;
        }
    }
}

async fn stored_once(session: &Session, ks: &str, r: &MessageRecord) -> Option<Stored> {
    let bucket = (r.seq.0 / SEQ_BUCKET_SIZE) as i64;
    let (t, c, s) = (r.tenant.0.to_vec(), r.conversation.0.to_vec(), r.seq.0 as i64);
    let row = session
        .query_unpaged(
            format!(
                "SELECT record_blob, TTL(record_blob) FROM {ks}.message_record WHERE tenant_id = ? AND \
                 conversation_id = ? AND seq_bucket = ? AND conversation_seq = ?"
            ),
            (t.clone(), c.clone(), bucket, s),
        )
        .await
        .expect("reading message_record")
        .into_rows_result()
        .unwrap()
        .maybe_first_row::<(Vec<u8>, Option<i32>)>()
        .unwrap()?;
    let index = session
        .query_unpaged(
            format!(
                "SELECT expires_at, TTL(expires_at), writetime(expires_at) FROM {ks}.history_index WHERE tenant_id = ? \
                 AND conversation_id = ? AND conversation_seq = ?"
            ),
            (t, c, s),
        )
        .await
        .expect("reading history_index")
        .into_rows_result()
        .unwrap()
        .maybe_first_row::<(Option<i64>, Option<i32>, Option<i64>)>()
        .unwrap();
    let (index_expires_at, index_ttl) = index.map_or((None, None), |(e, t, _)| (e, t));
    Some(Stored { blob: row.0, record_ttl: row.1, index_expires_at, index_ttl })
}

/// How many history index rows a conversation has in the archive.
pub async fn index_rows(session: &Session, ks: &str, tenant: TenantId, conversation: ConversationId) -> usize {
    session
        .query_unpaged(
            format!("SELECT conversation_seq FROM {ks}.history_index WHERE tenant_id = ? AND conversation_id = ?"),
            (tenant.0.to_vec(), conversation.0.to_vec()),
        )
        .await
        .expect("reading history_index")
        .into_rows_result()
        .unwrap()
        .rows::<(i64,)>()
        .unwrap()
        .count()
}

/// Whether the record's history index row exists (the last row a batch writes for it).
pub async fn indexed(session: &Session, ks: &str, r: &MessageRecord) -> bool {
    session
        .query_unpaged(
            format!(
                "SELECT conversation_seq FROM {ks}.history_index WHERE tenant_id = ? AND conversation_id = ? \
                 AND conversation_seq = ?"
            ),
            (r.tenant.0.to_vec(), r.conversation.0.to_vec(), r.seq.0 as i64),
        )
        .await
        .expect("reading history_index")
        .into_rows_result()
        .unwrap()
        .rows::<(i64,)>()
        .unwrap()
        .count()
        == 1
}

/// Waits until every record of `records` has its index row.
pub async fn wait_archived(session: &Session, ks: &str, records: &[MessageRecord], timeout: Duration) {
    let deadline = Instant::now() + timeout;
    for r in records {
        while !indexed(session, ks, r).await {
            assert!(Instant::now() < deadline, "timed out after {timeout:?} waiting for seq {} to be archived", r.seq);
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// Milliseconds in `days` days.
pub const fn days(days: i64) -> i64 {
    days * MILLIS_PER_DAY
}

/// The system clock, shared.
pub fn system_clock() -> Arc<dyn Clock> {
    Arc::new(SystemClock)
}
