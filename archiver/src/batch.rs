//! What one partition's batch of records becomes: records to archive and records to
//! dead-letter, decided before anything is written (pure, so it is unit-tested here).
//!
//! A record is poison, for good, when it does not decode or its key and headers contradict its
//! value ([`decode_message`], reasons `undecodable`, `bad_key`, `bad_header`), or when the
//! archive must refuse it ([`archive_check`], reasons `bad_retention`, `out_of_range`). Poison
//! goes to the dead-letter topic and the stream continues. (One more reason is found only while
//! writing: `conflicting_record`, a record whose coordinates hold another archived record; see
//! [`crate::pipeline`].) Transient failures are never
//! decided here: they happen while writing, and are retried.

use qim_store::message::{MessageRecord, Publication, PublishedRecord};
use qim_store::retention::{RetentionClass, RetentionPolicy};
use qim_store::scylla::archive_check;
use qim_store::topic::{decode_message, HEADER_MESSAGE_ID, HEADER_SCHEMA};

use qim_runtime::kafka::consumer::Lease;

use crate::source::Incoming;

/// A record that must not be archived, and why.
#[derive(Clone, Debug)]
pub struct Poison {
    /// The record as received.
    pub incoming: Incoming,
    /// A short stable reason (dead-letter header, metric label).
    pub reason: &'static str,
    /// The full error, for people.
    pub detail: String,
}

/// A record to archive, with what the metrics need.
#[derive(Clone, Debug)]
pub struct Valid {
    /// The decoded record.
    pub record: MessageRecord,
    /// The record as received (dead-lettered as it is if the archive refuses it).
    pub incoming: Incoming,
    /// The Kafka record's timestamp, if any.
    pub timestamp_ms: Option<i64>,
    /// Whether its expiry differs from this process's policy (configuration drift).
    pub retention_mismatch: bool,
}

impl Valid {
    /// The record with where it was read.
    pub fn published(&self) -> PublishedRecord {
        let publication = Publication { partition: self.incoming.partition, offset: self.incoming.offset };
        PublishedRecord { record: self.record.clone(), publication }
    }
}

/// The dead-letter reason of a record whose coordinates hold another archived record.
pub const CONFLICTING: &str = "conflicting_record";

/// One partition's records, in offset order, classified.
#[derive(Clone, Debug)]
pub struct PartitionBatch {
    /// The partition.
    pub partition: i32,
    /// The lease of the partition the records were received under.
    pub lease: Lease,
    /// The batch's last offset (storing it makes the group resume after it).
    pub last_offset: i64,
    /// Records to archive.
    pub valid: Vec<Valid>,
    /// Records to dead-letter.
    pub poison: Vec<Poison>,
}

impl PartitionBatch {
    /// How many records the batch holds.
    pub fn len(&self) -> usize {
        self.valid.len() + self.poison.len()
    }

