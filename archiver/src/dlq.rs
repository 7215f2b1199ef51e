//! The dead-letter topic: poison records are produced there as they arrived (same key, value
//! and headers) plus the reason, source and detail headers every qim dead letter carries
//! ([`dead_letter_headers`]). The producer is idempotent with `acks=all`, and the archiver waits for
//! every delivery before it stores the poison record's offset, so a poison record is never
//! skipped without a trace.

use std::time::Duration;

use futures_util::future::try_join_all;
use qim_runtime::kafka::{dead_letter_headers, dead_letter_source, DELIVERY_TIMEOUT};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use rdkafka::util::Timeout;

use crate::batch::Poison;

/// The producer of the dead-letter topic.
pub struct DeadLetters {
    producer: FutureProducer,
    topic: String,
    source_topic: String,
}

impl DeadLetters {
    /// A producer to `topic` for records read from `source_topic` (no round trip yet).
    pub fn new(brokers: &str, topic: &str, source_topic: &str) -> Result<Self, String> {
        let producer = qim_runtime::kafka::producer_config(brokers, Duration::from_millis(5))
            .create()
            .map_err(|e| format!("creating the dead-letter producer: {e}"))?;
        Ok(Self { producer, topic: topic.to_owned(), source_topic: source_topic.to_owned() })
    }

    /// The dead-letter topic.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// Produces every poison record and waits until the broker acknowledged all of them.
    pub async fn send_all(&self, poison: &[Poison]) -> Result<(), String> {
        try_join_all(poison.iter().map(|p| self.send(p))).await.map(drop)
    }

    async fn send(&self, poison: &Poison) -> Result<(), String> {
        let incoming = &poison.incoming;
        let source = dead_letter_source(&self.source_topic, incoming.partition, incoming.offset);
        let original = incoming.headers.iter().map(|(k, v)| (k.as_str(), v.as_deref()));
        let headers = dead_letter_headers(original, poison.reason, &source, &poison.detail);
        let mut record: FutureRecord<'_, [u8], [u8]> = FutureRecord::to(&self.topic).headers(headers);
        if let Some(key) = &incoming.key {
            record = record.key(key.as_slice());
        }
        if let Some(value) = &incoming.value {
            record = record.payload(value.as_slice());
        }
        match self.producer.send(record, Timeout::After(DELIVERY_TIMEOUT)).await {
            Ok(_) => Ok(()),
            Err((e, _)) => Err(format!("dead-lettering {source} to {}: {e}", self.topic)),
        }
    }

    /// Checks `topic` exists (the dead-letter topic, or the one it serves), within `timeout`.
    pub async fn check_topic(&self, topic: &str, timeout: Duration) -> Result<(), String> {
        qim_runtime::kafka::partitions(&self.producer, topic, timeout).await.map(drop)
    }

    /// Waits up to `timeout` for queued deliveries.
    pub fn flush(&self, timeout: Duration) -> Result<(), String> {
        self.producer.flush(Timeout::After(timeout)).map_err(|e| e.to_string())
    }
}
