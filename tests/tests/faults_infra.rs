//! Fault injection, infrastructure (issue 9): under a steady send load, Kafka, Redis (AOF
//! everysec) and Cassandra are each killed with SIGKILL (`deploy/local/stack kill`) and brought
//! back (`deploy/local/stack up`), once each; then the pipeline converges and the invariant
//! checker must find nothing lost and nothing duplicated, and no conversation seq may have been
//! issued twice (Redis may lose its last second of writes; each conversation must revalidate its
//! seq lease against the durable high-water mark rather than reissue).
//!
//! It runs on the fault stack (`qim_testkit::fault_stack`), whose servers no other test uses
//! while it kills them, and always leaves that stack up.

use std::time::Duration;

use qim_testkit::fault_stack::FaultStack;
use qim_tests::faults::{self, stack_command, Load, Shape};
use qim_tests::services::{Pipeline, PipelineEnv, ServiceBinaries};
use qim_tests::workload::Plan;

/// The servers, in the order they are killed.
const SERVERS: [&str; 3] = ["kafka", "redis", "cassandra"];
/// How long `stack up` may take (Cassandra's start dominates).
const UP_WITHIN: Duration = Duration::from_secs(300);
/// How long each killed server stays dead before the stack brings it back.
const OUTAGE: Duration = Duration::from_secs(2);

/// Brings the fault stack up whatever happened, so a failing run does not leave it down.
struct StackUp;

impl Drop for StackUp {
    fn drop(&mut self) {
        let _ = FaultStack::locate().run(&["up"]);
    }
}

#[test]
fn kafka_redis_and_cassandra_die_and_return_under_load() {
    qim_testkit::fault_stack::run_test(4, infra_faults());
}

async fn infra_faults() {
    let _stack_up = StackUp;
    let bins = ServiceBinaries::locate().expect("service binaries");
    let env = PipelineEnv::fresh("infra").await.expect("a fresh run");
    let p = Pipeline::start(&bins, &env).await.expect("the pipeline starts");
    let plan = Plan::generate(0x1f4a, 20_000, 40, &[10, 60], 8);
    let shape = Shape { batch: 10, concurrency: 4, pause: Duration::from_millis(100) };
    let load = Load::start(p.writer.base_url(), &plan, shape).await.expect("the load starts");
    let mut faults = 0;
    for server in SERVERS {
        // The load flows before each fault: 50 more sends acknowledged.
        let flowing = load.acked() + 50;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
        while load.acked() < flowing {
            assert!(
                tokio::time::Instant::now() < deadline,
                "no sends acknowledged within 120 s before {server} was killed"
            );
            assert!(!load.is_finished(), "the load ended before {server} was killed");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let before = load.acked();
        stack_command(&["kill", server], Duration::from_secs(60)).await.expect("the server is killed");
        faults += 1;
        // The outage itself, not a wait for anything: the server stays dead this long.
        tokio::time::sleep(OUTAGE).await;
        stack_command(&["up"], UP_WITHIN).await.expect("the stack comes back");
        // The load must go on after the server returned.
        let back = load.acked();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
        while load.acked() < back + 50 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "no sends acknowledged within 120 s after {server} returned"
            );
            if load.is_finished() {
                let outcome = load.stop().await.map(|r| r.acks.len());
                panic!("the load ended after {server} returned: {outcome:?}");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        println!("infra: {server} killed and back; acknowledged {before} before, {} now", load.acked());
    }
    let report = load.stop().await.expect("every send is acknowledged despite the faults");
    let reissued = faults::reissued_seqs(&report);
    assert!(reissued.is_empty(), "seqs issued twice: {reissued:?}");
    p.converge(&report.acks, Duration::from_secs(300)).await.expect("the pipeline converges");
    let figures = faults::verify("infra", &env, &plan, &report, 0, faults)
        .await
        .expect("zero lost, zero logical duplicates, every invariant holds");
    p.stop().await.expect("every service stops cleanly");
    assert_eq!(figures.faults, 3);
}
