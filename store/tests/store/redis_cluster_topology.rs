//! The Redis Cluster beyond the contract suites: a URL of the wrong topology fails at once
//! with one line naming the setting, the global indexes spread over the masters, scripts a node
//! lost come back by `EVAL` on that node alone, and a failover that lost writes reissues no seq
//! (on a private cluster).
//!
//! Needs the local stack's Redis and its Redis Cluster (`deploy/local/stack up` and
//! `deploy/local/stack cluster up`; `QIM_TEST_REDIS_URL`, `QIM_TEST_REDIS_CLUSTER_URL`).

use std::sync::Arc;

use qim_store::memory::MemorySeqHighWater;
use qim_store::redis::{RedisConfig, RedisMessageStore, SeqLeases};
use qim_store::retention::RetentionPolicy;
use qim_store::testsuite::fixtures::{clock, fresh_conversation, fresh_tenant, request, user};
use qim_store::testsuite::message::commit_fully;
use qim_store::{ErrorKind, MessageStore};

use qim_testkit::redis_cluster::PrivateCluster;

use crate::shared_redis::{self, cluster_url, unique_namespace, Cleanup};

/// `host:port` of a `redis://host:port/db` URL.
fn host_port(url: &str) -> String {
    url.trim_start_matches("redis://").split('/').next().expect("a host").to_owned()
}

async fn open(url: &str, cleanup: &Cleanup) -> Result<RedisMessageStore, qim_store::StoreError> {
    let config = RedisConfig { url: url.to_owned(), namespace: unique_namespace() };
    cleanup.register_at(url, &config.namespace);
    let store = RedisMessageStore::open(&config, RetentionPolicy::default(), clock()).await?;
    Ok(store.with_seq_leases(SeqLeases::new(Arc::new(MemorySeqHighWater::default()))))
}

#[tokio::test]
async fn a_single_node_url_at_a_cluster_node_fails_in_one_line_naming_the_setting() {
    let seed = cluster_url().trim_start_matches("redis+cluster://").split(',').next().expect("a seed").to_owned();
    let err = open(&format!("redis://{seed}"), &Cleanup::default()).await.expect_err("a cluster node alone");
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
    let text = err.to_string();
    assert!(text.contains("names one node of a Redis Cluster") && text.contains("QIM_REDIS_URL"), "{text}");
    assert!(!text.contains('\n') && text.len() < 300, "one short line: {text}");
}

#[tokio::test]
async fn a_cluster_url_at_a_single_server_fails_naming_the_form_to_use() {
    let single = host_port(&shared_redis::url());
    let err = open(&format!("redis+cluster://{single}"), &Cleanup::default()).await.expect_err("not a cluster");
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
    assert!(err.to_string().contains("give one node as redis://host:port"), "{err}");
}

/// The global indexes are sharded: a few hundred commits' entries land on every master.
#[tokio::test]
async fn the_global_indexes_spread_over_every_master() {
    let cleanup = Cleanup::default();
    let url = cluster_url();
    let store = open(&url, &cleanup).await.expect("the cluster answers");
    let t = fresh_tenant();
    for i in 0..64 {
        commit_fully(&store, &request(t, user(i), &format!("m{i}"), fresh_conversation(), b"x")).await;
    }
    let namespace = store.recovery_keys()[0].split(":{").next().expect("a namespace").to_owned();
    let pattern = format!("{namespace}:{{commitgc:*");
    let held = qim_testkit::redis::keys_per_master(&url, &pattern).await.expect("the masters' keys");
    assert_eq!(held.len(), 3, "{held:?}");
    assert!(held.iter().all(|(_, keys)| *keys > 0), "every master holds some of {{commitgc}}: {held:?}");
}

/// Every master loses its scripts (a restart, a failover to a replica that never ran them): the
/// store's next steps answer as before, each script sent again as `EVAL` to its own node (no
/// `SCRIPT LOAD` to every node, which a cluster refuses while a master is down).
#[tokio::test]
async fn scripts_lost_on_every_master_come_back_by_eval() {
    let cleanup = Cleanup::default();
    let url = cluster_url();
    let store = open(&url, &cleanup).await.expect("the cluster answers");
    let (t, conv) = (fresh_tenant(), fresh_conversation());
    commit_fully(&store, &request(t, user(1), "before", conv, b"x")).await;
    let seed = url.trim_start_matches("redis+cluster://").split(',').next().expect("a seed").to_owned();
    for master in qim_testkit::redis::cluster_masters(&format!("redis://{seed}")).await.expect("CLUSTER NODES") {
        let client = redis::Client::open(master.as_str()).expect("a node url");
        let mut con = client.get_multiplexed_async_connection().await.expect("a master answers");
        redis::cmd("SCRIPT").arg("FLUSH").query_async::<()>(&mut con).await.expect("SCRIPT FLUSH");
    }
    let after = commit_fully(&store, &request(t, user(1), "after", conv, b"x")).await;
    assert_eq!(after.intent.seq.0, 2, "the next seq, through reloaded scripts");
}

