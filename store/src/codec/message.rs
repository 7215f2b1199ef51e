//! Encodings of commit requests, intents, commits and history records (format version 1).

use bincode::{Decode, Encode};

use super::{decode_blob, encode_blob, tag, CodecError};
use crate::ids::{ClientMessageId, ConversationId, ConversationSeq, MessageId, TenantId, UnixMillis, UserId};
use crate::message::{
    Commit, CommitIntent, CommitKey, CommitRequest, CommitState, MessageKind, MessageRecord, Publication,
    MAX_PAYLOAD_BYTES,
};
use crate::retention::RetentionClass;

const V1: u8 = 1;

/// Where an encoded commit head ([`encode_commit_head`]) holds its seq: eight big-endian bytes
/// right after the blob's tag and version. Fixed, because every field before it is fixed-width:
/// a Redis script that issues the seq can write it into a head the caller encoded around a
/// placeholder, without decoding the blob.
pub const COMMIT_HEAD_SEQ_BYTES: std::ops::Range<usize> = 2..10;

/// Where an encoded record ([`encode_record`]) holds its seq: eight big-endian bytes after the
/// tag, the version, the tenant and the conversation (all fixed-width), as
/// [`COMMIT_HEAD_SEQ_BYTES`].
pub const RECORD_SEQ_BYTES: std::ops::Range<usize> = 34..42;

#[derive(Encode, Decode)]
struct RequestV1 {
    tenant: [u8; 16],
    sender: [u8; 16],
    client_message_id: String,
    conversation: [u8; 16],
    kind: u8,
    retention: u8,
    payload: Vec<u8>,
}

#[derive(Encode, Decode)]
struct IntentV1 {
    request: RequestV1,
    seq: u64,
    message_id: [u8; 16],
    created_at: i64,
    publication: Option<(i32, i64)>,
}

#[derive(Encode, Decode)]
struct CommitV1 {
    intent: IntentV1,
    state: u8,
    committed_at: Option<i64>,
}

/// A commit without its request: what Redis keeps beside the request bytes, so a transition
/// compares and rewrites these few bytes instead of the whole payload.
#[derive(Encode, Decode)]
struct CommitHeadV1 {
    seq: u64,
    message_id: [u8; 16],
    created_at: i64,
    publication: Option<(i32, i64)>,
    state: u8,
    committed_at: Option<i64>,
}

#[derive(Encode, Decode)]
struct RecordV1 {
    tenant: [u8; 16],
    conversation: [u8; 16],
    seq: u64,
    message_id: [u8; 16],
    sender: [u8; 16],
    client_message_id: String,
    kind: u8,
    retention: u8,
    created_at: i64,
    expires_at: Option<i64>,
    payload: Vec<u8>,
}

pub(super) fn kind_code(k: MessageKind) -> u8 {
    match k {
        MessageKind::Normal => 0,
        MessageKind::Edited => 1,
        MessageKind::Control => 2,
    }
}

pub(super) fn kind_from(what: &'static str, code: u8) -> Result<MessageKind, CodecError> {
    MessageKind::ALL
        .get(usize::from(code))
        .copied()
        .ok_or_else(|| CodecError::Invalid { what, reason: format!("unknown message kind {code}") })
}

fn retention_code(r: RetentionClass) -> u8 {
    match r {
        RetentionClass::Default => 0,
        RetentionClass::Ephemeral24h => 1,
        RetentionClass::ComplianceHold => 2,
        RetentionClass::TenantCustom => 3,
    }
}

fn retention_from(what: &'static str, code: u8) -> Result<RetentionClass, CodecError> {
    RetentionClass::ALL
        .get(usize::from(code))
        .copied()
        .ok_or_else(|| CodecError::Invalid { what, reason: format!("unknown retention class {code}") })
}

fn state_code(s: CommitState) -> u8 {
    match s {
        CommitState::Reserved => 0,
        CommitState::Recorded => 1,
        CommitState::Outboxed => 2,
        CommitState::Committed => 3,
    }
}

fn state_from(what: &'static str, code: u8) -> Result<CommitState, CodecError> {
    [CommitState::Reserved, CommitState::Recorded, CommitState::Outboxed, CommitState::Committed]
        .get(usize::from(code))
        .copied()
        .ok_or_else(|| CodecError::Invalid { what, reason: format!("unknown commit state {code}") })
}

