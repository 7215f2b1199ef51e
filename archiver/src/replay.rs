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
use indicatif::{ProgressBar, ProgressStyle};
use qim_runtime::kafka::consumer::Lease;
use qim_store::clock::{Clock, SystemClock};
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::{Offset, TopicPartitionList};
use tokio_util::sync::CancellationToken;

use crate::batch::partition_batches;
use crate::config::ArchiverConfig;
use crate::pipeline::{Outcome, Processor};
use crate::serve::{open_archive, open_hot_tier};
use crate::source::{replay_consumer, Incoming};

/// Longest wait for metadata, offsets, or the next record.
const KAFKA_TIMEOUT: Duration = Duration::from_secs(10);

/// Where a replay starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Start {
    /// Every partition from its first retained record.
    Earliest,
    /// Every partition from its first record at or after this time (ms since the epoch).
    Time(i64),
    /// Only the named partitions, from the named offsets.
    Offsets(Vec<(i32, i64)>),
}

/// The command line of `replay`: exactly one starting point.
#[derive(Clone, Debug, PartialEq, Eq, clap::Args)]
#[group(required = true, multiple = false)]
pub struct ReplayArgs {
    /// Every partition from its first retained record (the only value: `earliest`).
    #[arg(long, value_name = "earliest", value_parser = ["earliest"])]
    from: Option<String>,
    /// Every partition from its first record at or after this time: RFC 3339
    /// (`2026-11-30T12:00:00Z`, any offset) or milliseconds since the epoch.
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    from_time: Option<i64>,
    /// Only these partitions, from these offsets: `partition:offset[,partition:offset...]`.
    #[arg(long, value_name = "P:O,...", value_parser = parse_offsets)]
    offsets: Option<Offsets>,
}

/// `--offsets`: partition and offset pairs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Offsets(Vec<(i32, i64)>);

impl ReplayArgs {
    /// Where these arguments start the replay.
    pub fn start(&self) -> Start {
        match (&self.from, self.from_time, &self.offsets) {
            (_, Some(ms), _) => Start::Time(ms),
            (_, _, Some(Offsets(pairs))) => Start::Offsets(pairs.clone()),
            _ => Start::Earliest,
        }
    }
}

/// `p:o[,p:o...]`.
fn parse_offsets(text: &str) -> Result<Offsets, String> {
    text.split(',')
        .map(|pair| {
            let (p, o) = pair.split_once(':').ok_or_else(|| format!("{pair:?} is not partition:offset"))?;
            let p = p.trim().parse().map_err(|_| format!("{pair:?}: bad partition"))?;
            let o = o.trim().parse().map_err(|_| format!("{pair:?}: bad offset"))?;
            Ok((p, o))
        })
        .collect::<Result<Vec<_>, String>>()
        .map(Offsets)
}

/// Milliseconds since the epoch, or an RFC 3339 timestamp (`2026-11-30T12:00:00Z`, any offset,
/// any fraction of a second; read to the millisecond).
pub fn parse_time(text: &str) -> Result<i64, String> {
    if let Ok(ms) = text.parse::<i64>() {
        return Ok(ms);
    }
    text.parse::<jiff::Timestamp>().map(|t| t.as_millisecond()).map_err(|e| {
        format!("{text:?} is neither milliseconds nor an RFC 3339 timestamp such as 2026-11-30T12:00:00Z: {e}")
    })
}

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

/// Resolves `start` to `(partition, first, end)` triples with records to replay.
async fn plan(consumer: Arc<StreamConsumer>, topic: String, start: Start) -> anyhow::Result<Vec<(i32, i64, i64)>> {
    tokio::task::spawn_blocking(move || {
        let partitions =
            qim_runtime::kafka::partition_ids(consumer.client(), &topic, KAFKA_TIMEOUT).map_err(anyhow::Error::msg)?;
        let mut bounds = HashMap::new();
        for &p in &partitions {
            bounds.insert(p, consumer.fetch_watermarks(&topic, p, KAFKA_TIMEOUT).context("reading watermarks")?);
        }
        let firsts: Vec<(i32, i64)> = match start {
            Start::Earliest => partitions.iter().map(|p| (*p, bounds[p].0)).collect(),
            Start::Offsets(list) => {
                for (p, _) in &list {
                    if !bounds.contains_key(p) {
                        bail!("topic {topic} has no partition {p}");
                    }
                }
                list
            }
            Start::Time(ms) => {
                let mut query = TopicPartitionList::new();
                for p in &partitions {
                    query.add_partition_offset(&topic, *p, Offset::Offset(ms))?;
                }
                let found = consumer.offsets_for_times(query, KAFKA_TIMEOUT).context("finding offsets by time")?;
                found
                    .elements()
                    .iter()
                    .map(|e| {
                        let end = bounds[&e.partition()].1;
                        (e.partition(), if let Offset::Offset(o) = e.offset() { o } else { end })
                    })
                    .collect()
            }
        };
        Ok(firsts
            .into_iter()
            .map(|(p, first)| {
                let (low, high) = bounds[&p];
                (p, first.clamp(low, high), high)
            })
            .filter(|(_, first, end)| first < end)
            .collect())
    })
    .await?
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
    let plan = plan(consumer.clone(), config.messages_topic.clone(), start).await?;
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
    let bar = ProgressBar::new(0).with_style(
        ProgressStyle::with_template("replay {wide_bar} {pos}/{len} records ({percent}%), {per_sec}, eta {eta}")
            .map_err(anyhow::Error::msg)?,
    );
    let summary = replay(&config, start, &shutdown, |done, total| {
        bar.set_length(total);
        bar.set_position(done);
    })
    .await;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// `replay`'s arguments as the binary parses them.
    #[derive(clap::Parser)]
    struct Replay {
        #[command(flatten)]
        args: ReplayArgs,
    }

    fn start(line: &str) -> Result<Start, clap::Error> {
        use clap::Parser as _;
        Replay::try_parse_from(std::iter::once("replay").chain(line.split(' '))).map(|r| r.args.start())
    }

    #[test]
    fn starts_parse() {
        assert_eq!(start("--from earliest").unwrap(), Start::Earliest);
        assert_eq!(start("--from-time 1700000000000").unwrap(), Start::Time(1_700_000_000_000));
        assert_eq!(start("--from-time 2023-11-14T22:13:20Z").unwrap(), Start::Time(1_700_000_000_000));
        assert_eq!(start("--offsets 0:5,2:0").unwrap(), Start::Offsets(vec![(0, 5), (2, 0)]));
        assert!(start("--offsets 0-5").is_err());
        assert!(start("--from latest").is_err());
        assert!(start("--from earliest --offsets 0:5").is_err(), "one starting point only");
        assert!(start("").is_err(), "a starting point is required");
    }

    #[test]
    fn times_parse_as_utc() {
        assert_eq!(parse_time("1970-01-01T00:00:00Z"), Ok(0));
        assert_eq!(parse_time("2023-11-14T22:13:20Z"), Ok(1_700_000_000_000));
        assert_eq!(parse_time("2000-02-29T12:00:00.5Z"), Ok(951_825_600_500));
        assert_eq!(parse_time("2023-11-15T00:13:20+02:00"), Ok(1_700_000_000_000));
        assert!(parse_time("2023-13-01T00:00:00Z").is_err());
        assert!(parse_time("yesterday").is_err());
        assert!(parse_time("2023-11-14T22:13:20").is_err(), "a time without an offset is ambiguous");
    }
}
