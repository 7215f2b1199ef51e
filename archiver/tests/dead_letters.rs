//! Poison records go to the dead-letter topic with their reason and source in headers, are
//! counted, and the stream continues past them: the valid records around them are archived
//! and the committed offset passes everything.

mod support;

use std::time::Duration;

use qim_store::ids::{ConversationId, TenantId, UnixMillis};
use qim_store::retention::{RetentionClass, RetentionPolicy};
use qim_store::topic::{
    encode_message, HEADER_DLQ_DETAIL, HEADER_DLQ_REASON, HEADER_DLQ_SOURCE, HEADER_MESSAGE_ID, HEADER_SCHEMA,
};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::{Offset, TopicPartitionList};
use support::*;

/// Every record of a one-partition topic: (key, value, headers).
type Raw = (Option<Vec<u8>>, Option<Vec<u8>>, Vec<(String, Vec<u8>)>);

fn read_all(topic: &str, expected: usize) -> Vec<Raw> {
    let consumer: BaseConsumer =
        ClientConfig::new().set("bootstrap.servers", brokers()).set("group.id", unique("dlq_reader")).create().unwrap();
    let mut list = TopicPartitionList::new();
    list.add_partition_offset(topic, 0, Offset::Beginning).unwrap();
    consumer.assign(&list).unwrap();
    let mut out = Vec::new();
    while out.len() < expected {
        let m = consumer.poll(Duration::from_secs(20)).expect("a dead letter within 20 s").expect("a record");
        let headers = m
            .headers()
            .map(|h| h.iter().map(|x| (x.key.to_owned(), x.value.unwrap_or_default().to_vec())).collect())
            .unwrap_or_default();
        out.push((m.key().map(<[u8]>::to_vec), m.payload().map(<[u8]>::to_vec), headers));
    }
    out
}

fn header<'a>(raw: &'a Raw, name: &str) -> &'a str {
    let (_, _, headers) = raw;
    let value = headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_slice()).unwrap_or_default();
    std::str::from_utf8(value).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poison_is_dead_lettered_with_its_reason_and_the_stream_continues() {
    let policy = RetentionPolicy::with_default_days(30).unwrap();
    let (topic, dlq) = (create_topic("arch_poison", 1).await, create_topic("arch_dlq", 1).await);
    let good = conversation(4, &policy);
    let key = encode_message(&good[0]).key;
    // A compliance-hold record that claims an expiry: decodes, but the archive must refuse it.
    let mut held =
        record(good[0].tenant, good[0].conversation, 9, RetentionClass::ComplianceHold, UnixMillis::now(), &policy);
    held.expires_at = Some(UnixMillis::now().plus_millis(1000));
    let held = encode_message(&held);
    let other = encode_message(&record(
        fresh(TenantId),
        fresh(ConversationId),
        1,
        RetentionClass::Default,
        UnixMillis::now(),
        &policy,
    ));

    produce(&topic, &good[..1]).await; // offset 0
    produce_raw(&topic, Some(&key), Some(b"\x01\x01garbage"), &[]).await; // 1: undecodable
    produce(&topic, &good[1..2]).await; // 2
    produce_raw(&topic, Some(&key), Some(&other.value), &[]).await; // 3: value of another conversation
    produce_raw(&topic, Some(&key), None, &[]).await; // 4: tombstone
    produce(&topic, &good[2..3]).await; // 5
    produce_raw(&topic, Some(&key), Some(&other.value), &[(HEADER_MESSAGE_ID, b"00")]).await; // 6: bad key first
    let m = encode_message(&good[3]);
    produce_raw(&topic, Some(&m.key), Some(&m.value), &[(HEADER_SCHEMA, b"9")]).await; // 7: unknown schema
    produce_raw(&topic, Some(&held.key), Some(&held.value), &[]).await; // 8: bad retention
    produce(&topic, &good[3..]).await; // 9

    let config = config(&topic, &dlq, policy).await;
    let (ks, group) = (config.scylla.keyspace.clone(), config.group.clone());
    let archiver = TestArchiver::start(config).await;
    let store = archive(policy).await;
    wait_archived(store.session(), &ks, &good, Duration::from_secs(60)).await;

    let letters = read_all(&dlq, 6);
    let reasons: Vec<&str> = letters.iter().map(|l| header(l, HEADER_DLQ_REASON)).collect();
    assert_eq!(reasons, vec!["undecodable", "bad_key", "bad_key", "bad_key", "bad_header", "bad_retention"]);
    let sources: Vec<&str> = letters.iter().map(|l| header(l, HEADER_DLQ_SOURCE)).collect();
    let want: Vec<String> = [1, 3, 4, 6, 7, 8].iter().map(|o| format!("{topic}/0/{o}")).collect();
    assert_eq!(sources, want);
    assert!(letters.iter().all(|l| !header(l, HEADER_DLQ_DETAIL).is_empty()), "every letter explains itself");
    assert_eq!(letters[0].1.as_deref(), Some(&b"\x01\x01garbage"[..]), "the value is kept as it came");
    assert_eq!(letters[0].0.as_deref(), Some(&key[..]), "and the key");
    assert_eq!(header(&letters[4], HEADER_SCHEMA), "9", "and the original headers");

    wait_for("the offset past every record committed", Duration::from_secs(30), || async {
        committed(&group, &topic, 1).get(&0) == Some(&10)
    })
    .await;
    let metrics = archiver.metrics().await;
    for (name, label, want) in [
        ("qim_archiver_dead_letters_total", ("reason", "bad_key"), 3.0),
        ("qim_archiver_dead_letters_total", ("reason", "undecodable"), 1.0),
        ("qim_archiver_records_total", ("outcome", "archived"), 4.0),
        ("qim_archiver_records_total", ("outcome", "dead_lettered"), 6.0),
    ] {
        assert_eq!(metrics.values(name, &[label]).len(), 1, "{name}{label:?} exported once: {metrics:?}");
        assert_eq!(metrics.sum(name, &[label]), want, "{name}{label:?}");
    }
    archiver.stop().await.unwrap();
}
