//! Encodings of mailbox event groups and dispatch manifests (format version 1).

use bincode::{Decode, Encode};

use super::message::{check_seq, kind_code, kind_from};
use super::{decode_blob, encode_blob, tag, CodecError};
use crate::ids::{ConversationId, EventId, MessageId, TenantId, UnixMillis, UserId};
use crate::mailbox::{
    DispatchId, DispatchManifest, EventGroup, MailboxEvent, MailboxSeq, MessageRef, ShardId, MAX_GROUP_EVENTS,
};

const V1: u8 = 1;

#[derive(Encode, Decode)]
struct MessageRefV1 {
    tenant: [u8; 16],
    conversation: [u8; 16],
    seq: u64,
    message_id: [u8; 16],
    sender: [u8; 16],
    kind: u8,
    created_at: i64,
}

#[derive(Encode, Decode)]
struct EventV1 {
    ordinal: u16,
    event_id: [u8; 16],
    message: MessageRefV1,
}

#[derive(Encode, Decode)]
struct GroupV1 {
    tenant: [u8; 16],
    user: [u8; 16],
    seq: u64,
    expires_at: i64,
    events: Vec<EventV1>,
}

#[derive(Encode, Decode)]
struct ManifestV1 {
    message: MessageRefV1,
    shard: u16,
    recipients: Vec<[u8; 16]>,
}

fn ref_wire(m: &MessageRef) -> MessageRefV1 {
    MessageRefV1 {
        tenant: m.tenant.0,
        conversation: m.conversation.0,
        seq: m.seq.0,
        message_id: m.message_id.0,
        sender: m.sender.0,
        kind: kind_code(m.kind),
        created_at: m.created_at.0,
    }
}

fn ref_domain(what: &'static str, w: MessageRefV1) -> Result<MessageRef, CodecError> {
    let kind = kind_from(what, w.kind)?;
    let seq = check_seq(what, w.seq)?;
    Ok(MessageRef {
        tenant: TenantId(w.tenant),
        conversation: ConversationId(w.conversation),
        seq,
        message_id: MessageId(w.message_id),
        sender: UserId(w.sender),
        kind,
        created_at: UnixMillis(w.created_at),
    })
}

/// Checks an event group's rules: 1..=256 events, canonical order by (ordinal, event id), unique
/// ordinals, every event of the group's tenant.
pub(crate) fn validate_group(g: &EventGroup) -> Result<(), String> {
    if g.events.is_empty() || g.events.len() > MAX_GROUP_EVENTS {
        return Err(format!("an event group holds 1..={MAX_GROUP_EVENTS} events, got {}", g.events.len()));
    }
    if !g.events.windows(2).all(|w| w[0].ordinal < w[1].ordinal) {
        return Err("event ordinals are not strictly ascending (duplicate or out of order)".into());
    }
    if g.events.iter().any(|e| e.message.tenant != g.tenant) {
        return Err("an event refers to another tenant".into());
    }
    Ok(())
}

/// The canonical bytes of an event group. The group must be valid (see the store's
/// `append_batch`, which canonicalises before encoding).
pub fn encode_event_group(g: &EventGroup) -> Vec<u8> {
    let wire = GroupV1 {
        tenant: g.tenant.0,
        user: g.user.0,
        seq: g.seq.as_u64(),
        expires_at: g.expires_at.0,
        events: g
            .events
            .iter()
            .map(|e| EventV1 { ordinal: e.ordinal, event_id: e.event_id.0, message: ref_wire(&e.message) })
            .collect(),
    };
    encode_blob(tag::EVENT_GROUP, V1, &wire)
}

/// Decodes [`encode_event_group`]'s output and re-checks the group's rules.
pub fn decode_event_group(bytes: &[u8]) -> Result<EventGroup, CodecError> {
    const WHAT: &str = "mailbox event group";
    let w: GroupV1 = decode_blob(WHAT, tag::EVENT_GROUP, V1, bytes)?;
    let seq = MailboxSeq::from_u64(w.seq)
        .ok_or_else(|| CodecError::Invalid { what: WHAT, reason: "mailbox seq has bit 63 set".into() })?;
    let events = w
        .events
        .into_iter()
        .map(|e| {
            Ok(MailboxEvent {
                ordinal: e.ordinal,
                event_id: EventId(e.event_id),
                message: ref_domain(WHAT, e.message)?,
            })
        })
        .collect::<Result<Vec<_>, CodecError>>()?;
    let group = EventGroup {
        tenant: TenantId(w.tenant),
        user: UserId(w.user),
        seq,
        expires_at: UnixMillis(w.expires_at),
        events,
    };
    validate_group(&group).map_err(|reason| CodecError::Invalid { what: WHAT, reason })?;
    Ok(group)
}

/// The canonical bytes of a dispatch manifest (the `qim.mailbox.dispatch.v1` value too).
pub fn encode_manifest(m: &DispatchManifest) -> Vec<u8> {
    let wire = ManifestV1 {
        message: ref_wire(&m.message),
        shard: m.id.shard.0,
        recipients: m.recipients.iter().map(|u| u.0).collect(),
    };
    encode_blob(tag::MANIFEST, V1, &wire)
}

/// Decodes [`encode_manifest`]'s output and re-checks the manifest's rules.
pub fn decode_manifest(bytes: &[u8]) -> Result<DispatchManifest, CodecError> {
    const WHAT: &str = "dispatch manifest";
    let w: ManifestV1 = decode_blob(WHAT, tag::MANIFEST, V1, bytes)?;
    let message = ref_domain(WHAT, w.message)?;
    let manifest = DispatchManifest {
        id: DispatchId { message_id: message.message_id, shard: ShardId(w.shard) },
        message,
        recipients: w.recipients.into_iter().map(UserId).collect(),
    };
    manifest.validate().map_err(|reason| CodecError::Invalid { what: WHAT, reason })?;
    Ok(manifest)
}
