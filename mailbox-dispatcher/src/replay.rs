//! `qim-mailbox-dispatcher replay`: rebuilds mailboxes from the topics, then exits.
//!
//! ```text
//! qim-mailbox-dispatcher replay --from earliest
//! qim-mailbox-dispatcher replay --from-time 2026-11-30T12:00:00Z   (or milliseconds since the epoch)
//! qim-mailbox-dispatcher replay --offsets 0:1200,3:0                (messages-topic partitions)
//! ```
//!
//! Every dispatcher of `QIM_DISPATCHER_GROUP` must be stopped: the replay moves the router's
//! group (`<group>.router`, on the messages topic) and the shard workers' group (`<group>.shards`,
//! on the dispatch topic) back to the starting point (it refuses, naming the group, while either
//! has a live member), then runs the dispatcher as `run` does until both groups have committed the
//! ends their topics had when the replay began, and stops it as SIGTERM would. The progress bar
//! counts the records both groups have committed; the final line gives the totals.
//!
//! - `--from earliest`: both groups from the first retained record of every partition.
//! - `--from-time T`: both groups from the first record at or after `T` of every partition.
//! - `--offsets p:o,...`: the router's group only, on those messages-topic partitions; the shard
//!   workers' group goes on from where it is.
//!
//! Either way the shard workers then go through the dispatch records the router produced during
//! the replay (up to the dispatch topic's end once the router is done): each is dispatched, or
//! absorbed as a duplicate when its dispatch is known.
//!
//! Idempotent: a dispatch's entries sit at its first observation's seq (`epoch:offset+1` in the
//! dispatch topic), and the router produces the same dispatch (same id, same recipients while the
//! membership is the same) for a message again, so a mailbox store that kept its state absorbs
//! the replay as duplicates, and one that lost it gets identical entries at identical seqs from
//! the dispatch topic read again from its first records.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use qim_runtime::kafka::replay::{
    committed_offsets, plan, progress_bar, progress_reporter, reset_group, ReplayArgs, Start,
};
use rdkafka::consumer::StreamConsumer;
use rdkafka::ClientConfig;
use tokio_util::sync::CancellationToken;

use crate::config::DispatcherConfig;

/// Longest wait for metadata and offsets.
const KAFKA_TIMEOUT: Duration = Duration::from_secs(10);
/// How often the groups' committed offsets are read for the progress bar.
const POLL: Duration = Duration::from_millis(500);

/// What a replay did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// Messages-topic records the router went through again.
    pub messages: u64,
    /// Dispatch-topic records the shard workers went through again.
    pub dispatches: u64,
}

/// One group's part of the replay: its topic and `(partition, first, end)` ranges.
struct Stage {
    group: String,
    topic: String,
    ranges: Vec<(i32, i64, i64)>,
}

impl Stage {
    fn total(&self) -> u64 {
        self.ranges.iter().map(|(_, first, end)| (end - first) as u64).sum()
    }

    /// Records of the ranges the group has committed past.
    async fn done(&self, brokers: &str) -> anyhow::Result<u64> {
        let partitions = self.ranges.iter().map(|(p, _, _)| *p).collect();
        let committed = committed_offsets(brokers, &self.group, &self.topic, partitions, KAFKA_TIMEOUT).await?;
        Ok(self
            .ranges
            .iter()
            .map(|(p, first, end)| {
                let at = committed.iter().find(|(q, _)| q == p).and_then(|(_, o)| *o).unwrap_or(*first);
                (at.clamp(*first, *end) - first) as u64
            })
            .sum())
    }
}

