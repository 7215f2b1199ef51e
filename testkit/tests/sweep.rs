//! The sweeps delete what an exited test process left (older than `MIN_AGE`), and nothing a
//! live process or a user made. Real Kafka and Cassandra from the local stack.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use qim_testkit::stack::{kafka_config, require_scylla, unique_name, MIN_AGE};
use qim_testkit::{kafka, scylla};
use rdkafka::consumer::{BaseConsumer, Consumer as _};

/// A pid no process has (Linux's pid_max is at most 2^22).
const GONE_PID: u32 = 4_194_304 + 23;

fn long_ago_millis() -> u128 {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    (now - MIN_AGE - Duration::from_secs(60)).as_millis()
}

fn topics() -> Vec<String> {
    let consumer: BaseConsumer = kafka_config().create().unwrap();
    let md = consumer.fetch_metadata(None, Duration::from_secs(10)).unwrap();
    md.topics().iter().map(|t| t.name().to_owned()).collect()
}

#[tokio::test]
async fn topics_of_exited_test_processes_are_deleted_and_live_ones_kept() {
    let abandoned = format!("sweep_{GONE_PID}_{:x}_0.messages", long_ago_millis());
    let live = format!("{}.messages", unique_name("sweep"));
    let config = kafka_config();
    kafka::create_topics_with(&config, &[(abandoned.as_str(), 1), (live.as_str(), 1)]).await.unwrap();
    assert!(kafka::sweep_leftover_topics(&config, MIN_AGE).await >= 1);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let now = topics();
        assert!(now.contains(&live), "a live process's topic was deleted");
        if !now.contains(&abandoned) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{abandoned} is still listed");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn keyspaces_of_exited_test_processes_are_dropped_and_others_kept() {
    let session = require_scylla().await;
    let abandoned = format!("e2e_sweep_{GONE_PID}_{:x}_0", long_ago_millis());
    let live = unique_name("e2e_sweep");
    let user = "qim_sweep_user_keyspace";
    for ks in [abandoned.as_str(), live.as_str(), user] {
        let cql = format!(
            "CREATE KEYSPACE IF NOT EXISTS {ks} WITH replication = {{'class': 'SimpleStrategy', 'replication_factor': 1}}"
        );
        session.query_unpaged(cql, &[]).await.unwrap();
    }
    assert!(scylla::sweep_leftover_keyspaces(&session, MIN_AGE).await >= 1);
    let rows = session.query_unpaged("SELECT keyspace_name FROM system_schema.keyspaces", &[]).await.unwrap();
    let names: Vec<String> =
        rows.into_rows_result().unwrap().rows::<(String,)>().unwrap().map(|r| r.unwrap().0).collect();
    assert!(!names.contains(&abandoned), "{abandoned} was not dropped");
    assert!(names.contains(&live) && names.contains(&user.to_owned()), "a live or user keyspace was dropped");
    for ks in [live.as_str(), user] {
        qim_testkit::scylla::drop_keyspace(&session, ks).await.unwrap();
    }
}

#[tokio::test]
async fn redis_namespaces_of_exited_test_processes_are_deleted_and_others_kept() {
    let mut con = qim_testkit::stack::require_redis().await;
    let abandoned = format!("e2e_sweep_{GONE_PID}_{:x}_0", long_ago_millis());
    let live = unique_name("e2e_sweep");
    // A recent name of an exited process: younger than MIN_AGE, it may be another machine's run.
    let recent =
        format!("e2e_sweep_{GONE_PID}_{:x}_1", SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis());
    let user = "qim_sweep_user";
    let keys: Vec<String> = [abandoned.as_str(), live.as_str(), recent.as_str(), user]
        .iter()
        .flat_map(|ns| [format!("{ns}:{{c:1}}:seq"), format!("{ns}:{{k:2}}:commit:a")])
        .collect();
    for key in &keys {
        redis::cmd("SET").arg(key).arg("1").query_async::<()>(&mut con).await.unwrap();
    }
    assert!(qim_testkit::redis::sweep_leftover_namespaces(&qim_testkit::stack::redis_url(), MIN_AGE).await >= 1);
    for key in &keys {
        let exists: bool = redis::cmd("EXISTS").arg(key).query_async(&mut con).await.unwrap();
        assert_eq!(exists, !key.starts_with(&abandoned), "{key}: only the exited process's old namespace goes");
    }
    redis::cmd("DEL").arg(&keys).query_async::<()>(&mut con).await.unwrap();
}
