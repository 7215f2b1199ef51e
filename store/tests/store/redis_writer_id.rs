//! Writer-id leases on the local stack's Redis and its cluster: instances hold different ids, an
//! id lost in Redis (expired, deleted, taken) is replaced at the next renewal, a lease not renewed
//! within its life is fenced, and a released id is free at once.

use std::collections::HashSet;
use std::time::Duration;

use qim_store::redis::{RedisConfig, Renewal, WriterIdLease};
use qim_store::ErrorKind;

use crate::shared_redis::{cluster_url, unique_namespace, unreachable, url, Cleanup};

async fn lease(url: &str, namespace: &str, life: Duration) -> WriterIdLease {
    let config = RedisConfig { url: url.to_owned(), namespace: namespace.to_owned() };
    WriterIdLease::acquire(&config, life).await.unwrap_or_else(|e| panic!("{}", unreachable(url, &e)))
}

async fn raw(url: &str) -> qim_store::redis::RedisConnection {
    qim_store::redis::RedisConnection::open(url).await.expect("redis answers")
}

async fn instances_hold_different_ids_and_a_lost_one_is_replaced(url: &str) {
    let cleanup = Cleanup::default();
    let ns = unique_namespace();
    cleanup.register_at(url, &ns);
    let life = Duration::from_secs(10);
    let mut leases = Vec::new();
    for _ in 0..8 {
        leases.push(lease(url, &ns, life).await);
    }
    let ids: HashSet<_> = leases.iter().map(|l| l.current().expect("a fresh lease is valid")).collect();
    assert_eq!(ids.len(), 8, "two instances hold one id: {ids:?}");
    for l in &leases {
        let id = l.current().unwrap();
        assert_eq!(l.renew().await.expect("renewal"), Renewal::Held(id));
    }

    // Redis loses the first one's key and another process takes that number: the first one's
    // next renewal finds it lost and takes another id, never the taken one.
    let first = leases[0].current().unwrap();
    let key = format!("{ns}:{{writerids}}:{}", first.0);
    let mut con = raw(url).await;
    let _: () = redis::cmd("SET").arg(&key).arg("someone-else").query_async(&mut con).await.unwrap();
    match leases[0].renew().await.expect("renewal") {
        Renewal::Replaced { lost, now } => {
            assert_eq!(lost, first);
            assert!(!ids.contains(&now), "took {now}, which another instance holds");
            assert_eq!(leases[0].current().unwrap(), now);
        }
        other => panic!("a taken id was renewed: {other:?}"),
    }
    let owner: String = redis::cmd("GET").arg(&key).query_async(&mut con).await.unwrap();
    assert_eq!(owner, "someone-else", "the renewal overwrote another holder's id");

    // Released: the number is free at once, and the lease is fenced.
    let second = leases[1].current().unwrap();
    leases[1].release().await.expect("release");
    assert_eq!(leases[1].current().unwrap_err().kind(), ErrorKind::Unavailable);
    let exists: i64 =
        redis::cmd("EXISTS").arg(format!("{ns}:{{writerids}}:{}", second.0)).query_async(&mut con).await.unwrap();
    assert_eq!(exists, 0, "a released id is still held");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_hold_different_ids_and_a_lost_one_is_replaced_on_one_server() {
    instances_hold_different_ids_and_a_lost_one_is_replaced(&url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_hold_different_ids_and_a_lost_one_is_replaced_on_the_cluster() {
    instances_hold_different_ids_and_a_lost_one_is_replaced(&cluster_url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_not_renewed_within_its_life_is_fenced_until_renewed() {
    let cleanup = Cleanup::default();
    let ns = unique_namespace();
    cleanup.register(&ns);
    let held = lease(&url(), &ns, Duration::from_secs(1)).await;
    let id = held.current().expect("valid at first");
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let refused = held.current().expect_err("valid past its life");
    assert_eq!(refused.kind(), ErrorKind::Unavailable, "{refused}");
    // Its key expired in Redis too: the renewal takes an id again (perhaps the same number).
    match held.renew().await.expect("renewal") {
        Renewal::Replaced { lost, .. } => assert_eq!(lost, id),
        other => panic!("an expired id was renewed: {other:?}"),
    }
    held.current().expect("valid again");
    assert!(WriterIdLease::acquire(&RedisConfig { url: url(), namespace: ns }, Duration::from_millis(10))
        .await
        .is_err());
}
