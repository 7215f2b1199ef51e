//! The three services together.

use std::time::{Duration, Instant};

use anyhow::bail;

use super::converge::consumer_group_lag;
use super::{PipelineEnv, Service, ServiceBinaries, ServiceKind};
use crate::workload::Ack;
use qim_testkit::metrics::Exposition;

/// The writer, archiver and dispatcher of one run.
pub struct Pipeline {
    /// `qim-writer`.
    pub writer: Service,
    /// `qim-archiver`.
    pub archiver: Service,
    /// `qim-mailbox-dispatcher`.
    pub dispatcher: Service,
    env: PipelineEnv,
}

impl Pipeline {
    /// Starts the writer, the archiver and the dispatcher of `env`, each ready before the next.
    ///
    /// # Errors
    ///
    /// A service did not become ready (its log tail is in the error).
    pub async fn start(bins: &ServiceBinaries, env: &PipelineEnv) -> anyhow::Result<Pipeline> {
        let writer = Service::start(ServiceKind::Writer, bins, env, &[]).await?;
        let archiver = Service::start(ServiceKind::Archiver, bins, env, &[]).await?;
        let dispatcher = Service::start(ServiceKind::Dispatcher, bins, env, &[]).await?;
        Ok(Pipeline { writer, archiver, dispatcher, env: env.clone() })
    }

    /// Assembles a pipeline from services started one by one (e.g. after a rebuild).
    pub fn from_services(writer: Service, archiver: Service, dispatcher: Service, env: &PipelineEnv) -> Pipeline {
        Pipeline { writer, archiver, dispatcher, env: env.clone() }
    }

    /// The run this pipeline belongs to.
    pub fn env(&self) -> &PipelineEnv {
        &self.env
    }

    /// Waits until the archiver and the dispatcher have caught up with everything on the
    /// messages topic (which holds every acknowledged message once `acks` were answered):
    /// the archiver's group, the router's group and the shard workers' group have committed
    /// the ends of their topics, and every shard's lane-watermark lag is 0. Holds for two polls
    /// in a row, so a commit racing the poll is not mistaken for the end.
    ///
    /// # Errors
    ///
    /// Not caught up within `timeout` (the error names what lags), or Kafka does not answer.
    pub async fn converge(&self, acks: &[Ack], timeout: Duration) -> anyhow::Result<()> {
        let began = Instant::now();
        let mut settled = 0;
        loop {
            let why = self.behind(acks.len()).await?;
            match why {
                None => settled += 1,
                Some(_) => settled = 0,
            }
            if settled >= 2 {
                return Ok(());
            }
            if began.elapsed() > timeout {
                bail!("the pipeline did not converge within {timeout:?}: {}", why.unwrap_or_default());
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// What still lags, or `None` when everything has caught up.
    async fn behind(&self, acked: usize) -> anyhow::Result<Option<String>> {
        let e = &self.env;
        let messages = consumer_group_lag(&e.kafka_brokers, &e.archiver_group, &e.messages_topic).await?;
        if messages.end < acked as i64 {
            return Ok(Some(format!("the messages topic holds {} records, fewer than {acked} acks", messages.end)));
        }
        if messages.total > 0 {
            return Ok(Some(format!("archiver lag {}", messages.total)));
        }
        let router_group = format!("{}.router", e.dispatcher_group);
        let router = consumer_group_lag(&e.kafka_brokers, &router_group, &e.messages_topic).await?;
        if router.total > 0 {
            return Ok(Some(format!("router lag {}", router.total)));
        }
        let shards_group = format!("{}.shards", e.dispatcher_group);
        let shards = consumer_group_lag(&e.kafka_brokers, &shards_group, &e.dispatch_topic).await?;
        if shards.total > 0 {
            return Ok(Some(format!("shard workers lag {}", shards.total)));
        }
        let metrics = match self.metrics(ServiceKind::Dispatcher).await {
            Ok(m) => m,
            Err(e) => return Ok(Some(format!("dispatcher metrics unavailable: {e:#}"))),
        };
        let lagging: Vec<_> = metrics
            .values(qim_mailbox_dispatcher::metrics::LANE_WATERMARK_LAG, &[])
            .into_iter()
            .filter(|(_, v)| *v > 0.0)
            .collect();
        if !lagging.is_empty() {
            return Ok(Some(format!("lane watermarks behind: {lagging:?}")));
        }
        Ok(None)
    }

    /// `kind`'s `/metrics`, parsed.
    ///
    /// # Errors
    ///
    /// The service does not answer.
    pub async fn metrics(&self, kind: ServiceKind) -> anyhow::Result<Exposition> {
        let url = format!("{}/metrics", self.env.base_url(kind));
        let r = reqwest::Client::new().get(&url).timeout(Duration::from_secs(5)).send().await?;
        Ok(Exposition::parse(&r.error_for_status()?.text().await?))
    }

    /// SIGTERM to all three (dispatcher, archiver, writer), each expected to exit 0.
    ///
    /// # Errors
    ///
    /// A service was not running, did not exit in time, or exited non-zero (all are tried).
    pub async fn stop(mut self) -> anyhow::Result<()> {
        let mut problems = Vec::new();
        for s in [&mut self.dispatcher, &mut self.archiver, &mut self.writer] {
            match s.terminate().await {
                Ok(status) if status.success() => {}
                Ok(status) => problems.push(format!("{} exited with {status}:\n{}", s.kind(), s.log_tail(10))),
                Err(e) => problems.push(format!("{e:#}")),
            }
        }
        if !problems.is_empty() {
            bail!("stopping the pipeline: {}", problems.join("; "));
        }
        Ok(())
    }
}
