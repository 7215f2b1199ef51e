//! Gates on the ring without faults: the whole pipeline end to end with the checker, and a
//! keyspace whose replication does not match the settings refused before anything is served.

use std::time::{Duration, Instant};

use qim_tests::checker::{self, CheckInput};
use qim_tests::services::{run_command, Pipeline, Service, ServiceBinaries, ServiceKind};
use qim_tests::stack;
use qim_tests::workload::{self, Plan};

use crate::support::ring_env;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn end_to_end_on_three_brokers_and_a_ring_of_three_passes_the_checker() {
    let bins = ServiceBinaries::locate().expect("service binaries");
    let env = ring_env("gatee2e").await;
    let pipeline = Pipeline::start(&bins, &env).await.expect("the pipeline starts on the three-node mode");
    let plan = Plan::generate(71, 200, 10, &[40, 3], 5);
    let began = Instant::now();
    let report = workload::run(pipeline.writer.base_url(), None, &plan, 8, true).await.expect("the workload runs");
    pipeline.converge(&report.acks, Duration::from_secs(120)).await.expect("converges");
    println!("end to end on the ring: 200 sends acknowledged and converged in {:.1?}", began.elapsed());
    pipeline.stop().await.expect("clean stop");
    let input = CheckInput::new(env.clone(), &plan, report.acks.clone(), report.retries_mismatched);
    let verdict = checker::check(&input).await.expect("the checker reads everything");
    println!("{verdict}");
    assert!(verdict.is_ok(), "{verdict}");
    assert_eq!((verdict.counts.acked, verdict.counts.in_kafka, verdict.counts.archived), (200, 200, 200));
    assert_eq!(verdict.counts.mailbox_entries, verdict.counts.expected_mailbox_entries);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyspace_whose_rf_or_dc_does_not_match_is_refused() {
    let bins = ServiceBinaries::locate().expect("service binaries");
    let env = ring_env("gaterf").await;
    let session = stack::connect_scylla_at(&env.scylla_hosts).await.expect("the ring answers");
    // RF 2 where the settings say 3; and RF 3, but in a data centre the settings do not name.
    let cases = [
        (
            format!("{}_rf2", env.keyspace),
            "{'class': 'NetworkTopologyStrategy', 'datacenter1': 2}",
            "datacenter1",
            "is 2, the configuration says 3",
        ),
        (
            format!("{}_dc", env.keyspace),
            "{'class': 'NetworkTopologyStrategy', 'datacenter1': 3}",
            "dc9",
            "is not in the cluster",
        ),
    ];
    for (keyspace, replication, dc, why) in &cases {
        if replication.contains(": 2") {
            let create = format!("CREATE KEYSPACE IF NOT EXISTS {keyspace} WITH replication = {replication}");
            session.query_unpaged(create, &[]).await.expect("creating the mismatched keyspace");
            session.await_schema_agreement().await.expect("schema agreement");
        }
        let mut wrong = env.clone();
        if replication.contains(": 2") {
            wrong.keyspace = keyspace.clone();
        }
        wrong.scylla_dc = (*dc).to_owned();
        let migrate = run_command(ServiceKind::Writer, &bins, &wrong, &["migrate"]).await;
        let refusal = migrate.expect_err("migrate accepted a keyspace of other replication");
        println!("{keyspace} ({replication}, settings RF 3 in {dc}): migrate refused: {refusal:#}");
        let refusal = format!("{refusal:#}");
        assert!(refusal.contains(why), "migrate's refusal does not say why ({why}): {refusal}");
        let serve =
            Service::start(ServiceKind::Writer, &bins, &wrong, &[("QIM_STORE_BACKEND", "scylla")]).await.map(drop);
        let refusal = format!("{:#}", serve.expect_err("a writer served a keyspace of other replication"));
        println!("{keyspace}: serve refused: {}", refusal.lines().last().unwrap_or_default());
        assert!(refusal.contains(why), "the refusal does not say why ({why}): {refusal}");
    }
    session.query_unpaged(format!("DROP KEYSPACE IF EXISTS {}", cases[0].0), &[]).await.expect("dropping it");
}
