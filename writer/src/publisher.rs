//! Publication of committed records to `qim.messages.v1`.
//!
//! One idempotent producer (`enable.idempotence`, `acks=all`) shared by every commit: sends are
//! queued without waiting for each other, and each commit awaits only its own delivery report.
//! A delivery that fails (or times out) leaves the commit RECORDED; the recovery loop publishes
//! it again later, so a record may reach the topic twice, never with a different seq.

use std::time::Duration;

use async_trait::async_trait;
use qim_runtime::kafka::messages::message_record;
use qim_store::message::{MessageRecord, Publication};
use qim_store::topic::encode_message;
use rdkafka::config::ClientConfig;
use rdkafka::producer::{FutureProducer, Producer};
use rdkafka::util::Timeout;

/// How long one delivery may take before the commit gives up (the recovery loop retries).
pub use qim_runtime::kafka::DELIVERY_TIMEOUT;

/// A failed publication.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    /// The producer could not be created (bad configuration).
    #[error("creating the kafka producer: {0}")]
    Config(String),
    /// The broker did not acknowledge the record in time, or refused it.
    #[error("delivering to {topic}: {reason}")]
    Delivery {
        /// The topic.
        topic: String,
        /// librdkafka's reason.
        reason: String,
    },
}

/// Publishes one committed record and returns where it landed.
#[async_trait]
pub trait Publish: Send + Sync {
    /// Produces `record` and waits for the broker's acknowledgement (all in-sync replicas).
    async fn publish(&self, record: &MessageRecord) -> Result<Publication, PublishError>;
}

/// Compression of the batches the writer produces (librdkafka's `compression.type`): the codecs
/// the bundled librdkafka is built with (not zstd: the `rdkafka` build here has no libzstd).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Compression {
    /// Uncompressed.
    None,
    /// gzip.
    Gzip,
    /// Snappy.
    Snappy,
    /// LZ4.
    Lz4,
}

impl Compression {
    /// The `compression.type` value.
    pub fn as_str(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Gzip => "gzip",
            Compression::Snappy => "snappy",
            Compression::Lz4 => "lz4",
        }
    }
}

/// How the writer's producer fills its batches. Idempotence and `acks=all` are not tunable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProducerTuning {
    /// How long a record waits for others to share its batch (`linger.ms`).
    pub linger: Duration,
    /// How batches are compressed.
    pub compression: Compression,
}

impl Default for ProducerTuning {
    /// 2 ms and LZ4: what `qim-bench writer` measured best on one broker (see the README's
    /// benchmarks; `QIM_WRITER_KAFKA_LINGER_MS` defaults to the same).
    fn default() -> Self {
        Self { linger: Duration::from_millis(2), compression: Compression::Lz4 }
    }
}

/// The writer's producer settings: every qim producer's
/// ([`qim_runtime::kafka::producer_config`]) with `tuning`'s linger and compression. (The
/// benchmark's raw loop produces with exactly these.)
pub fn producer_config(brokers: &str, tuning: ProducerTuning) -> ClientConfig {
    let mut config = qim_runtime::kafka::producer_config(brokers, tuning.linger);
    config.set("compression.type", tuning.compression.as_str());
    config
}

/// The Kafka producer of the writer.
pub struct KafkaPublisher {
    producer: FutureProducer,
    topic: String,
}

impl KafkaPublisher {
    /// Creates the idempotent producer (no network round trip yet).
    pub fn new(brokers: &str, topic: &str, tuning: ProducerTuning) -> Result<Self, PublishError> {
        let producer = producer_config(brokers, tuning).create().map_err(|e| PublishError::Config(e.to_string()))?;
        Ok(Self { producer, topic: topic.to_owned() })
    }

    /// Checks the topic exists and the cluster answers, within `timeout`.
    pub async fn check_topic(&self, timeout: Duration) -> Result<usize, String> {
        qim_runtime::kafka::partitions(&self.producer, &self.topic, timeout).await
    }

    /// Waits up to `timeout` for every queued record to be delivered.
    pub fn flush(&self, timeout: Duration) -> Result<(), String> {
        self.producer.flush(Timeout::After(timeout)).map_err(|e| e.to_string())
    }
}

#[async_trait]
impl Publish for KafkaPublisher {
    async fn publish(&self, record: &MessageRecord) -> Result<Publication, PublishError> {
        let m = encode_message(record);
        let record = message_record(&self.topic, &m);
        // A full local queue waits (backpressure) up to the delivery timeout instead of failing.
        match self.producer.send(record, Timeout::After(DELIVERY_TIMEOUT)).await {
            Ok(d) => Ok(Publication { partition: d.partition, offset: d.offset }),
            Err((e, _)) => Err(PublishError::Delivery { topic: self.topic.clone(), reason: e.to_string() }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::ValueEnum;

    /// A setting the configuration accepts never fails the producer's creation at start-up.
    #[test]
    fn every_compression_the_setting_accepts_makes_a_producer() {
        for &compression in Compression::value_variants() {
            let tuning = ProducerTuning { linger: Duration::from_millis(1000), compression };
            let made = producer_config("127.0.0.1:9", tuning).create::<FutureProducer>();
            assert!(made.is_ok(), "{}: {:?}", compression.as_str(), made.err());
        }
    }
}