    /// Whether the batch holds no record.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What becomes of one record.
#[derive(Clone, Debug)]
pub enum Verdict {
    /// Archive it.
    Archive(Valid),
    /// Dead-letter it.
    DeadLetter(Poison),
}

/// Decodes and checks one record.
pub fn classify(incoming: Incoming, policy: &RetentionPolicy) -> Verdict {
    let decoded = decode_message(
        incoming.key.as_deref(),
        incoming.value.as_deref(),
        incoming.header(HEADER_SCHEMA),
        incoming.header(HEADER_MESSAGE_ID),
    );
    let record = match decoded {
        Ok(record) => record,
        Err(e) => return Verdict::DeadLetter(Poison { reason: e.reason(), detail: e.to_string(), incoming }),
    };
    if let Err(e) = archive_check(&record) {
        return Verdict::DeadLetter(Poison { reason: e.reason(), detail: e.to_string(), incoming });
    }
    let retention_mismatch = record.retention == RetentionClass::Default
        && record.expires_at != policy.expires_at(record.retention, record.created_at);
    Verdict::Archive(Valid { record, timestamp_ms: incoming.timestamp_ms, retention_mismatch, incoming })
}

/// Splits `records` (any order, any partitions, one lease each) into per-partition batches in
/// offset order, dropping duplicates of an offset (a partition re-read after a seek).
pub fn partition_batches(mut records: Vec<Incoming>, policy: &RetentionPolicy) -> Vec<PartitionBatch> {
    records.sort_by_key(|r| (r.partition, r.offset));
    records.dedup_by_key(|r| (r.partition, r.offset));
    let mut out: Vec<PartitionBatch> = Vec::new();
    for incoming in records {
        let batch = match out.last_mut() {
            Some(b) if b.partition == incoming.partition && b.lease.same_as(&incoming.lease) => b,
            _ => {
                out.push(PartitionBatch {
                    partition: incoming.partition,
                    lease: incoming.lease.clone(),
                    last_offset: 0,
                    valid: Vec::new(),
                    poison: Vec::new(),
                });
                out.last_mut().expect("just pushed")
            }
        };
        batch.last_offset = incoming.offset;
        match classify(incoming, policy) {
            Verdict::Archive(valid) => batch.valid.push(valid),
            Verdict::DeadLetter(poison) => batch.poison.push(poison),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use qim_store::ids::{ClientMessageId, ConversationId, ConversationSeq, MessageId, TenantId, UnixMillis, UserId};
    use qim_store::message::MessageKind;
    use qim_store::topic::encode_message;

    use super::*;

    fn record(retention: RetentionClass, expires_at: Option<UnixMillis>) -> MessageRecord {
        MessageRecord {
            tenant: TenantId([1; 16]),
            conversation: ConversationId([2; 16]),
            seq: ConversationSeq(3),
            message_id: MessageId([3; 16]),
            sender: UserId([4; 16]),
            client_message_id: ClientMessageId::new("c").unwrap(),
            kind: MessageKind::Normal,
            retention,
            created_at: UnixMillis(1_790_000_000_000),
            expires_at,
            payload: b"x".to_vec(),
        }
    }

    fn incoming(partition: i32, offset: i64, record: &MessageRecord) -> Incoming {
        let m = encode_message(record);
        Incoming {
            partition,
            offset,
            lease: Lease::fixed(partition),
            key: Some(m.key.to_vec()),
            value: Some(m.value),
            headers: vec![
                (HEADER_SCHEMA.to_owned(), Some(m.schema.into_bytes())),
                (HEADER_MESSAGE_ID.to_owned(), Some(m.message_id.into_bytes())),
            ],
            timestamp_ms: Some(1),
        }
    }

    fn policy() -> RetentionPolicy {
        RetentionPolicy::with_default_days(30).unwrap()
    }

    fn valid(v: Verdict) -> Valid {
        match v {
            Verdict::Archive(v) => v,
            Verdict::DeadLetter(p) => panic!("poison: {p:?}"),
        }
    }

    fn reason(v: Verdict) -> &'static str {
        match v {
            Verdict::Archive(v) => panic!("valid: {v:?}"),
            Verdict::DeadLetter(p) => p.reason,
        }
    }

    #[test]
    fn valid_records_pass_and_drift_is_noticed() {
        let p = policy();
        let good =
            record(RetentionClass::Default, p.expires_at(RetentionClass::Default, UnixMillis(1_790_000_000_000)));
        let v = valid(classify(incoming(0, 0, &good), &p));
        assert_eq!(v.record, good);
        assert!(!v.retention_mismatch);
        let drifted = record(RetentionClass::Default, Some(UnixMillis(1_790_000_000_001)));
        assert!(valid(classify(incoming(0, 0, &drifted), &p)).retention_mismatch);
    }

    #[test]
    fn poison_carries_a_stable_reason() {
        let p = policy();
        let good = record(RetentionClass::ComplianceHold, None);
        let mut garbage = incoming(0, 0, &good);
        garbage.value = Some(b"\x01garbage".to_vec());
        assert_eq!(reason(classify(garbage, &p)), "undecodable");
        let mut wrong_key = incoming(0, 0, &good);
        wrong_key.key = Some(vec![0; 32]);
        assert_eq!(reason(classify(wrong_key, &p)), "bad_key");
        let mut wrong_id = incoming(0, 0, &good);
        wrong_id.headers[1].1 = Some(b"00".to_vec());
        assert_eq!(reason(classify(wrong_id, &p)), "bad_header");
        let held_but_expiring = record(RetentionClass::ComplianceHold, Some(UnixMillis(1_800_000_000_000)));
        assert_eq!(reason(classify(incoming(0, 0, &held_but_expiring), &p)), "bad_retention");
    }

    #[test]
    fn batches_are_per_partition_in_offset_order_without_duplicates() {
        let p = policy();
        let good = record(RetentionClass::ComplianceHold, None);
        let mut bad = incoming(1, 6, &good);
        bad.value = None;
        let records = vec![incoming(1, 7, &good), incoming(0, 3, &good), bad, incoming(1, 7, &good)];
        let batches = partition_batches(records, &p);
        assert_eq!(batches.len(), 2);
        assert_eq!((batches[0].partition, batches[0].last_offset, batches[0].len()), (0, 3, 1));
        assert_eq!((batches[1].partition, batches[1].last_offset), (1, 7));
        assert_eq!((batches[1].valid.len(), batches[1].poison.len()), (1, 1));
    }
}
