//! `qim-test-sweep`: drops the test keyspaces, deletes the test topics and the keys of the test
//! Redis namespaces (on the shared Redis and its Redis Cluster) that no running process owns
//! (their creator, or the nextest run they belong to, has exited), whatever their age, and says
//! how many: on the shared local stack (the `QIM_TEST_*` servers) and on the
//! fault stack of the server-killing tests (`qim_testkit::fault_stack`) when it was ever started
//! here. The test command runs it before its tests, so leftovers of earlier, crashed or
//! interrupted runs never pile up (a few hundred keyspaces fill a single-node Cassandra's heap).
//! Names that are not generated test names are never touched.

use std::time::Duration;

use anyhow::Context as _;
use qim_testkit::fault_stack::FaultStack;
use qim_testkit::stack::redis_cluster_url;
use qim_testkit::stack::{connect_scylla_at, kafka_config_at, Endpoints};
use qim_testkit::{kafka, redis, scylla};

/// What one sweep removed.
struct Swept {
    keyspaces: usize,
    topics: usize,
    namespaces: usize,
}

/// Sweeps the stack at `endpoints`, and the Redis Cluster at `cluster` if given.
async fn sweep(endpoints: &Endpoints, cluster: Option<&str>) -> anyhow::Result<Swept> {
    let session = connect_scylla_at(&endpoints.scylla_hosts).await.context("sweeping test keyspaces")?;
    let keyspaces = scylla::sweep_leftover_keyspaces(&session, Duration::ZERO).await;
    let topics = kafka::sweep_leftover_topics(&kafka_config_at(&endpoints.kafka_brokers), Duration::ZERO).await;
    let mut namespaces = redis::sweep_leftover_namespaces(&endpoints.redis_url, Duration::ZERO).await;
    if let Some(cluster) = cluster {
        namespaces += redis::sweep_leftover_namespaces(cluster, Duration::ZERO).await;
    }
    Ok(Swept { keyspaces, topics, namespaces })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let fault_stack = FaultStack::locate();
    let on_the_fault_stack = async {
        if fault_stack.was_started() {
            Some(sweep(&fault_stack.endpoints(), None).await)
        } else {
            None
        }
    };
    let shared_stack = Endpoints::from_env();
    let cluster = redis_cluster_url();
    let (shared, faults) = tokio::join!(sweep(&shared_stack, Some(&cluster)), on_the_fault_stack);
    let Swept { keyspaces, topics, namespaces } = shared?;
    println!(
        "swept leftovers of finished test runs: {keyspaces} keyspaces, {topics} topics, {namespaces} redis namespaces"
    );
    match faults {
        None => {}
        Some(Ok(Swept { keyspaces, topics, namespaces })) => {
            println!("and on the fault stack: {keyspaces} keyspaces, {topics} topics, {namespaces} redis namespaces")
        }
        // Down between runs is normal for it (a fresh boot, a `down`): reported, not an error.
        Some(Err(e)) => {
            println!("the fault stack ({}) does not answer, nothing swept there: {e:#}", fault_stack.dir().display())
        }
    }
    Ok(())
}