fn client_id(what: &'static str, raw: String) -> Result<ClientMessageId, CodecError> {
    ClientMessageId::new(raw).map_err(|e| CodecError::Invalid { what, reason: e.to_string() })
}

fn check_payload(what: &'static str, payload: &[u8]) -> Result<(), CodecError> {
    if payload.len() > MAX_PAYLOAD_BYTES {
        return Err(CodecError::Invalid {
            what,
            reason: format!("payload of {} bytes exceeds {MAX_PAYLOAD_BYTES}", payload.len()),
        });
    }
    Ok(())
}

pub(super) fn check_seq(what: &'static str, seq: u64) -> Result<ConversationSeq, CodecError> {
    if seq == 0 || seq >> 63 != 0 {
        return Err(CodecError::Invalid { what, reason: format!("conversation seq {seq} is out of range") });
    }
    Ok(ConversationSeq(seq))
}

fn request_wire(r: &CommitRequest) -> RequestV1 {
    RequestV1 {
        tenant: r.key.tenant.0,
        sender: r.key.sender.0,
        client_message_id: r.key.client_message_id.as_str().to_owned(),
        conversation: r.conversation.0,
        kind: kind_code(r.kind),
        retention: retention_code(r.retention),
        payload: r.payload.clone(),
    }
}

fn request_domain(what: &'static str, w: RequestV1) -> Result<CommitRequest, CodecError> {
    check_payload(what, &w.payload)?;
    Ok(CommitRequest {
        key: CommitKey {
            tenant: TenantId(w.tenant),
            sender: UserId(w.sender),
            client_message_id: client_id(what, w.client_message_id)?,
        },
        conversation: ConversationId(w.conversation),
        kind: kind_from(what, w.kind)?,
        retention: retention_from(what, w.retention)?,
        payload: w.payload,
    })
}

fn intent_wire(i: &CommitIntent) -> IntentV1 {
    IntentV1 {
        request: request_wire(&i.request),
        seq: i.seq.0,
        message_id: i.message_id.0,
        created_at: i.created_at.0,
        publication: i.publication.map(|p| (p.partition, p.offset)),
    }
}

fn intent_domain(what: &'static str, w: IntentV1) -> Result<CommitIntent, CodecError> {
    let publication = match w.publication {
        Some((partition, offset)) if partition < 0 || offset < 0 => {
            return Err(CodecError::Invalid { what, reason: format!("publication {partition}/{offset} is negative") })
        }
        p => p.map(|(partition, offset)| Publication { partition, offset }),
    };
    Ok(CommitIntent {
        request: request_domain(what, w.request)?,
        seq: check_seq(what, w.seq)?,
        message_id: MessageId(w.message_id),
        created_at: UnixMillis(w.created_at),
        publication,
    })
}

/// The canonical bytes of a request: its stable identity.
pub fn encode_request(r: &CommitRequest) -> Vec<u8> {
    encode_blob(tag::REQUEST, V1, &request_wire(r))
}

/// Decodes [`encode_request`]'s output.
pub fn decode_request(bytes: &[u8]) -> Result<CommitRequest, CodecError> {
    const WHAT: &str = "commit request";
    request_domain(WHAT, decode_blob(WHAT, tag::REQUEST, V1, bytes)?)
}

/// The canonical bytes of an intent.
pub fn encode_intent(i: &CommitIntent) -> Vec<u8> {
    encode_blob(tag::INTENT, V1, &intent_wire(i))
}

/// Decodes [`encode_intent`]'s output.
pub fn decode_intent(bytes: &[u8]) -> Result<CommitIntent, CodecError> {
    const WHAT: &str = "commit intent";
    intent_domain(WHAT, decode_blob(WHAT, tag::INTENT, V1, bytes)?)
}

/// The canonical bytes of a commit (intent, state, commit time).
pub fn encode_commit(c: &Commit) -> Vec<u8> {
    let wire = CommitV1 {
        intent: intent_wire(&c.intent),
        state: state_code(c.state),
        committed_at: c.committed_at.map(|t| t.0),
    };
    encode_blob(tag::COMMIT, V1, &wire)
}

/// Decodes [`encode_commit`]'s output; a committed commit must carry its commit time and
/// publication, an uncommitted one must not carry a commit time.
pub fn decode_commit(bytes: &[u8]) -> Result<Commit, CodecError> {
    const WHAT: &str = "commit";
    commit_domain(WHAT, decode_blob(WHAT, tag::COMMIT, V1, bytes)?)
}

