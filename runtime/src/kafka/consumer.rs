//! Group consumers, configured and rebalanced the same way in every service.
//!
//! Offsets: `enable.auto.offset.store=false`, so nothing counts as consumed until the service
//! stores a record's offset, after its effect is durable; librdkafka commits the stored offsets
//! every second, before a partition is given up and when the service commits at shutdown.
//! Assignment is `cooperative-sticky`: a rebalance moves only the partitions that change owner.
//!
//! Revocation has one design: each assignment of a partition is a [`Lease`]. Work takes the
//! lease of its partition when it receives a record and checks it (or waits on it) before every
//! step that would store an offset or start more work. The revoke callback, which librdkafka
//! runs inside `recv()` before the partition is handed over, ends the lease first and then
//! commits what was stored, so the next owner resumes after the last durable record and work
//! of the old lease starts nothing more. (A step that passed its check just before the
//! revocation may still store its offset; it is durable work, so the new owner only skips what
//! is done.) A later assignment of the same partition is a new lease; work of the old one stays
//! stale.
//!
//! Changing the assignment strategy of a running group is not possible in place: a group of
//! members that used the eager default must be stopped entirely before members with
//! `cooperative-sticky` join it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use metrics::{counter, gauge};
use rdkafka::client::ClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance, StreamConsumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::statistics::Statistics;
use rdkafka::TopicPartitionList;
use tokio_util::sync::CancellationToken;

/// How often librdkafka reports statistics (the consumer-lag gauge).
pub const STATS_INTERVAL: Duration = Duration::from_secs(5);

/// Every qim group consumer's settings: offsets stored by the service only and auto-committed
/// every second, new groups start at the beginning, cooperative-sticky assignment, a dead
/// member's partitions move within 10 s, statistics every [`STATS_INTERVAL`].
pub fn group_consumer_config(brokers: &str, group: &str) -> ClientConfig {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", brokers)
        .set("group.id", group)
        .set("enable.auto.commit", "true")
        .set("auto.commit.interval.ms", "1000")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "earliest")
        .set("enable.partition.eof", "false")
        .set("partition.assignment.strategy", "cooperative-sticky")
        .set("session.timeout.ms", "10000")
        .set("heartbeat.interval.ms", "2000")
        .set("statistics.interval.ms", STATS_INTERVAL.as_millis().to_string());
    config
}

/// How long a stopping consumer keeps serving its group after leaving it ([`leave_group`]).
pub const LEAVE_TIMEOUT: Duration = Duration::from_secs(5);

/// Polls a consumer leaving its group gets at least: a rebalance that began before the
/// unsubscribe may be served only then.
const LEAVE_POLLS: u32 = 3;

/// Leaves the group before the consumer is dropped: unsubscribes, then polls (dropping what it
/// receives: none of it is stored, so the next owner reads it) until nothing is assigned, at
/// least [`LEAVE_POLLS`] times, for at most `within`. The revocation this serves commits what
/// was stored, as every revocation does.
///
/// A consumer dropped while an incremental (cooperative) assignment is in progress aborts the
/// process inside librdkafka (`rd_kafka_cgrp_terminated: assert:
/// !rd_kafka_assignment_in_progress`, librdkafka issue 4792). A stopping service no longer polls,
/// so a rebalance that began while it drained would still be in progress when it dropped the
/// consumer.
pub async fn leave_group(consumer: &StreamConsumer<GroupContext>, within: Duration) {
    consumer.unsubscribe();
    let deadline = tokio::time::Instant::now() + within;
    let mut polls = 0;
    while tokio::time::Instant::now() < deadline {
        let held = consumer.assignment().map(|a| a.count()).unwrap_or(0);
        if held == 0 && polls >= LEAVE_POLLS {
            return;
        }
        let _ = tokio::time::timeout(Duration::from_millis(100), consumer.recv()).await;
        polls += 1;
    }
    tracing::warn!("the consumer still held partitions when it stopped waiting to leave its group");
}

