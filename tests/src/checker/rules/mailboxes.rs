//! Rules over the dispatch topic, the mailboxes and the lane watermarks.

use std::collections::{HashMap, HashSet};

use qim_store::ids::{MessageId, UserId};
use qim_store::mailbox::{lane_of, shard_of, DispatchId, DispatchManifest, MailboxSeq, MessageRef, ShardEpoch};
use qim_store::message::MessageRecord;
use qim_store::topic::decode_dispatch;

use super::super::verdict::{Invariant, Verdict};
use super::super::{Expect, Observed};
use super::messages::Topic;

/// The shard epoch the services run with (`QIM_MAILBOX_EPOCH` unset).
pub const EPOCH: ShardEpoch = ShardEpoch(0);

/// What a mailbox event must say about `r`.
fn message_ref(r: &MessageRecord) -> MessageRef {
    MessageRef {
        tenant: r.tenant,
        conversation: r.conversation,
        seq: r.seq,
        message_id: r.message_id,
        sender: r.sender,
        kind: r.kind,
        created_at: r.created_at,
    }
}

/// Each dispatch's first receipt: (offset, manifest).
fn first_receipts(obs: &Observed, v: &mut Verdict) -> HashMap<DispatchId, (u64, DispatchManifest)> {
    let mut first: HashMap<DispatchId, (u64, DispatchManifest)> = HashMap::new();
    v.counts.dispatch_records = obs.dispatches.len();
    for raw in &obs.dispatches {
        let m = match decode_dispatch(raw.key.as_deref(), raw.value.as_deref(), raw.partition) {
            Ok(m) => m,
            Err(e) => {
                v.violate(Invariant::Corrupt, format!("dispatch {}/{}: {e}", raw.partition, raw.offset));
                continue;
            }
        };
        match first.get(&m.id) {
            Some((_, earlier)) => {
                v.counts.dispatch_physical_duplicates += 1;
                if *earlier != m {
                    v.violate(
                        Invariant::LogicalDuplicate,
                        format!("dispatch of {} to shard {} has two manifests", m.id.message_id, m.id.shard.0),
                    );
                }
            }
            None => {
                first.insert(m.id, (raw.offset as u64, m));
            }
        }
    }
    first
}

/// Mailboxes, dispatches and watermarks against the topic and the acknowledged messages.
pub fn check_mailboxes(x: &Expect, obs: &Observed, t: &Topic, alive: &[&MessageRecord], v: &mut Verdict) {
    let first = first_receipts(obs, v);
    // (user, message) → the seq of the group holding it.
    let mut holds: HashMap<(UserId, MessageId), MailboxSeq> = HashMap::new();
    for (user, groups) in &obs.mailboxes {
        let mut prev: Option<MailboxSeq> = None;
        for g in groups {
            if prev.is_some_and(|p| g.seq <= p) {
                v.violate(Invariant::Order, format!("mailbox of {user} returns seq {:?} after {prev:?}", g.seq));
            }
            prev = Some(g.seq);
            if g.user != *user {
                v.violate(Invariant::MailboxMismatch, format!("mailbox of {user} holds a group of {}", g.user));
            }
            for e in &g.events {
                v.counts.mailbox_entries += 1;
                let id = e.message.message_id;
                if holds.insert((*user, id), g.seq).is_some() {
                    v.counts.logical_duplicates += 1;
                    v.violate(Invariant::LogicalDuplicate, format!("mailbox of {user} holds {id} twice"));
                }
                let Some(r) = t.by_id.get(&id) else {
                    v.violate(
                        Invariant::MailboxMismatch,
                        format!("mailbox of {user} announces {id}, which is not on the topic"),
                    );
                    continue;
                };
                if e.message != message_ref(r) {
                    v.violate(
                        Invariant::MailboxMismatch,
                        format!("mailbox of {user}: the entry for {id} does not match the message"),
                    );
                }
                let dispatch = DispatchId { message_id: id, shard: shard_of(&g.tenant, user, x.shards) };
                match first.get(&dispatch) {
                    None => v.violate(
                        Invariant::MailboxMismatch,
                        format!("mailbox of {user} holds {id} without a dispatch"),
                    ),
                    Some((offset, m)) => {
                        if MailboxSeq::from_offset(EPOCH, *offset) != Some(g.seq) {
                            v.violate(
                                Invariant::MailboxMismatch,
                                format!(
                                    "mailbox of {user}: {id} at {:?}, its dispatch's first receipt is offset {offset}",
                                    g.seq
                                ),
                            );
                        }
                        if m.recipients.binary_search(user).is_err() {
                            v.violate(
                                Invariant::MailboxMismatch,
                                format!("mailbox of {user} holds {id}, not a recipient"),
                            );
                        }
                    }
                }
            }
        }
    }
    for r in alive {
        let members = x.members.get(&r.conversation).map(Vec::as_slice).unwrap_or_default();
        v.counts.expected_mailbox_entries += members.len();
        for user in members {
            if !holds.contains_key(&(*user, r.message_id)) {
                v.counts.lost += 1;
                v.violate(
                    Invariant::Lost,
                    format!(
                        "acked {} (seq {} of {}) is not in the mailbox of {user}",
                        r.message_id, r.seq.0, r.conversation
                    ),
                );
            }
        }
    }
    check_watermarks(obs, &first, &holds, v);
}

/// A lane watermark at `w` promises every first receipt at or below offset `w` in its shard has
/// its lane's entries written.
fn check_watermarks(
    obs: &Observed,
    first: &HashMap<DispatchId, (u64, DispatchManifest)>,
    holds: &HashMap<(UserId, MessageId), MailboxSeq>,
    v: &mut Verdict,
) {
    let mut by_shard: HashMap<u16, Vec<(u64, &DispatchManifest)>> = HashMap::new();
    for (id, (offset, m)) in first {
        by_shard.entry(id.shard.0).or_default().push((*offset, m));
    }
    let mut reported = HashSet::new();
    for wm in &obs.watermarks {
        let Some(through) = wm.through else { continue };
        v.counts.lanes_advanced += 1;
        for (offset, m) in by_shard.get(&wm.shard.0).map(Vec::as_slice).unwrap_or_default() {
            if *offset > through {
                continue;
            }
            let recipients = m.lane_recipients(wm.lane);
            if recipients.is_empty() {
                continue;
            }
            v.counts.lane_dispatches_verified += 1;
            let seq = MailboxSeq::from_offset(EPOCH, *offset);
            for user in recipients {
                debug_assert_eq!(lane_of(&m.message.tenant, &user), wm.lane);
                if holds.get(&(user, m.id.message_id)).copied() != seq && reported.insert((wm.shard, wm.lane, *offset))
                {
                    v.violate(
                        Invariant::Watermark,
                        format!(
                            "lane {}/{} watermark {through} passed offset {offset} ({}) but {user}'s entry is missing",
                            wm.shard.0,
                            wm.lane.get(),
                            m.id.message_id
                        ),
                    );
                }
            }
        }
    }
}
