//! Catching-up checks: consumer-group lag from Kafka.

use std::time::Duration;

use anyhow::Context;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset, TopicPartitionList};

use crate::stack;

const KAFKA_TIMEOUT: Duration = Duration::from_secs(10);

/// How far a consumer group is behind a topic's end.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Lag {
    /// Records between the group's committed offsets and the high watermarks, summed.
    pub total: i64,
    /// The high watermarks summed (records ever written, counting from offset 0).
    pub end: i64,
}

/// The lag of `group` on `topic` (every partition; a partition without a committed offset
/// counts from its low watermark).
///
/// # Errors
///
/// Kafka does not answer within 10 s per request.
pub async fn consumer_group_lag(brokers: &str, group: &str, topic: &str) -> anyhow::Result<Lag> {
    let mut config = stack::kafka_config();
    config.set("bootstrap.servers", brokers).set("group.id", group).set("enable.auto.commit", "false");
    let topic = topic.to_owned();
    tokio::task::spawn_blocking(move || -> anyhow::Result<Lag> {
        let consumer: BaseConsumer = config.create().context("creating a Kafka client")?;
        let metadata = consumer.fetch_metadata(Some(&topic), KAFKA_TIMEOUT).context("fetching topic metadata")?;
        let partitions: Vec<i32> =
            metadata.topics().iter().flat_map(|t| t.partitions().iter().map(|p| p.id())).collect();
        let mut tpl = TopicPartitionList::new();
        for p in &partitions {
            tpl.add_partition(&topic, *p);
        }
        let committed = consumer.committed_offsets(tpl, KAFKA_TIMEOUT).context("reading committed offsets")?;
        let mut lag = Lag::default();
        for p in partitions {
            let (low, high) = consumer.fetch_watermarks(&topic, p, KAFKA_TIMEOUT).context("reading watermarks")?;
            let at = match committed.find_partition(&topic, p).map(|e| e.offset()) {
                Some(Offset::Offset(o)) => o,
                _ => low,
            };
            lag.total += (high - at).max(0);
            lag.end += high;
        }
        Ok(lag)
    })
    .await
    .context("the Kafka lag task panicked")?
}
