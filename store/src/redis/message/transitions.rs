//! The commit transitions after `reserve`: RESERVED → RECORDED (`put_record`, with the
//! record's write and its hot-tier registrations), → OUTBOXED, → COMMITTED, and the
//! compare-and-set every transition is (see the parent module's "Step order and crash safety").

use std::sync::{Arc, PoisonError};

use super::keys::{aux_member, aux_shard};
use super::scripts::{self, answered, expect_ok, run, status, Batch, Reply};
use super::{at_least, inflight, missing, one, Described, RedisMessageStore, COMMITTED_REDIS_TTL_MILLIS};
use crate::codec::{encode_commit_head, encode_intent, encode_record};
use crate::error::{StoreError, StoreResult};
use crate::ids::MessageId;
use crate::message::{Commit, CommitIntent, CommitKey, CommitState, Publication};
use crate::redis::index_shard::IndexShard;
use crate::rules::{conflict, expect_message, expect_state, not_found};

impl RedisMessageStore {
    /// `put_record` from RESERVED commit `reserved`; `known` when the in-flight knowledge says
    /// Redis holds exactly that commit.
    pub(super) async fn record(&self, key: &CommitKey, reserved: Commit, known: bool) -> StoreResult<Commit> {
        let known_blob = if known && self.write_record(&reserved.intent, "known").await? {
            Some(encode_commit_head(&reserved))
        } else {
            None
        };
        let read = match known_blob {
            Some(blob) => blob,
            None => {
                let stored = self.load(key).await?.ok_or_else(|| not_found(key))?;
                if encode_intent(&stored.commit.intent) != encode_intent(&reserved.intent) {
                    return Err(conflict(key, "the intent differs from the reserved one"));
                }
                expect_state(key, &stored.commit, CommitState::Reserved)?;
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
        self.cas(&mut batch, key, &read, &next, 0);
        self.hot_tier_registrations(&next.intent, &mut batch);
        let mut replies = run(&self.con, "recording a commit", batch).await?.into_iter();
        let cas = replies.next().ok_or_else(|| missing("message_commit_cas"))?;
        self.cas_outcome(key, cas)?;
        let registered = replies.all(|r| r.is_ok());
        self.inflight.remember(next.clone(), registered);
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
        let (current, read, registered) = self.recorded(key, message_id).await?;
        let mut next = current;
        next.intent.publication = Some(publication);
        next.state = CommitState::Outboxed;
        // The transition, with the hot-tier registrations unless this store saw them succeed
        // at RECORDED: the record exists (the commit is past RECORDED), so registering it is
        // right whatever the CAS answers; a CAS that lands without them leaves them to
        // `mark_committed`.
        let mut batch = Batch::default();
        self.cas(&mut batch, key, &read, &next, 0);
        if !registered {
            self.hot_tier_registrations(&next.intent, &mut batch);
        }
        let mut replies = run(&self.con, "publishing a commit", batch).await?.into_iter();
        let cas = replies.next().ok_or_else(|| missing("message_commit_cas"))?;
        self.cas_outcome(key, cas)?;
        let registered = registered || replies.all(|r| r.is_ok());
        self.inflight.remember(next.clone(), registered);
        Ok(next)
    }

    /// The RECORDED commit under `key` for `message_id`: from the in-flight knowledge, else
    /// read (and checked). Also its exact stored bytes, and whether this store saw its hot-tier
    /// registrations succeed.
    pub(super) async fn recorded(
        &self,
        key: &CommitKey,
        message_id: MessageId,
    ) -> StoreResult<(Commit, Vec<u8>, bool)> {
        Ok(match self.known(key, CommitState::Recorded, message_id) {
            Some(k) => (k.commit.clone(), encode_commit_head(&k.commit), k.registered),
            None => {
                let stored = self.load(key).await?.ok_or_else(|| not_found(key))?;
                expect_message(key, &stored.commit, message_id)?;
                expect_state(key, &stored.commit, CommitState::Recorded)?;
                (stored.commit, stored.blob, false)
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
        let known = self.known(key, CommitState::Recorded, message_id).filter(|k| k.registered);
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
        let member = aux_member(key, committed.intent.created_at);
        let mut batch = Batch::default();
        self.cas(&mut batch, key, &read, &committed, COMMITTED_REDIS_TTL_MILLIS);
        batch.command("ZADD").arg(self.keys.commit_gc(aux_shard(&member))).arg(now.0).arg(&member);
        self.unlist_settled(&mut batch);
        let mut replies = run(&self.con, "publishing and committing a commit", batch).await?.into_iter();
        let (Some(to_committed), Some(listed)) = (replies.next(), replies.next()) else {
            return Err(missing("message_commit_cas"));
        };
        self.cas_outcome(key, to_committed)?;
        // This commit's recovery entry goes on a later round trip, once both are confirmed.
        if listed.is_ok() {
            self.settled.lock().unwrap_or_else(PoisonError::into_inner).push(member);
        }
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
        let (current, read, registered) = match self.known(key, CommitState::Outboxed, message_id) {
            Some(k) => (k.commit.clone(), encode_commit_head(&k.commit), k.registered),
            None => {
                let stored = self.load(key).await?.ok_or_else(|| not_found(key))?;
                expect_message(key, &stored.commit, message_id)?;
                expect_state(key, &stored.commit, CommitState::Outboxed)?;
                (stored.commit, stored.blob, false)
            }
        };
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
        let member = aux_member(key, next.intent.created_at);
        let mut batch = Batch::default();
        self.cas(&mut batch, key, &read, &next, COMMITTED_REDIS_TTL_MILLIS);
        batch.command("ZADD").arg(self.keys.commit_gc(aux_shard(&member))).arg(now.0).arg(&member);
        self.unlist_settled(&mut batch);
        let [cas, listed, ..] = at_least(run(&self.con, "committing a commit", batch).await?)?;
        self.cas_outcome(key, cas)?;
        // (3) This commit's recovery entry goes on a later round trip, once both are confirmed.
        if listed.is_ok() {
            self.settled.lock().unwrap_or_else(PoisonError::into_inner).push(member);
        }
        Ok(next)
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

    /// Adds to `batch` the CAS of `key`'s commit from `read` (exact bytes) to `next`.
    pub(super) fn cas(&self, batch: &mut Batch, key: &CommitKey, read: &[u8], next: &Commit, redis_ttl_millis: i64) {
        batch
            .script(&scripts::COMMIT_CAS, &[&self.keys.commit(key)])
            .arg(read)
            .arg(encode_commit_head(next))
            .arg(redis_ttl_millis);
    }

    /// The outcome of a CAS added by [`Self::cas`].
    pub(super) fn cas_outcome(&self, key: &CommitKey, reply: Reply) -> StoreResult<()> {
        expect_ok("message_commit_cas", &Described(key), answered("advancing a commit", reply)?)
    }
}
