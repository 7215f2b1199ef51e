//! Cassandra killed (SIGKILL) and restarted while the archiver consumes: the archiver retries
//! with backoff, reports itself not ready, never stores an offset past a record that is not
//! written, and resumes by itself once Cassandra is back; every record ends up archived.
//!
//! It runs on the fault stack (`qim_testkit::fault_stack`): the Cassandra it restarts (through
//! the checkout's own `deploy/local/stack`, which waits until CQL answers again) is not the one
//! the other tests use.

mod support;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use qim_store::codec::encode_record;
use qim_store::retention::RetentionPolicy;
use qim_testkit::fault_stack::FaultStack;
use rdkafka::consumer::{BaseConsumer, Consumer};
use support::*;

const PARTITIONS: i32 = 2;

/// `deploy/local/stack ARGS` on the fault stack.
fn stack(args: &[&str]) {
    FaultStack::locate().run(args).unwrap_or_else(|e| panic!("{e:#}"));
}

fn end_offsets(topic: &str) -> HashMap<i32, i64> {
    let consumer: BaseConsumer = rdkafka::ClientConfig::new().set("bootstrap.servers", brokers()).create().unwrap();
    (0..PARTITIONS)
        .map(|p| (p, consumer.fetch_watermarks(topic, p, Duration::from_secs(10)).expect("watermarks").1))
        .collect()
}

async fn ready(archiver: &TestArchiver) -> u16 {
    match reqwest::get(format!("http://{}/readyz", archiver.addr)).await {
        Ok(r) => r.status().as_u16(),
        Err(_) => 0,
    }
}

#[test]
fn the_archiver_waits_out_a_cassandra_restart_and_never_commits_unwritten_records() {
    qim_testkit::fault_stack::run_test(2, cassandra_restart());
}

async fn cassandra_restart() {
    let policy = RetentionPolicy::with_default_days(30).unwrap();
    let (topic, dlq) = (create_topic("a_cass", PARTITIONS).await, create_topic("a_cass_dlq", 1).await);
    let before: Vec<_> = (0..10).flat_map(|_| conversation(50, &policy)).collect();
    produce(&topic, &before).await;
    let config = config(&topic, &dlq, policy).await;
    let (ks, group) = (config.scylla.keyspace.clone(), config.group.clone());
    let archiver = TestArchiver::start(config).await;
    {
        let store = archive(policy).await;
        wait_archived(store.session(), &ks, &before, Duration::from_secs(60)).await;
    }
    let ends_before = end_offsets(&topic);

    tokio::task::spawn_blocking(|| stack(&["kill", "cassandra"])).await.unwrap();
    let during: Vec<_> = (0..10).flat_map(|_| conversation(50, &policy)).collect();
    produce(&topic, &during).await;
    let outage = Instant::now();
    let mut saw_unready = false;
    // The outage lasts until the archiver reported it (its writes failed) and at least 3 s, long
    // enough for it to have tried the new records; nothing it commits meanwhile may pass them.
    while !saw_unready || outage.elapsed() < Duration::from_secs(3) {
        assert!(outage.elapsed() < Duration::from_secs(60), "/readyz never reported the failing archive");
        let c = committed(&group, &topic, PARTITIONS);
        for (p, offset) in &c {
            assert!(*offset <= ends_before[p], "partition {p} committed {offset} past unwritten records");
        }
        saw_unready |= ready(&archiver).await == 503;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    tokio::task::spawn_blocking(|| stack(&["up"])).await.unwrap();
    let ends_after = end_offsets(&topic);
    wait_for("every offset committed after the restart", Duration::from_secs(180), || async {
        committed(&group, &topic, PARTITIONS) == ends_after
    })
    .await;
    let store = archive(policy).await;
    for r in before.iter().chain(&during) {
        let s = stored(store.session(), &ks, r).await.unwrap_or_else(|| panic!("seq {} lost", r.seq));
        assert_eq!(s.blob, encode_record(r));
    }
    wait_for("ready again", Duration::from_secs(30), || async { ready(&archiver).await == 200 }).await;
    let metrics = archiver.metrics().await;
    assert!(
        metrics.sum("qim_archiver_retries_total", &[("step", "archive")]) > 0.0,
        "the outage shows as archive retries: {metrics:?}"
    );
    archiver.stop().await.unwrap();
}
