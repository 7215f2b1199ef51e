//! `qim-archiver replay`: re-applies `qim.messages.v1` to the archive from chosen positions up
//! to the end the topic had when the replay started, with a progress line and a final count.
//!
//! ```text
//! qim-archiver replay --from earliest
//! qim-archiver replay --from-time 2026-11-30T12:00:00Z      (or milliseconds since the epoch)
//! qim-archiver replay --offsets 0:1200,3:0                   (partition:offset; others skipped)
//! ```
//!
//! A replay writes exactly what the consumer writes (same rows, same values; TTLs computed again
//! from each record's own expiry, so they still end at the original moment and an expired record
//! gets 1 s, never a new life), and raises archived watermarks the same way. It also raises each
//! conversation's durable seq high-water mark to its highest replayed seq, so a keyspace rebuilt
//! from the topic gets back the marks the writer leases seqs from (they have no TTL; without a
//! replay a lost keyspace would lose them). It uses its own
//! assignment: no consumer group, no offset commits, so the running archivers are undisturbed.
//! Poison records are counted and logged, not dead-lettered again (the consumer did that when
//! it first met them). Transient failures retry with backoff; Ctrl-C stops with the count so far.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use qim_runtime::kafka::consumer::Lease;
use qim_runtime::kafka::replay::{plan, progress_bar, progress_reporter, ReplayArgs, Start};
use qim_store::clock::{Clock, SystemClock};
use rdkafka::consumer::Consumer;
use rdkafka::{Offset, TopicPartitionList};
use tokio_util::sync::CancellationToken;

use crate::batch::partition_batches;
use crate::config::ArchiverConfig;
use crate::pipeline::{Outcome, Processor};
use crate::serve::{open_archive, open_hot_tier};
use crate::source::{replay_consumer, Incoming};

/// Longest wait for metadata, offsets, or the next record.
const KAFKA_TIMEOUT: Duration = Duration::from_secs(10);

/// What a replay did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// Records read.
    pub records: u64,
    /// Records archived.
    pub archived: u64,
    /// Poison records met (not dead-lettered again).
    pub poison: u64,
    /// Partitions replayed.
    pub partitions: usize,
}

/// Replays `start` into the archive of `config`; `progress(done, total)` is called as it goes.
pub async fn replay(
    config: &ArchiverConfig,
    start: Start,
    shutdown: &CancellationToken,
    mut progress: impl FnMut(u64, u64),
) -> anyhow::Result<Summary> {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let archive = open_archive(config, clock.clone()).await?;
    let watermarks = open_hot_tier(config, &archive, clock).await?.map(|(_, w)| w);
    let processor = Processor::new(archive, None, watermarks, config.batch.write_concurrency).raising_high_water();
    let group = format!("{}-replay", config.group);
    let consumer = Arc::new(replay_consumer(&config.kafka_brokers, &group).context("creating the replay consumer")?);
    let plan = plan(consumer.clone(), config.messages_topic.clone(), start, KAFKA_TIMEOUT).await?;
    let total: u64 = plan.iter().map(|(_, first, end)| (end - first) as u64).sum();
    let mut summary = Summary { partitions: plan.len(), ..Summary::default() };
    let mut ends: HashMap<i32, i64> = plan.iter().map(|(p, _, end)| (*p, *end)).collect();
    if plan.is_empty() {
        progress(0, 0);
        return Ok(summary);
    }
    let mut assignment = TopicPartitionList::new();
    for (p, first, _) in &plan {
        assignment.add_partition_offset(&config.messages_topic, *p, Offset::Offset(*first))?;
    }
    consumer.assign(&assignment)?;
    while !ends.is_empty() {
        let mut batch = Vec::new();
        while batch.len() < config.batch.max_records && !ends.is_empty() {
            let wait = if batch.is_empty() { KAFKA_TIMEOUT } else { config.batch.max_wait };
            let received = tokio::select! {
                () = shutdown.cancelled() => bail!("replay interrupted after {} of {total} records", summary.records),
                r = tokio::time::timeout(wait, consumer.recv()) => r,
            };
            let message = match received {
                Ok(m) => m.context("reading the topic")?,
                Err(_) if batch.is_empty() => bail!("no record within {KAFKA_TIMEOUT:?} while replaying"),
                Err(_) => break,
            };
            let incoming = Incoming::from_message(&message, Lease::fixed(rdkafka::Message::partition(&message)));
            let Some(end) = ends.get(&incoming.partition).copied() else { continue };
            if incoming.offset + 1 >= end {
                ends.remove(&incoming.partition);
            }
            if incoming.offset < end {
                batch.push(incoming);
            }
        }
        for b in partition_batches(batch, &config.policy) {
            match processor.apply_with_retry(&b, || None, shutdown).await.map_err(anyhow::Error::msg)? {
                Outcome::Done => {}
                Outcome::Abandoned(_) => bail!("replay interrupted after {} of {total} records", summary.records),
            }
            summary.records += b.len() as u64;
            summary.archived += b.valid.len() as u64;
            summary.poison += b.poison.len() as u64;
            progress(summary.records, total);
        }
    }
    Ok(summary)
}

/// The `replay` subcommand: logs → replay with a progress line → final count.
pub async fn main(args: &ReplayArgs, config: ArchiverConfig) -> anyhow::Result<()> {
    let start = args.start();
    qim_runtime::telemetry::init_logs(&config.log).map_err(anyhow::Error::msg)?;
    let shutdown = CancellationToken::new();
    qim_runtime::shutdown::cancel_on_signal(shutdown.clone());
    let began = Instant::now();
    let bar = progress_bar();
    let summary = replay(&config, start, &shutdown, progress_reporter(&bar)).await;
    bar.finish_and_clear();
    let summary = summary?;
    println!(
        "replayed {} records from {} partitions in {:.1} s: {} archived, {} poison (logged, not dead-lettered again)",
        summary.records,
        summary.partitions,
        began.elapsed().as_secs_f64(),
        summary.archived,
        summary.poison
    );
    Ok(())
}
