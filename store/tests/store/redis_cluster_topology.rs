//! The Redis Cluster beyond the contract suites: a URL of the wrong topology fails at once
//! with one line naming the setting, the global indexes spread over the masters, and scripts
//! a node lost come back by `EVAL` on that node alone.
//!
//! Needs the local stack's Redis and its Redis Cluster (`deploy/local/stack up` and
//! `deploy/local/stack cluster up`; `QIM_TEST_REDIS_URL`, `QIM_TEST_REDIS_CLUSTER_URL`).

use std::collections::BTreeSet;
use std::sync::Arc;

use qim_store::memory::MemorySeqHighWater;
use qim_store::redis::{RedisConfig, RedisMessageStore, SeqLeases};
use qim_store::retention::RetentionPolicy;
use qim_store::testsuite::fixtures::{clock, fresh_conversation, fresh_tenant, request, user};
use qim_store::testsuite::message::commit_fully;
use qim_store::ErrorKind;

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
    let seed = url.trim_start_matches("redis+cluster://").split(',').next().expect("a seed").to_owned();
    let masters = qim_testkit::redis::cluster_masters(&format!("redis://{seed}")).await.expect("CLUSTER NODES");
    assert_eq!(masters.len(), 3, "{masters:?}");
    let namespace = store.recovery_keys()[0].split(":{").next().expect("a namespace").to_owned();
    let mut holding = BTreeSet::new();
    for master in &masters {
        let client = redis::Client::open(master.as_str()).expect("a node url");
        let mut con = client.get_multiplexed_async_connection().await.expect("a master answers");
        let (_, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(0)
            .arg("MATCH")
            .arg(format!("{namespace}:{{commitgc:*"))
            .arg("COUNT")
            .arg(100_000)
            .query_async(&mut con)
            .await
            .expect("SCAN");
        if !keys.is_empty() {
            holding.insert(master.clone());
        }
    }
    assert_eq!(holding.len(), masters.len(), "every master holds some of {{commitgc}}: {holding:?}");
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
