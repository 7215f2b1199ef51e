//! Reading a whole topic from its beginning to the end it had when the read began.

use std::collections::HashMap;
use std::time::Duration;

use anyhow::Context;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{BorrowedMessage, Headers};
use rdkafka::{Message, Offset, TopicPartitionList};

use crate::stack;

const KAFKA_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest a whole topic read may take.
const READ_TIMEOUT: Duration = Duration::from_secs(120);

/// One raw record.
#[derive(Clone, Debug)]
pub struct RawRecord {
    /// Partition.
    pub partition: i32,
    /// Offset.
    pub offset: i64,
    /// Key bytes.
    pub key: Option<Vec<u8>>,
    /// Value bytes.
    pub value: Option<Vec<u8>>,
    /// Headers by name.
    pub headers: HashMap<String, Vec<u8>>,
}

/// Every record of `topic`, from each partition's low watermark up to its high watermark as of
/// the start of the read, in (partition, offset) order.
///
/// # Errors
///
/// Kafka does not answer, or the read does not reach the end within two minutes.
pub async fn read_topic(brokers: &str, topic: &str) -> anyhow::Result<Vec<RawRecord>> {
    let mut config = stack::kafka_config();
    config
        .set("bootstrap.servers", brokers)
        .set("group.id", stack::unique_name("checker"))
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "false");
    let topic = topic.to_owned();
    tokio::task::spawn_blocking(move || read_blocking(&config, &topic)).await.context("the topic reader panicked")?
}

fn read_blocking(config: &rdkafka::ClientConfig, topic: &str) -> anyhow::Result<Vec<RawRecord>> {
    let consumer: BaseConsumer = config.create().context("creating a Kafka consumer")?;
    let metadata = consumer.fetch_metadata(Some(topic), KAFKA_TIMEOUT).context("fetching topic metadata")?;
    let mut ends = HashMap::new();
    let mut tpl = TopicPartitionList::new();
    for p in metadata.topics().iter().flat_map(|t| t.partitions().iter().map(|p| p.id())) {
        let (low, high) = consumer.fetch_watermarks(topic, p, KAFKA_TIMEOUT).context("reading watermarks")?;
        if high > low {
            ends.insert(p, high);
            tpl.add_partition_offset(topic, p, Offset::Offset(low))?;
        }
    }
    if ends.is_empty() {
        return Ok(Vec::new());
    }
    consumer.assign(&tpl).context("assigning the topic's partitions")?;
    let began = std::time::Instant::now();
    let mut out = Vec::new();
    while !ends.is_empty() {
        anyhow::ensure!(
            began.elapsed() < READ_TIMEOUT,
            "reading {topic} did not reach its end within {READ_TIMEOUT:?}"
        );
        let Some(m) = consumer.poll(Duration::from_millis(500)) else { continue };
        let m = m.with_context(|| format!("reading {topic}"))?;
        let partition = m.partition();
        if let Some(end) = ends.get(&partition).copied() {
            if m.offset() < end {
                out.push(raw(&m));
            }
            if m.offset() + 1 >= end {
                ends.remove(&partition);
            }
        }
    }
    out.sort_by_key(|r| (r.partition, r.offset));
    Ok(out)
}

fn raw(m: &BorrowedMessage<'_>) -> RawRecord {
    let headers = m
        .headers()
        .map(|hs| hs.iter().map(|h| (h.key.to_owned(), h.value.map(<[u8]>::to_vec).unwrap_or_default())).collect())
        .unwrap_or_default();
    RawRecord {
        partition: m.partition(),
        offset: m.offset(),
        key: m.key().map(<[u8]>::to_vec),
        value: m.payload().map(<[u8]>::to_vec),
        headers,
    }
}
