//! `reserve`: the allocation of a seq under the conversation's lease (or the key's claim), then
//! the commit created if the key is free (see the parent module's "Step order and crash
//! safety", and [`super::lease`]).

use super::keys::{self, aux_member, aux_shard};
use super::lease::{Allocation, LeaseAttempts};
use super::scripts::{self, answered, bytes, run, status, Batch};
use super::{at_least, decode_stored, one, Described, Loc, RedisMessageStore};
use crate::codec::{decode_commit_parts, encode_commit_head, encode_request};
use crate::error::{StoreError, StoreResult};
use crate::ids::{ConversationSeq, MessageId};
use crate::message::{Commit, CommitIntent, CommitRequest, CommitState};
use crate::message_store::HistoryAuthorizer;
use crate::message_store::COMMIT_AUX_TTL_MILLIS;
use crate::rules::{check_request, conflict};

/// How many times one reserve takes a `created_at` other than its own from the allocation
/// before giving up: once normally (the claim then answers the same time); more only when the
/// claim was lost in between (a revalidation deletes claims).
const MAX_RESTAMPS: u32 = 3;

impl RedisMessageStore {
    /// [`MessageStore::reserve`](crate::MessageStore::reserve) on Redis; with `members`,
    /// [`MessageStore::reserve_from_member`](crate::MessageStore::reserve_from_member): the
    /// allocation asks the member cache in the same round trip, and `members` is asked only when
    /// the cache can not answer.
    pub(super) async fn reserve_commit(
        &self,
        request: &CommitRequest,
        proposed_id: MessageId,
        members: Option<&dyn HistoryAuthorizer>,
    ) -> StoreResult<Commit> {
        check_request(request)?;
        let key = &request.key;
        let (tenant, conversation) = (key.tenant, request.conversation);
        let request_bytes = encode_request(request);
        // (1) A seq (the key's claim, or a new one) and the recovery entry: one round trip. An
        // allocation that issued nothing says what its lease needs first; then again, with the
        // same `created_at` (so the same recovery entry, written again, and no orphan entries).
        // `created_at` is this store's hybrid clock's stamp unless the conversation's clock is
        // ahead of it (another writer's clock runs ahead) or the key's claim holds an earlier
        // one: the allocation says which, and the entry is written again under that time (the
        // claim then answers the same seq and time), the first one removed in the same trip.
        let mut created_at = self.stamps.stamp();
        let mut member = aux_member(key, created_at);
        let mut stale: Option<String> = None;
        let (mut attempts, mut restamps) = (LeaseAttempts::default(), 0u32);
        let mut check_sender = members.is_some();
        let seq = loop {
            let mut batch = Batch::default();
            self.allocate_seq(&mut batch, key, conversation, created_at, check_sender);
            let recovery = self.keys.recovery(aux_shard(&member));
            batch.command("ZADD").arg(&recovery).arg(created_at.0).arg(&member);
            if let Some(stale) = stale.take() {
                // Best effort, as give_up_orphan: the auxiliary GC removes it otherwise.
                batch.command("ZREM").arg(&recovery).arg(stale);
            }
            let [allocated, listed] = at_least(run(&self.con, "reserving a commit", batch).await?)?;
            let allocation = match self.allocation(conversation, allocated) {
                Ok(a) => a,
                Err(e) => return self.reserve_without_seq(request, &request_bytes, &member, e).await,
            };
            match (&allocation, members) {
                (Allocation::NotMember, _) => {
                    self.give_up_orphan(&member).await;
                    return Err(not_a_member(request));
                }
                (Allocation::MembersUnknown, Some(members)) => {
                    // The cache can not answer here: the durable membership does (and fills it).
                    if let Err(e) = members.authorize_history(tenant, conversation, key.sender).await {
                        self.give_up_orphan(&member).await;
                        return Err(e);
                    }
                    check_sender = false;
                    continue;
                }
                _ => {}
            }
            if let Allocation::Issued { seq, lease, renew, created_at: fixed } = allocation {
                self.stamps.observe(fixed);
                if renew {
                    self.renew_soon(tenant, conversation, lease);
                }
                // No commit may exist without its recovery entry: stop here. The seq stays the
                // key's claim, so a retry gets it again.
                answered("writing the recovery index", listed)?;
                if fixed == created_at {
                    break seq;
                }
                restamps += 1;
                if restamps > MAX_RESTAMPS {
                    let e = StoreError::Unavailable {
                        message: format!("conversation {conversation}: its clock kept moving under this send"),
                        source: None,
                    };
                    return self.reserve_without_seq(request, &request_bytes, &member, e).await;
                }
                stale = Some(std::mem::replace(&mut member, aux_member(key, fixed)));
                created_at = fixed;
                continue;
            }
            if let Err(e) = self.prepare_counted(&mut attempts, tenant, conversation, allocation).await {
                return self.reserve_without_seq(request, &request_bytes, &member, e).await;
            }
        };
        let intent =
            CommitIntent { request: request.clone(), seq, message_id: proposed_id, created_at, publication: None };
        let commit = Commit { intent, state: CommitState::Reserved, committed_at: None };
        // (2) The commit, if the key is still free.
        let mut batch = Batch::default();
        let [hash, claim] = [self.keys.commit(key), self.keys.sender_claim(key)];
        batch.script(&scripts::RESERVE, &[&hash, &claim]).arg(&request_bytes).arg(encode_commit_head(&commit));
        let [reply] = one(run(&self.con, "reserving a commit", batch).await?)?;
        let reply = answered("reserving a commit", reply)?;
        let (outcome, rest) = status("message_reserve", &Described(key), reply)?;
        match outcome.as_str() {
            "ok" => {
                self.inflight.remember(commit.clone(), Loc::Sender, false);
                Ok(commit)
            }
            "moved" => {
                // A store of the group-commit layout claimed the key: its commit (if any yet) is
                // in the conversation's slot, and that layout's reservation decides. The seq just
                // issued stays a hole.
                metrics::counter!(crate::metrics::SEQ_ABANDONED).increment(1);
                self.give_up_orphan(&member).await;
                Box::pin(self.reserve_in_conversation(request, proposed_id, members, false)).await
            }
            "exists" => {
                // The key was taken (a replay, a racing reserver, another request): nothing was
                // written. Our recovery entry goes unless it coincides with the stored commit's.
                let (Some(req), Some(blob)) = (rest.first().and_then(bytes), rest.get(1).and_then(bytes)) else {
                    return Err(StoreError::InvariantViolation(
                        "message_reserve: 'exists' without request and commit".to_owned(),
                    ));
                };
                if req != request_bytes.as_slice() {
                    let theirs = decode_commit_parts(req, blob).ok().map(|c| c.intent);
                    if let Some(theirs) = &theirs {
                        self.abandoned(seq, theirs).await;
                        if theirs.created_at != created_at {
                            self.give_up_orphan(&member).await;
                        }
                    }
                    return Err(conflict(key, "the same key was reserved for different content"));
                }
                let first = decode_stored(key, Loc::Sender, req.to_vec(), blob.to_vec())?;
                self.abandoned(seq, &first.commit.intent).await;
                if first.commit.intent.created_at != created_at {
                    self.give_up_orphan(&member).await;
                }
                // Remembered only as stored in this release's layout: a whole commit an earlier
                // release wrote is read again by the next step (its CAS compares those bytes).
                if first.commit.state != CommitState::Committed && first.blob == encode_commit_head(&first.commit) {
                    self.inflight.remember(first.commit.clone(), Loc::Sender, false);
                }
                Ok(first.commit)
            }
            other => {
                Err(StoreError::InvariantViolation(format!("message_reserve: unexpected script status {other:?}")))
            }
        }
    }

