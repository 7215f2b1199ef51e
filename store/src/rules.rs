//! Rules every backend applies the same way, written once: the commit state machine's checks
//! and request limits, and the mailbox's grouping and range preconditions. Backends differ in
//! how they store facts, never in what they accept.

use std::collections::BTreeMap;

use crate::codec::{decode_event_group, validate_group};
use crate::error::{StoreError, StoreResult};
use crate::ids::{MessageId, TenantId, UnixMillis, UserId, MILLIS_PER_DAY};
use crate::mailbox::{DispatchManifest, EventGroup, MailboxEntry, MailboxPage, MailboxSeq, ShardEpoch};
use crate::message::{Commit, CommitKey, CommitRequest, CommitState, Publication, MAX_PAYLOAD_BYTES};

/// `commit <tenant>/<sender>/<client id>`, the prefix of every commit error.
pub(crate) fn describe(key: &CommitKey) -> String {
    format!("commit {}/{}/{}", key.tenant, key.sender, key.client_message_id)
}

/// A `Conflict` on `key`.
pub(crate) fn conflict(key: &CommitKey, what: impl std::fmt::Display) -> StoreError {
    StoreError::Conflict(format!("{}: {what}", describe(key)))
}

/// `NotFound` for a key never reserved (or collected).
pub(crate) fn not_found(key: &CommitKey) -> StoreError {
    StoreError::NotFound(format!("no {}", describe(key)))
}

/// A step runs only from its predecessor state.
pub(crate) fn expect_state(key: &CommitKey, commit: &Commit, want: CommitState) -> StoreResult<()> {
    if commit.state != want {
        return Err(conflict(key, format!("state is {}, the step needs {}", commit.state.as_str(), want.as_str())));
    }
    Ok(())
}

/// A step names the message id that was reserved.
pub(crate) fn expect_message(key: &CommitKey, commit: &Commit, message_id: MessageId) -> StoreResult<()> {
    if commit.intent.message_id != message_id {
        return Err(conflict(key, format!("message id {message_id} is not the reserved {}", commit.intent.message_id)));
    }
    Ok(())
}

/// What `reserve` refuses before touching storage (so a refused request consumes no seq).
pub(crate) fn check_request(request: &CommitRequest) -> StoreResult<()> {
    if request.payload.len() > MAX_PAYLOAD_BYTES {
        return Err(StoreError::InvalidInput(format!(
            "payload of {} bytes exceeds {MAX_PAYLOAD_BYTES}",
            request.payload.len()
        )));
    }
    Ok(())
}

/// Kafka coordinates are never negative.
pub(crate) fn check_publication(publication: Publication) -> StoreResult<()> {
    if publication.partition < 0 || publication.offset < 0 {
        return Err(StoreError::InvalidInput(format!(
            "publication {}/{} is negative",
            publication.partition, publication.offset
        )));
    }
    Ok(())
}

/// The chunk writes of one `append_chunks` call without repeats, in order: a repeat would put
/// the same event twice into one group. A repeat is the same chunk of the same dispatch under the
/// same seq and manifest, which is all the checks look at (so the same chunk under the first
/// observation's receipt and a duplicate's is one write). A repeat with another seq or manifest
/// stays, for the checks to refuse.
///
/// Manifests are compared only between writes of the same chunk and seq (by address first, as
/// the writes of one dispatch share theirs): hashing them would read every recipient of the
/// manifest for every chunk written.
#[cfg(any(feature = "redis", feature = "scylla"))]
pub(crate) fn distinct_chunk_writes<'a>(
    writes: &'a [crate::mailbox_store::ChunkWrite<'a>],
) -> Vec<&'a crate::mailbox_store::ChunkWrite<'a>> {
    let mut seen: std::collections::HashMap<_, Vec<&DispatchManifest>> = std::collections::HashMap::new();
    writes
        .iter()
        .filter(|w| {
            let manifests = seen.entry((w.receipt.id, w.receipt.seq, w.chunk)).or_default();
            let repeat = manifests.iter().any(|m| std::ptr::eq(*m, w.manifest) || **m == *w.manifest);
            if !repeat {
                manifests.push(w.manifest);
            }
            !repeat
        })
        .collect()
}

/// Groups `entries` by `(tenant, user, seq)`, sorts each group's events by (ordinal, event id)
/// and checks the group rules. Every entry of a group must carry the same expiry, aligned to the
/// end of a UTC day (so a bucket's proof covers every entry in it). Any violation is
/// `InvalidInput` and nothing is returned.
pub(crate) fn canonical_groups(entries: &[MailboxEntry]) -> StoreResult<Vec<EventGroup>> {
    let mut by_key: BTreeMap<(TenantId, UserId, MailboxSeq), EventGroup> = BTreeMap::new();
    for e in entries {
        if e.expires_at.0.rem_euclid(MILLIS_PER_DAY) != 0 {
            return Err(StoreError::InvalidInput(format!(
                "entry expiry {} is not the end of a UTC day",
                e.expires_at.0
            )));
        }
        let group = by_key.entry((e.tenant, e.user, e.seq)).or_insert_with(|| EventGroup {
            tenant: e.tenant,
            user: e.user,
            seq: e.seq,
            expires_at: e.expires_at,
            events: Vec::new(),
        });
        if group.expires_at != e.expires_at {
            return Err(StoreError::InvalidInput(format!("events of mailbox seq {} carry different expiries", e.seq)));
        }
        group.events.push(e.event.clone());
    }
    by_key
        .into_values()
        .map(|mut g| {
            g.events.sort_by_key(|e| (e.ordinal, e.event_id));
            validate_group(&g)
                .map_err(|reason| StoreError::InvalidInput(format!("mailbox seq {} of {}: {reason}", g.seq, g.user)))?;
            Ok(g)
        })
        .collect()
}

