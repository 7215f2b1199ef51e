//! The commit transitions after `reserve`: RESERVED → RECORDED (`put_record`, with the
//! record's write and its hot-tier registrations), → OUTBOXED, → COMMITTED, and the
//! compare-and-set every transition is (see the parent module's "Step order and crash safety").

use std::sync::{Arc, PoisonError};
use std::time::Instant;

use super::keys::aux_shard;
use super::scripts::{self, answered, expect_ok, run, status, Batch, Reply};
use super::{
    aux_member_at, inflight, missing, one, Described, Loc, RedisMessageStore, CLAIM_MILLIS, CLAIM_YOUNG,
    COMMITTED_REDIS_TTL_MILLIS,
};
use crate::codec::{encode_commit_head, encode_intent, encode_record};
use crate::error::{StoreError, StoreResult};
use crate::ids::MessageId;
use crate::message::{Commit, CommitIntent, CommitKey, CommitState, Publication};
use crate::redis::index_shard::IndexShard;
use crate::rules::{conflict, expect_message, expect_state, not_found};

impl RedisMessageStore {
    /// `put_record` from RESERVED commit `reserved`; `known`: where the in-flight knowledge
    /// says Redis holds exactly that commit.
    pub(super) async fn record(&self, key: &CommitKey, reserved: Commit, known: Option<Loc>) -> StoreResult<Commit> {
        let known_blob = match known {
            Some(Loc::Conversation(c)) => {
                let read = encode_commit_head(&reserved);
                return self.record_in_conversation(key, Loc::Conversation(c), &read, reserved).await;
            }
            Some(Loc::Sender) if self.write_record(&reserved.intent, "known").await? => {
                Some(encode_commit_head(&reserved))
            }
            _ => None,
        };
        let read = match known_blob {
            Some(blob) => blob,
            None => {
                let stored = self.load(key).await?.ok_or_else(|| not_found(key))?;
                if encode_intent(&stored.commit.intent) != encode_intent(&reserved.intent) {
                    return Err(conflict(key, "the intent differs from the reserved one"));
                }
                expect_state(key, &stored.commit, CommitState::Reserved)?;
                if let Loc::Conversation(_) = stored.loc {
                    return self.record_in_conversation(key, stored.loc, &stored.blob, reserved).await;
                }
                if !self.write_record(&reserved.intent, "read").await? {
                    return Err(StoreError::InvariantViolation(
                        "message_put_record: 'stale' for a commit just read".to_owned(),
                    ));
                }
                stored.blob
            }
        };
        let mut next = reserved;
        next.state = CommitState::Recorded;
        // The transition and the hot-tier registrations, one round trip: the record exists (just
        // written or found identical), so registering it is right whatever the CAS answers; a
        // CAS that lands without them leaves them to `mark_committed`.
        let mut batch = Batch::default();
        self.cas(&mut batch, key, Loc::Sender, &read, &next, 0);
        self.hot_tier_registrations(&next.intent, &mut batch);
        let mut replies = run(&self.con, "recording a commit", batch).await?.into_iter();
        let cas = replies.next().ok_or_else(|| missing("message_commit_cas"))?;
        self.cas_outcome(key, cas)?;
        let registered = replies.all(|r| r.is_ok());
        self.inflight.remember(next.clone(), Loc::Sender, registered);
        Ok(next)
    }

    /// `put_record` of a commit in its conversation's slot, stored as `read`: the record, its
    /// index entry and RESERVED → RECORDED in one script (`message_commit_record.lua`), then the
    /// hot-tier registrations (the record exists once the script answered).
    async fn record_in_conversation(
        &self,
        key: &CommitKey,
        loc: Loc,
        read: &[u8],
        reserved: Commit,
    ) -> StoreResult<Commit> {
        let intent = &reserved.intent;
        let (tenant, conversation) = (key.tenant, intent.request.conversation);
        let expires_at = self.policy.expires_at(intent.request.retention, intent.created_at);
        let mut next = reserved.clone();
        next.state = CommitState::Recorded;
        let mut batch = Batch::default();
        let keys = [
            self.keys.commit_at(key, loc),
            self.keys.records(tenant, conversation),
            self.keys.index(tenant, conversation),
        ];
        batch
            .script(&scripts::COMMIT_RECORD, &keys.each_ref().map(String::as_str))
            .arg(read)
            .arg(encode_commit_head(&next))
            .arg(intent.seq.0)
            .arg(encode_record(&intent.record(expires_at)));
        let [reply] = one(run(&self.con, "recording a commit", batch).await?)?;
        expect_ok("message_commit_record", &Described(key), answered("recording a commit", reply)?)?;
        let registered = self.register_hot_tier(&next.intent).await.is_ok();
        self.inflight.remember(next.clone(), loc, registered);
        Ok(next)
    }