/// One assignment of one partition to this consumer: live from the assignment until the
/// partition is revoked (or the consumer releases everything at shutdown).
#[derive(Clone, Debug)]
pub struct Lease {
    partition: i32,
    generation: u64,
    token: CancellationToken,
}

impl Lease {
    /// A lease that is already over: for a record of a partition this consumer does not hold.
    pub fn ended(partition: i32) -> Self {
        let token = CancellationToken::new();
        token.cancel();
        Self { partition, generation: 0, token }
    }

    /// A lease that never ends: for a consumer with an explicit assignment (replay), which no
    /// rebalance takes away.
    pub fn fixed(partition: i32) -> Self {
        Self { partition, generation: 0, token: CancellationToken::new() }
    }

    /// The partition.
    pub fn partition(&self) -> i32 {
        self.partition
    }

    /// Whether the partition is still assigned under this lease.
    pub fn is_live(&self) -> bool {
        !self.token.is_cancelled()
    }

    /// The token cancelled when the lease ends (to stop or interrupt the lease's work).
    pub fn token(&self) -> &CancellationToken {
        &self.token
    }

    /// Whether both are the same assignment of the same partition.
    pub fn same_as(&self, other: &Lease) -> bool {
        self.partition == other.partition && self.generation == other.generation
    }
}

/// The leases a consumer holds now, kept by its [`GroupContext`].
#[derive(Debug, Default)]
pub struct Leases {
    held: Mutex<HashMap<i32, Lease>>,
    generations: AtomicU64,
}

impl Leases {
    fn lock(&self) -> MutexGuard<'_, HashMap<i32, Lease>> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The live lease of `partition`, or `None` when the partition is not assigned.
    pub fn get(&self, partition: i32) -> Option<Lease> {
        self.lock().get(&partition).cloned()
    }

    /// The live lease of `partition`, or an [ended](Lease::ended) one.
    pub fn get_or_ended(&self, partition: i32) -> Lease {
        self.get(partition).unwrap_or_else(|| Lease::ended(partition))
    }

    /// The partitions assigned now, sorted.
    pub fn partitions(&self) -> Vec<i32> {
        let mut partitions: Vec<i32> = self.lock().keys().copied().collect();
        partitions.sort_unstable();
        partitions
    }

    /// Ends every lease (shutdown: nothing more is stored or started).
    pub fn release_all(&self) {
        for (_, lease) in self.lock().drain() {
            lease.token.cancel();
        }
    }

    /// Starts a lease for each partition not held yet.
    pub fn assign(&self, partitions: &[i32]) {
        let mut held = self.lock();
        for &partition in partitions {
            held.entry(partition).or_insert_with(|| Lease {
                partition,
                generation: self.generations.fetch_add(1, Ordering::Relaxed) + 1,
                token: CancellationToken::new(),
            });
        }
    }

    /// Ends the leases of `partitions`.
    pub fn revoke(&self, partitions: &[i32]) {
        let mut held = self.lock();
        for partition in partitions {
            if let Some(lease) = held.remove(partition) {
                lease.token.cancel();
            }
        }
    }
}

/// The metric names a consumer reports under (each service names its own, in its metrics
/// module).
#[derive(Clone, Copy, Debug)]
pub struct ConsumerMetrics {
    /// Gauge: records not yet consumed, by `consumer` and `partition` (held partitions only).
    pub lag: &'static str,
    /// Counter: rebalance callbacks, by `consumer` and `event` (`assign`, `revoke`, `error`).
    pub rebalances: &'static str,
}

/// A group consumer's context: keeps its [`Leases`], commits before a revocation, and reports
/// lag and rebalances.
pub struct GroupContext {
    consumer: &'static str,
    topic: String,
    leases: Arc<Leases>,
    metrics: ConsumerMetrics,
}

