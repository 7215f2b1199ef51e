//! Duplicate dispatch records at later offsets change nothing; a record with the same id and a
//! different manifest, and an undecodable one, are refused to the dead-letter topic and block
//! nothing after them.

use crate::support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use qim_store::ids::{ConversationId, TenantId, UserId};
use qim_store::mailbox::{shard_of, DispatchId, DispatchManifest, MailboxSeq, ShardId};
use qim_store::topic::{dispatch_key, HEADER_DLQ_DETAIL, HEADER_DLQ_REASON, HEADER_DLQ_SOURCE};
use qim_store::MailboxStore;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use support::{
    fresh, mailbox_of, mailboxes_of, message, wait_for, watermarks, Fixture, Kind, EPOCH, SHARDS, TEST_HEADER,
    TEST_HEADER_VALUE,
};

const SHARD: ShardId = ShardId(3);

/// `n` fresh users of `SHARD`.
fn shard_users(tenant: TenantId, n: usize) -> Vec<UserId> {
    std::iter::repeat_with(|| fresh(UserId)).filter(|u| shard_of(&tenant, u, SHARDS) == SHARD).take(n).collect()
}

fn manifest(tenant: TenantId, recipients: Vec<UserId>) -> DispatchManifest {
    let record = message(tenant, fresh(ConversationId), 1, recipients[0]);
    let id = DispatchId { message_id: record.message_id, shard: SHARD };
    DispatchManifest::new(id, qim_mailbox_dispatcher::router::route::message_ref(&record), recipients)
}

async fn passed(store: &Arc<dyn MailboxStore>, offset: u64) {
    wait_for(&format!("every lane of shard {} to pass offset {offset}", SHARD.0), Duration::from_secs(60), || {
        let store = Arc::clone(store);
        async move { watermarks(store.as_ref(), SHARD).await.iter().all(|w| w.is_some_and(|w| w >= offset)) }
    })
    .await;
}

async fn snapshot(
    store: &dyn MailboxStore,
    tenant: TenantId,
    users: &[UserId],
) -> BTreeMap<UserId, Vec<(MailboxSeq, qim_store::ids::MessageId)>> {
    mailboxes_of(store, tenant, users.iter().copied()).await.into_iter().collect()
}

/// Every dead letter of the fixture: (reason, source) pairs, after checking each kept the
/// refused record's own header and says what was wrong.
fn dead_letters(f: &Fixture) -> Vec<(String, String)> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", support::brokers())
        .set("group.id", support::unique("dlq_reader"))
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    consumer.subscribe(&[&f.config.kafka.dlq_topic]).unwrap();
    let mut out = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while std::time::Instant::now() < deadline && out.len() < 2 {
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(500)) {
            let header = |name: &str| {
                m.headers()
                    .and_then(|h| h.iter().find(|x| x.key == name).and_then(|x| x.value))
                    .map(|v| String::from_utf8_lossy(v).into_owned())
                    .unwrap_or_default()
            };
            assert_eq!(header(TEST_HEADER).as_bytes(), TEST_HEADER_VALUE, "the refused record's header is kept");
            assert!(!header(HEADER_DLQ_DETAIL).is_empty(), "a dead letter says what was wrong");
            out.push((header(HEADER_DLQ_REASON), header(HEADER_DLQ_SOURCE)));
        }
    }
    out
}

async fn duplicates_change_nothing_and_conflicts_are_refused(kind: Kind) {
    let f = Fixture::new(kind).await;
    let d = f.start().await;
    let store = f.mailbox().await;
    let tenant = fresh(TenantId);
    let recipients = shard_users(tenant, 300);
    let m = manifest(tenant, recipients.clone());

    assert_eq!(f.produce_dispatch(&m).await, 0);
    passed(&store, 0).await;
    let first = snapshot(store.as_ref(), tenant, &recipients).await;
    let seq0 = MailboxSeq::from_offset(EPOCH, 0).unwrap();
    assert!(first.values().all(|v| *v == vec![(seq0, m.id.message_id)]), "one entry each at seq {seq0}");

    // A duplicate at a later offset: absorbed, the lanes pass it, nothing changes.
    assert_eq!(f.produce_dispatch(&m).await, 1);
    passed(&store, 1).await;
    assert_eq!(snapshot(store.as_ref(), tenant, &recipients).await, first);
    let progress = store.dispatch_progress(m.id).await.unwrap().expect("the dispatch is known");
    assert_eq!((progress.receipt.seq, progress.max_observed_offset), (seq0, 1));

    // The same id with another recipient list: refused, the newcomer gets nothing.
    let newcomer = shard_users(tenant, 1)[0];
    let mut other = recipients.clone();
    other.push(newcomer);
    let conflicting = DispatchManifest::new(m.id, m.message.clone(), other);
    assert_eq!(f.produce_dispatch(&conflicting).await, 2);
    // Garbage under a dispatch key: refused too.
    let garbage_key = dispatch_key(&DispatchId { message_id: fresh(qim_store::ids::MessageId), shard: SHARD });
    assert_eq!(f.produce_raw_dispatch(i32::from(SHARD.0), &garbage_key, b"\x01not a manifest").await, 3);

    // A new dispatch and its duplicate back to back (both in flight at once), after the refusals.
    let later = shard_users(tenant, 200);
    let n = manifest(tenant, later.clone());
    assert_eq!(f.produce_dispatch(&n).await, 4);
    assert_eq!(f.produce_dispatch(&n).await, 5);
    passed(&store, 5).await;

    assert_eq!(snapshot(store.as_ref(), tenant, &recipients).await, first, "the conflict changed nothing");
    assert!(mailbox_of(store.as_ref(), tenant, newcomer).await.is_empty(), "the conflicting manifest wrote nothing");
    let seq4 = MailboxSeq::from_offset(EPOCH, 4).unwrap();
    for u in &later {
        assert_eq!(mailbox_of(store.as_ref(), tenant, *u).await, vec![(seq4, n.id.message_id)]);
    }
    let mut letters = dead_letters(&f);
    letters.sort();
    let source = |o: u64| format!("{}/{}/{o}", f.config.kafka.dispatch_topic, SHARD.0);
    assert_eq!(
        letters,
        vec![("dispatch_conflict".to_owned(), source(2)), ("undecodable".to_owned(), source(3))],
        "exactly the two refused records are dead-lettered"
    );
    d.stop().await;
}

both_backends!(duplicates_change_nothing_and_conflicts_are_refused);