    /// Writes the record and index of `intent` (`message_put_record.lua` in `mode`); `false`
    /// when the script calls the caller's knowledge stale (mode `known` only).
    pub(super) async fn write_record(&self, intent: &CommitIntent, mode: &str) -> StoreResult<bool> {
        let (tenant, conversation) = (intent.request.key.tenant, intent.request.conversation);
        let expires_at = self.policy.expires_at(intent.request.retention, intent.created_at);
        let keys = [
            self.keys.index(tenant, conversation),
            self.keys.records(tenant, conversation),
            self.keys.seq(tenant, conversation),
            self.keys.lower_bound(tenant, conversation),
            self.keys.gc_tombstones(tenant, conversation),
            self.keys.lease(tenant, conversation),
        ];
        let mut batch = Batch::default();
        batch
            .script(&scripts::PUT_RECORD, &keys.each_ref().map(String::as_str))
            .arg(intent.seq.0)
            .arg(encode_record(&intent.record(expires_at)))
            .arg(mode);
        let [reply] = one(run(&self.con, "writing a history record", batch).await?)?;
        let reply = answered("writing a history record", reply)?;
        match status("message_put_record", &Described(&intent.request.key), reply)?.0.as_str() {
            "ok" => Ok(true),
            "stale" => Ok(false),
            other => {
                Err(StoreError::InvariantViolation(format!("message_put_record: unexpected script status {other:?}")))
            }
        }
    }

    /// `mark_outbox_published` after the publication was checked.
    pub(super) async fn outbox(
        &self,
        key: &CommitKey,
        message_id: MessageId,
        publication: Publication,
    ) -> StoreResult<Commit> {
        let (current, loc, read, registered) = self.recorded(key, message_id).await?;
        let mut next = current;
        next.intent.publication = Some(publication);
        next.state = CommitState::Outboxed;
        // The transition, with the hot-tier registrations unless this store saw them succeed
        // at RECORDED: the record exists (the commit is past RECORDED), so registering it is
        // right whatever the CAS answers; a CAS that lands without them leaves them to
        // `mark_committed`.
        let mut batch = Batch::default();
        self.cas(&mut batch, key, loc, &read, &next, 0);
        if !registered {
            self.hot_tier_registrations(&next.intent, &mut batch);
        }
        let mut replies = run(&self.con, "publishing a commit", batch).await?.into_iter();
        let cas = replies.next().ok_or_else(|| missing("message_commit_cas"))?;
        self.cas_outcome(key, cas)?;
        let registered = registered || replies.all(|r| r.is_ok());
        self.inflight.remember(next.clone(), loc, registered);
        Ok(next)
    }

    /// The RECORDED commit under `key` for `message_id`: from the in-flight knowledge, else
    /// read (and checked). Also where it is, its exact stored bytes, and whether this store saw
    /// its hot-tier registrations succeed.
    pub(super) async fn recorded(
        &self,
        key: &CommitKey,
        message_id: MessageId,
    ) -> StoreResult<(Commit, Loc, Vec<u8>, bool)> {
        self.current(key, CommitState::Recorded, message_id).await
    }

    /// The commit under `key` in `state` for `message_id` (see [`Self::recorded`]).
    async fn current(
        &self,
        key: &CommitKey,
        state: CommitState,
        message_id: MessageId,
    ) -> StoreResult<(Commit, Loc, Vec<u8>, bool)> {
        Ok(match self.known(key, state, message_id) {
            Some(k) => (k.commit.clone(), k.loc, encode_commit_head(&k.commit), k.registered),
            None => {
                let stored = self.load(key).await?.ok_or_else(|| not_found(key))?;
                expect_message(key, &stored.commit, message_id)?;
                expect_state(key, &stored.commit, state)?;
                (stored.commit, stored.loc, stored.blob, false)
            }
        })
    }

