//! The Kafka side of the consumer: the group consumer, and owned copies of records.
//!
//! Offsets: `enable.auto.offset.store=false`, so nothing counts as consumed until the archiver
//! calls `store_offset` after the record's effect is durable; librdkafka then commits the
//! stored offsets every second, and synchronously when partitions are revoked. A crash between
//! the write and the commit re-delivers records whose rows already exist: the rewrite stores the
//! same values.
//!
//! Rebalance callbacks run inside `recv()` on the archiver's own task, never during a write.
//! Records carry the [`Lease`] of their partition they were received under; a record (or a
//! whole partition batch) whose lease has ended is dropped before its offset could be stored:
//! the partition's next owner reads it again from the committed offset.

use qim_runtime::kafka::consumer::{group_consumer_config, GroupContext, Lease};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::StreamConsumer;
use rdkafka::error::KafkaResult;
use rdkafka::message::{BorrowedMessage, Headers, Message};

/// One record as received, detached from the consumer.
#[derive(Clone, Debug)]
pub struct Incoming {
    /// Its partition.
    pub partition: i32,
    /// Its offset.
    pub offset: i64,
    /// The lease of its partition it was received under.
    pub lease: Lease,
    /// The key, if any.
    pub key: Option<Vec<u8>>,
    /// The value, if any.
    pub value: Option<Vec<u8>>,
    /// The headers in order.
    pub headers: Vec<(String, Option<Vec<u8>>)>,
    /// The record's timestamp (ms since the epoch), if it has one.
    pub timestamp_ms: Option<i64>,
}

impl Incoming {
    /// Copies `message`, received under `lease`.
    pub fn from_message(message: &BorrowedMessage<'_>, lease: Lease) -> Self {
        let headers = message
            .headers()
            .map(|h| h.iter().map(|x| (x.key.to_owned(), x.value.map(<[u8]>::to_vec))).collect())
            .unwrap_or_default();
        Self {
            partition: message.partition(),
            offset: message.offset(),
            lease,
            key: message.key().map(<[u8]>::to_vec),
            value: message.payload().map(<[u8]>::to_vec),
            headers,
            timestamp_ms: message.timestamp().to_millis(),
        }
    }

    /// The first header called `name`, if it has a value.
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers.iter().find(|(k, _)| k == name).and_then(|(_, v)| v.as_deref())
    }
}

/// The archiver's consumer type.
pub type ArchiverConsumer = StreamConsumer<GroupContext>;

/// Creates the group consumer (not yet subscribed), with the settings and revocation handling
/// every qim consumer shares ([`qim_runtime::kafka::consumer`]).
pub fn group_consumer(brokers: &str, group: &str, context: GroupContext) -> KafkaResult<ArchiverConsumer> {
    group_consumer_config(brokers, group).create_with_context(context)
}

/// Creates a consumer for explicit assignment (replay): no group membership, no commits.
pub fn replay_consumer(brokers: &str, group: &str) -> KafkaResult<StreamConsumer> {
    ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("enable.partition.eof", "false")
        .create()
}
