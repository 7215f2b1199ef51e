//! A steady send load in the background: a plan's sends in small batches through the writer's
//! HTTP API, surviving the writer's restarts (the workload retries the same request on
//! connection errors and 503s), until the plan runs out or the load is stopped.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::workload::{self, Plan, Report};

/// How the load is shaped.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    /// Sends per batch.
    pub batch: usize,
    /// Sends in flight within a batch.
    pub concurrency: usize,
    /// Pause between batches (keeps the load steady rather than flat out).
    pub pause: Duration,
}

/// A running load.
pub struct Load {
    stop: CancellationToken,
    acked: Arc<AtomicU64>,
    task: JoinHandle<anyhow::Result<Report>>,
}

impl Load {
    /// Adds every member of `plan` (the writer at `base` must be up), then starts sending.
    ///
    /// # Errors
    ///
    /// Adding the members failed.
    pub async fn start(base: &str, plan: &Plan, shape: Shape) -> anyhow::Result<Load> {
        let members_only = Plan { sends: Vec::new(), ..plan.clone() };
        workload::run(base, None, &members_only, 1, true).await.context("adding the plan's members")?;
        let (stop, acked) = (CancellationToken::new(), Arc::new(AtomicU64::new(0)));
        let (base, plan, token, count) = (base.to_owned(), plan.clone(), stop.clone(), acked.clone());
        let task = tokio::spawn(async move {
            let mut total = Report::default();
            for sends in plan.sends.chunks(shape.batch.max(1)) {
                if token.is_cancelled() {
                    break;
                }
                let batch = Plan { tenant: plan.tenant.clone(), conversations: Vec::new(), sends: sends.to_vec() };
                let part = workload::run(&base, None, &batch, shape.concurrency, true).await?;
                count.fetch_add(part.acks.len() as u64, Ordering::Relaxed);
                merge(&mut total, part);
                tokio::time::sleep(shape.pause).await;
            }
            Ok(total)
        });
        Ok(Load { stop, acked, task })
    }

    /// Sends acknowledged so far.
    pub fn acked(&self) -> u64 {
        self.acked.load(Ordering::Relaxed)
    }

    /// Whether every send of the plan was made.
    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }

    /// Stops after the batch in flight and returns what was acknowledged.
    ///
    /// # Errors
    ///
    /// A send failed for good (the workload retries for [`workload::SEND_PATIENCE`] first).
    pub async fn stop(self) -> anyhow::Result<Report> {
        self.stop.cancel();
        self.task.await.context("the load task panicked")?
    }

    /// Waits until every send of the plan was made.
    ///
    /// # Errors
    ///
    /// As [`Load::stop`].
    pub async fn finish(self) -> anyhow::Result<Report> {
        self.task.await.context("the load task panicked")?
    }
}

/// Adds `part` to `total`.
pub fn merge(total: &mut Report, part: Report) {
    total.acks.extend(part.acks);
    total.requests += part.requests;
    total.retries_matched += part.retries_matched;
    total.retries_mismatched += part.retries_mismatched;
    total.latencies.extend(part.latencies);
    total.wall += part.wall;
}