/// Rewinds the dispatcher's groups to `start`, runs the dispatcher until both passed the ends
/// the topics had, and stops it; `progress(done, total)` is called as it goes.
pub async fn replay(
    config: DispatcherConfig,
    start: Start,
    shutdown: &CancellationToken,
    mut progress: impl FnMut(u64, u64),
) -> anyhow::Result<Summary> {
    let kafka = config.kafka.clone();
    let planner: Arc<StreamConsumer> = Arc::new(
        ClientConfig::new()
            .set("bootstrap.servers", &kafka.brokers)
            .set("group.id", format!("{}-replay-planner", kafka.group))
            .create()
            .context("creating the replay's Kafka client")?,
    );
    let router = Stage {
        group: kafka.router_group(),
        topic: kafka.messages_topic.clone(),
        ranges: plan(Arc::clone(&planner), kafka.messages_topic.clone(), start.clone(), KAFKA_TIMEOUT).await?,
    };
    let shard_ranges = match start {
        Start::Offsets(_) => Vec::new(),
        start => plan(Arc::clone(&planner), kafka.dispatch_topic.clone(), start, KAFKA_TIMEOUT).await?,
    };
    let shards = Stage { group: kafka.shard_group(), topic: kafka.dispatch_topic.clone(), ranges: shard_ranges };
    let total = router.total() + shards.total();
    let summary = Summary { messages: router.total(), dispatches: shards.total() };
    progress(0, total);
    if total == 0 {
        return Ok(summary);
    }
    for stage in [&router, &shards] {
        let firsts = stage.ranges.iter().map(|(p, first, _)| (*p, *first)).collect();
        reset_group(&kafka.brokers, &stage.group, &stage.topic, firsts, KAFKA_TIMEOUT).await?;
    }
    let stop = shutdown.child_token();
    let running = crate::serve::start(config, stop.clone()).await.context("starting the dispatcher")?;
    let outcome = async {
        wait_for(&[&router, &shards], &kafka.brokers, shutdown, &mut progress).await?;
        // The router produced its dispatch records again while it ran: the shard workers go
        // through those too, up to where the dispatch topic ends now.
        let drain = Stage {
            group: kafka.shard_group(),
            topic: kafka.dispatch_topic.clone(),
            ranges: plan(planner, kafka.dispatch_topic.clone(), Start::Earliest, KAFKA_TIMEOUT).await?,
        };
        wait_for(&[&drain], &kafka.brokers, shutdown, &mut |_, _| {}).await
    }
    .await;
    stop.cancel();
    let stopped = running.wait().await;
    outcome?;
    stopped.context("the dispatcher failed during the replay")?;
    Ok(summary)
}

/// Waits until every stage's group has committed past its ranges, reporting progress.
async fn wait_for(
    stages: &[&Stage],
    brokers: &str,
    shutdown: &CancellationToken,
    progress: &mut impl FnMut(u64, u64),
) -> anyhow::Result<()> {
    let total: u64 = stages.iter().map(|s| s.total()).sum();
    loop {
        let mut done = 0;
        for stage in stages {
            done += stage.done(brokers).await?;
        }
        progress(done, total);
        if done >= total {
            return Ok(());
        }
        tokio::select! {
            () = shutdown.cancelled() => bail!("replay interrupted after {done} of {total} records"),
            () = tokio::time::sleep(POLL) => {}
        }
    }
}

/// The `replay` subcommand: logs → replay with a progress bar → final count.
pub async fn main(args: &ReplayArgs, config: DispatcherConfig) -> anyhow::Result<()> {
    qim_runtime::telemetry::init_logs(&config.log).map_err(anyhow::Error::msg)?;
    let shutdown = CancellationToken::new();
    qim_runtime::shutdown::cancel_on_signal(shutdown.clone());
    let began = Instant::now();
    let bar = progress_bar();
    let summary = replay(config, args.start(), &shutdown, progress_reporter(&bar)).await;
    bar.finish_and_clear();
    let summary = summary?;
    println!(
        "replayed {} messages (router) and {} dispatch records (shard workers) in {:.1} s",
        summary.messages,
        summary.dispatches,
        began.elapsed().as_secs_f64()
    );
    Ok(())
}