/// The checks `range_scan` makes before reading: both ends in one epoch, a positive limit.
/// `Some(page)` is the whole answer when `after > up_to` (nothing, covered at `after`).
pub(crate) fn range_preamble(
    after: MailboxSeq,
    up_to: MailboxSeq,
    max_items: usize,
) -> StoreResult<Option<MailboxPage>> {
    if after.epoch() != up_to.epoch() {
        return Err(StoreError::InvalidInput(format!("cursor {after} and bound {up_to} are of different epochs")));
    }
    if max_items == 0 {
        return Err(StoreError::InvalidInput("max_items must be at least 1".into()));
    }
    if after > up_to {
        return Ok(Some(MailboxPage { groups: Vec::new(), covered: after }));
    }
    Ok(None)
}

/// What `begin_dispatch` checks before touching storage: a valid manifest, and the canonical seq
/// a first observation at `observed_offset` of `epoch` would get.
pub(crate) fn dispatch_seq(
    epoch: ShardEpoch,
    manifest: &DispatchManifest,
    observed_offset: u64,
) -> StoreResult<MailboxSeq> {
    manifest.validate().map_err(StoreError::InvalidInput)?;
    MailboxSeq::from_offset(epoch, observed_offset)
        .ok_or_else(|| StoreError::InvalidInput(format!("offset {observed_offset} is beyond the mailbox seq range")))
}

/// A stored group as `range_scan` may return it: decodable, at the position it was read from,
/// and not expired at `now` (an expired group above the expired-gap boundary means a bucket
/// proof failed to cover it: fail closed).
pub(crate) fn accept_group(
    bytes: &[u8],
    seq: MailboxSeq,
    tenant: TenantId,
    user: UserId,
    now: UnixMillis,
) -> StoreResult<EventGroup> {
    let group = decode_event_group(bytes)?;
    if group.seq != seq || group.tenant != tenant || group.user != user {
        return Err(StoreError::CorruptEntry(format!(
            "mailbox group at {seq} belongs to {} at {}",
            group.user, group.seq
        )));
    }
    if group.expires_at <= now {
        return Err(StoreError::CorruptEntry(format!("expired mailbox group at {seq} above the expired-gap boundary")));
    }
    Ok(group)
}

#[cfg(all(test, any(feature = "redis", feature = "scylla")))]
mod tests {
    use super::*;
    use crate::ids::{ConversationId, ConversationSeq, MessageId, UnixMillis, UserId};
    use crate::mailbox::{ChunkId, DispatchId, DispatchManifest, DispatchReceipt, LaneId, MessageRef, ShardId};
    use crate::mailbox_store::ChunkWrite;
    use crate::message::MessageKind;

    fn manifest(recipients: &[u8]) -> DispatchManifest {
        let message = MessageRef {
            tenant: TenantId([1; 16]),
            conversation: ConversationId([2; 16]),
            seq: ConversationSeq(1),
            message_id: MessageId([3; 16]),
            sender: UserId([4; 16]),
            kind: MessageKind::Normal,
            created_at: UnixMillis(0),
        };
        let id = DispatchId { message_id: message.message_id, shard: ShardId(0) };
        DispatchManifest::new(id, message, recipients.iter().map(|&n| UserId([n; 16])).collect())
    }

    #[test]
    fn a_repeated_chunk_write_is_dropped_and_one_with_another_manifest_or_seq_kept() {
        let receipt = DispatchReceipt {
            id: manifest(&[1]).id,
            seq: MailboxSeq::from_u64(7).unwrap(),
            canonical_offset: 1,
            observed_offset: 1,
            duplicate: false,
        };
        let later = DispatchReceipt { seq: MailboxSeq::from_u64(8).unwrap(), ..receipt };
        let (m, same, other) = (manifest(&[1, 2]), manifest(&[1, 2]), manifest(&[1, 3]));
        let chunk = |lane| ChunkId { lane: LaneId::new(lane).unwrap(), index: 0 };
        let writes = [
            ChunkWrite { receipt: &receipt, manifest: &m, chunk: chunk(0) },
            ChunkWrite { receipt: &receipt, manifest: &m, chunk: chunk(0) },
            ChunkWrite { receipt: &receipt, manifest: &same, chunk: chunk(0) },
            ChunkWrite { receipt: &receipt, manifest: &other, chunk: chunk(0) },
            ChunkWrite { receipt: &later, manifest: &m, chunk: chunk(0) },
            ChunkWrite { receipt: &receipt, manifest: &m, chunk: chunk(1) },
            ChunkWrite { receipt: &receipt, manifest: &other, chunk: chunk(0) },
        ];
        let kept: Vec<usize> = distinct_chunk_writes(&writes)
            .into_iter()
            .map(|w| writes.iter().position(|x| std::ptr::eq(x, w)).unwrap())
            .collect();
        assert_eq!(kept, vec![0, 3, 4, 5], "the same chunk under an equal manifest is a repeat, by address or not");
    }
}
