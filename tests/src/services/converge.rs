//! Catching-up checks: consumer-group lag from Kafka, gauges from `/metrics`.

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

/// Every sample of the metric `name` in a Prometheus text exposition, as `(labels, value)`
/// (`labels` is the raw text between the braces, empty when there are none).
pub fn metric_values(text: &str, name: &str) -> Vec<(String, f64)> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let rest = l.strip_prefix(name)?;
            let (labels, value) = if let Some(r) = rest.strip_prefix('{') {
                let (labels, value) = r.split_once('}')?;
                (labels.to_owned(), value)
            } else if rest.starts_with(' ') {
                (String::new(), rest)
            } else {
                return None;
            };
            Some((labels, value.split_whitespace().next()?.parse().ok()?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_are_parsed_by_exact_name() {
        let text = "# HELP x\nqim_lag{shard=\"0\"} 3\nqim_lag{shard=\"1\"} 0\nqim_lag_total 9\nqim_other 1\n";
        let v = metric_values(text, "qim_lag");
        assert_eq!(v, vec![("shard=\"0\"".to_owned(), 3.0), ("shard=\"1\"".to_owned(), 0.0)]);
        assert_eq!(metric_values(text, "qim_lag_total"), vec![(String::new(), 9.0)]);
    }
}
