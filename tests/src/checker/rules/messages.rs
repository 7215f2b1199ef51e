//! Rules over the messages topic, the archive and the hot tier.

use std::collections::{BTreeSet, HashMap};

use qim_store::ids::{ConversationId, MessageId, TenantId, UnixMillis};
use qim_store::message::MessageRecord;
use qim_store::retention::RetentionClass;
use qim_store::topic::{decode_message, HEADER_MESSAGE_ID, HEADER_SCHEMA};

use super::super::verdict::{Invariant, Verdict};
use super::super::{Expect, Observed};

/// A conversation's place: (tenant, conversation, seq).
pub type SeqKey = (TenantId, ConversationId, u64);

/// The messages topic, decoded and indexed.
#[derive(Default)]
pub struct Topic {
    /// First copy of each message.
    pub by_id: HashMap<MessageId, MessageRecord>,
    /// The message at each seq.
    pub by_seq: HashMap<SeqKey, MessageId>,
}

/// Decodes the topic and checks it alone: corrupt records, physical and logical duplicates,
/// seq holes.
pub fn check_topic(obs: &Observed, v: &mut Verdict) -> Topic {
    let mut t = Topic::default();
    let mut bytes: HashMap<MessageId, &[u8]> = HashMap::new();
    let mut by_key: HashMap<(TenantId, [u8; 16], String), MessageId> = HashMap::new();
    v.counts.kafka_records = obs.messages.len();
    for raw in &obs.messages {
        let h = |name: &str| raw.headers.get(name).map(Vec::as_slice);
        let decoded = decode_message(raw.key.as_deref(), raw.value.as_deref(), h(HEADER_SCHEMA), h(HEADER_MESSAGE_ID));
        let record = match decoded {
            Ok(r) => r,
            Err(e) => {
                v.violate(Invariant::Corrupt, format!("messages {}/{}: {e}", raw.partition, raw.offset));
                continue;
            }
        };
        let value = raw.value.as_deref().unwrap_or_default();
        let id = record.message_id;
        if let Some(first) = bytes.get(&id) {
            v.counts.kafka_physical_duplicates += 1;
            if *first != value {
                v.counts.logical_duplicates += 1;
                v.violate(Invariant::LogicalDuplicate, format!("message {id} appears with two different contents"));
            }
            continue;
        }
        bytes.insert(id, value);
        let seq_key = (record.tenant, record.conversation, record.seq.0);
        if let Some(other) = t.by_seq.insert(seq_key, id) {
            v.counts.logical_duplicates += 1;
            v.violate(
                Invariant::LogicalDuplicate,
                format!("seq {} of conversation {} issued twice: {other} and {id}", record.seq.0, record.conversation),
            );
        }
        let key = (record.tenant, record.sender.0, record.client_message_id.as_str().to_owned());
        if let Some(other) = by_key.insert(key, id) {
            v.counts.logical_duplicates += 1;
            v.violate(
                Invariant::LogicalDuplicate,
                format!("client message id {:?} committed twice: {other} and {id}", record.client_message_id.as_str()),
            );
        }
        t.by_id.insert(id, record);
    }
    let mut seqs: HashMap<(TenantId, ConversationId), BTreeSet<u64>> = HashMap::new();
    for (tenant, conversation, seq) in t.by_seq.keys() {
        seqs.entry((*tenant, *conversation)).or_default().insert(*seq);
    }
    for set in seqs.values() {
        let max = set.last().copied().unwrap_or(0);
        v.counts.holes += (1..=max).filter(|s| !set.contains(s)).count();
    }
    t
}

