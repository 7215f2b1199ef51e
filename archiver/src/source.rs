//! The Kafka side of the consumer: configuration, owned copies of records, and what rebalances
//! did.
//!
//! Offsets: `enable.auto.offset.store=false`, so nothing counts as consumed until the archiver
//! calls `store_offset` after the record's effect is durable; librdkafka then commits the
//! stored offsets every second, and synchronously when partitions are revoked. A crash between
//! the write and the commit re-delivers records whose rows already exist: the rewrite stores the
//! same values.
//!
//! Rebalance callbacks run inside `recv()` on the archiver's own task, never during a write.
//! Each revocation bumps the partition's epoch; records carry the epoch they were received in,
//! and a record (or a whole partition batch) from an older epoch is dropped before its offset
//! could be stored: the partition's next owner reads it again from the committed offset.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use metrics::gauge;
use rdkafka::client::ClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance, StreamConsumer};
use rdkafka::error::{KafkaError, KafkaResult, RDKafkaErrorCode};
use rdkafka::message::{BorrowedMessage, Headers, Message};
use rdkafka::statistics::Statistics;

use crate::metrics::CONSUMER_LAG;

/// How often librdkafka reports statistics (consumer lag).
const STATS_INTERVAL: Duration = Duration::from_secs(5);

/// One record as received, detached from the consumer.
#[derive(Clone, Debug)]
pub struct Incoming {
    /// Its partition.
    pub partition: i32,
    /// Its offset.
    pub offset: i64,
    /// The partition's epoch when it was received.
    pub epoch: u64,
    /// The key, if any.
    pub key: Option<Vec<u8>>,
    /// The value, if any.
    pub value: Option<Vec<u8>>,
    /// The headers in order.
    pub headers: Vec<(String, Option<Vec<u8>>)>,
    /// The record's timestamp (ms since the epoch), if it has one.
    pub timestamp_ms: Option<i64>,
}

impl Incoming {
    /// Copies `message`, received while its partition was at `epoch`.
    pub fn from_message(message: &BorrowedMessage<'_>, epoch: u64) -> Self {
        let headers = message
            .headers()
            .map(|h| h.iter().map(|x| (x.key.to_owned(), x.value.map(<[u8]>::to_vec))).collect())
            .unwrap_or_default();
        Self {
            partition: message.partition(),
            offset: message.offset(),
            epoch,
            key: message.key().map(<[u8]>::to_vec),
            value: message.payload().map(<[u8]>::to_vec),
            headers,
            timestamp_ms: message.timestamp().to_millis(),
        }
    }

    /// The first header called `name`, if it has a value.
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers.iter().find(|(k, _)| k == name).and_then(|(_, v)| v.as_deref())
    }
}

/// Partition epochs and assignment, shared between the rebalance callbacks and the loop.
#[derive(Debug, Default)]
pub struct Rebalances {
    inner: Mutex<RebalanceState>,
}

#[derive(Debug, Default)]
struct RebalanceState {
    /// Bumped at every revocation of the partition.
    epochs: HashMap<i32, u64>,
    /// Partitions currently assigned.
    assigned: Vec<i32>,
    /// Revocations seen, for logs and tests.
    revocations: u64,
}

impl Rebalances {
    fn lock(&self) -> std::sync::MutexGuard<'_, RebalanceState> {
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The partition's current epoch.
    pub fn epoch(&self, partition: i32) -> u64 {
        self.lock().epochs.get(&partition).copied().unwrap_or(0)
    }

    /// Whether the partition is still assigned in the same epoch.
    pub fn owns(&self, partition: i32, epoch: u64) -> bool {
        let state = self.lock();
        state.assigned.contains(&partition) && state.epochs.get(&partition).copied().unwrap_or(0) == epoch
    }

    /// Records an assignment.
    pub fn assigned(&self, partitions: &[i32]) {
        let mut state = self.lock();
        for p in partitions {
            if !state.assigned.contains(p) {
                state.assigned.push(*p);
            }
        }
    }

