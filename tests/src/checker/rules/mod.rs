//! The rules, pure functions of what was expected and what was observed.

mod mailboxes;
mod messages;

use super::verdict::Verdict;
use super::{Expect, Observed};

pub use mailboxes::EPOCH;

/// Applies every rule.
pub fn evaluate(x: &Expect, obs: &Observed) -> Verdict {
    let mut v = Verdict::default();
    let topic = messages::check_topic(obs, &mut v);
    messages::check_stores(x, obs, &topic, &mut v);
    let alive = messages::check_acks(x, obs, &topic, &mut v);
    mailboxes::check_mailboxes(x, obs, &topic, &alive, &mut v);
    v
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use qim_store::ids::{ClientMessageId, ConversationId, ConversationSeq, MessageId, TenantId, UnixMillis, UserId};
    use qim_store::message::{MessageKind, MessageRecord};
    use qim_store::retention::{RetentionClass, RetentionPolicy};
    use qim_store::topic::encode_message;

    use super::*;
    use crate::checker::kafka::RawRecord;
    use crate::checker::verdict::Invariant;

    fn record(seq: u64, id: u8) -> MessageRecord {
        MessageRecord {
            tenant: TenantId([1; 16]),
            conversation: ConversationId([2; 16]),
            seq: ConversationSeq(seq),
            message_id: MessageId([id; 16]),
            sender: UserId([3; 16]),
            client_message_id: ClientMessageId::new(format!("c{id}")).unwrap(),
            kind: MessageKind::Normal,
            retention: RetentionClass::ComplianceHold,
            created_at: UnixMillis(1_000),
            expires_at: None,
            payload: b"hi".to_vec(),
        }
    }

    fn raw(r: &MessageRecord, offset: i64) -> RawRecord {
        let e = encode_message(r);
        RawRecord { partition: 0, offset, key: Some(e.key.to_vec()), value: Some(e.value), headers: HashMap::new() }
    }

    fn expect() -> Expect {
        Expect {
            acks: Vec::new(),
            members: HashMap::new(),
            retries_mismatched: 0,
            policy: RetentionPolicy::with_default_days(30).unwrap(),
            hot_exempt_before: None,
            hot_window_days: 7,
            shards: 4,
        }
    }

    fn observed(messages: Vec<RawRecord>, hot: Vec<MessageRecord>) -> Observed {
        Observed {
            messages,
            dispatches: Vec::new(),
            archive: Vec::new(),
            hot,
            hot_untrusted: Default::default(),
            mailboxes: HashMap::new(),
            watermarks: Vec::new(),
            now: UnixMillis(2_000),
        }
    }

    #[test]
    fn a_reissued_seq_a_filled_hole_and_physical_duplicates_are_told_apart() {
        let (a, b, c) = (record(1, 10), record(1, 11), record(3, 12));
        let obs = observed(vec![raw(&a, 0), raw(&a, 1), raw(&b, 2), raw(&c, 3)], vec![record(2, 13)]);
        let v = evaluate(&expect(), &obs);
        assert_eq!(v.counts.kafka_physical_duplicates, 1, "{v}");
        assert_eq!(v.counts.holes, 1, "{v}");
        assert!(v.of(Invariant::LogicalDuplicate).any(|x| x.detail.contains("seq 1 of")), "{v}");
        assert!(v.of(Invariant::Hole).any(|x| x.detail.contains(&MessageId([13; 16]).to_hex())), "{v}");
    }

    fn ack(r: &MessageRecord) -> crate::workload::Ack {
        crate::workload::Ack {
            tenant: r.tenant.to_hex(),
            conversation: r.conversation.to_hex(),
            sender: r.sender.to_hex(),
            client_message_id: r.client_message_id.as_str().to_owned(),
            retention: r.retention.as_str().to_owned(),
            message_id: r.message_id.to_hex(),
            conversation_seq: r.seq.0,
            created_at: r.created_at.0,
        }
    }

    #[test]
    fn a_message_missing_from_the_hot_tier_is_lost_unless_its_hot_tier_is_not_trusted() {
        let (a, b) = (record(1, 10), record(2, 11));
        let mut obs = observed(vec![raw(&a, 0), raw(&b, 1)], vec![a.clone()]);
        obs.now = UnixMillis(1_500);
        obs.archive = [&a, &b]
            .iter()
            .map(|r| crate::checker::observe::ArchivedRow {
                record: Ok((*r).clone()),
                seq: r.seq.0,
                ttl: None,
                index_expires_at: Some(None),
                read_between: (1_500, 1_500),
            })
            .collect();
        let x = Expect { acks: vec![ack(&a), ack(&b)], ..expect() };
        let v = evaluate(&x, &obs);
        assert!(v.of(Invariant::Lost).any(|l| l.detail.contains("not in the hot tier")), "{v}");
        obs.hot_untrusted.insert((a.tenant, a.conversation));
        let v = evaluate(&x, &obs);
        assert!(v.is_ok(), "{v}");
        assert_eq!((v.counts.hot, v.counts.hot_exempt), (1, 1), "{v}");
    }

    #[test]
    fn a_clean_topic_passes_and_garbage_is_corrupt() {
        let obs = observed(vec![raw(&record(1, 10), 0), raw(&record(2, 11), 1)], Vec::new());
        assert!(evaluate(&expect(), &obs).is_ok());
        let mut bad = raw(&record(3, 12), 2);
        bad.value = Some(vec![0xff, 1, 2]);
        let v = evaluate(&expect(), &observed(vec![bad], Vec::new()));
        assert!(v.of(Invariant::Corrupt).any(|x| x.detail.starts_with("messages 0/2")), "{v}");
    }
}