    /// `reserve` when no seq could be allocated (no lease could be had, a corrupt counter): a
    /// replay is still answered from the stored commit, a different request is still `Conflict`;
    /// anything else gets the allocation's error. The recovery entry written alongside (if it
    /// was) leads nowhere and is collected by the auxiliary GC, unless removed here: only when
    /// the stored commit shows it is not that commit's entry.
    pub(super) async fn reserve_without_seq(
        &self,
        request: &CommitRequest,
        request_bytes: &[u8],
        member: &str,
        allocation: StoreError,
    ) -> StoreResult<Commit> {
        let key = &request.key;
        let Some(existing) = self.load(key).await? else { return Err(allocation) };
        if aux_member(key, existing.commit.intent.created_at) != member {
            self.give_up_orphan(member).await;
        }
        if existing.request_bytes != request_bytes {
            return Err(conflict(key, "the same key was reserved for different content"));
        }
        Ok(existing.commit)
    }

    /// Counts `seq` as a hole when the key's stored commit (`theirs`) holds another seq: the
    /// key's claim was lost with Redis state, so the allocation issued a new seq that nothing
    /// will carry. Then points the claim at the stored commit's seq (best effort), so later
    /// attempts of the key get that one.
    pub(super) async fn abandoned(&self, seq: ConversationSeq, theirs: &CommitIntent) {
        if theirs.seq == seq {
            return;
        }
        metrics::counter!(crate::metrics::SEQ_ABANDONED).increment(1);
        let (tenant, conversation) = (theirs.request.key.tenant, theirs.request.conversation);
        let (claims, times) = (self.keys.claims(tenant, conversation), self.keys.claim_times(tenant, conversation));
        let (member, life) = (keys::claim(&theirs.request.key), 2 * COMMIT_AUX_TTL_MILLIS);
        // As message_allocate_seq.lua claims: the claim, its time, and the keys' safety-net TTL.
        let mut batch = Batch::default();
        batch.command("HSET").arg(&claims).arg(&member).arg(format!("{}:{}", theirs.seq.0, theirs.created_at.0));
        batch.command("ZADD").arg(&times).arg(theirs.created_at.0).arg(&member);
        batch.command("PEXPIRE").arg(&claims).arg(life);
        batch.command("PEXPIRE").arg(&times).arg(life);
        if let Err(e) = run(&self.con, "pointing a claim at its commit", batch).await {
            tracing::debug!(%conversation, error = %e, "pointing a claim at its commit failed");
        }
    }

    /// Best effort: removes a recovery entry that leads nowhere (else the auxiliary GC does).
    /// Never the stored commit's: an entry is named by its `created_at`, fresh per attempt.
    pub(super) async fn give_up_orphan(&self, member: &str) {
        let _ = self.zrem(&self.keys.recovery(aux_shard(member)), member).await;
    }
}

/// The refusal of a send whose sender is not a member of the conversation (worded as the history
/// authorizer words it).
pub(super) fn not_a_member(request: &CommitRequest) -> StoreError {
    StoreError::Forbidden(format!("{} is not a member of conversation {}", request.key.sender, request.conversation))
}
