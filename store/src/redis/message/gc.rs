//! The recovery scan and the two GC drains of [`RedisMessageStore`].
//!
//! Members of both layouts are read: [`AuxMember::InSenderSlot`] names its commit by key and
//! `created_at`, [`AuxMember::InConversationSlot`] by key, conversation and message id. Before a
//! conversation-slot commit is deleted its key's claim is released (claim first) and its record
//! registered with the hot tier again (its send registered it beside the transition to
//! COMMITTED, which may have landed alone).

use super::keys::{aux_shard, parse_aux_member, parse_expiry_member, AuxMember};
use super::scripts::{self, invoke, status};
use super::{aux_due, Loc, RedisMessageStore, Stored};
use crate::error::{StoreError, StoreResult};
use crate::ids::UnixMillis;
use crate::message::{Commit, CommitState};
use crate::message_store::{GcReport, COMMIT_AUX_TTL_MILLIS};

/// How long the expiry drain remembers a record it deleted (Redis clock), so the same member
/// registered again by a commit step retried after a crash is recognised, not taken for
/// corruption.
const TOMBSTONE_MILLIS: i64 = 7 * 24 * 60 * 60 * 1000;

/// At most this many index members are inspected per requested item in one call, so entries
/// that do not qualify (finished, orphaned, not yet due) can not make one call unbounded.
const INSPECT_PER_ITEM: usize = 10;

impl RedisMessageStore {
    /// [`crate::MessageStore::scan_recoverable_commits`]: pages through `{recovery}` below the
    /// cutoff, re-reading each commit and keeping only unfinished ones of that reservation.
    pub(super) async fn scan_recovery(&self, cutoff: UnixMillis, limit: usize) -> StoreResult<Vec<Commit>> {
        let mut found = Vec::new();
        if limit == 0 {
            return Ok(found);
        }
        self.flush_settled().await?;
        let batch = limit.clamp(16, 1000);
        let max = format!("({}", cutoff.0);
        // Bounded over all shards together: entries that do not qualify can not make one call
        // unbounded.
        let most = limit.saturating_mul(INSPECT_PER_ITEM).max(1000);
        let mut inspected = 0;
        for shard in self.scans.recovery.order() {
            let key = self.keys.recovery(shard);
            let mut offset = 0;
            while inspected < most {
                let members = self.zrange_due(&key, &max, offset, batch).await?;
                inspected += members.len();
                for member in &members {
                    // An entry without its commit (a crash or a lost race), of a later reuse of
                    // the key, or of a finished commit is skipped.
                    let Some(stored) = self.member_commit(&parse_aux_member(member)?).await? else { continue };
                    if stored.commit.intent.created_at < cutoff && stored.commit.state.is_recoverable() {
                        found.push(stored.commit);
                        if found.len() == limit {
                            return Ok(found);
                        }
                    }
                }
                if members.len() < batch {
                    break;
                }
                offset += batch;
            }
        }
        Ok(found)
    }

    /// [`crate::MessageStore::gc_committed_auxiliary`] on the injected clock.
    pub(super) async fn gc_auxiliary(&self, limit: usize) -> StoreResult<GcReport> {
        let now = self.clock.now();
        let max = now.plus_millis(-COMMIT_AUX_TTL_MILLIS).0.to_string();
        let mut report = GcReport::default();
        if limit == 0 {
            return Ok(report);
        }
        self.flush_settled().await?;
        // Committed commits past the TTL (committed_at <= now - TTL).
        for shard in self.scans.commit_gc.order() {
            let commit_gc = self.keys.commit_gc(shard);
            for member in self.zrange_due(&commit_gc, &max, 0, limit - report.removed).await? {
                // None: already expired by its safety-net TTL, or the key was reused: nothing
                // to delete.
                if let Some(s) = self.member_commit(&parse_aux_member(&member)?).await? {
                    if s.commit.state != CommitState::Committed {
                        // An entry written alongside a transition that did not land (a pipeline
                        // is not a transaction): the commit is unfinished, so its recovery entry
                        // stays for the recovery loop; only this entry goes.
                        self.zrem(&commit_gc, &member).await?;
                        report.removed += 1;
                        continue;
                    }
                    if !aux_due(&s.commit, now) {
                        // Committed a moment after this entry's score (another process won the
                        // transition): due on a later pass.
                        continue;
                    }
                    self.collect_commit(&s).await?;
                }
                self.zrem(&self.keys.recovery(aux_shard(&member)), &member).await?;
                self.zrem(&commit_gc, &member).await?;
                report.removed += 1;
            }
            if report.removed == limit {
                return Ok(report);
            }
        }
        // Recovery entries older than the TTL that lead nowhere (a crash inside reserve, a lost
        // race, a crash inside mark_committed); entries of unfinished commits stay.
        let budget = limit - report.removed;
        // Entries of commits still unfinished stay in place: skip past them (bounded over all
        // shards), so they can not hide the orphans behind them.
        let mut most = budget.saturating_mul(INSPECT_PER_ITEM);
        for shard in self.scans.recovery.order() {
            if most == 0 || report.removed == limit {
                break;
            }
            let recovery = self.keys.recovery(shard);
            let members = self.zrange_due(&recovery, &max, 0, most).await?;
            most -= members.len();
            for member in members {
                if report.removed == limit {
                    break;
                }
                if let Some(s) = self.member_commit(&parse_aux_member(&member)?).await? {
                    if !aux_due(&s.commit, now) {
                        continue;
                    }
                    self.collect_commit(&s).await?;
                    self.zrem(&self.keys.commit_gc(aux_shard(&member)), &member).await?;
                }
                self.zrem(&recovery, &member).await?;
                report.removed += 1;
            }
        }
        Ok(report)
    }

