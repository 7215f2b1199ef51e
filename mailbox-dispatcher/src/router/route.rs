//! Turning one committed message and its conversation's members into dispatch records: one per
//! mailbox shard that has recipients, recipients frozen (sorted, deduplicated) in the record.

use std::collections::BTreeMap;

use qim_store::codec::encode_manifest;
use qim_store::ids::UserId;
use qim_store::mailbox::{shard_of, DispatchId, DispatchManifest, MessageRef, ShardId, MAX_DISPATCH_RECIPIENTS};
use qim_store::message::MessageRecord;
use qim_store::topic::{dispatch_key, dispatch_partition, DISPATCH_KEY_LEN};

/// One encoded dispatch record, ready to produce.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DispatchRecord {
    /// The target partition (= shard).
    pub partition: i32,
    /// `message id ++ shard`.
    pub key: [u8; DISPATCH_KEY_LEN],
    /// The canonical manifest bytes.
    pub value: Vec<u8>,
    /// How many recipients it carries.
    pub recipients: usize,
}

/// The mailbox event's view of a committed record.
pub fn message_ref(record: &MessageRecord) -> MessageRef {
    MessageRef {
        tenant: record.tenant,
        conversation: record.conversation,
        seq: record.seq,
        message_id: record.message_id,
        sender: record.sender,
        kind: record.kind,
        created_at: record.created_at,
    }
}

/// The manifests of `record` for `members` over `shards` shards, ascending by shard. Empty when
/// the conversation has no members. `Err` names the shard when one holds more recipients than
/// a dispatch may carry (that message can not be dispatched; it is dead-lettered).
pub fn manifests(record: &MessageRecord, members: &[UserId], shards: u16) -> Result<Vec<DispatchManifest>, String> {
    let mut by_shard: BTreeMap<ShardId, Vec<UserId>> = BTreeMap::new();
    for user in members {
        by_shard.entry(shard_of(&record.tenant, user, shards)).or_default().push(*user);
    }
    let message = message_ref(record);
    by_shard
        .into_iter()
        .map(|(shard, recipients)| {
            let m =
                DispatchManifest::new(DispatchId { message_id: record.message_id, shard }, message.clone(), recipients);
            if m.recipients.len() > MAX_DISPATCH_RECIPIENTS {
                return Err(format!(
                    "shard {} would receive {} recipients, more than {MAX_DISPATCH_RECIPIENTS}",
                    shard.0,
                    m.recipients.len()
                ));
            }
            Ok(m)
        })
        .collect()
}

/// Encodes a manifest for the dispatch topic.
pub fn encode(manifest: &DispatchManifest) -> DispatchRecord {
    DispatchRecord {
        partition: dispatch_partition(manifest.id.shard),
        key: dispatch_key(&manifest.id),
        value: encode_manifest(manifest),
        recipients: manifest.recipients.len(),
    }
}

#[cfg(test)]
mod tests {
    use qim_store::ids::{ClientMessageId, ConversationId, ConversationSeq, MessageId, TenantId, UnixMillis};
    use qim_store::message::MessageKind;
    use qim_store::retention::RetentionClass;
    use qim_store::topic::decode_dispatch;

    use super::*;

    fn record() -> MessageRecord {
        MessageRecord {
            tenant: TenantId([1; 16]),
            conversation: ConversationId([2; 16]),
            seq: ConversationSeq(9),
            message_id: MessageId([3; 16]),
            sender: UserId([4; 16]),
            client_message_id: ClientMessageId::new("c").unwrap(),
            kind: MessageKind::Normal,
            retention: RetentionClass::Default,
            created_at: UnixMillis(1_700_000_000_000),
            expires_at: None,
            payload: b"x".to_vec(),
        }
    }

    fn users(n: u32) -> Vec<UserId> {
        (0..n)
            .map(|i| {
                let mut b = [0u8; 16];
                b[12..].copy_from_slice(&i.to_be_bytes());
                UserId(b)
            })
            .collect()
    }

    #[test]
    fn every_member_lands_in_exactly_one_manifest_of_its_shard() {
        let r = record();
        let mut members = users(1000);
        members.extend(users(10)); // duplicates collapse
        let ms = manifests(&r, &members, 8).unwrap();
        assert_eq!(ms.len(), 8, "1000 users reach every shard");
        let total: usize = ms.iter().map(|m| m.recipients.len()).sum();
        assert_eq!(total, 1000);
        for m in &ms {
            m.validate().unwrap();
            assert!(m.recipients.iter().all(|u| shard_of(&r.tenant, u, 8) == m.id.shard));
            let enc = encode(m);
            assert_eq!(enc.partition, i32::from(m.id.shard.0));
            let back = decode_dispatch(Some(&enc.key), Some(&enc.value), enc.partition).unwrap();
            assert_eq!(&back, m);
        }
    }

    #[test]
    fn the_same_inputs_give_the_same_bytes() {
        let r = record();
        let mut members = users(300);
        let a: Vec<_> = manifests(&r, &members, 8).unwrap().iter().map(encode).collect();
        members.reverse();
        let b: Vec<_> = manifests(&r, &members, 8).unwrap().iter().map(encode).collect();
        assert_eq!(a, b, "member order does not matter: replay is deterministic");
    }

    #[test]
    fn no_members_no_records_and_one_shard_takes_everything() {
        assert!(manifests(&record(), &[], 8).unwrap().is_empty());
        let ms = manifests(&record(), &users(50), 1).unwrap();
        assert_eq!((ms.len(), ms[0].recipients.len()), (1, 50));
    }
}
