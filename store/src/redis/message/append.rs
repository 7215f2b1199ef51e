//! `reserve` in the group-commit layout ([`super::CommitLayout::InConversationSlot`]; the
//! parent module's "Commit layouts"): the request key claimed in its sender's slot, then the
//! commit created by the script that issues its seq, in its conversation's slot, with the record
//! when the send is being recorded too (`reserve_and_record`).

use std::time::Instant;

use super::group::{append_command, AppendCall};
use super::keys::{aux_member_in_conversation, aux_shard};
use super::lease::{self, Allocation, LeaseAttempts};
use super::scripts::{self, answered, bytes, run, status, Batch};
use super::{claim_value, decode_stored, exactly, one, Described, Loc, RedisMessageStore, CLAIM_MILLIS};
use crate::codec::{encode_commit_head, encode_record, encode_request, COMMIT_HEAD_SEQ_BYTES, RECORD_SEQ_BYTES};
use crate::error::{StoreError, StoreResult};
use crate::ids::{ConversationSeq, MessageId, UnixMillis};
use crate::message::{Commit, CommitIntent, CommitKey, CommitRequest, CommitState};
use crate::message_store::{HistoryAuthorizer, MessageStore};
use crate::rules::{check_request, conflict};

/// What claiming a request key found.
enum Claimed {
    /// This attempt claimed it.
    Ours,
    /// It was claimed for this request and conversation already.
    Same,
    /// A commit of the sender-slot layout holds it.
    Legacy,
    /// Another request or conversation claimed it.
    Other,
}

/// How many times one reservation proposes a later `created_at` because the conversation's
/// clock ran ahead of it (another writer's clock, a restored record).
const MAX_RESTAMPS: u32 = 3;

/// How many times one reservation is answered `later` (an earlier send of its tick's call was
/// told what the lease needs) before it gives up as `Unavailable`: the earliest send of a call
/// goes first, so each send soon leads a call and counts its own lease attempts.
const MAX_LATER: u32 = 200;