    /// Records a revocation: the partitions' in-flight work must not store offsets.
    pub fn revoked(&self, partitions: &[i32]) {
        let mut state = self.lock();
        state.revocations += 1;
        for p in partitions {
            *state.epochs.entry(*p).or_default() += 1;
        }
        state.assigned.retain(|p| !partitions.contains(p));
    }

    /// The partitions currently assigned.
    pub fn assignment(&self) -> Vec<i32> {
        self.lock().assigned.clone()
    }

    /// How many revocations happened.
    pub fn revocations(&self) -> u64 {
        self.lock().revocations
    }
}

/// The consumer's context: rebalance bookkeeping and lag metrics.
pub struct ArchiverContext {
    topic: String,
    rebalances: Arc<Rebalances>,
}

impl ArchiverContext {
    /// A context for `topic`, recording into `rebalances`.
    pub fn new(topic: &str, rebalances: Arc<Rebalances>) -> Self {
        Self { topic: topic.to_owned(), rebalances }
    }
}

fn partitions_of(topic: &str, list: &rdkafka::TopicPartitionList) -> Vec<i32> {
    list.elements().iter().filter(|e| e.topic() == topic).map(|e| e.partition()).collect()
}

impl ClientContext for ArchiverContext {
    fn stats(&self, statistics: Statistics) {
        let Some(topic) = statistics.topics.get(&self.topic) else { return };
        let assigned = self.rebalances.assignment();
        for (id, p) in &topic.partitions {
            // Internal partition -1 and partitions of other members report nothing useful.
            if assigned.contains(id) && p.consumer_lag_stored >= 0 {
                gauge!(CONSUMER_LAG, "partition" => id.to_string()).set(p.consumer_lag_stored as f64);
            }
        }
    }
}

impl ConsumerContext for ArchiverContext {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Revoke(list) => {
                let partitions = partitions_of(&self.topic, list);
                self.rebalances.revoked(&partitions);
                // Hand the next owner everything made durable so far.
                match consumer.commit_consumer_state(CommitMode::Sync) {
                    Ok(()) | Err(KafkaError::ConsumerCommit(RDKafkaErrorCode::NoOffset)) => {}
                    Err(e) => tracing::warn!(error = %e, "committing offsets before a revocation failed"),
                }
                tracing::info!(?partitions, "partitions revoked");
            }
            Rebalance::Assign(list) => {
                let partitions = partitions_of(&self.topic, list);
                self.rebalances.assigned(&partitions);
                tracing::info!(?partitions, "partitions assigned");
            }
            Rebalance::Error(e) => tracing::warn!(error = %e, "rebalance failed"),
        }
    }
}

/// The archiver's consumer type.
pub type ArchiverConsumer = StreamConsumer<ArchiverContext>;

/// Creates the group consumer (not yet subscribed): offsets stored by the archiver only,
/// committed automatically every second and at revocation; new groups start at the beginning.
pub fn group_consumer(brokers: &str, group: &str, context: ArchiverContext) -> KafkaResult<ArchiverConsumer> {
    ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", group)
        .set("enable.auto.commit", "true")
        .set("auto.commit.interval.ms", "1000")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "earliest")
        .set("enable.partition.eof", "false")
        // A crashed archiver's partitions move to the others within 10 s.
        .set("session.timeout.ms", "10000")
        .set("statistics.interval.ms", STATS_INTERVAL.as_millis().to_string())
        .create_with_context(context)
}

/// Creates a consumer for explicit assignment (replay): no group membership, no commits.
pub fn replay_consumer(brokers: &str, group: &str) -> KafkaResult<StreamConsumer> {
    ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("enable.partition.eof", "false")
        .create()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_revocation_ends_the_epoch_of_in_flight_work() {
        let r = Rebalances::default();
        r.assigned(&[0, 1]);
        let (e0, e1) = (r.epoch(0), r.epoch(1));
        assert!(r.owns(0, e0) && r.owns(1, e1));
        r.revoked(&[0, 1]);
        r.assigned(&[1]);
        assert!(!r.owns(0, e0), "revoked and not reassigned");
        assert!(!r.owns(1, e1), "reassigned, but work from before the revocation is stale");
        assert!(r.owns(1, r.epoch(1)));
        assert_eq!(r.revocations(), 1);
    }
}