    /// The commit `member` names, if its hash still holds that reservation (not a later reuse
    /// of the key, nor a reserver that lost the race for it).
    async fn member_commit(&self, member: &AuxMember) -> StoreResult<Option<Stored>> {
        Ok(match member {
            AuxMember::InSenderSlot { key, created_at } => {
                self.load_at(key, Loc::Sender).await?.filter(|s| s.commit.intent.created_at == *created_at)
            }
            AuxMember::InConversationSlot { key, conversation, message_id } => self
                .load_at(key, Loc::Conversation(*conversation))
                .await?
                .filter(|s| s.commit.intent.message_id == *message_id),
        })
    }

    /// Deletes a COMMITTED commit past the auxiliary TTL (see the module docs for a
    /// conversation-slot commit's claim and registrations).
    async fn collect_commit(&self, stored: &Stored) -> StoreResult<()> {
        if let Loc::Conversation(_) = stored.loc {
            self.register_hot_tier(&stored.commit.intent).await?;
        }
        self.delete_commit(&stored.commit.intent.request.key, stored.loc, stored).await.map(drop)
    }

    /// [`crate::MessageStore::gc_expired_history`]: drains `{msghistorygc}` up to now.
    pub(super) async fn gc_history(&self, limit: usize) -> StoreResult<GcReport> {
        let now = self.clock.now();
        let mut report = GcReport::default();
        if limit == 0 {
            return Ok(report);
        }
        for shard in self.scans.history_gc.order() {
            if report.removed + report.orphans_cleaned >= limit {
                break;
            }
            let gc_key = self.keys.history_gc(shard);
            let now = now.0.to_string();
            let due = self.zrange_due(&gc_key, &now, 0, limit - report.removed - report.orphans_cleaned).await?;
            self.gc_history_members(&gc_key, due, &mut report).await?;
        }
        Ok(report)
    }

    /// Deletes the expired records `members` of the shard `gc_key` names.
    async fn gc_history_members(&self, gc_key: &str, members: Vec<String>, report: &mut GcReport) -> StoreResult<()> {
        for member in members {
            let (tenant, conversation, seq) = parse_expiry_member(&member)?;
            let tombstones = self.keys.gc_tombstones(tenant, conversation);
            let mut invocation = scripts::GC_RECORD.key(self.keys.index(tenant, conversation));
            invocation.key(self.keys.records(tenant, conversation));
            invocation.key(self.keys.lower_bound(tenant, conversation)).key(&tombstones).arg(seq.0);
            invocation.arg(TOMBSTONE_MILLIS);
            let reply = invoke(&self.con, "deleting an expired record", &invocation).await?;
            let what = format!("history of {conversation}");
            let (outcome, _) = status("message_gc_record", &what, reply)?;
            match outcome.as_str() {
                "removed" | "already" => {
                    self.zrem(gc_key, &member).await?;
                    report.removed += 1;
                }
                "orphan" => {
                    self.zrem(gc_key, &member).await?;
                    report.orphans_cleaned += 1;
                }
                other => {
                    return Err(StoreError::InvariantViolation(format!(
                        "message_gc_record: unexpected script status {other:?}"
                    )))
                }
            }
        }
        Ok(())
    }
}