impl RedisMessageStore {
    /// `reserve` (with `members`: `reserve_from_member`) creating the commit in its
    /// conversation's slot; with `record`, the record too (the commit then RECORDED).
    ///
    /// (1) ⟨`message_claim.lua` ‖ ZADD `{recovery}`⟩: the claim decides who owns the key (other
    /// bytes or another conversation: `Conflict`; a commit of the sender-slot layout: that
    /// layout's `reserve` takes over). The recovery entry is confirmed before the commit can
    /// exist. (2) `message_append.lua`: the stored commit if there is one (a replay: no seq, no
    /// lease needed), else the seq, the commit and the record at once; or what the lease needs
    /// first, as the sender-slot allocation says it.
    pub(super) async fn reserve_in_conversation(
        &self,
        request: &CommitRequest,
        proposed_id: MessageId,
        members: Option<&dyn HistoryAuthorizer>,
        record: bool,
    ) -> StoreResult<Commit> {
        check_request(request)?;
        let (key, conversation) = (&request.key, request.conversation);
        let request_bytes = encode_request(request);
        let member = aux_member_in_conversation(key, conversation, proposed_id);
        let value = claim_value(conversation, &request_bytes);
        let mut created_at = self.stamps.stamp();
        let (tenant, mut check_sender) = (key.tenant, members.is_some());
        // When this send took the claim (it is `Ours`), which then lives from about then.
        let mut claimed_at: Option<Instant> = None;
        let (mut attempts, mut restamps, mut later) = (LeaseAttempts::default(), 0u32, 0u32);
        'claim: loop {
            let sent_at = Instant::now();
            match self.claim_key(key, &value, &member, created_at).await? {
                Claimed::Ours => claimed_at = claimed_at.or(Some(sent_at)),
                Claimed::Same => {}
                Claimed::Legacy => {
                    self.give_up_orphan(&member).await;
                    return self.reserve_in_sender_slot(request, proposed_id, members, record).await;
                }
                Claimed::Other => {
                    self.give_up_orphan(&member).await;
                    return Err(conflict(key, "the key is claimed by different content or another conversation"));
                }
            }
            let refused_claim = claimed_at.map(|_| (self.keys.sender_claim(key), value.clone()));
            loop {
                let state = if record { CommitState::Recorded } else { CommitState::Reserved };
                let seq = ConversationSeq(0);
                let intent = CommitIntent {
                    request: request.clone(),
                    seq,
                    message_id: proposed_id,
                    created_at,
                    publication: None,
                };
                let template = Commit { intent, state, committed_at: None };
                let reply = self.append(&template, &request_bytes, record, check_sender).await?;
                let (outcome, rest) = status("message_append", &Described(key), reply.clone())?;
                match outcome.as_str() {
                    // An earlier send of the same call stopped the issue (and was told what the
                    // lease needs; perhaps a revalidation, which may restore this send's commit):
                    // nothing was written for this one, which claims its key again.
                    "later" => {
                        later += 1;
                        if later > MAX_LATER {
                            return Err(StoreError::Unavailable {
                                message: format!(
                                    "conversation {conversation}: its seq lease stayed unready under this send"
                                ),
                                source: None,
                            });
                        }
                        continue 'claim;
                    }
                    "exists" => {
                        return self.replayed(request, &request_bytes, &member, proposed_id, &rest, record).await
                    }
                    "restamp" => {
                        restamps += 1;
                        if restamps > MAX_RESTAMPS {
                            return Err(StoreError::Unavailable {
                                message: format!("conversation {conversation}: its clock kept moving under this send"),
                                source: None,
                            });
                        }
                        let clock = rest.first().and_then(bytes).and_then(|b| std::str::from_utf8(b).ok());
                        let Some(clock) = clock.and_then(|c| c.parse().ok()) else {
                            return Err(StoreError::InvariantViolation(
                                "message_append: 'restamp' without a clock".into(),
                            ));
                        };
                        self.stamps.observe(UnixMillis(clock));
                        created_at = self.stamps.stamp();
                        continue;
                    }
                    _ => {}
                }
                let allocation = self.allocation(conversation, Ok(reply))?;
                match (&allocation, members) {
                    (Allocation::NotMember, _) => {
                        self.refused(&member, refused_claim.as_ref()).await;
                        return Err(super::reserve::not_a_member(request));
                    }
                    (Allocation::MembersUnknown, Some(members)) => {
                        if let Err(e) = members.authorize_history(tenant, conversation, key.sender).await {
                            self.refused(&member, refused_claim.as_ref()).await;
                            return Err(e);
                        }
                        check_sender = false;
                        continue;
                    }
                    _ => {}
                }
                if let Allocation::Issued { seq, lease, renew, created_at: at } = allocation {
                    self.stamps.observe(at);
                    if renew {
                        self.renew_soon(tenant, conversation, lease);
                    }
                    let mut commit = template;
                    commit.intent.seq = seq;
                    self.inflight.remember_claimed(commit.clone(), Loc::Conversation(conversation), false, claimed_at);
                    return Ok(commit);
                }
                let revalidation = matches!(allocation, Allocation::Revalidate { .. } | Allocation::Wait);
                self.prepare_counted(&mut attempts, tenant, conversation, allocation).await?;
                if revalidation {
                    // Redis lost state under this conversation: the revalidation (this send's, or
                    // another's it waited for) restored the commits of its recent records in the
                    // sender's slot, so the key is claimed again, and a restored commit of this
                    // send answers it (no second seq).
                    continue 'claim;
                }
            }
        }
    }

    /// (1): the key's claim for `value`, with the recovery entry `member` (scored at
    /// `created_at`), which must be confirmed before the commit can exist.
    async fn claim_key(
        &self,
        key: &CommitKey,
        value: &str,
        member: &str,
        created_at: UnixMillis,
    ) -> StoreResult<Claimed> {
        let mut batch = Batch::default();
        batch
            .script(&scripts::CLAIM, &[&self.keys.sender_claim(key), &self.keys.commit(key)])
            .arg(value)
            .arg(CLAIM_MILLIS);
        batch.command("ZADD").arg(self.keys.recovery(aux_shard(member))).arg(created_at.0).arg(member);
        let [claimed, listed] = exactly(self.shared_trip("claiming a request key", batch).await?)?;
        let claimed = answered("claiming a request key", claimed)?;
        let claimed = match status("message_claim", &Described(key), claimed)?.0.as_str() {
            "ok" => Claimed::Ours,
            "same" => Claimed::Same,
            "legacy" => return Ok(Claimed::Legacy),
            "other" => return Ok(Claimed::Other),
            other => {
                return Err(StoreError::InvariantViolation(format!(
                    "message_claim: unexpected script status {other:?}"
                )))
            }
        };
        // No commit without its recovery entry: stop here (the claim stays for a retry).
        answered("writing the recovery index", listed)?;
        Ok(claimed)
    }

    /// The answer to a reservation that found the key's commit (`rest`: the stored request and
    /// head): other bytes are `Conflict`; the same bytes get the stored commit, recorded first
    /// when `record` asks for it and it is RESERVED. Our recovery entry goes unless it is the
    /// commit's own.
    async fn replayed(
        &self,
        request: &CommitRequest,
        request_bytes: &[u8],
        member: &str,
        proposed_id: MessageId,
        rest: &[redis::Value],
        record: bool,
    ) -> StoreResult<Commit> {
        let key = &request.key;
        let (Some(req), Some(head)) = (rest.first().and_then(bytes), rest.get(1).and_then(bytes)) else {
            return Err(StoreError::InvariantViolation("message_append: 'exists' without request and commit".into()));
        };
        if req != request_bytes {
            self.give_up_orphan(member).await;
            return Err(conflict(key, "the same key was reserved for different content"));
        }
        let loc = Loc::Conversation(request.conversation);
        let first = decode_stored(key, loc, req.to_vec(), head.to_vec())?.commit;
        if first.intent.message_id != proposed_id {
            self.give_up_orphan(member).await;
        }
        if first.state == CommitState::Committed {
            return Ok(first);
        }
        self.inflight.remember(first.clone(), loc, false);
        if !record || first.state != CommitState::Reserved {
            return Ok(first);
        }
        match self.record(key, first.clone(), Some(loc)).await {
            Err(StoreError::Conflict(_)) => Ok(first),
            recorded => recorded,
        }
    }

    /// `message_append.lua`'s reply to the send of `template` (its seq 0; RECORDED with
    /// `record`): with group commit, from the call covering the conversation's sends of a tick.
    async fn append(
        &self,
        template: &Commit,
        request_bytes: &[u8],
        record: bool,
        check_sender: bool,
    ) -> StoreResult<redis::Value> {
        let call = self.append_call(template, request_bytes, record, check_sender);
        if let Some(group) = &self.group {
            return group.append(call).await;
        }
        let mut batch = Batch::default();
        append_command(&mut batch, std::iter::once(&call));
        let [reply] = one(run(&self.con, "reserving a commit", batch).await?)?;
        let reply = answered("reserving a commit", reply)?;
        match reply {
            redis::Value::Array(mut replies) if replies.len() == 1 => Ok(replies.remove(0)),
            other => Err(StoreError::InvariantViolation(format!("message_append: {other:?} in reply to one send"))),
        }
    }

    /// The send of `template`'s part of a `message_append.lua` call.
    fn append_call(&self, template: &Commit, request_bytes: &[u8], record: bool, check_sender: bool) -> AppendCall {
        let intent = &template.intent;
        let (key, tenant, conversation) = (&intent.request.key, intent.request.key.tenant, intent.request.conversation);
        let [seq, lease, token, index, low, archived] = self.lease_keys(tenant, conversation);
        let [members, cached] = self.keys.member_cache(tenant, conversation);
        let keys = [
            seq,
            lease,
            token,
            index,
            low,
            archived,
            self.keys.claims(tenant, conversation),
            self.keys.claim_times(tenant, conversation),
            members,
            cached,
            self.keys.clock(tenant, conversation),
            self.keys.records(tenant, conversation),
        ];
        let record_bytes = if record {
            encode_record(&intent.record(self.policy.expires_at(intent.request.retention, intent.created_at)))
        } else {
            Vec::new()
        };
        let sender = if check_sender { key.sender.0.to_vec() } else { Vec::new() };
        AppendCall {
            conversation: keys,
            shared: [
                lease::fresh_token().into_bytes(),
                text(lease::TOKEN_MILLIS),
                text(self.lease_block() / 2),
                text(COMMIT_HEAD_SEQ_BYTES.start),
                text(RECORD_SEQ_BYTES.start),
            ],
            commit: self.keys.commit_in_conversation(key, conversation),
            send: [
                request_bytes.to_vec(),
                encode_commit_head(template),
                record_bytes,
                text(intent.created_at.0),
                sender,
            ],
            created_at: intent.created_at.0,
        }
    }

    /// Best effort, after a refused send: its recovery entry goes, and its claim when this
    /// attempt took it (`Some((claim, value))`), so nothing of it stays.
    async fn refused(&self, member: &str, claim: Option<&(String, String)>) {
        self.give_up_orphan(member).await;
        if let Some((claim, value)) = claim {
            let mut release = scripts::CLAIM_RELEASE.key(claim);
            release.arg(value);
            let _ = scripts::invoke(&self.con, "releasing a request key's claim", &release).await;
        }
    }

    /// `reserve` (and, with `record`, `put_record`) in the sender-slot layout: a key such a
    /// commit holds, or every send of a store creating that layout.
    pub(super) async fn reserve_in_sender_slot(
        &self,
        request: &CommitRequest,
        proposed_id: MessageId,
        members: Option<&dyn HistoryAuthorizer>,
        record: bool,
    ) -> StoreResult<Commit> {
        let reserved = self.reserve_commit(request, proposed_id, members).await?;
        if !record || reserved.state != CommitState::Reserved {
            return Ok(reserved);
        }
        match self.put_record(&reserved.intent).await {
            Err(StoreError::Conflict(_)) => Ok(reserved),
            recorded => recorded,
        }
    }
}

/// A number as the decimal text Redis takes it in.
fn text(n: impl ToString) -> Vec<u8> {
    n.to_string().into_bytes()
}
