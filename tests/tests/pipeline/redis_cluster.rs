//! The three services on a Redis Cluster, end to end: on the local stack's cluster
//! (`deploy/local/stack cluster up`) with the hot tier's keys spread over every master, and on a
//! private cluster of their own while a master is killed or slots move under load. Each run ends
//! with the checker's verdict.

use std::time::{Duration, Instant};

use qim_testkit::redis_cluster::PrivateCluster;
use qim_tests::checker::{self, CheckInput};
use qim_tests::services::{Pipeline, PipelineEnv, ServiceBinaries, ServiceKind};
use qim_tests::stack;
use qim_tests::workload::{self, Plan};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pipeline_on_a_redis_cluster_passes_the_checker() {
    let bins = ServiceBinaries::locate().expect("service binaries");
    let mut env = PipelineEnv::fresh("cluster").await.expect("a fresh run (is the stack up?)");
    env.redis_url = stack::redis_cluster_url();
    let pipeline = Pipeline::start(&bins, &env).await.expect("the pipeline starts on the cluster");
    let plan = Plan::generate(31, 150, 12, &[60, 3], 6);
    let report = workload::run(pipeline.writer.base_url(), None, &plan, 8, true).await.expect("the workload runs");
    pipeline.converge(&report.acks, Duration::from_secs(90)).await.expect("converges");
    pipeline.stop().await.expect("clean stop");

    let input = CheckInput::new(env.clone(), &plan, report.acks.clone(), report.retries_mismatched);
    let verdict = checker::check(&input).await.expect("the checker reads everything");
    println!("{verdict}");
    assert!(verdict.is_ok(), "{verdict}");
    assert_eq!(verdict.counts.acked, 150);
    assert_eq!(verdict.counts.in_kafka, 150);
    assert_eq!(verdict.counts.hot, 150, "every record is in the cluster's hot tier");
    assert_eq!(verdict.counts.mailbox_entries, verdict.counts.expected_mailbox_entries);

    let pattern = format!("{}:*", env.redis_namespace);
    let held = qim_testkit::redis::keys_per_master(&env.redis_url, &pattern).await.expect("the masters' keys");
    assert_eq!(held.len(), 3, "{held:?}");
    assert!(held.iter().all(|(_, keys)| *keys > 0), "every master holds some of the run's keys: {held:?}");
    let wiped = qim_testkit::redis::wipe_namespace(&env.redis_url, &env.redis_namespace).await.expect("wiping the run");
    assert!(wiped > 150, "the run's keys were on the cluster: {wiped}");
}

/// What happened to the Redis Cluster during a run under load.
enum Disruption {
    /// SIGKILL of one master; its replica is promoted after the node timeout.
    KillMaster,
    /// `redis-cli --cluster reshard` of 1,000 slots from one master to another.
    Reshard,
}

/// The pipeline on a private cluster, a workload of 600 sends through 8 clients, and the
/// disruption once a quarter of them are acknowledged: every acknowledged message is found (topic,
/// archive, hot tier, mailboxes), no seq is issued twice, the checker accepts the run. Prints the
/// figures: messages, refused sends (503s the clients retried), time for the cluster to serve
/// every slot again.
async fn under_load(disruption: Disruption) {
    let mut cluster = PrivateCluster::start().expect("a private redis cluster");
    let bins = ServiceBinaries::locate().expect("service binaries");
    let mut env = PipelineEnv::fresh("clusterflt").await.expect("a fresh run (is the stack up?)");
    env.redis_url = cluster.url();
    let pipeline = Pipeline::start(&bins, &env).await.expect("the pipeline starts on the cluster");
    let plan = Plan::generate(41, 600, 16, &[30], 7);
    let (base, sends) = (pipeline.writer.base_url().to_owned(), plan.clone());
    let load = tokio::spawn(async move { workload::run(&base, None, &sends, 8, true).await });
    let deadline = Instant::now() + Duration::from_secs(60);
    while committed(&pipeline).await < 150.0 {
        assert!(Instant::now() < deadline && !load.is_finished(), "the workload did not get going");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let masters = cluster.masters().expect("the masters");
    let began = Instant::now();
    let what = match disruption {
        Disruption::KillMaster => {
            cluster.kill(masters[0]);
            format!("master {} killed", masters[0])
        }
        Disruption::Reshard => {
            cluster.reshard(masters[0], masters[1], 1_000).expect("resharding under load");
            format!("1000 slots moved from {} to {}", masters[0], masters[1])
        }
    };
    cluster.wait_ok(Duration::from_secs(60)).expect("every slot served again");
    let recovered = began.elapsed();
    let report = load.await.expect("the workload task").expect("every send acknowledged in the end");
    pipeline.converge(&report.acks, Duration::from_secs(120)).await.expect("converges");
    let refused = refused_sends(&pipeline).await;
    pipeline.stop().await.expect("clean stop");

    let input = CheckInput::new(env.clone(), &plan, report.acks.clone(), report.retries_mismatched);
    let verdict = checker::check(&input).await.expect("the checker reads everything");
    println!(
        "redis cluster under load: {what}; messages {}, refused sends retried {refused}, every slot served by a live \
         master {:.1} s after the disruption began",
        report.acks.len(),
        recovered.as_secs_f64()
    );
    println!("{verdict}");
    assert!(verdict.is_ok(), "{verdict}");
    assert_eq!(verdict.counts.acked, 600);
    assert_eq!(verdict.counts.in_kafka, 600);
}

async fn committed(pipeline: &Pipeline) -> f64 {
    let metrics = pipeline.metrics(ServiceKind::Writer).await;
    metrics.map_or(0.0, |m| m.sum("qim_writer_commits_total", &[("outcome", "committed")]))
}

/// Sends the writer refused with 503 (the store unavailable), which the clients retried.
async fn refused_sends(pipeline: &Pipeline) -> u64 {
    let metrics = pipeline.metrics(ServiceKind::Writer).await.expect("the writer's metrics");
    metrics.sum("qim_writer_http_requests_total", &[("status", "503")]).max(0.0) as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_killed_under_load_fails_over_and_loses_nothing_acknowledged() {
    under_load(Disruption::KillMaster).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slots_moved_under_load_lose_nothing_acknowledged() {
    under_load(Disruption::Reshard).await;
}
