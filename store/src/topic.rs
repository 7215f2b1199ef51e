//! The Kafka wire contract of the pipeline: what the writer produces to `qim.messages.v1` and
//! what the router produces to `qim.mailbox.dispatch.v1`, and how consumers validate both.
//!
//! A message record on `qim.messages.v1`:
//! - key: the 32 bytes `tenant ++ conversation`, so one conversation stays in one partition
//!   (per-conversation order) and two tenants' equal conversation ids never meet;
//! - value: [`crate::codec::encode_record`] of the committed [`MessageRecord`] (versioned, fails
//!   closed on anything unknown);
//! - headers: [`HEADER_SCHEMA`] (the value's format version, decimal) and [`HEADER_MESSAGE_ID`]
//!   (32 hex digits), so tools can route or drop records without decoding them.
//!
//! A dispatch record on `qim.mailbox.dispatch.v1`: key = the dispatch id
//! (`message id ++ shard`, 18 bytes), value = [`crate::codec::encode_manifest`], partition =
//! the mailbox shard.
//!
//! Decoding checks that key, headers and value agree; a mismatch is a [`TopicError`] a consumer
//! sends to the dead-letter topic with [`TopicError::reason`] in its headers.

use crate::codec::{self, CodecError};
use crate::ids::{ConversationId, MessageId, TenantId};
use crate::mailbox::{DispatchId, DispatchManifest, ShardId};
use crate::message::MessageRecord;

/// Default name of the committed-message topic.
pub const MESSAGES_TOPIC: &str = "qim.messages.v1";
/// Default name of the mailbox dispatch topic (one partition per mailbox shard).
pub const DISPATCH_TOPIC: &str = "qim.mailbox.dispatch.v1";
/// Default name of the archiver's dead-letter topic.
pub const MESSAGES_DLQ_TOPIC: &str = "qim.messages.dlq.v1";

/// Header carrying the value's format version.
pub const HEADER_SCHEMA: &str = "qim-schema";
/// Header carrying the message id as 32 hex digits.
pub const HEADER_MESSAGE_ID: &str = "qim-message-id";
/// Dead-letter header: why the record was rejected.
pub const HEADER_DLQ_REASON: &str = "qim-dlq-reason";
/// Dead-letter header: `topic/partition/offset` the record came from.
pub const HEADER_DLQ_SOURCE: &str = "qim-dlq-source";
/// Dead-letter header: the full error, for people.
pub const HEADER_DLQ_DETAIL: &str = "qim-dlq-detail";

/// The format version of message values this build writes and reads.
pub const MESSAGE_SCHEMA_VERSION: u8 = 1;

/// Length of a message key: tenant id then conversation id.
pub const MESSAGE_KEY_LEN: usize = 32;

/// A record on either topic that can not be trusted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopicError {
    /// The value did not decode.
    #[error("undecodable value: {0}")]
    Codec(#[from] CodecError),
    /// The key is missing or has the wrong length or contents.
    #[error("bad key: {0}")]
    Key(String),
    /// A header is missing, malformed or disagrees with the value.
    #[error("bad header: {0}")]
    Header(String),
}

impl TopicError {
    /// A short, stable reason for dead-letter headers and metric labels.
    pub const fn reason(&self) -> &'static str {
        match self {
            TopicError::Codec(_) => "undecodable",
            TopicError::Key(_) => "bad_key",
            TopicError::Header(_) => "bad_header",
        }
    }
}

/// The partitioning key of a conversation's records.
pub fn message_key(tenant: &TenantId, conversation: &ConversationId) -> [u8; MESSAGE_KEY_LEN] {
    let mut key = [0u8; MESSAGE_KEY_LEN];
    key[..16].copy_from_slice(tenant.as_bytes());
    key[16..].copy_from_slice(conversation.as_bytes());
    key
}

/// One message record as produced: key, value and the header values in [`HEADER_SCHEMA`],
/// [`HEADER_MESSAGE_ID`] order.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct EncodedMessage {
    /// [`message_key`] of the record.
    pub key: [u8; MESSAGE_KEY_LEN],
    /// The canonical record bytes.
    pub value: Vec<u8>,
    /// The schema version header's value.
    pub schema: String,
    /// The message id header's value.
    pub message_id: String,
}

/// Encodes a committed record for `qim.messages.v1`.
pub fn encode_message(record: &MessageRecord) -> EncodedMessage {
    EncodedMessage {
        key: message_key(&record.tenant, &record.conversation),
        value: codec::encode_record(record),
        schema: MESSAGE_SCHEMA_VERSION.to_string(),
        message_id: record.message_id.to_hex(),
    }
}

