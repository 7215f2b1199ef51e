//! Smoke test of the Kafka the stack provides: topic admin, an idempotent `acks=all` produce
//! with key and headers, and a consumer-group read of the same record.
//!
//! Needs Kafka at `QIM_TEST_KAFKA_BROKERS` (default 127.0.0.1:9092); fails, never skips, when
//! it is missing: start it with `deploy/local/stack up`.

use std::time::Duration;

use anyhow::{bail, ensure, Context as _};
use qim_tests::stack;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{Consumer as _, StreamConsumer};
use rdkafka::message::{Header, Headers as _, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::Message as _;

/// Bound for each admin operation, the delivery and the consume.
const OP_TIMEOUT: Duration = Duration::from_secs(30);
/// Consuming includes joining a fresh consumer group (the broker's initial rebalance delay is
/// 3 s by default), so it gets more room.
const CONSUME_TIMEOUT: Duration = Duration::from_secs(60);

const KEY: &[u8] = b"conv-42";
const PAYLOAD: &[u8] = b"{\"seq\":1,\"body\":\"hello\"}";
const HEADER_KEY: &str = "qim-trace";
const HEADER_VALUE: &[u8] = b"smoke-1";

#[tokio::test]
async fn produce_idempotent_then_consume_same_record() -> anyhow::Result<()> {
    let admin = stack::require_kafka_admin().await;
    let topic = stack::unique_name("smoke_kafka");
    let opts = AdminOptions::new().operation_timeout(Some(OP_TIMEOUT));

    let created = admin
        .create_topics(&[NewTopic::new(&topic, 1, TopicReplication::Fixed(1))], &opts)
        .await
        .with_context(|| format!("creating topic {topic}"))?;
    match created.as_slice() {
        [Ok(name)] if *name == topic => {}
        other => bail!("creating topic {topic}: unexpected result {other:?}"),
    }

    let outcome = round_trip(&topic).await;
    delete_topic(&admin, &topic, &opts).await;
    outcome
}

/// Produces one record to `topic` and reads it back; the topic exists with one partition.
async fn round_trip(topic: &str) -> anyhow::Result<()> {
    let producer: FutureProducer = stack::kafka_config()
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("message.timeout.ms", OP_TIMEOUT.as_millis().to_string())
        .create()
        .context("creating the idempotent FutureProducer")?;

    let headers = OwnedHeaders::new().insert(Header { key: HEADER_KEY, value: Some(HEADER_VALUE) });
    let record = FutureRecord::to(topic).key(KEY).payload(PAYLOAD).headers(headers);
    let delivery = producer
        .send(record, OP_TIMEOUT)
        .await
        .map_err(|(e, _msg)| e)
        .with_context(|| format!("delivering the record to {topic}"))?;
    ensure!(delivery.partition == 0, "delivered to partition {}, the topic has only partition 0", delivery.partition);
    ensure!(delivery.offset >= 0, "delivery reported offset {}", delivery.offset);

    let consumer: StreamConsumer = stack::kafka_config()
        .set("group.id", stack::unique_name("smoke_group"))
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        .create()
        .context("creating the StreamConsumer")?;
    consumer.subscribe(&[topic]).with_context(|| format!("subscribing to {topic}"))?;

    let msg = tokio::time::timeout(CONSUME_TIMEOUT, consumer.recv())
        .await
        .with_context(|| format!("no record consumed from {topic} within {CONSUME_TIMEOUT:?}"))?
        .with_context(|| format!("consuming from {topic}"))?;

    ensure!(msg.topic() == topic, "consumed from topic {}", msg.topic());
    ensure!(
        msg.partition() == delivery.partition,
        "consumed partition {} but delivery reported {}",
        msg.partition(),
        delivery.partition
    );
    ensure!(
        msg.offset() == delivery.offset,
        "consumed offset {} but delivery reported {}",
        msg.offset(),
        delivery.offset
    );
    ensure!(
        msg.timestamp() == delivery.timestamp,
        "consumed timestamp {:?} but delivery reported {:?}",
        msg.timestamp(),
        delivery.timestamp
    );
    ensure!(msg.key() == Some(KEY), "consumed key {:?}, produced {KEY:?}", msg.key());
    ensure!(msg.payload() == Some(PAYLOAD), "consumed payload {:?}, produced {PAYLOAD:?}", msg.payload());

    let headers = msg.headers().context("consumed record has no headers")?;
    let consumed: Vec<(String, Option<Vec<u8>>)> =
        headers.iter().map(|h| (h.key.to_owned(), h.value.map(<[u8]>::to_vec))).collect();
    ensure!(
        consumed == [(HEADER_KEY.to_owned(), Some(HEADER_VALUE.to_vec()))],
        "consumed headers {consumed:?}, produced one: {HEADER_KEY}={HEADER_VALUE:?}"
    );
    Ok(())
}

/// Deletes `topic`, reporting (not failing on) errors: the name is unique, so a leftover topic
/// harms no other run.
async fn delete_topic(admin: &AdminClient<DefaultClientContext>, topic: &str, opts: &AdminOptions) {
    match admin.delete_topics(&[topic], opts).await {
        Ok(results) => {
            for r in results {
                if let Err((name, code)) = r {
                    eprintln!("warning: could not delete topic {name}: {code}");
                }
            }
        }
        Err(e) => eprintln!("warning: could not delete topic {topic}: {e}"),
    }
}
