//! `qim-test-sweep`: drops the test keyspaces and deletes the test topics on the local stack
//! that no running process owns (their creator, or the nextest run they belong to, has exited),
//! whatever their age, and says how many. The test command runs it before and after its tests,
//! so leftovers of crashed or interrupted runs never pile up (a few hundred keyspaces fill a
//! single-node Cassandra's heap). Names that are not generated test names are never touched.

use std::time::Duration;

use anyhow::Context as _;
use qim_testkit::stack::{connect_scylla, kafka_config};
use qim_testkit::{kafka, scylla};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let session = connect_scylla().await.context("sweeping test keyspaces")?;
    let keyspaces = scylla::sweep_leftover_keyspaces(&session, Duration::ZERO).await;
    let topics = kafka::sweep_leftover_topics(&kafka_config(), Duration::ZERO).await;
    println!("swept leftovers of finished test runs: {keyspaces} keyspaces, {topics} topics");
    Ok(())
}
