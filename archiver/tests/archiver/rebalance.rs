//! Two archivers in one group: the second joins while the first consumes, partitions move
//! (revocation mid-stream), and at the end every record is archived exactly as produced and
//! the group's committed offsets reach the end of every partition.

use crate::support;

use std::time::Duration;

use qim_store::codec::encode_record;
use qim_store::retention::RetentionPolicy;
use rdkafka::consumer::{BaseConsumer, Consumer};
use support::*;

const PARTITIONS: i32 = 4;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_joining_mid_stream_moves_partitions_without_losing_a_record() {
    let policy = RetentionPolicy::with_default_days(30).unwrap();
    let (topic, dlq) = (create_topic("a_rebal", PARTITIONS).await, create_topic("a_rb_dlq", 1).await);
    let records: Vec<_> = (0..40).flat_map(|_| conversation(50, &policy)).collect();
    produce(&topic, &records).await;
    let mut config = config(&topic, &dlq, policy).await;
    config.batch.max_records = 50;
    let ks = config.scylla.keyspace.clone();
    let first = TestArchiver::start(config.clone()).await;
    let store = archive(policy).await;
    wait_for("the first member to make progress", Duration::from_secs(60), || async {
        committed(&config.group, &topic, PARTITIONS).values().sum::<i64>() > 0
    })
    .await;
    let second = TestArchiver::start(config.clone()).await;
    let consumer: BaseConsumer = rdkafka::ClientConfig::new().set("bootstrap.servers", brokers()).create().unwrap();
    let ends: std::collections::HashMap<i32, i64> = (0..PARTITIONS)
        .map(|p| (p, consumer.fetch_watermarks(&topic, p, Duration::from_secs(10)).unwrap().1))
        .collect();
    wait_for("every partition consumed by the group", Duration::from_secs(120), || async {
        committed(&config.group, &topic, PARTITIONS) == ends
    })
    .await;
    second.stop().await.unwrap();
    first.stop().await.unwrap();
    for r in &records {
        let s = stored(store.session(), &ks, r).await.unwrap_or_else(|| panic!("seq {} lost", r.seq));
        assert_eq!(s.blob, encode_record(r));
    }
}
