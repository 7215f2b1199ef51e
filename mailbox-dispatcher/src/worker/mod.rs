//! The shard workers: one consumer of the dispatch topic (group `<group>.shards`) feeding one
//! [`Pipeline`] per assigned partition (= mailbox shard).
//!
//! For each dispatch record: the canonical `MailboxSeq` comes from its first observed offset
//! (a duplicate at a later offset reuses that receipt); a record with the same id and a
//! different manifest is refused explicitly (`DispatchConflict`) and dead-lettered; the
//! recipients are split over 64 lanes by user hash and written in chunks of at most 256; each
//! `(shard, lane)` watermark advances page-wise and never past a record whose lane work is
//! incomplete. See [`pipeline`] for the scheduling, [`window`] for the bookkeeping and [`resync`]
//! for a store that lost state.
//!
//! The consumer hands records to the pipeline of their partition through a bounded channel; a
//! full channel stops polling (backpressure; librdkafka's `max.poll.interval.ms`, 5 min, is far
//! above a healthy pipeline's stall). Records of a partition this consumer does not own (any
//! more) are dropped: their new owner reads them from the committed offset.

pub mod begins;
pub mod lanes;
mod lost_state;
pub mod marks;
pub mod pipeline;
pub mod readable;
pub mod resync;
pub mod steps;
pub mod window;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use qim_store::mailbox::ShardId;
use qim_store::MailboxStore;
use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::message::Message;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use self::pipeline::Pipeline;
use self::steps::{Record, ShardContext};
use qim_runtime::kafka::consumer::{group_consumer_config, leave_group, GroupContext, Leases, LEAVE_TIMEOUT};

use crate::config::DispatcherConfig;
use crate::kafka::AckedProducer;

/// Records buffered between the consumer and one pipeline.
pub(super) const CHANNEL: usize = 256;
/// How long shutdown waits for in-flight steps before abandoning them (they are redone).
const DRAIN_TIMEOUT: Duration = Duration::from_secs(20);

/// A running pipeline and the partition token it was started under. Its task answers the
/// offset it sought the partition back to, if it ended because the store lost state.
struct Running {
    token: CancellationToken,
    input: mpsc::Sender<Record>,
    task: JoinHandle<Option<u64>>,
}

/// The shard workers of one process.
pub struct ShardWorkers {
    consumer: Arc<StreamConsumer<GroupContext>>,
    leases: Arc<Leases>,
    ctx: Arc<ShardContext>,
}

impl ShardWorkers {
    /// Joins the shard workers' consumer group (subscribed, not yet polling).
    pub fn new(
        config: &DispatcherConfig,
        store: Arc<dyn MailboxStore>,
        producer: AckedProducer,
    ) -> anyhow::Result<Self> {
        let kafka = &config.kafka;
        let context = GroupContext::new("shards", &kafka.dispatch_topic, crate::metrics::CONSUMER);
        let leases = context.leases();
        let consumer: StreamConsumer<GroupContext> = group_consumer_config(&kafka.brokers, &kafka.shard_group())
            .create_with_context(context)
            .context("creating the shard workers' consumer")?;
        consumer.subscribe(&[&kafka.dispatch_topic]).context("subscribing to the dispatch topic")?;
        let consumer = Arc::new(consumer);
        let ctx = Arc::new(ShardContext {
            store,
            producer,
            consumer: Arc::clone(&consumer),
            kafka: kafka.clone(),
            epoch: config.epoch,
            chunks_in_flight: config.chunks_in_flight,
            keep: config.keep_dispatches,
            advance_every: config.advance_every,
        });
        Ok(Self { consumer, leases, ctx })
    }

