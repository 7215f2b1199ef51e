//! Kafka plumbing shared by the router and the shard workers: the acknowledged producer and the
//! dead-letter writer.
//!
//! Both consumers are the group consumers every qim service shares
//! ([`qim_runtime::kafka::consumer`]) and run at-least-once: an offset is stored (then
//! auto-committed) only after the record's effect is durable. The work of a partition holds its
//! [`Lease`](qim_runtime::kafka::consumer::Lease): the revoke callback ends it *before*
//! the partition is given up, so that work stops scheduling new steps at once (steps already
//! started finish; they are idempotent, and the new owner redoes whatever was not stored).

use std::time::Duration;

use qim_runtime::events::emit;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Headers, OwnedHeaders};
use rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord, Producer};
use rdkafka::util::Timeout;
use tokio_util::sync::CancellationToken;

use crate::events::{DeadLetterFailed, DeadLettered};

/// How long one produce may wait for its acknowledgement before it is retried.
pub use qim_runtime::kafka::DELIVERY_TIMEOUT;

/// Why a produce failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SendError {
    /// The broker will never take this record (too large, invalid): retrying is pointless.
    Permanent(String),
    /// Anything else (timeouts, broker down): retry.
    Transient(String),
}

impl std::fmt::Display for SendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SendError::Permanent(m) => write!(f, "{m} (permanent)"),
            SendError::Transient(m) => f.write_str(m),
        }
    }
}

fn classify(topic: &str, e: &KafkaError) -> SendError {
    let message = format!("delivering to {topic}: {e}");
    match e.rdkafka_error_code() {
        Some(RDKafkaErrorCode::MessageSizeTooLarge | RDKafkaErrorCode::InvalidRecord) => SendError::Permanent(message),
        _ => SendError::Transient(message),
    }
}

/// A record enqueued in the producer; resolves at the broker's acknowledgement.
pub struct Pending {
    topic: String,
    delivery: DeliveryFuture,
}

impl Pending {
    /// Waits for the acknowledgement.
    pub async fn acked(self) -> Result<(), SendError> {
        match self.delivery.await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err((e, _))) => Err(classify(&self.topic, &e)),
            Err(_) => Err(SendError::Transient(format!("delivering to {}: the producer went away", self.topic))),
        }
    }
}

/// The dispatcher's producer: idempotent, `acks=all`, so records enqueued in order reach each
/// partition in that order, and every send resolves at the broker's acknowledgement.
#[derive(Clone)]
pub struct AckedProducer {
    producer: FutureProducer,
}

/// One record to produce.
pub struct Outgoing<'a> {
    /// Target topic.
    pub topic: &'a str,
    /// Explicit partition, or `None` for the key's hash.
    pub partition: Option<i32>,
    /// Key bytes.
    pub key: &'a [u8],
    /// Value bytes.
    pub value: &'a [u8],
    /// Headers, if any.
    pub headers: Option<OwnedHeaders>,
}

/// Pause while the producer's local queue is full.
const QUEUE_FULL_PAUSE: Duration = Duration::from_millis(10);

impl AckedProducer {
    /// Creates the producer (no network round trip yet).
    pub fn new(brokers: &str) -> Result<Self, String> {
        let producer = qim_runtime::kafka::producer_config(brokers, Duration::from_millis(2))
            .create()
            .map_err(|e| format!("creating the kafka producer: {e}"))?;
        Ok(Self { producer })
    }

    /// Enqueues `record` now (so enqueue order is log order per partition), waiting while the
    /// local queue is full.
    pub async fn enqueue(&self, record: Outgoing<'_>) -> Result<Pending, SendError> {
        let mut r = FutureRecord::to(record.topic).key(record.key).payload(record.value);
        if let Some(headers) = record.headers {
            r = r.headers(headers);
        }
        if let Some(p) = record.partition {
            r = r.partition(p);
        }
        loop {
            match self.producer.send_result(r) {
                Ok(delivery) => return Ok(Pending { topic: record.topic.to_owned(), delivery }),
                Err((e, back)) if e.rdkafka_error_code() == Some(RDKafkaErrorCode::QueueFull) => {
                    r = back;
                    tokio::time::sleep(QUEUE_FULL_PAUSE).await;
                }
                Err((e, _)) => return Err(classify(record.topic, &e)),
            }
        }
    }

    /// Produces `record` and waits for the broker's acknowledgement.
    pub async fn send(&self, record: Outgoing<'_>) -> Result<(), SendError> {
        self.enqueue(record).await?.acked().await
    }

    /// Waits up to `timeout` for queued records.
    pub fn flush(&self, timeout: Duration) -> Result<(), String> {
        self.producer.flush(Timeout::After(timeout)).map_err(|e| e.to_string())
    }

    /// The number of partitions of `topic`, read from the cluster within `timeout`.
    pub async fn partitions(&self, topic: &str, timeout: Duration) -> Result<usize, String> {
        qim_runtime::kafka::partitions(&self.producer, topic, timeout).await
    }
}

/// Where a refused record came from, and why it was refused.
pub struct Refused<'a> {
    /// Source topic.
    pub topic: &'a str,
    /// Source partition.
    pub partition: i32,
    /// Source offset.
    pub offset: i64,
    /// The record's key, if any.
    pub key: Option<&'a [u8]>,
    /// The record's value, if any.
    pub value: Option<&'a [u8]>,
    /// The record's headers, kept on the dead letter.
    pub headers: &'a [(String, Option<Vec<u8>>)],
    /// A short stable reason (`undecodable`, `dispatch_conflict`, ...).
    pub reason: &'a str,
    /// What was wrong, for a person.
    pub detail: &'a str,
}

/// A record's headers as [`Refused::headers`] takes them.
pub fn original_headers(headers: Option<&impl Headers>) -> Vec<(String, Option<Vec<u8>>)> {
    let Some(headers) = headers else { return Vec::new() };
    headers.iter().map(|h| (h.key.to_owned(), h.value.map(<[u8]>::to_vec))).collect()
}

/// Writes `refused` to `dlq_topic` as it arrived (key, value and headers) plus the reason, the
/// source (`topic/partition/offset`) and the detail in headers (the archiver's dead letters
/// carry the same three), retrying until the broker acknowledges it. `false` when `cancel` fired
/// between attempts (nothing is stored then).
pub async fn dead_letter(
    producer: &AckedProducer,
    dlq_topic: &str,
    refused: Refused<'_>,
    cancel: &CancellationToken,
) -> bool {
    use qim_runtime::kafka::{dead_letter_headers, dead_letter_source};
    let source = dead_letter_source(refused.topic, refused.partition, refused.offset);
    let original = refused.headers.iter().map(|(k, v)| (k.as_str(), v.as_deref()));
    let headers = dead_letter_headers(original, refused.reason, &source, refused.detail);
    let mut backoff = crate::retry::Backoff::default();
    loop {
        let out = Outgoing {
            topic: dlq_topic,
            partition: None,
            key: refused.key.unwrap_or_default(),
            value: refused.value.unwrap_or_default(),
            headers: Some(headers.clone()),
        };
        match producer.send(out).await {
            Ok(()) => {
                emit(DeadLettered { topic: refused.topic, source: &source, reason: refused.reason });
                return true;
            }
            Err(e) => {
                emit(DeadLetterFailed { source: &source, error: &e });
                if !backoff.pause(cancel).await {
                    return false;
                }
            }
        }
    }
}