/// Decodes and cross-checks a record read from `qim.messages.v1`. Headers are optional for
/// forward compatibility with tools that strip them, but when present they must agree.
pub fn decode_message(
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    schema: Option<&[u8]>,
    message_id: Option<&[u8]>,
) -> Result<MessageRecord, TopicError> {
    if let Some(schema) = schema {
        if schema != MESSAGE_SCHEMA_VERSION.to_string().as_bytes() {
            return Err(TopicError::Header(format!(
                "{HEADER_SCHEMA} is {:?}, this build reads {MESSAGE_SCHEMA_VERSION}",
                String::from_utf8_lossy(schema)
            )));
        }
    }
    let value = value.ok_or_else(|| TopicError::Key("record has no value (tombstone)".into()))?;
    let record = codec::decode_record(value)?;
    let expected = message_key(&record.tenant, &record.conversation);
    match key {
        Some(k) if k == expected => {}
        Some(k) => return Err(TopicError::Key(format!("{} bytes that are not tenant ++ conversation", k.len()))),
        None => return Err(TopicError::Key("record has no key".into())),
    }
    if let Some(id) = message_id {
        let parsed = std::str::from_utf8(id).ok().and_then(|s| MessageId::from_hex(s).ok());
        if parsed != Some(record.message_id) {
            return Err(TopicError::Header(format!(
                "{HEADER_MESSAGE_ID} {:?} does not name the record's message {}",
                String::from_utf8_lossy(id),
                record.message_id
            )));
        }
    }
    Ok(record)
}

/// Length of a dispatch key: message id then shard (big-endian).
pub const DISPATCH_KEY_LEN: usize = 18;

/// The key of a dispatch record.
pub fn dispatch_key(id: &DispatchId) -> [u8; DISPATCH_KEY_LEN] {
    let mut key = [0u8; DISPATCH_KEY_LEN];
    key[..16].copy_from_slice(id.message_id.as_bytes());
    key[16..].copy_from_slice(&id.shard.0.to_be_bytes());
    key
}

/// Decodes and cross-checks a record read from `qim.mailbox.dispatch.v1` at `partition`.
pub fn decode_dispatch(
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    partition: i32,
) -> Result<DispatchManifest, TopicError> {
    let value = value.ok_or_else(|| TopicError::Key("record has no value (tombstone)".into()))?;
    let manifest = codec::decode_manifest(value)?;
    if key != Some(&dispatch_key(&manifest.id)[..]) {
        return Err(TopicError::Key("key does not name the manifest's dispatch id".into()));
    }
    if i32::from(manifest.id.shard.0) != partition {
        return Err(TopicError::Key(format!(
            "dispatch for shard {} found in partition {partition}",
            manifest.id.shard.0
        )));
    }
    Ok(manifest)
}

/// The partition a shard's dispatch records go to.
pub fn dispatch_partition(shard: ShardId) -> i32 {
    i32::from(shard.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{ClientMessageId, ConversationSeq, UnixMillis, UserId};
    use crate::message::MessageKind;
    use crate::retention::RetentionClass;

    fn record() -> MessageRecord {
        MessageRecord {
            tenant: TenantId([1; 16]),
            conversation: ConversationId([2; 16]),
            seq: ConversationSeq(7),
            message_id: MessageId([3; 16]),
            sender: UserId([4; 16]),
            client_message_id: ClientMessageId::new("c-7").unwrap(),
            kind: MessageKind::Normal,
            retention: RetentionClass::Default,
            created_at: UnixMillis(1_700_000_000_000),
            expires_at: Some(UnixMillis(1_702_592_000_000)),
            payload: b"hello".to_vec(),
        }
    }

    #[test]
    fn a_message_round_trips_with_its_key_and_headers() {
        let record = record();
        let m = encode_message(&record);
        let back =
            decode_message(Some(&m.key), Some(&m.value), Some(m.schema.as_bytes()), Some(m.message_id.as_bytes()));
        assert_eq!(back, Ok(record));
    }

    #[test]
    fn a_message_under_another_key_or_id_is_refused() {
        let record = record();
        let m = encode_message(&record);
        let other_key = [0u8; MESSAGE_KEY_LEN];
        let err = decode_message(Some(&other_key), Some(&m.value), None, None).unwrap_err();
        assert_eq!(err.reason(), "bad_key");
        let err = decode_message(Some(&m.key), Some(&m.value), Some(b"2"), None).unwrap_err();
        assert_eq!(err.reason(), "bad_header");
        let err = decode_message(Some(&m.key), Some(&m.value), None, Some(b"00")).unwrap_err();
        assert_eq!(err.reason(), "bad_header");
        let err = decode_message(Some(&m.key), Some(b"\x01garbage"), None, None).unwrap_err();
        assert_eq!(err.reason(), "undecodable");
        let err = decode_message(Some(&m.key), None, None, None).unwrap_err();
        assert_eq!(err.reason(), "bad_key");
    }
}