/// Commits `id` on `store`, retrying while the cluster is still electing a new master (the
/// store answers `Unavailable` then); fails the test after a minute.
async fn commit_through_failover(store: &RedisMessageStore, req: &qim_store::message::CommitRequest) -> u64 {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        match store.reserve(req, qim_store::testsuite::fixtures::fresh_message_id()).await {
            Ok(_) => return commit_fully(store, req).await.intent.seq.0,
            Err(e) if e.kind() == ErrorKind::Unavailable && std::time::Instant::now() < deadline => {
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            Err(e) => panic!("reserving after the failover: {e}"),
        }
    }
}

/// Seq safety per node: the master of a conversation fails over to a replica that missed its
/// last acknowledged writes (the replica stopped, the master killed, the replica promoted). The
/// conversation's next send revalidates against the durable high-water mark and gets a seq above
/// every seq issued before, never one of the writes the new master lost; a conversation on
/// another master keeps its seqs in order throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_to_a_replica_that_missed_writes_reissues_no_seq() {
    let mut cluster = PrivateCluster::start().expect("a private redis cluster");
    let config = RedisConfig { url: cluster.url(), namespace: unique_namespace() };
    let store = RedisMessageStore::open(&config, RetentionPolicy::default(), clock())
        .await
        .expect("the cluster answers")
        .with_seq_leases(SeqLeases::new(Arc::new(MemorySeqHighWater::default())));
    let t = fresh_tenant();
    let (conv, mut other) = (fresh_conversation(), fresh_conversation());
    let master = cluster.master_of(&store.seq_key(t, conv)).expect("the conversation's master");
    while cluster.master_of(&store.seq_key(t, other)).expect("a master") == master {
        other = fresh_conversation();
    }
    for i in 1..=3 {
        commit_fully(&store, &request(t, user(1), &format!("a{i}"), conv, b"x")).await;
        commit_fully(&store, &request(t, user(1), &format!("o{i}"), other, b"x")).await;
    }
    let replica = cluster.replica_of(master).expect("the master's replica");
    cluster.wait_replicated(master, std::time::Duration::from_secs(10)).expect("the replica holds seqs 1..=3");
    cluster.pause(replica);
    cluster.cut_replication(master).expect("the master drops its replica's link");
    let mut lost = Vec::new();
    for i in 4..=6 {
        lost.push(commit_fully(&store, &request(t, user(1), &format!("a{i}"), conv, b"x")).await.intent.seq.0);
    }
    assert_eq!(lost, vec![4, 5, 6], "acknowledged while the replica was stopped");
    cluster.kill(master);
    cluster.resume(replica);
    let took = cluster.wait_ok(std::time::Duration::from_secs(60)).expect("the replica takes over");
    let mut con = qim_store::redis::RedisConnection::open(&cluster.url()).await.expect("the cluster answers");
    let counter: Option<u64> = redis::cmd("GET").arg(store.seq_key(t, conv)).query_async(&mut con).await.unwrap();
    // The new master missed seqs 4..=6 at least. It may hold less than 1..=3 too: one CI run in
    // two found no counter at all on the promoted replica, after `WAIT 1` had confirmed it held
    // 1..=3 (not understood yet); either way the next seq must clear 6.
    assert!(counter.unwrap_or(0) <= 3, "the new master holds seq {counter:?}: the writes 4..=6 were not lost");
    let next = commit_through_failover(&store, &request(t, user(1), "after", conv, b"x")).await;
    assert!(next > 6, "seq {next} after a failover that lost seqs 4..=6 (promoted in {took:?})");
    let elsewhere = commit_through_failover(&store, &request(t, user(1), "o4", other, b"x")).await;
    assert_eq!(elsewhere, 4, "the other master's conversation keeps its order");
}