    /// `mark_outbox_published_and_committed`: when this store saw the hot-tier registrations
    /// succeed, ⟨CAS RECORDED → COMMITTED (published) ‖ ZADD `{commitgc}` ‖ ZREM settled⟩ in one
    /// round trip; otherwise the two steps one after the other.
    pub(super) async fn outbox_and_commit(
        &self,
        key: &CommitKey,
        message_id: MessageId,
        publication: Publication,
    ) -> StoreResult<Commit> {
        // In a conversation's slot the registrations ride with the transition (see
        // `committed_extras`); in the sender's they must have landed first.
        let known = self
            .known(key, CommitState::Recorded, message_id)
            .filter(|k| k.registered || matches!(k.loc, Loc::Conversation(_)));
        let Some(known) = known else {
            self.outbox(key, message_id, publication).await?;
            return self.commit(key, message_id).await;
        };
        let read = encode_commit_head(&known.commit);
        let now = self.clock.now();
        let mut committed = known.commit.clone();
        committed.intent.publication = Some(publication);
        committed.state = CommitState::Committed;
        committed.committed_at = Some(now);
        // One compare-and-set takes the commit through OUTBOXED to COMMITTED at once: what a
        // crash or another driver could see between the two never exists, so the commit is either
        // still RECORDED (publish again) or COMMITTED with this publication.
        let mut batch = Batch::default();
        self.cas(&mut batch, key, known.loc, &read, &committed, COMMITTED_REDIS_TTL_MILLIS);
        let member = self.committed_extras(&mut batch, &committed, known.loc, !known.registered, known.claimed);
        self.unlist_settled(&mut batch);
        let mut replies = self.shared_trip("publishing and committing a commit", batch).await?.into_iter();
        let (Some(to_committed), Some(listed)) = (replies.next(), replies.next()) else {
            return Err(missing("message_commit_cas"));
        };
        self.cas_outcome(key, to_committed)?;
        self.committed_landed(&committed, known.registered, member, listed, replies).await;
        Ok(committed)
    }

    /// What the in-flight knowledge says `key` holds, if that is `state` for `message_id`.
    pub(super) fn known(
        &self,
        key: &CommitKey,
        state: CommitState,
        message_id: MessageId,
    ) -> Option<Arc<inflight::Known>> {
        self.inflight.get(key).filter(|k| k.commit.state == state && k.commit.intent.message_id == message_id)
    }

    /// `mark_committed`.
    pub(super) async fn commit(&self, key: &CommitKey, message_id: MessageId) -> StoreResult<Commit> {
        let now = self.clock.now();
        let (current, loc, read, registered) = self.current(key, CommitState::Outboxed, message_id).await?;
        // (1) The hot-tier registrations strictly before the transition (after it a repeated
        // step is a Conflict and could never add them), unless this store saw them succeed.
        if !registered {
            self.register_hot_tier(&current.intent).await?;
        }
        // (2) The transition (with the safety-net TTL) ‖ its `{commitgc}` entry ‖ the recovery
        // entries of earlier commits whose transition and `{commitgc}` entry were confirmed.
        let mut next = current;
        next.state = CommitState::Committed;
        next.committed_at = Some(now);
        let mut batch = Batch::default();
        self.cas(&mut batch, key, loc, &read, &next, COMMITTED_REDIS_TTL_MILLIS);
        let member = self.committed_extras(&mut batch, &next, loc, false, None);
        self.unlist_settled(&mut batch);
        let mut replies = run(&self.con, "committing a commit", batch).await?.into_iter();
        let (Some(cas), Some(listed)) = (replies.next(), replies.next()) else {
            return Err(missing("message_commit_cas"));
        };
        self.cas_outcome(key, cas)?;
        // (3) This commit's recovery entry goes on a later round trip, once both are confirmed.
        self.committed_landed(&next, true, member, listed, replies).await;
        Ok(next)
    }

    /// Adds to `batch`, after the CAS to COMMITTED of `committed` (at `loc`): its `{commitgc}`
    /// entry; in a conversation's slot the claim's life extended past the commit's safety-net
    /// TTL, unless this store took the claim at `claimed` and it is still young enough to
    /// outlive that TTL as it is ([`claim_outlives_commit`]); with `register`, the hot-tier
    /// registrations. Returns the commit's index member.
    ///
    /// Registering beside the transition (the group-commit layout's send, whose seq is known
    /// only once its commit exists) is legal because the record exists (the commit is past
    /// RECORDED); a CAS that lands without them is registered again by `committed_landed`, and
    /// the auxiliary GC registers a conversation-slot commit's record before deleting it.
    fn committed_extras(
        &self,
        batch: &mut Batch,
        committed: &Commit,
        loc: Loc,
        register: bool,
        claimed: Option<Instant>,
    ) -> String {
        let key = &committed.intent.request.key;
        let member = aux_member_at(committed, loc);
        let now = committed.committed_at.map_or(0, |at| at.0);
        batch.command("ZADD").arg(self.keys.commit_gc(aux_shard(&member))).arg(now).arg(&member);
        if matches!(loc, Loc::Conversation(_)) && !claim_outlives_commit(claimed, Instant::now()) {
            batch.command("PEXPIRE").arg(self.keys.sender_claim(key)).arg(CLAIM_MILLIS);
        }
        if register {
            self.hot_tier_registrations(&committed.intent, batch);
        }
        member
    }

