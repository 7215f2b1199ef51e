//! `qim-archiver run`: startup in order (archive connect/prepare → readiness → hot tier →
//! Kafka topics → consumer, each step retried while its server is unavailable, until the
//! start-up deadline), the background loops, the operational HTTP endpoints, and
//! graceful shutdown.
//!
//! Shutdown (SIGTERM/SIGINT or the token): the consumer stops receiving, the batch being written
//! finishes (or, if it is waiting to retry, is abandoned without storing its offset), stored
//! offsets are committed, the loops stop between passes, the dead-letter producer is flushed,
//! and [`RunningArchiver::wait`] returns. A fatal error stops everything the same way and is
//! returned.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use qim_runtime::http::{operational_routes, ReadinessCheck};
use qim_runtime::kafka::consumer::GroupContext;
use qim_runtime::startup::{open_scylla_messages, Startup, Unreachable};
use qim_runtime::telemetry;
use qim_store::clock::{Clock, SystemClock};
use qim_store::redis::{ArchiveGaps, RedisMessageStore};
use qim_store::scylla::ScyllaMessageStore;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::config::ArchiverConfig;
use crate::consumer::ConsumerLoop;
use crate::dlq::DeadLetters;
use crate::hot_tier;
use crate::pipeline::{Health, Processor};
use crate::source::group_consumer;
use crate::watermark::Watermarks;

/// Longest wait for topic metadata at startup.
const KAFKA_CHECK_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest wait for dead-letter deliveries at shutdown.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(10);

/// A started archiver.
pub struct RunningArchiver {
    /// The address of the operational endpoints (useful with port 0).
    pub addr: SocketAddr,
    task: JoinHandle<anyhow::Result<()>>,
}

impl RunningArchiver {
    /// Waits until the archiver stopped (shutdown, or a fatal error, which is returned).
    pub async fn wait(self) -> anyhow::Result<()> {
        self.task.await.context("the archiver task panicked")?
    }
}

/// The archive, connected and prepared, with its schema checked.
pub async fn open_archive(config: &ArchiverConfig, clock: Arc<dyn Clock>) -> anyhow::Result<ScyllaMessageStore> {
    open_scylla_messages(&config.scylla, config.policy, clock, "qim-archiver migrate").await
}

/// The hot tier (trim owner) and the watermarks over it and `archive`, in Redis mode.
pub async fn open_hot_tier(
    config: &ArchiverConfig,
    archive: &ScyllaMessageStore,
    clock: Arc<dyn Clock>,
) -> anyhow::Result<Option<(RedisMessageStore, Arc<Watermarks>)>> {
    let Some(redis) = &config.hot_tier else {
        tracing::info!("scylla backend: no hot tier, so no archived watermarks and no trim");
        return Ok(None);
    };
    let hot = RedisMessageStore::open(redis, config.policy, clock.clone())
        .await
        .with_context(|| format!("opening the redis hot tier at {}", redis.url))?
        .with_trim_window(config.hot_window_days);
    let gaps = ArchiveGaps::open(redis).await.context("opening the archive gap schedule")?;
    let watermarks = Watermarks::new(hot.clone(), archive.clone(), gaps, config.hole_grace, clock);
    Ok(Some((hot, Arc::new(watermarks))))
}

/// Starts the archiver; returns once it consumes. Any startup failure is an error naming the
/// step.
pub async fn start(config: ArchiverConfig, shutdown: CancellationToken) -> anyhow::Result<RunningArchiver> {
    let metrics = telemetry::install_metrics();
    crate::metrics::describe();
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let startup = Startup::new(config.startup_timeout);
    let archive = startup.step("connecting to the scylla archive", || open_archive(&config, clock.clone())).await?;
    let hot_tier =
        startup.step("connecting to the redis hot tier", || open_hot_tier(&config, &archive, clock.clone())).await?;
    let dead_letters = Arc::new(
        DeadLetters::new(&config.kafka_brokers, &config.dlq_topic, &config.messages_topic)
            .map_err(anyhow::Error::msg)?,
    );
    for topic in [&config.messages_topic, &config.dlq_topic] {
        startup
            .step(&format!("checking kafka topic {topic}"), || async {
                dead_letters
                    .check_topic(topic, KAFKA_CHECK_TIMEOUT)
                    .await
                    .map_err(|e| anyhow::Error::new(Unreachable(e)))
                    .with_context(|| format!("checking kafka at {}", config.kafka_brokers))
            })
            .await?;
    }
    let context = GroupContext::new("archiver", &config.messages_topic, crate::metrics::CONSUMER);
    let leases = context.leases();
    let consumer =
        Arc::new(group_consumer(&config.kafka_brokers, &config.group, context).context("creating the kafka consumer")?);
    let watermarks = hot_tier.as_ref().map(|(_, w)| w.clone());
    let processor = Arc::new(Processor::new(
        archive.clone(),
        Some(dead_letters.clone()),
        watermarks,
        config.batch.write_concurrency,
    ));
    let app = operational_routes(metrics, readiness(archive, processor.health()));
    let listener = tokio::net::TcpListener::bind(config.http_addr)
        .await
        .with_context(|| format!("binding {}", config.http_addr))?;
    let addr = listener.local_addr()?;
    let mut loops = Vec::new();
    if let Some((hot, watermarks)) = hot_tier {
        loops.push(tokio::spawn(hot_tier::run_trim(hot, config.trim_interval, shutdown.clone())));
        loops.push(tokio::spawn(hot_tier::run_rechecks(watermarks, shutdown.clone())));
    }
    let stop = shutdown.clone();
    let http =
        tokio::spawn(async move { axum::serve(listener, app).with_graceful_shutdown(stop.cancelled_owned()).await });
    let consumer_loop =
        ConsumerLoop::new(consumer, leases, processor, &config.messages_topic, config.batch, config.policy);
    tracing::info!(%addr, topic = %config.messages_topic, group = %config.group, dlq = %config.dlq_topic, "archiver consuming");
    let task = tokio::spawn(async move {
        let result = consumer_loop.run(shutdown.clone()).await;
        shutdown.cancel();
        for l in loops {
            l.await.context("a background loop panicked")?;
        }
        http.await.context("the http task panicked")?.context("serving http")?;
        let flushed = tokio::task::spawn_blocking(move || dead_letters.flush(FLUSH_TIMEOUT)).await?;
        flushed.map_err(anyhow::Error::msg).context("flushing the dead-letter producer")?;
        result.context("consuming")?;
        tracing::info!("archiver stopped");
        Ok(())
    });
    Ok(RunningArchiver { addr, task })
}

/// Ready when the archive's schema is in place and no batch is stuck on a failing step.
fn readiness(archive: ScyllaMessageStore, health: Arc<Health>) -> ReadinessCheck {
    Arc::new(move || {
        let (archive, health) = (archive.clone(), health.clone());
        Box::pin(async move {
            health.check()?;
            match archive.readiness().await {
                Ok(r) if r.is_ready() => Ok(()),
                Ok(r) => Err(format!("{r:?}")),
                Err(e) => Err(e.to_string()),
            }
        })
    })
}

/// `run`: logs → components → run until a signal.
pub async fn main(config: ArchiverConfig) -> anyhow::Result<()> {
    telemetry::init_logs(&config.log).map_err(anyhow::Error::msg)?;
    let shutdown = CancellationToken::new();
    qim_runtime::shutdown::cancel_on_signal(shutdown.clone());
    start(config, shutdown).await?.wait().await
}
