//! Two dispatcher instances in one group while messages flow: the second joins (a rebalance of
//! both consumer groups), then the first leaves gracefully (another). No entry is lost,
//! doubled or renumbered: every member holds exactly one entry per message of its
//! conversation, at the seq of the dispatch's first offset in its shard's log.

use crate::support;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use qim_store::ids::{ConversationId, MessageId, TenantId, UserId};
use qim_store::mailbox::{MailboxSeq, ShardId};
use qim_store::topic::decode_dispatch;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use support::{
    add_members, fresh, mailboxes_of, message, users, wait_for, wait_groups_settled, watermarks, Fixture, Kind, EPOCH,
    SHARDS,
};

const CONVERSATIONS: usize = 3;
const MEMBERS: usize = 120;
const MESSAGES: usize = 60;

/// Every dispatch record of the fixture: the first offset of each dispatch id, and the last
/// offset of each partition.
fn dispatch_log(f: &Fixture) -> (HashMap<(MessageId, ShardId), u64>, HashMap<ShardId, u64>) {
    let topic = &f.config.kafka.dispatch_topic;
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", support::brokers())
        .set("group.id", support::unique("log_reader"))
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut list = TopicPartitionList::new();
    let mut ends = HashMap::new();
    for p in 0..i32::from(SHARDS) {
        let (_, high) = consumer.fetch_watermarks(topic, p, Duration::from_secs(10)).unwrap();
        if high > 0 {
            ends.insert(p, high);
            list.add_partition_offset(topic, p, Offset::Beginning).unwrap();
        }
    }
    consumer.assign(&list).unwrap();
    let last: HashMap<ShardId, u64> =
        ends.iter().map(|(p, h)| (ShardId(u16::try_from(*p).unwrap()), u64::try_from(*h - 1).unwrap())).collect();
    let mut first = HashMap::new();
    while !ends.is_empty() {
        let m = consumer.poll(Duration::from_secs(10)).expect("records within 10 s").unwrap();
        let manifest = decode_dispatch(m.key(), m.payload(), m.partition()).expect("the router writes valid records");
        let offset = u64::try_from(m.offset()).unwrap();
        first.entry((manifest.id.message_id, manifest.id.shard)).or_insert(offset);
        if ends.get(&m.partition()).is_some_and(|h| m.offset() + 1 >= *h) {
            ends.remove(&m.partition());
        }
    }
    (first, last)
}

async fn two_instances_and_a_rebalance_while_records_flow(kind: Kind) {
    let f = Arc::new(Fixture::new(kind).await);
    let tenant = fresh(TenantId);
    let members = f.members().await;
    let mut conversations: Vec<(ConversationId, Vec<UserId>)> = Vec::new();
    for _ in 0..CONVERSATIONS {
        let (c, us) = (fresh(ConversationId), users(MEMBERS));
        add_members(members.as_ref(), tenant, c, &us).await;
        conversations.push((c, us));
    }
    let conversations = Arc::new(conversations);

    let a = f.start().await;
    let producer = {
        let (f, conversations) = (Arc::clone(&f), Arc::clone(&conversations));
        tokio::spawn(async move {
            let mut sent: Vec<(usize, MessageId)> = Vec::new();
            for i in 0..MESSAGES {
                let c = i % CONVERSATIONS;
                let (conversation, us) = &conversations[c];
                let record = message(tenant, *conversation, (i / CONVERSATIONS + 1) as u64, us[0]);
                f.produce_message(&record).await;
                sent.push((c, record.message_id));
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            sent
        })
    };
    wait_for("the first instance routing messages", Duration::from_secs(60), || {
        std::future::ready(!dispatch_log(&f).1.is_empty())
    })
    .await;
    let b = f.start().await;
    wait_groups_settled(&f.config.kafka, 2).await;
    a.stop().await;
    let sent = producer.await.unwrap();

    // Wait until the dispatch log holds every message's records and every lane passed them.
    let store = f.mailbox().await;
    let expected_records =
        |first: &HashMap<(MessageId, ShardId), u64>| sent.iter().all(|(_, id)| first.keys().any(|(m, _)| m == id));
    let mut log = dispatch_log(&f);
    wait_for("every message routed and every lane past its shard's log", Duration::from_secs(180), || {
        log = dispatch_log(&f);
        let (first, last) = (log.0.clone(), log.1.clone());
        let store = Arc::clone(&store);
        let routed = expected_records(&first);
        async move {
            if !routed {
                return false;
            }
            for (shard, end) in &last {
                if !watermarks(store.as_ref(), *shard).await.iter().all(|w| w.is_some_and(|w| w >= *end)) {
                    return false;
                }
            }
            true
        }
    })
    .await;
    let (first, _) = log;

    for (c, (_, us)) in conversations.iter().enumerate() {
        let mine: Vec<MessageId> = sent.iter().filter(|(k, _)| *k == c).map(|(_, id)| *id).collect();
        for (u, got) in mailboxes_of(store.as_ref(), tenant, us.iter().copied()).await {
            let shard = qim_store::mailbox::shard_of(&tenant, &u, SHARDS);
            let mut want: Vec<(MailboxSeq, MessageId)> =
                mine.iter().map(|id| (MailboxSeq::from_offset(EPOCH, first[&(*id, shard)]).unwrap(), *id)).collect();
            want.sort();
            assert_eq!(got, want, "mailbox of {u}: one entry per message, at its first offset's seq");
        }
    }
    b.stop().await;
}

both_backends!(two_instances_and_a_rebalance_while_records_flow);
