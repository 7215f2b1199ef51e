//! `qim-writer serve`: startup in order (connect/prepare → readiness → Kafka), the
//! background loops, the HTTP API, and graceful shutdown.
//!
//! Shutdown (SIGTERM/SIGINT or the token): the listener stops accepting, in-flight requests
//! (and so in-flight commits) finish, the loops stop between passes, the writer id is given
//! back, the producer is flushed, and [`RunningWriter::wait`] returns `Ok`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use qim_runtime::auth::Authenticator;
use qim_runtime::http::ReadinessCheck;
use qim_runtime::startup::{Startup, Unreachable};
use qim_runtime::telemetry;
use qim_store::redis::{WriterIdLease, DEFAULT_WRITER_ID_LIFE};
use qim_store::MembershipAuthorizer;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::api::{self, ApiState};
use crate::backend;
use crate::committer::DurableMessageCommitter;
use crate::config::{Backend, WriterConfig};
use crate::message_ids::{self, MessageIds};
use crate::publisher::KafkaPublisher;
use crate::{expiry, recovery};

/// Longest wait for the topic's metadata at startup and in `/readyz`.
const KAFKA_CHECK_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest wait for queued records at shutdown.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(10);

/// A started writer.
pub struct RunningWriter {
    /// The address the API listens on (useful with port 0).
    pub addr: SocketAddr,
    task: JoinHandle<anyhow::Result<()>>,
}

impl RunningWriter {
    /// Waits until the writer stopped (after the shutdown token was cancelled).
    pub async fn wait(self) -> anyhow::Result<()> {
        self.task.await.context("the writer task panicked")?
    }
}

/// Starts the writer; returns once it accepts requests. Any startup failure is an error naming
/// the step.
pub async fn start(config: WriterConfig, shutdown: CancellationToken) -> anyhow::Result<RunningWriter> {
    let metrics = telemetry::install_metrics();
    crate::metrics::describe();
    let startup = Startup::new(config.startup_timeout);
    let stores = backend::open(&config, &startup).await?;
    let publisher = Arc::new(
        KafkaPublisher::new(&config.kafka_brokers, &config.messages_topic, config.producer)
            .context("creating the kafka producer")?,
    );
    let partitions = startup
        .step("checking the messages topic", || async {
            publisher
                .check_topic(KAFKA_CHECK_TIMEOUT)
                .await
                .map_err(|e| anyhow::Error::new(Unreachable(e)))
                .with_context(|| format!("checking kafka at {}", config.kafka_brokers))
        })
        .await?;
    let lease = match &config.backend {
        Backend::Redis { redis, .. } => Some(Arc::new(
            startup
                .step("taking a writer id", || async {
                    WriterIdLease::acquire(redis, DEFAULT_WRITER_ID_LIFE)
                        .await
                        .with_context(|| format!("leasing a writer id in the redis at {}", redis.url))
                })
                .await?,
        )),
        Backend::Scylla(_) => None,
    };
    let ids = Arc::new(MessageIds::new(lease.clone()));
    let committer = Arc::new(DurableMessageCommitter::new(
        stores.messages.clone(),
        publisher.clone(),
        config.policy,
        config.max_in_flight,
        ids.clone(),
    ));
    let state = ApiState {
        committer: committer.clone(),
        store: stores.messages.clone(),
        members: stores.members.clone(),
        authorizer: Arc::new(MembershipAuthorizer::new(stores.members.clone())),
        max_body_bytes: config.max_body_bytes,
    };
    let ready = readiness(stores.ready.clone(), publisher.clone(), ids);
    let auth = Authenticator::new(&config.auth).context("loading the API's token keys")?;
    let app = api::router(state, auth, metrics, ready);
    let listener = tokio::net::TcpListener::bind(config.http_addr)
        .await
        .with_context(|| format!("binding {}", config.http_addr))?;
    let addr = listener.local_addr()?;
    let lease_keeper = lease.map(|lease| tokio::spawn(message_ids::keep(lease, shutdown.clone())));
    let loops = [
        tokio::spawn(recovery::run(
            stores.messages.clone(),
            committer,
            config.recovery_grace,
            config.recovery_interval,
            shutdown.clone(),
        )),
        tokio::spawn(expiry::run(stores.messages.clone(), shutdown.clone())),
    ];
    tracing::info!(
        %addr,
        backend = config.backend.name(),
        commit_layout = ?config.commit_layout,
        group_commit = config.group_commit,
        topic = %config.messages_topic,
        partitions,
        "writer serving"
    );
    let task = tokio::spawn(async move {
        let stop = shutdown.clone();
        axum::serve(listener, app)
            .with_graceful_shutdown(async move { stop.cancelled().await })
            .await
            .context("serving http")?;
        shutdown.cancel();
        for l in loops.into_iter().chain(lease_keeper) {
            l.await.context("a background loop panicked")?;
        }
        let flushed = tokio::task::spawn_blocking(move || publisher.flush(FLUSH_TIMEOUT)).await?;
        flushed.map_err(anyhow::Error::msg).context("flushing the kafka producer")?;
        tracing::info!("writer stopped");
        Ok(())
    });
    Ok(RunningWriter { addr, task })
}

/// Ready when the writer id is held (if leased), the store is ready and the topic answers.
fn readiness(store: ReadinessCheck, publisher: Arc<KafkaPublisher>, ids: Arc<MessageIds>) -> ReadinessCheck {
    Arc::new(move || {
        let (store, publisher, ids) = (store.clone(), publisher.clone(), ids.clone());
        Box::pin(async move {
            if let Some(lease) = ids.lease() {
                lease.current().map_err(|e| e.to_string())?;
            }
            store().await?;
            publisher.check_topic(Duration::from_secs(2)).await.map(drop)
        })
    })
}

/// `serve`: logs → components → run until a signal.
pub async fn main(config: WriterConfig) -> anyhow::Result<()> {
    telemetry::init_logs(&config.log).map_err(anyhow::Error::msg)?;
    let shutdown = CancellationToken::new();
    qim_runtime::shutdown::cancel_on_signal(shutdown.clone());
    start(config, shutdown).await?.wait().await
}
