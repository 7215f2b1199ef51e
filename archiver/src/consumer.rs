//! The consumer loop of `qim-archiver run`: receive a batch, apply it per partition, store each
//! partition's offset once its batch is durable, repeat.
//!
//! - Batching: up to `QIM_ARCHIVER_BATCH_RECORDS` records, waiting at most
//!   `QIM_ARCHIVER_BATCH_WAIT_MILLIS` after the first; split per partition, and the partition
//!   batches are applied concurrently (each conversation lives in one partition, so they never
//!   touch the same conversation).
//! - Offsets: stored per partition only after [`Processor::apply_with_retry`] finished every
//!   step, i.e. after the archive acknowledged every row at LOCAL_QUORUM. In-order processing
//!   per partition makes "stored offset" mean "everything below is durable".
//! - Revocation: callbacks run inside `recv()`, so they never interrupt a write; records and
//!   batches from before a revocation are dropped (never stored), and a batch retrying a
//!   transient failure gives up once its partition is revoked.
//! - Long batches (the archive down): after a few seconds the assigned partitions are paused and
//!   the consumer keeps being polled, so the group does not evict this member
//!   (`max.poll.interval.ms`) and rebalances are served while the batch retries; anything
//!   received meanwhile is kept for the next batch.
//! - Shutdown: the token interrupts receiving and the backoff between retries, never a write;
//!   records received but not applied are simply not stored, and are consumed again later.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::try_join_all;
use qim_runtime::events::emit;
use qim_runtime::kafka::consumer::{leave_group, Leases, LEAVE_TIMEOUT};
use qim_store::retention::RetentionPolicy;
use rdkafka::consumer::{CommitMode, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::TopicPartitionList;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::batch::{partition_batches, PartitionBatch};
use crate::config::BatchLimits;

use crate::events::{BatchAbandoned, ConsumerFailed};
use crate::pipeline::{Outcome, Processor};
use crate::source::{ArchiverConsumer, Incoming};

/// A batch still running after this long pauses the partitions and keeps polling.
const KEEPALIVE_AFTER: Duration = Duration::from_secs(5);

/// The consumer loop (see the module docs).
pub struct ConsumerLoop {
    consumer: Arc<ArchiverConsumer>,
    leases: Arc<Leases>,
    processor: Arc<Processor>,
    topic: String,
    limits: BatchLimits,
    policy: RetentionPolicy,
}

impl ConsumerLoop {
    /// A loop over `consumer` (not yet subscribed) reading `topic`.
    pub fn new(
        consumer: Arc<ArchiverConsumer>,
        leases: Arc<Leases>,
        processor: Arc<Processor>,
        topic: &str,
        limits: BatchLimits,
        policy: RetentionPolicy,
    ) -> Self {
        Self { consumer, leases, processor, topic: topic.to_owned(), limits, policy }
    }

    /// Subscribes and runs until `shutdown` (then commits what is stored) or a fatal error.
    pub async fn run(&self, shutdown: CancellationToken) -> anyhow::Result<()> {
        self.consumer.subscribe(&[&self.topic])?;
        let mut carry = Vec::new();
        let result = loop {
            let received = self.collect(&mut carry, &shutdown).await;
            if !received.is_empty() {
                if let Err(e) = self.process(received, &shutdown, &mut carry).await {
                    break Err(e);
                }
            }
            if shutdown.is_cancelled() {
                break Ok(());
            }
        };
        match self.consumer.commit_consumer_state(CommitMode::Sync) {
            Ok(()) | Err(KafkaError::ConsumerCommit(RDKafkaErrorCode::NoOffset)) => {}
            Err(e) => tracing::warn!(error = %e, "committing stored offsets at shutdown failed"),
        }
        leave_group(&self.consumer, LEAVE_TIMEOUT).await;
        result
    }

    /// Receives up to one batch (starting with `carry`); returns early on shutdown.
    async fn collect(&self, carry: &mut Vec<Incoming>, shutdown: &CancellationToken) -> Vec<Incoming> {
        let mut batch = std::mem::take(carry);
        let mut deadline = (!batch.is_empty()).then(|| Instant::now() + self.limits.max_wait);
        while batch.len() < self.limits.max_records {
            let received = tokio::select! {
                biased;
                () = shutdown.cancelled() => break,
                () = tokio::time::sleep_until(deadline.unwrap_or_else(Instant::now)), if deadline.is_some() => break,
                received = self.consumer.recv() => received,
            };
            match received {
                Ok(message) => {
                    let lease = self.leases.get_or_ended(rdkafka::Message::partition(&message));
                    batch.push(Incoming::from_message(&message, lease));
                    deadline.get_or_insert_with(|| Instant::now() + self.limits.max_wait);
                }
                Err(error) => emit(ConsumerFailed { error: &error }),
            }
        }
        batch.retain(|r| r.lease.is_live());
        batch
    }

    /// Applies one batch per partition, keeping the consumer polled if that takes long.
    async fn process(
        &self,
        records: Vec<Incoming>,
        shutdown: &CancellationToken,
        carry: &mut Vec<Incoming>,
    ) -> anyhow::Result<()> {
        let batches = partition_batches(records, &self.policy);
        let work = try_join_all(batches.iter().map(|b| self.process_partition(b, shutdown)));
        tokio::pin!(work);
        let keepalive = tokio::time::sleep(KEEPALIVE_AFTER);
        tokio::pin!(keepalive);
        let mut paused = None;
        let result = loop {
            tokio::select! {
                biased;
                result = &mut work => break result,
                () = &mut keepalive, if paused.is_none() => {
                    let assignment = self.consumer.assignment()?;
                    self.consumer.pause(&assignment)?;
                    tracing::info!("batch still running: partitions paused, consumer kept alive");
                    paused = Some(assignment);
                }
                received = self.consumer.recv(), if paused.is_some() => match received {
                    Ok(message) => {
                        let partition = rdkafka::Message::partition(&message);
                        // A partition assigned since the pause (cooperative rebalances move
                        // single partitions) is paused too, so `carry` stays bounded.
                        if let Some(paused) = paused.as_mut() {
                            pause_newcomer(&self.consumer, paused, &self.topic, partition);
                        }
                        let lease = self.leases.get_or_ended(partition);
                        carry.push(Incoming::from_message(&message, lease));
                    }
                    Err(error) => emit(ConsumerFailed { error: &error }),
                },
            }
        };
        if let Some(assignment) = paused {
            // Partitions revoked meanwhile are not ours to resume; the rest continue.
            if let Err(e) = self.consumer.resume(&assignment) {
                tracing::debug!(error = %e, "resuming partitions");
            }
        }
        result.map(drop)
    }

    async fn process_partition(&self, batch: &PartitionBatch, shutdown: &CancellationToken) -> anyhow::Result<()> {
        let (partition, lease) = (batch.partition, &batch.lease);
        let revoked = || (!lease.is_live()).then_some("revoked");
        let outcome = match revoked() {
            Some(cause) => Outcome::Abandoned(cause),
            None => self.processor.apply_with_retry(batch, revoked, shutdown).await.map_err(anyhow::Error::msg)?,
        };
        match outcome {
            Outcome::Done if lease.is_live() => {
                crate::failpoint::crash_point("archiver::before_store_offset");
                // librdkafka stores `offset + 1`: the group resumes after the last durable record.
                if let Err(e) = self.consumer.store_offset(&self.topic, partition, batch.last_offset) {
                    tracing::warn!(partition, error = %e, "storing an offset failed; the batch will be consumed again");
                }
            }
            Outcome::Done => emit(BatchAbandoned { partition, cause: "revoked", records: batch.len(), durable: true }),
            Outcome::Abandoned(cause) => {
                emit(BatchAbandoned { partition, cause, records: batch.len(), durable: false });
            }
        }
        Ok(())
    }
}

/// Pauses `partition` of `topic` and adds it to `paused` unless it is there already.
fn pause_newcomer(consumer: &ArchiverConsumer, paused: &mut TopicPartitionList, topic: &str, partition: i32) {
    if paused.find_partition(topic, partition).is_some() {
        return;
    }
    let mut one = TopicPartitionList::new();
    one.add_partition(topic, partition);
    match consumer.pause(&one) {
        Ok(()) => {
            paused.add_partition(topic, partition);
        }
        Err(e) => tracing::debug!(partition, error = %e, "pausing a partition assigned during a long batch"),
    }
}
