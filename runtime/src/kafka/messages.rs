//! Committed messages on Kafka: the one way a `qim.messages.v1` record is produced (its key,
//! canonical value and the schema and message-id headers) and read back.

use qim_store::message::MessageRecord;
use qim_store::topic::{decode_message, EncodedMessage, TopicError, HEADER_MESSAGE_ID, HEADER_SCHEMA};
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::FutureRecord;

/// The Kafka record of `m` (from `qim_store::topic::encode_message`) for `topic`.
pub fn message_record<'a>(topic: &'a str, m: &'a EncodedMessage) -> FutureRecord<'a, [u8], Vec<u8>> {
    let headers = OwnedHeaders::new()
        .insert(Header { key: HEADER_SCHEMA, value: Some(m.schema.as_bytes()) })
        .insert(Header { key: HEADER_MESSAGE_ID, value: Some(m.message_id.as_bytes()) });
    FutureRecord::to(topic).key(&m.key[..]).payload(&m.value).headers(headers)
}

/// The value of the first header of `message` named `name`.
pub fn header<'m, M: Message>(message: &'m M, name: &str) -> Option<&'m [u8]> {
    message.headers().and_then(|h| h.iter().find(|x| x.key == name).and_then(|x| x.value))
}

/// Decodes and cross-checks a record read from the messages topic.
///
/// # Errors
///
/// What [`decode_message`] refuses: a missing or malformed key or value, headers that disagree
/// with the value, an unknown schema version.
pub fn decode<M: Message>(message: &M) -> Result<MessageRecord, TopicError> {
    decode_message(message.key(), message.payload(), header(message, HEADER_SCHEMA), header(message, HEADER_MESSAGE_ID))
}
