//! Gates under faults: a broker, and later a Cassandra node, killed with `kill -9` under a
//! steady send load through two writer processes (Redis backend, the same Redis), with two
//! archivers and two dispatchers in their groups. Nothing acknowledged is lost, nothing is
//! duplicated logically, no seq is issued twice, every lane watermark is consistent (the
//! checker); the figures are printed.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use qim_tests::checker::{self, CheckInput};
use qim_tests::services::{Pipeline, ServiceBinaries, ServiceKind};
use qim_tests::workload::{self, Plan};

use crate::support::{another, heal, rf3, ring_env, sends, CONVERGE};

/// Runs the load, kills `node` once a quarter of it has had time to go through, heals the
/// cluster after the load, and holds the run to the checker.
async fn under_load_with(node: &str, label: &str) {
    let bins = ServiceBinaries::locate().expect("service binaries");
    let env = ring_env(label).await;
    let pipeline = Pipeline::start(&bins, &env).await.expect("the pipeline starts on the three-node mode");
    let writer = another(ServiceKind::Writer, &bins, &env, &[]).await;
    let archiver = another(ServiceKind::Archiver, &bins, &env, &[]).await;
    let dispatcher = another(ServiceKind::Dispatcher, &bins, &env, &[]).await;
    let total = sends();
    let plan = Plan::generate(83, total, 12, &[30, 4], 7);
    let bases = vec![pipeline.writer.base_url().to_owned(), writer.base_url().to_owned()];

    let began = Instant::now();
    let load = {
        let (bases, plan) = (bases.clone(), plan.clone());
        tokio::spawn(async move { workload::run_behind(&bases, None, &plan, 8, true).await })
    };
    tokio::time::sleep(Duration::from_secs(3)).await;
    let killed_at = began.elapsed();
    rf3(&["kill", node]).await;
    let report = load.await.expect("the load task");
    let acked_in = began.elapsed();
    heal().await;
    let report = report.expect("every send is acknowledged (503s and refused connections are retried)");
    pipeline.converge(&report.acks, CONVERGE).await.expect("converges after the node came back");
    let converged_in = began.elapsed();
    for mut extra in [writer, archiver, dispatcher] {
        let status = extra.terminate().await.expect("stops");
        assert!(status.success(), "{} exited with {status}", extra.kind().name());
    }
    pipeline.stop().await.expect("clean stop");

    let input = CheckInput::new(env.clone(), &plan, report.acks.clone(), report.retries_mismatched);
    let verdict = checker::check(&input).await.expect("the checker reads everything");
    let mut latencies = report.latencies.clone();
    latencies.sort();
    let p99 = latencies.get(latencies.len() * 99 / 100).copied().unwrap_or_default();
    println!(
        "{node} killed {killed_at:.1?} into {total} sends through 2 writers, 2 archivers, 2 dispatchers: \
         all acknowledged after {acked_in:.1?} ({} requests, p99 {p99:.1?}, slowest {:.1?}), converged after \
         {converged_in:.1?}\n{verdict}",
        report.requests,
        latencies.last().copied().unwrap_or_default(),
    );
    assert!(verdict.is_ok(), "{verdict}");
    let writers: HashSet<Option<u16>> = report.acks.iter().map(|a| a.writer_id()).collect();
    assert_eq!(writers.len(), 2, "both writer instances answered sends, each under its leased id: {writers:?}");
    assert_eq!(verdict.counts.acked, total);
    assert_eq!((verdict.counts.lost, verdict.counts.logical_duplicates), (0, 0));
    assert_eq!(verdict.counts.mailbox_entries, verdict.counts.expected_mailbox_entries);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_killed_under_load_loses_nothing_acknowledged() {
    // Broker 2 leads a third of the partitions of every topic (RF 3, leaders spread).
    under_load_with("kafka-2", "gatebroker").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cassandra_node_killed_under_load_loses_nothing_acknowledged() {
    under_load_with("cassandra-2", "gatenode").await;
}
