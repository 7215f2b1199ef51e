//! What every service does with Kafka the same way: how its producers are configured, what a
//! dead letter carries, and which partitions a topic has (the start-up check that a topic
//! exists, readiness probes, replay and tail-scan plans); group consumers and their partition
//! leases in [`consumer`]; committed messages as records in [`messages`].

use std::time::Duration;

use rdkafka::client::{Client, ClientContext};
use rdkafka::config::ClientConfig;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, Producer};

use qim_store::topic::{HEADER_DLQ_DETAIL, HEADER_DLQ_REASON, HEADER_DLQ_SOURCE};

pub mod consumer;
pub mod dlq;
pub mod messages;
pub mod replay;

/// How long a produced record may wait for the broker's acknowledgement before its delivery
/// fails (`message.timeout.ms`; the caller retries or reports it).
pub const DELIVERY_TIMEOUT: Duration = Duration::from_secs(30);

/// Every qim producer's settings: idempotent with `acks=all` (an acknowledged record is on every
/// in-sync replica and a retried one is written once), lz4, records batched for `linger`, given up
/// after [`DELIVERY_TIMEOUT`].
pub fn producer_config(brokers: &str, linger: Duration) -> ClientConfig {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", brokers)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", linger.as_millis().to_string())
        .set("compression.type", "lz4")
        .set("message.timeout.ms", DELIVERY_TIMEOUT.as_millis().to_string());
    config
}

/// Where a refused record was read, as a dead letter's `qim-dlq-source` header gives it:
/// `topic/partition/offset`.
pub fn dead_letter_source(topic: &str, partition: i32, offset: i64) -> String {
    format!("{topic}/{partition}/{offset}")
}

/// The headers of a dead letter, the one shape every qim dead letter has: the refused record's
/// own headers (in order, null values kept), then `qim-dlq-reason` (short and stable),
/// `qim-dlq-source` ([`dead_letter_source`]) and `qim-dlq-detail` (what was wrong, for a person).
pub fn dead_letter_headers<'a>(
    original: impl IntoIterator<Item = (&'a str, Option<&'a [u8]>)>,
    reason: &str,
    source: &str,
    detail: &str,
) -> OwnedHeaders {
    let mut headers = OwnedHeaders::new();
    for (key, value) in original {
        headers = headers.insert(Header { key, value });
    }
    headers
        .insert(Header { key: HEADER_DLQ_REASON, value: Some(reason.as_bytes()) })
        .insert(Header { key: HEADER_DLQ_SOURCE, value: Some(source.as_bytes()) })
        .insert(Header { key: HEADER_DLQ_DETAIL, value: Some(detail.as_bytes()) })
}

/// The partition ids of `topic`, read from the cluster's metadata within `timeout`. Blocking
/// (librdkafka waits for the answer): call it on a blocking thread, or use [`partitions`].
///
/// # Errors
///
/// The cluster does not answer, the topic is missing from the answer or reported with an error
/// (it does not exist), or it has no partitions; the message names the topic.
pub fn partition_ids<C: ClientContext>(client: &Client<C>, topic: &str, timeout: Duration) -> Result<Vec<i32>, String> {
    let md = client.fetch_metadata(Some(topic), timeout).map_err(|e| format!("reading metadata of {topic}: {e}"))?;
    let t =
        md.topics().iter().find(|t| t.name() == topic).ok_or_else(|| format!("topic {topic} missing from metadata"))?;
    if let Some(e) = t.error() {
        return Err(format!("topic {topic}: {e:?} (does it exist?)"));
    }
    let ids: Vec<i32> = t.partitions().iter().map(|p| p.id()).collect();
    if ids.is_empty() {
        return Err(format!("topic {topic} has no partitions (does it exist?)"));
    }
    Ok(ids)
}

/// How many partitions `topic` has ([`partition_ids`] on a blocking thread, through `producer`'s
/// connection to the cluster).
///
/// # Errors
///
/// As [`partition_ids`].
pub async fn partitions(producer: &FutureProducer, topic: &str, timeout: Duration) -> Result<usize, String> {
    let (producer, topic) = (producer.clone(), topic.to_owned());
    tokio::task::spawn_blocking(move || partition_ids(producer.client(), &topic, timeout).map(|ids| ids.len()))
        .await
        .map_err(|e| format!("the metadata task failed: {e}"))?
}

#[cfg(test)]
mod tests {
    use rdkafka::message::Headers;

    use super::*;

    #[test]
    fn a_dead_letter_keeps_the_records_headers_and_adds_three() {
        let original = [("schema", Some(&b"v1"[..])), ("empty", None)];
        let source = dead_letter_source("qim.messages.v1", 3, 42);
        assert_eq!(source, "qim.messages.v1/3/42");
        let h = dead_letter_headers(original, "undecodable", &source, "truncated value");
        let got: Vec<(&str, Option<&[u8]>)> = h.iter().map(|h| (h.key, h.value)).collect();
        assert_eq!(
            got,
            vec![
                ("schema", Some(&b"v1"[..])),
                ("empty", None),
                (HEADER_DLQ_REASON, Some(&b"undecodable"[..])),
                (HEADER_DLQ_SOURCE, Some(source.as_bytes())),
                (HEADER_DLQ_DETAIL, Some(&b"truncated value"[..])),
            ]
        );
    }
}
