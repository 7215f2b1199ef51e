//! Convergence with a progress line (a spinner showing every consumer's lag).

use std::time::{Duration, Instant};

use indicatif::ProgressBar;
use qim_tests::services::{consumer_group_lag, Pipeline, ServiceKind};
use qim_tests::workload::Ack;

/// Prints the archiver's, the router's and the shard workers' lag and the entries written once
/// a second until every lag is 0, then confirms with [`Pipeline::converge`].
pub async fn show_until_converged(pipeline: &Pipeline, acks: &[Ack], timeout: Duration) -> anyhow::Result<()> {
    let e = pipeline.env();
    let began = Instant::now();
    let line = ProgressBar::new_spinner();
    loop {
        let archiver = consumer_group_lag(&e.kafka_brokers, &e.archiver_group, &e.messages_topic).await?;
        let router =
            consumer_group_lag(&e.kafka_brokers, &format!("{}.router", e.dispatcher_group), &e.messages_topic).await?;
        let shards =
            consumer_group_lag(&e.kafka_brokers, &format!("{}.shards", e.dispatcher_group), &e.dispatch_topic).await?;
        let entries: f64 = match pipeline.metrics(ServiceKind::Dispatcher).await {
            Ok(metrics) => metrics.sum(qim_mailbox_dispatcher::metrics::ENTRIES_WRITTEN, &[]),
            Err(_) => 0.0,
        };
        line.set_message(format!(
            "archiver lag {:>6} | router lag {:>6} | shard lag {:>6} | mailbox entries written {:>9.0}",
            archiver.total, router.total, shards.total, entries
        ));
        line.tick();
        if archiver.total == 0 && router.total == 0 && shards.total == 0 && archiver.end >= acks.len() as i64 {
            break;
        }
        if began.elapsed() > timeout {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    line.finish();
    pipeline.converge(acks, timeout.saturating_sub(began.elapsed()).max(Duration::from_secs(30))).await
}