/// A decoded commit checked against the domain's rules: a committed commit carries its commit
/// time and publication, an uncommitted one no commit time.
fn commit_domain(what: &'static str, w: CommitV1) -> Result<Commit, CodecError> {
    let state = state_from(what, w.state)?;
    let intent = intent_domain(what, w.intent)?;
    if (state == CommitState::Committed) != w.committed_at.is_some() {
        return Err(CodecError::Invalid {
            what,
            reason: format!("state {} with commit time {:?}", state.as_str(), w.committed_at),
        });
    }
    if (state >= CommitState::Outboxed) != intent.publication.is_some() {
        return Err(CodecError::Invalid {
            what,
            reason: format!("state {} with publication {:?}", state.as_str(), intent.publication),
        });
    }
    Ok(Commit { intent, state, committed_at: w.committed_at.map(UnixMillis) })
}

/// The canonical bytes of a commit's *head*: everything but its request (seq, message id,
/// creation time, publication, state, commit time). Stored beside [`encode_request`]'s bytes,
/// the two together say exactly what [`encode_commit`] says, with the payload written once.
pub fn encode_commit_head(c: &Commit) -> Vec<u8> {
    let i = &c.intent;
    let wire = CommitHeadV1 {
        seq: i.seq.0,
        message_id: i.message_id.0,
        created_at: i.created_at.0,
        publication: i.publication.map(|p| (p.partition, p.offset)),
        state: state_code(c.state),
        committed_at: c.committed_at.map(|t| t.0),
    };
    encode_blob(tag::COMMIT_HEAD, V1, &wire)
}

/// The commit stored as `request` bytes ([`encode_request`]) beside `stored`: a head
/// ([`encode_commit_head`]) or a whole commit ([`encode_commit`], whose request must then be
/// `request`). Checked like [`decode_commit`].
pub fn decode_commit_parts(request: &[u8], stored: &[u8]) -> Result<Commit, CodecError> {
    const WHAT: &str = "commit head";
    if stored.first() == Some(&tag::COMMIT) {
        let commit = decode_commit(stored)?;
        if encode_request(&commit.intent.request) != request {
            return Err(CodecError::Invalid {
                what: "commit",
                reason: "the commit's request differs from the request bytes beside it".to_owned(),
            });
        }
        return Ok(commit);
    }
    let w: CommitHeadV1 = decode_blob(WHAT, tag::COMMIT_HEAD, V1, stored)?;
    let wire = CommitV1 {
        intent: IntentV1 {
            request: decode_blob("commit request", tag::REQUEST, V1, request)?,
            seq: w.seq,
            message_id: w.message_id,
            created_at: w.created_at,
            publication: w.publication,
        },
        state: w.state,
        committed_at: w.committed_at,
    };
    commit_domain(WHAT, wire)
}

/// The canonical bytes of a history record (both tiers and the `qim.messages.v1` value).
pub fn encode_record(r: &MessageRecord) -> Vec<u8> {
    let wire = RecordV1 {
        tenant: r.tenant.0,
        conversation: r.conversation.0,
        seq: r.seq.0,
        message_id: r.message_id.0,
        sender: r.sender.0,
        client_message_id: r.client_message_id.as_str().to_owned(),
        kind: kind_code(r.kind),
        retention: retention_code(r.retention),
        created_at: r.created_at.0,
        expires_at: r.expires_at.map(|t| t.0),
        payload: r.payload.clone(),
    };
    encode_blob(tag::RECORD, V1, &wire)
}

/// Decodes [`encode_record`]'s output.
pub fn decode_record(bytes: &[u8]) -> Result<MessageRecord, CodecError> {
    const WHAT: &str = "message record";
    let w: RecordV1 = decode_blob(WHAT, tag::RECORD, V1, bytes)?;
    check_payload(WHAT, &w.payload)?;
    Ok(MessageRecord {
        tenant: TenantId(w.tenant),
        conversation: ConversationId(w.conversation),
        seq: check_seq(WHAT, w.seq)?,
        message_id: MessageId(w.message_id),
        sender: UserId(w.sender),
        client_message_id: client_id(WHAT, w.client_message_id)?,
        kind: kind_from(WHAT, w.kind)?,
        retention: retention_from(WHAT, w.retention)?,
        created_at: UnixMillis(w.created_at),
        expires_at: w.expires_at.map(UnixMillis),
        payload: w.payload,
    })
}