impl GroupContext {
    /// A context for the consumer called `consumer` (a fixed name for logs and metrics) of
    /// `topic`.
    pub fn new(consumer: &'static str, topic: &str, metrics: ConsumerMetrics) -> Self {
        Self { consumer, topic: topic.to_owned(), leases: Arc::default(), metrics }
    }

    /// The leases this consumer holds (shared with the service's loop).
    pub fn leases(&self) -> Arc<Leases> {
        Arc::clone(&self.leases)
    }

    fn partitions(&self, list: &TopicPartitionList) -> Vec<i32> {
        list.elements().iter().filter(|e| e.topic() == self.topic).map(|e| e.partition()).collect()
    }

    fn count(&self, event: &'static str) {
        counter!(self.metrics.rebalances, "consumer" => self.consumer, "event" => event).increment(1);
    }
}

impl ClientContext for GroupContext {
    fn stats(&self, statistics: Statistics) {
        let Some(topic) = statistics.topics.get(&self.topic) else { return };
        let held = self.leases.partitions();
        for (id, p) in &topic.partitions {
            // Internal partition -1 and partitions of other members report nothing useful.
            if held.contains(id) && p.consumer_lag_stored >= 0 {
                gauge!(self.metrics.lag, "consumer" => self.consumer, "partition" => id.to_string())
                    .set(p.consumer_lag_stored as f64);
            }
        }
    }
}

impl ConsumerContext for GroupContext {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Revoke(list) => {
                let partitions = self.partitions(list);
                self.leases.revoke(&partitions);
                for partition in &partitions {
                    // Its lag is its next owner's to report now.
                    gauge!(self.metrics.lag, "consumer" => self.consumer, "partition" => partition.to_string())
                        .set(0.0);
                }
                // Hand the next owner everything made durable so far (a lost assignment can
                // commit nothing: the group already moved on).
                if !consumer.assignment_lost() {
                    match consumer.commit_consumer_state(CommitMode::Sync) {
                        Ok(())
                        | Err(KafkaError::ConsumerCommit(
                            RDKafkaErrorCode::NoOffset | RDKafkaErrorCode::AssignmentLost,
                        )) => {}
                        Err(e) => {
                            tracing::warn!(consumer = self.consumer, error = %e, "committing offsets before a revocation failed");
                        }
                    }
                }
                self.count("revoke");
                tracing::info!(consumer = self.consumer, ?partitions, "partitions revoked, their work stops");
            }
            Rebalance::Assign(_) => {}
            Rebalance::Error(e) => {
                self.count("error");
                tracing::warn!(consumer = self.consumer, error = %e, "rebalance failed");
            }
        }
    }

    fn post_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(list) = rebalance {
            let partitions = self.partitions(list);
            self.leases.assign(&partitions);
            self.count("assign");
            tracing::info!(consumer = self.consumer, ?partitions, "partitions assigned");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_revocation_ends_the_lease_and_a_new_assignment_is_another() {
        let leases = Leases::default();
        leases.assign(&[0, 1]);
        let (l0, l1) = (leases.get(0).unwrap(), leases.get(1).unwrap());
        assert!(l0.is_live() && l1.is_live());
        leases.assign(&[1]);
        assert!(leases.get(1).unwrap().same_as(&l1), "assigning a held partition keeps its lease");
        leases.revoke(&[0, 1]);
        leases.assign(&[1]);
        assert!(!l0.is_live() && leases.get(0).is_none(), "revoked and not reassigned");
        assert!(!l1.is_live(), "reassigned, but work from before the revocation is stale");
        let again = leases.get(1).unwrap();
        assert!(again.is_live() && !again.same_as(&l1));
        assert_eq!(leases.partitions(), vec![1]);
        leases.release_all();
        assert!(!again.is_live() && leases.partitions().is_empty());
    }

    #[test]
    fn a_record_of_a_partition_not_held_gets_an_ended_lease() {
        let leases = Leases::default();
        let lease = leases.get_or_ended(3);
        assert!(!lease.is_live());
        assert_eq!(lease.partition(), 3);
    }
}