    /// After a CAS to COMMITTED landed: the commit's recovery entry is settled once its
    /// `{commitgc}` entry (`listed`) was confirmed too; registrations that rode along and
    /// failed (`registered` false: they were sent; `rest`: the replies after `listed`) are sent
    /// again once, the auxiliary GC covering a second failure.
    async fn committed_landed(
        &self,
        committed: &Commit,
        registered: bool,
        member: String,
        listed: super::scripts::Reply,
        rest: impl Iterator<Item = super::scripts::Reply>,
    ) {
        if listed.is_ok() {
            self.settled.lock().unwrap_or_else(PoisonError::into_inner).push(member);
        }
        let failed = rest.filter(|r| r.is_err()).count();
        if !registered && failed > 0 {
            if let Err(e) = self.register_hot_tier(&committed.intent).await {
                tracing::warn!(conversation = %committed.intent.request.conversation, error = %e,
                    "registering a committed record with the hot tier failed; the auxiliary gc registers it");
            }
        }
    }

    /// Adds to `batch` the removal from `{recovery}` of every settled commit (COMMITTED and in
    /// `{commitgc}`, both confirmed). If the removal fails or never happens, the entries stay:
    /// the recovery scan skips COMMITTED commits and the auxiliary GC removes them.
    pub(super) fn unlist_settled(&self, batch: &mut Batch) {
        let settled = std::mem::take(&mut *self.settled.lock().unwrap_or_else(PoisonError::into_inner));
        let mut by_shard: Vec<(IndexShard, Vec<String>)> = Vec::new();
        for member in settled {
            let shard = aux_shard(&member);
            match by_shard.iter_mut().find(|(s, _)| *s == shard) {
                Some((_, members)) => members.push(member),
                None => by_shard.push((shard, vec![member])),
            }
        }
        for (shard, members) in by_shard {
            batch.command("ZREM").arg(self.keys.recovery(shard)).arg(members);
        }
    }

    /// Removes from `{recovery}` the entries of commits this store committed whose removal is
    /// still pending (it rides on the next `mark_committed`; the recovery scan and the auxiliary
    /// GC also call this). A writer calls it before shutting down; skipping it is harmless.
    pub async fn flush_settled(&self) -> StoreResult<()> {
        let mut batch = Batch::default();
        self.unlist_settled(&mut batch);
        if batch.is_empty() {
            return Ok(());
        }
        for reply in run(&self.con, "removing settled recovery entries", batch).await? {
            answered("removing settled recovery entries", reply)?;
        }
        Ok(())
    }

    /// Adds to `batch` the CAS of `key`'s commit at `loc` from `read` (exact bytes) to `next`.
    pub(super) fn cas(
        &self,
        batch: &mut Batch,
        key: &CommitKey,
        loc: Loc,
        read: &[u8],
        next: &Commit,
        redis_ttl_millis: i64,
    ) {
        batch
            .script(&scripts::COMMIT_CAS, &[&self.keys.commit_at(key, loc)])
            .arg(read)
            .arg(encode_commit_head(next))
            .arg(redis_ttl_millis);
    }

    /// The outcome of a CAS added by [`Self::cas`].
    pub(super) fn cas_outcome(&self, key: &CommitKey, reply: Reply) -> StoreResult<()> {
        expect_ok("message_commit_cas", &Described(key), answered("advancing a commit", reply)?)
    }
}

/// Whether a claim this store took at `claimed` (`None`: not known to be this store's, or not
/// fresh) still outlives, at `now`, a commit's safety-net TTL set now without being extended:
/// taken less than [`CLAIM_YOUNG`] ago.
fn claim_outlives_commit(claimed: Option<Instant>, now: Instant) -> bool {
    claimed.is_some_and(|at| now.saturating_duration_since(at) < CLAIM_YOUNG)
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::{claim_outlives_commit, CLAIM_MILLIS, CLAIM_YOUNG, COMMITTED_REDIS_TTL_MILLIS};

    #[test]
    fn only_a_claim_this_store_took_recently_is_left_unextended() {
        let at = Instant::now();
        assert!(claim_outlives_commit(Some(at), at));
        assert!(claim_outlives_commit(Some(at), at + CLAIM_YOUNG - Duration::from_millis(1)));
        assert!(!claim_outlives_commit(Some(at), at + CLAIM_YOUNG), "an old claim is extended");
        assert!(!claim_outlives_commit(None, at), "a claim found there, or a commit read, is extended");
        let young = i64::try_from(CLAIM_YOUNG.as_millis()).unwrap();
        assert!(
            CLAIM_MILLIS - young >= COMMITTED_REDIS_TTL_MILLIS + young,
            "a claim at the end of its youth still outlives a commit's TTL by the same spare"
        );
    }
}
