//! DESIGN invariant 8 at the archiver: a record whose coordinates already hold a different
//! archived record is dead-lettered (reason `conflicting_record`), counted and logged once; the
//! original stays. (Its own test binary: `/metrics` is per process, and the counts of
//! `dead_letters.rs` would mix with these.)

use crate::support;

use std::time::Duration;

use qim_store::retention::RetentionPolicy;
use qim_store::topic::{encode_message, HEADER_DLQ_DETAIL, HEADER_DLQ_REASON, HEADER_DLQ_SOURCE};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers as _, Message};
use rdkafka::{Offset, TopicPartitionList};
use support::*;

/// A record's headers, in order.
type Headers = Vec<(String, Vec<u8>)>;

/// The first dead letter of a one-partition topic: (value, headers).
fn first_letter(topic: &str) -> (Option<Vec<u8>>, Headers) {
    let consumer: BaseConsumer =
        ClientConfig::new().set("bootstrap.servers", brokers()).set("group.id", unique("dlq_reader")).create().unwrap();
    let mut list = TopicPartitionList::new();
    list.add_partition_offset(topic, 0, Offset::Beginning).unwrap();
    consumer.assign(&list).unwrap();
    let m = consumer.poll(Duration::from_secs(30)).expect("a dead letter within 30 s").expect("a record");
    let headers = m
        .headers()
        .map(|h| h.iter().map(|x| (x.key.to_owned(), x.value.unwrap_or_default().to_vec())).collect())
        .unwrap_or_default();
    (m.payload().map(<[u8]>::to_vec), headers)
}

fn header<'a>(headers: &'a [(String, Vec<u8>)], name: &str) -> &'a str {
    std::str::from_utf8(headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_slice()).unwrap_or_default()).unwrap()
}

/// DESIGN invariant 8: a record whose (tenant, conversation, seq) already holds a different
/// archived record (a reissued seq, whatever its cause) is refused: dead-lettered with reason
/// `conflicting_record`, counted, and the original stays in the archive, byte for byte. An
/// identical copy (a physical duplicate) is no conflict.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_different_record_at_an_archived_seq_is_dead_lettered_and_the_original_kept() {
    let policy = RetentionPolicy::with_default_days(30).unwrap();
    let (topic, dlq) = (create_topic("a_confl", 1).await, create_topic("a_confl_dlq", 1).await);
    let originals = conversation(3, &policy);
    let mut impostor = originals[1].clone();
    impostor.payload = b"another message given the same seq".to_vec();
    impostor.message_id = qim_store::ids::MessageId([0xee; 16]);
    produce(&topic, &originals).await; // offsets 0..=2
    produce(&topic, &originals[..1]).await; // 3: a physical duplicate
    produce(&topic, std::slice::from_ref(&impostor)).await; // 4: the conflict

    let config = config(&topic, &dlq, policy).await;
    let (ks, group) = (config.scylla.keyspace.clone(), config.group.clone());
    let archiver = TestArchiver::start(config).await;
    let store = archive(policy).await;
    wait_archived(store.session(), &ks, &originals, Duration::from_secs(60)).await;
    let (value, headers) = first_letter(&dlq);
    assert_eq!(header(&headers, HEADER_DLQ_REASON), "conflicting_record");
    assert_eq!(header(&headers, HEADER_DLQ_SOURCE), format!("{topic}/0/4"));
    assert!(header(&headers, HEADER_DLQ_DETAIL).contains("seq 2"), "{}", header(&headers, HEADER_DLQ_DETAIL));
    assert_eq!(value.as_deref(), Some(&encode_message(&impostor).value[..]), "the refused record as it came");
    wait_for("the offset past every record committed", Duration::from_secs(30), || async {
        committed(&group, &topic, 1).get(&0) == Some(&5)
    })
    .await;
    let kept = stored(store.session(), &ks, &originals[1]).await.expect("the original is archived");
    assert_eq!(kept.blob, qim_store::codec::encode_record(&originals[1]), "the original, byte for byte");
    let metrics = archiver.metrics().await;
    let refused = metrics.sum("qim_archiver_dead_letters_total", &[("reason", "conflicting_record")]);
    assert_eq!(refused, 1.0, "one conflicting record dead-lettered: {metrics:?}");
    archiver.stop().await.unwrap();
}