/// The archive and the hot tier against the topic: every row is a message of the topic at its
/// seq (a hole stays a hole), reads come in seq order, TTLs and expiries follow the policy.
pub fn check_stores(x: &Expect, obs: &Observed, t: &Topic, v: &mut Verdict) {
    let mut last: HashMap<(TenantId, ConversationId), u64> = HashMap::new();
    for row in &obs.archive {
        let r = match &row.record {
            Ok(r) => r,
            Err(e) => {
                v.violate(Invariant::Corrupt, format!("archive row at seq {}: {e}", row.seq));
                continue;
            }
        };
        if r.seq.0 != row.seq {
            v.violate(
                Invariant::Corrupt,
                format!("archive row at seq {} holds seq {} ({})", row.seq, r.seq.0, r.message_id),
            );
        }
        check_against_topic("archive", r, t, v);
        let expected = x.policy.expires_at(r.retention, r.created_at);
        if r.expires_at != expected {
            v.violate(
                Invariant::Retention,
                format!("archived {} expires at {:?}, the policy says {:?}", r.message_id, r.expires_at, expected),
            );
        }
        match row.index_expires_at {
            None => v.violate(Invariant::Lost, format!("archived {} has no history_index row", r.message_id)),
            Some(e) if e != expected.map(|u| u.0) => v.violate(
                Invariant::Retention,
                format!("history_index of {} says expiry {e:?}, the policy {expected:?}", r.message_id),
            ),
            Some(_) => {}
        }
        check_ttl(r, expected, row.ttl, row.read_between, v);
    }
    for r in &obs.hot {
        let conv = (r.tenant, r.conversation);
        if let Some(prev) = last.insert(conv, r.seq.0) {
            if r.seq.0 <= prev {
                v.violate(
                    Invariant::Order,
                    format!("hot history of {} returns seq {} after {prev}", r.conversation, r.seq.0),
                );
            }
        }
        check_against_topic("hot tier", r, t, v);
    }
}

fn check_against_topic(place: &str, r: &MessageRecord, t: &Topic, v: &mut Verdict) {
    match t.by_seq.get(&(r.tenant, r.conversation, r.seq.0)) {
        None => v.violate(
            Invariant::Hole,
            format!(
                "the {place} holds {} at seq {} of {}, a seq the topic does not have",
                r.message_id, r.seq.0, r.conversation
            ),
        ),
        Some(id) if *id != r.message_id => v.violate(
            Invariant::LogicalDuplicate,
            format!("the {place} holds {} at seq {} of {}, the topic {id}", r.message_id, r.seq.0, r.conversation),
        ),
        Some(id) if t.by_id.get(id) != Some(r) => {
            v.violate(Invariant::AckMismatch, format!("the {place}'s copy of {id} differs from the topic's"))
        }
        Some(_) => {}
    }
}

/// The row must vanish within a second of the policy's expiry. The server keeps a row's
/// deletion moment `D` in whole seconds and answers `TTL() = D − ⌊read time⌋`, so the read
/// happened between `before` and `after` gives `D ∈ [ttl + ⌊before⌋, ttl + ⌊after⌋]`; some `D`
/// there must lie within 1 s of the expiry. Classes that never expire carry no TTL.
fn check_ttl(
    r: &MessageRecord,
    expected: Option<UnixMillis>,
    ttl: Option<i32>,
    (before, after): (i64, i64),
    v: &mut Verdict,
) {
    let ttl = ttl.filter(|t| *t > 0);
    match (expected, ttl) {
        (None, None) => {}
        (None, Some(t)) => v.violate(
            Invariant::Retention,
            format!("archived {} ({}) never expires but has TTL {t} s", r.message_id, r.retention.as_str()),
        ),
        (Some(e), _) if e.0 <= after => {} // expired by now: written with 1 s, may be gone
        (Some(e), None) => {
            v.violate(Invariant::Retention, format!("archived {} expires at {} but has no TTL", r.message_id, e.0))
        }
        (Some(e), Some(t)) => {
            let expiry = e.0 as f64 / 1000.0;
            let earliest = f64::from(t) + before.div_euclid(1000) as f64;
            let latest = f64::from(t) + after.div_euclid(1000) as f64;
            if earliest > expiry + 1.0 || latest < expiry - 1.0 {
                v.violate(
                    Invariant::Retention,
                    format!(
                        "archived {} has TTL {t} s: it vanishes {:+.1} s from the policy's expiry",
                        r.message_id,
                        if earliest > expiry { earliest - expiry } else { latest - expiry }
                    ),
                );
            }
        }
    }
}

