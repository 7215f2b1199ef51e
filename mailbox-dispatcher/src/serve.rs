//! `qim-mailbox-dispatcher run`: startup in order (configuration validated → logs → store
//! connect and readiness → Kafka topics checked → consumers joined → HTTP), then the router, the
//! shard workers and the read API until a signal.
//!
//! Shutdown (SIGTERM/SIGINT or the token): the listener stops accepting, the consumers stop
//! *receiving*; every started step finishes (none is cut in half), completed offsets are stored
//! and committed, the producer is flushed, and [`RunningDispatcher::wait`] returns. If any
//! component stops on its own, the others are shut down and `wait` returns the error.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use metrics_exporter_prometheus::PrometheusHandle;
use qim_runtime::auth::Authenticator;
use qim_runtime::http::ReadinessCheck;
use qim_runtime::startup::{Startup, Unreachable};
use qim_runtime::telemetry;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::api::{self, ApiState};
use crate::backend::{self, Stores};
use crate::config::DispatcherConfig;
use crate::kafka::AckedProducer;
use crate::router::Router;
use crate::worker::ShardWorkers;

/// Longest wait for topic metadata at startup and in `/readyz`.
const KAFKA_CHECK_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest wait for queued records at shutdown.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(10);

/// A started dispatcher.
pub struct RunningDispatcher {
    /// The address the API listens on (useful with port 0).
    pub addr: SocketAddr,
    task: JoinHandle<anyhow::Result<()>>,
}

impl RunningDispatcher {
    /// Waits until the dispatcher stopped (after the token was cancelled, or a component failed).
    pub async fn wait(self) -> anyhow::Result<()> {
        self.task.await.context("the dispatcher task panicked")?
    }
}

/// Opens the configured stores, then starts (see [`start_with`]).
pub async fn start(config: DispatcherConfig, shutdown: CancellationToken) -> anyhow::Result<RunningDispatcher> {
    let metrics = telemetry::install_metrics();
    crate::metrics::describe();
    let startup = Startup::new(config.startup_timeout);
    let stores = startup.step("opening the stores", || backend::open(&config.backend, config.retention)).await?;
    start_with(config, stores, metrics, shutdown).await
}

/// Starts the dispatcher on already opened `stores`; returns once the API accepts requests.
/// Any startup failure is an error naming the step.
pub async fn start_with(
    config: DispatcherConfig,
    stores: Stores,
    metrics: PrometheusHandle,
    shutdown: CancellationToken,
) -> anyhow::Result<RunningDispatcher> {
    let kafka = &config.kafka;
    let producer = AckedProducer::new(&kafka.brokers).map_err(anyhow::Error::msg)?;
    // The stores were opened before (by `start`, or by a test): the steps left share a
    // deadline of their own.
    let startup = Startup::new(config.startup_timeout);
    startup
        .step("checking the kafka topics", || async {
            check_topics(&producer, &config).await.with_context(|| format!("checking kafka at {}", kafka.brokers))
        })
        .await?;
    let router = Router::new(kafka, config.shards, Arc::clone(&stores.members), producer.clone())?;
    let workers = ShardWorkers::new(&config, Arc::clone(&stores.mailbox), producer.clone())?;
    let state = ApiState { store: Arc::clone(&stores.mailbox), shards: config.shards, epoch: config.epoch };
    let ready = readiness(stores.ready.clone(), producer.clone(), kafka.dispatch_topic.clone());
    let auth = Authenticator::new(&config.auth).context("loading the API's token keys")?;
    let app = api::router(state, auth, metrics, ready);
    let listener = tokio::net::TcpListener::bind(config.http_addr)
        .await
        .with_context(|| format!("binding {}", config.http_addr))?;
    let addr = listener.local_addr()?;
    tracing::info!(%addr, backend = config.backend.name(), shards = config.shards, epoch = config.epoch.0,
        messages = %kafka.messages_topic, dispatch = %kafka.dispatch_topic, "mailbox dispatcher serving");
    let task = tokio::spawn(async move {
        let stop = shutdown.clone();
        let http = async move {
            axum::serve(listener, app).with_graceful_shutdown(async move { stop.cancelled().await }).await
        };
        let mut components = tokio::task::JoinSet::new();
        let token = shutdown.clone();
        components.spawn(async move { ("router", router.run(token).await) });
        let token = shutdown.clone();
        components.spawn(async move { ("shard workers", workers.run(token).await) });
        components.spawn(async move { ("http", http.await.context("serving http")) });
        let mut first_failure = None;
        while let Some(joined) = components.join_next().await {
            let failure = match joined {
                Ok((_, Ok(()))) if shutdown.is_cancelled() => None,
                Ok((name, Ok(()))) => Some(anyhow::anyhow!("the {name} stopped unexpectedly")),
                Ok((name, Err(e))) => Some(e.context(format!("the {name} failed"))),
                Err(e) => Some(anyhow::anyhow!("a component panicked: {e}")),
            };
            if let Some(e) = failure {
                tracing::error!(error = format!("{e:#}"), "shutting down after a component failed");
                first_failure.get_or_insert(e);
                shutdown.cancel();
            }
        }
        let flushed = tokio::task::spawn_blocking(move || producer.flush(FLUSH_TIMEOUT)).await?;
        flushed.map_err(anyhow::Error::msg).context("flushing the kafka producer")?;
        tracing::info!("mailbox dispatcher stopped");
        first_failure.map_or(Ok(()), Err)
    });
    Ok(RunningDispatcher { addr, task })
}

/// The messages topic exists, the dispatch topic has exactly one partition per shard, and the
/// dead-letter topic exists.
async fn check_topics(producer: &AckedProducer, config: &DispatcherConfig) -> anyhow::Result<()> {
    let kafka = &config.kafka;
    // A topic that does not answer (yet) is waited for; one with the wrong partitions is refused.
    for topic in [&kafka.messages_topic, &kafka.dlq_topic] {
        producer.partitions(topic, KAFKA_CHECK_TIMEOUT).await.map_err(|e| anyhow::Error::new(Unreachable(e)))?;
    }
    let partitions = producer
        .partitions(&kafka.dispatch_topic, KAFKA_CHECK_TIMEOUT)
        .await
        .map_err(|e| anyhow::Error::new(Unreachable(e)))?;
    if partitions != usize::from(config.shards) {
        bail!(
            "{} has {partitions} partitions but QIM_MAILBOX_SHARDS={}: they must be equal (partition = shard)",
            kafka.dispatch_topic,
            config.shards
        );
    }
    Ok(())
}

/// Ready when the store is ready and the dispatch topic answers.
fn readiness(store: ReadinessCheck, producer: AckedProducer, topic: String) -> ReadinessCheck {
    Arc::new(move || {
        let (store, producer, topic) = (store.clone(), producer.clone(), topic.clone());
        Box::pin(async move {
            store().await?;
            producer.partitions(&topic, Duration::from_secs(2)).await.map(drop)
        })
    })
}

/// `run`: logs → components → run until a signal.
pub async fn main(config: DispatcherConfig) -> anyhow::Result<()> {
    telemetry::init_logs(&config.log).map_err(anyhow::Error::msg)?;
    let shutdown = CancellationToken::new();
    qim_runtime::shutdown::cancel_on_signal(shutdown.clone());
    start(config, shutdown).await?.wait().await
}