    /// Consumes until `shutdown`; then every pipeline finishes what it started (abandoned after
    /// [`DRAIN_TIMEOUT`]) and the stored offsets are committed.
    pub async fn run(self, shutdown: CancellationToken) -> anyhow::Result<()> {
        let mut running: HashMap<i32, Running> = HashMap::new();
        let mut stopped: Vec<JoinHandle<Option<u64>>> = Vec::new();
        loop {
            let received = tokio::select! {
                () = shutdown.cancelled() => break,
                received = self.consumer.recv() => received,
            };
            let m = match received {
                Ok(m) => m,
                Err(e) => {
                    tracing::warn!(error = %e, "shard consumer error");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let partition = m.partition();
            let mut record = Record {
                offset: u64::try_from(m.offset()).unwrap_or_default(),
                key: m.key().map(<[u8]>::to_vec),
                value: m.payload().map(<[u8]>::to_vec),
                headers: crate::kafka::original_headers(m.headers()),
            };
            drop(m);
            // A pipeline closes its input when it ends: revoked (the record is not ours), or to
            // seek its log back, after which the record is for the pipeline that follows it.
            while let Some(input) =
                self.pipeline_for(partition, record.offset, &mut running, &mut stopped, &shutdown).await
            {
                tokio::select! {
                    () = shutdown.cancelled() => break,
                    sent = input.send(record) => match sent {
                        Ok(()) => break,
                        Err(mpsc::error::SendError(back)) => record = back,
                    },
                }
            }
            if shutdown.is_cancelled() {
                break;
            }
        }
        tracing::info!(pipelines = running.len(), "shard workers draining");
        stopped.extend(running.into_values().map(|r| r.task));
        let leases = Arc::clone(&self.leases);
        let abandon = tokio::spawn(async move {
            tokio::time::sleep(DRAIN_TIMEOUT).await;
            tracing::warn!("shard drain timed out, abandoning in-flight steps (they are redone)");
            leases.release_all();
        });
        for task in stopped {
            if let Err(e) = task.await {
                if let Ok(panic) = e.try_into_panic() {
                    std::panic::resume_unwind(panic);
                }
            }
        }
        abandon.abort();
        self.leases.release_all();
        if let Err(e) = self.consumer.commit_consumer_state(CommitMode::Sync) {
            tracing::debug!(error = %e, "final shard commit (nothing stored?)");
        }
        leave_group(&self.consumer, LEAVE_TIMEOUT).await;
        tracing::info!("shard workers stopped");
        Ok(())
    }

    /// The input of the pipeline of `partition` (for a record at `offset`), started if needed;
    /// `None` when the partition is not (or no longer) ours. A pipeline that closed its input
    /// without being revoked ends by itself (it seeks its log back): it is waited for, and the
    /// one that follows starts where it sought.
    async fn pipeline_for(
        &self,
        partition: i32,
        offset: u64,
        running: &mut HashMap<i32, Running>,
        stopped: &mut Vec<JoinHandle<Option<u64>>>,
        shutdown: &CancellationToken,
    ) -> Option<mpsc::Sender<Record>> {
        let Some(token) = self.leases.get(partition).map(|lease| lease.token().clone()) else {
            tracing::debug!(partition, offset, "record of a partition not owned, dropped");
            return None;
        };
        // Pipelines of revoked partitions finish in the background; reap the finished ones.
        stopped.retain(|t| !t.is_finished());
        if let Some(r) = running.get(&partition) {
            if !r.token.is_cancelled() && !r.input.is_closed() {
                return Some(r.input.clone());
            }
        }
        let mut resume_at = None;
        if let Some(old) = running.remove(&partition) {
            if old.token.is_cancelled() {
                stopped.push(old.task);
            } else {
                // It ended by itself (or is about to: its seek may still run): it sought the
                // partition back because the store lost state.
                let ended = tokio::select! {
                    ended = old.task => ended,
                    () = shutdown.cancelled() => return None,
                };
                resume_at = match ended {
                    Ok(sought) => sought,
                    Err(e) => {
                        // A failed pipeline is replaced, reading on from the
                        // partition's position (the new one finds the store's state itself).
                        tracing::error!(partition, error = %e, "a shard pipeline failed; starting another");
                        None
                    }
                };
            }
        }
        let Ok(shard) = u16::try_from(partition).map(ShardId) else { return None };
        let (tx, rx) = mpsc::channel(CHANNEL);
        let (ctx, revoked, shutdown) = (Arc::clone(&self.ctx), token.clone(), shutdown.clone());
        let task = tokio::spawn(async move {
            // Revoked or shut down before the store answered: nothing was taken into work yet.
            let fence = tokio::select! {
                fence = resync::take_over(&ctx, shard, &revoked) => fence?,
                () = shutdown.cancelled() => return None,
            };
            Pipeline::new(ctx, fence, revoked, shutdown, resume_at).run(rx).await
        });
        tracing::info!(shard = shard.0, "shard pipeline started");
        running.insert(partition, Running { token, input: tx.clone(), task });
        Some(tx)
    }
}