/// Every acknowledgement against the topic, the archive and the hot tier. Returns the acked
/// records still alive (for the mailbox rules).
pub fn check_acks<'t>(x: &Expect, obs: &Observed, t: &'t Topic, v: &mut Verdict) -> Vec<&'t MessageRecord> {
    v.counts.acked = x.acks.len();
    v.counts.retries_mismatched = x.retries_mismatched;
    if x.retries_mismatched > 0 {
        v.violate(Invariant::RetryMismatch, format!("{} client retries got another answer", x.retries_mismatched));
    }
    let mut answers: HashMap<(&str, &str, &str), (&str, u64)> = HashMap::new();
    let archived: HashMap<SeqKey, MessageId> = obs
        .archive
        .iter()
        .filter_map(|row| row.record.as_ref().ok())
        .map(|r| ((r.tenant, r.conversation, r.seq.0), r.message_id))
        .collect();
    let hot: HashMap<SeqKey, MessageId> =
        obs.hot.iter().map(|r| ((r.tenant, r.conversation, r.seq.0), r.message_id)).collect();
    let window_start = obs.now.0 - i64::from(x.hot_window_days) * 86_400_000;
    let mut alive = Vec::new();
    for a in &x.acks {
        let key = (a.tenant.as_str(), a.sender.as_str(), a.client_message_id.as_str());
        let answer = (a.message_id.as_str(), a.conversation_seq);
        if let Some(first) = answers.insert(key, answer) {
            if first != answer {
                v.violate(
                    Invariant::RetryMismatch,
                    format!("{:?} answered {first:?} then {answer:?}", a.client_message_id),
                );
            }
            continue;
        }
        let Ok(id) = MessageId::from_hex(&a.message_id) else {
            v.violate(
                Invariant::Corrupt,
                format!("ack {:?} has a bad message id {:?}", a.client_message_id, a.message_id),
            );
            continue;
        };
        let Some(r) = t.by_id.get(&id) else {
            v.counts.lost += 1;
            v.violate(
                Invariant::Lost,
                format!("acked {id} (seq {} of {}) is not on the messages topic", a.conversation_seq, a.conversation),
            );
            continue;
        };
        v.counts.in_kafka += 1;
        let same = r.conversation.to_hex() == a.conversation
            && r.seq.0 == a.conversation_seq
            && r.created_at.0 == a.created_at
            && r.sender.to_hex() == a.sender
            && r.client_message_id.as_str() == a.client_message_id
            && RetentionClass::parse(&a.retention) == Some(r.retention);
        if !same {
            v.violate(
                Invariant::AckMismatch,
                format!(
                    "acked {id} (seq {}) differs from its record on the topic (seq {})",
                    a.conversation_seq, r.seq.0
                ),
            );
        }
        if r.expires_at.is_some_and(|e| e.0 <= obs.now.0) {
            v.counts.expired += 1;
            continue;
        }
        let at = (r.tenant, r.conversation, r.seq.0);
        if archived.get(&at) == Some(&id) {
            v.counts.archived += 1;
        } else {
            v.counts.lost += 1;
            v.violate(
                Invariant::Lost,
                format!("acked {id} (seq {} of {}) is not in the archive", r.seq.0, r.conversation),
            );
        }
        // After Redis lost state a conversation's hot tier holds its history again only once a
        // send revalidated it; until then readers merge the archive in (where it must be).
        let exempt = r.created_at.0 < window_start
            || x.hot_exempt_before.is_some_and(|w| r.created_at.0 < w)
            || obs.hot_untrusted.contains(&(r.tenant, r.conversation));
        if hot.get(&at) == Some(&id) {
            v.counts.hot += 1;
        } else if exempt {
            v.counts.hot_exempt += 1;
        } else {
            v.counts.lost += 1;
            v.violate(
                Invariant::Lost,
                format!("acked {id} (seq {} of {}) is not in the hot tier", r.seq.0, r.conversation),
            );
        }
        alive.push(r);
    }
    alive
}
