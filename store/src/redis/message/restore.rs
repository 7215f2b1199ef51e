//! Rebuilding a conversation's hot tier after Redis lost state (DESIGN invariant 7; see
//! [`super::lease`]): published records are written back into its history, with their hot-tier
//! registrations, and the recent ones (within the auxiliary TTL) with their commits as COMMITTED
//! and their request keys' claims, so a client's retry gets its first answer; never overwriting
//! or resurrecting anything.

use metrics::counter;

use super::keys::{aux_member, aux_shard, claim};
use super::lease::RecentRecords;
use super::scripts::{answered, run, status, Batch, Reply, RESTORE_COMMIT, RESTORE_RECORD};
use super::{RedisMessageStore, COMMITTED_REDIS_TTL_MILLIS};
use crate::codec::{encode_commit_head, encode_record, encode_request};
use crate::error::{StoreError, StoreResult};
use crate::ids::{ConversationId, TenantId, UnixMillis};
use crate::message::{Commit, CommitIntent, CommitKey, CommitRequest, CommitState, PublishedRecord};
use crate::message_store::COMMIT_AUX_TTL_MILLIS;
use crate::metrics::{COMMITS_RESTORED, RECORDS_RESTORED};

/// Records written back per restore batch (two Redis round trips each).
const RESTORE_BATCH: usize = 512;

/// What one [`RedisMessageStore::restore_records`] call did, record by record.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct RestoreReport {
    /// Records written back into the hot tier.
    pub restored: usize,
    /// Records the hot tier already held, byte for byte (a physical duplicate in the topic, or
    /// Redis did not lose them).
    pub present: usize,
    /// Records the hot tier had removed on purpose (trimmed below the lower bound, or deleted by
    /// the expiry drain): not resurrected.
    pub removed: usize,
    /// Records created before the window start: the archive serves them.
    pub outside_window: usize,
    /// Records whose retention had ended.
    pub expired: usize,
    /// Records whose seq already holds a different record, described: left as they were. Each
    /// one is a broken invariant (two records were published under one seq) for an operator to
    /// inspect.
    pub conflicts: Vec<String>,
    /// Commits written back as COMMITTED (records created within the auxiliary TTL whose commit
    /// key was free).
    pub commits_restored: usize,
    /// Commits whose key was taken already (left as they were).
    pub commits_present: usize,
    /// The highest seq among the records given (0: none).
    pub highest_seq: u64,
}

impl RestoreReport {
    /// Adds `other`'s counts to this report's.
    pub fn add(&mut self, other: RestoreReport) {
        self.restored += other.restored;
        self.present += other.present;
        self.removed += other.removed;
        self.outside_window += other.outside_window;
        self.expired += other.expired;
        self.conflicts.extend(other.conflicts);
        self.commits_restored += other.commits_restored;
        self.commits_present += other.commits_present;
        self.highest_seq = self.highest_seq.max(other.highest_seq);
    }
}

impl RedisMessageStore {
    /// Writes `records` (published, read back from a durable copy) into the hot tier, with their
    /// expiry and window registrations and their claims, in two round trips. Idempotent: a record already there is left
    /// alone; a seq that holds another record is never overwritten (counted in
    /// [`RestoreReport::conflicts`]); a record the trim or the expiry drain removed is not
    /// resurrected; records created before `window_start` or already expired are skipped.
    /// The commit of every record created within [`COMMIT_AUX_TTL_MILLIS`] is written back as
    /// COMMITTED (publication: where the record was read) where its key is free, with its
    /// auxiliary GC entry, so a retry of the send is answered as the first time.
    /// Seq counters and leases are not touched (see [`super::lease`]); the conversation's clock
    /// is raised to each written (or present, or removed) record's `created_at`, so no later
    /// seq gets an earlier one.
    ///
    /// Errors: only a failing Redis or a corrupt reply; the outcome of every record is in the
    /// report.
    pub async fn restore_records(
        &self,
        records: &[PublishedRecord],
        window_start: UnixMillis,
    ) -> StoreResult<RestoreReport> {
        let now = self.clock.now();
        let highest_seq = records.iter().map(|p| p.record.seq.0).max().unwrap_or(0);
        let mut report = RestoreReport { highest_seq, ..RestoreReport::default() };
        let commits: Vec<(CommitKey, Commit)> =
            records.iter().filter(|p| p.record.created_at.0 + COMMIT_AUX_TTL_MILLIS > now.0).map(committed).collect();
        let mut candidates = Vec::with_capacity(records.len());
        for PublishedRecord { record, .. } in records {
            if record.created_at < window_start {
                report.outside_window += 1;
            } else if record.expires_at.is_some_and(|at| at <= now) {
                report.expired += 1;
            } else {
                candidates.push(record);
            }
        }
        if candidates.is_empty() && commits.is_empty() {
            return Ok(report);
        }
        let mut batch = Batch::default();
        for r in &candidates {
            let keys = [
                self.keys.index(r.tenant, r.conversation),
                self.keys.records(r.tenant, r.conversation),
                self.keys.lower_bound(r.tenant, r.conversation),
                self.keys.gc_tombstones(r.tenant, r.conversation),
                self.keys.claims(r.tenant, r.conversation),
                self.keys.claim_times(r.tenant, r.conversation),
                self.keys.clock(r.tenant, r.conversation),
            ];
            let key = CommitKey { tenant: r.tenant, sender: r.sender, client_message_id: r.client_message_id.clone() };
            batch
                .script(&RESTORE_RECORD, &keys.each_ref().map(String::as_str))
                .arg(r.seq.0)
                .arg(encode_record(r))
                .arg(claim(&key))
                .arg(r.created_at.0)
                .arg(now.0)
                .arg(COMMIT_AUX_TTL_MILLIS);
        }
        for (key, commit) in &commits {
            batch
                .script(&RESTORE_COMMIT, &[&self.keys.commit(key)])
                .arg(encode_request(&commit.intent.request))
                .arg(encode_commit_head(commit))
                .arg(COMMITTED_REDIS_TTL_MILLIS);
        }
        let what = "restoring a history record";
        let mut replies = run(&self.con, what, batch).await?;
        let commit_replies = replies.split_off(candidates.len());
        let mut registrations = Batch::default();
        for ((key, commit), reply) in commits.iter().zip(commit_replies) {
            if self.commit_restored(key, reply)? {
                report.commits_restored += 1;
                let (at, member) = (commit.committed_at.unwrap_or(now), aux_member(key, commit.intent.created_at));
                registrations.command("ZADD").arg(self.keys.commit_gc(aux_shard(&member))).arg(at.0).arg(&member);
            } else {
                report.commits_present += 1;
            }
        }
        for (r, reply) in candidates.iter().zip(replies) {
            let context = format_args!("conversation {} seq {}", r.conversation, r.seq.0);
            match status("message_restore_record", &context, answered(what, reply)?) {
                Ok((s, _)) if s == "restored" || s == "present" => {
                    if s == "restored" {
                        report.restored += 1;
                    } else {
                        report.present += 1;
                    }
                    self.registrations(r.tenant, r.conversation, r.seq, r.created_at, r.expires_at, &mut registrations);
                }
                Ok((s, _)) if s == "removed" => report.removed += 1,
                Ok((s, _)) => {
                    return Err(StoreError::InvariantViolation(format!(
                        "message_restore_record: unexpected script status {s:?}"
                    )))
                }
                Err(StoreError::Conflict(reason)) => report.conflicts.push(reason),
                Err(e) => return Err(e),
            }
        }
        if !registrations.is_empty() {
            for reply in run(&self.con, "registering restored records with the hot tier", registrations).await? {
                answered("registering restored records with the hot tier", reply)?;
            }
        }
        Ok(report)
    }

    /// Writes the conversation's recent records ([`RecentRecords`]) back, newest first (so the
    /// hot tier holds a suffix of the history at every moment); of two copies of one seq the
    /// one published first.
    pub(super) async fn restore_recent(
        &self,
        recent: &dyn RecentRecords,
        tenant: TenantId,
        conversation: ConversationId,
    ) -> StoreResult<RestoreReport> {
        let now = self.clock.now();
        let mut records =
            recent.recent_records(tenant, conversation, UnixMillis(now.0 - COMMIT_AUX_TTL_MILLIS)).await?;
        if let Some(stray) = records.iter().find(|p| p.record.tenant != tenant || p.record.conversation != conversation)
        {
            return Err(StoreError::InvariantViolation(format!(
                "recent records of {conversation} include seq {} of {}",
                stray.record.seq, stray.record.conversation
            )));
        }
        records.sort_by(|a, b| {
            let by_offset =
                (a.publication.partition, a.publication.offset).cmp(&(b.publication.partition, b.publication.offset));
            b.record.seq.cmp(&a.record.seq).then(by_offset)
        });
        records.dedup_by(|later, first| later.record == first.record);
        let window_start = self.trim_window_millis.map_or(UnixMillis(i64::MIN), |w| UnixMillis(now.0 - w));
        let mut report = RestoreReport::default();
        for batch in records.chunks(RESTORE_BATCH) {
            report.add(self.restore_records(batch, window_start).await?);
        }
        for reason in &report.conflicts {
            tracing::error!(%conversation, %reason, "a durable record conflicts with the hot tier; left as it was");
        }
        counter!(RECORDS_RESTORED).increment(report.restored as u64);
        counter!(COMMITS_RESTORED).increment(report.commits_restored as u64);
        Ok(report)
    }

    /// Whether `message_restore_commit` wrote the commit (`false`: the key was taken).
    fn commit_restored(&self, key: &CommitKey, reply: Reply) -> StoreResult<bool> {
        let what = "restoring a commit";
        let context = format_args!("commit of {} by {}", key.client_message_id.as_str(), key.sender);
        match status("message_restore_commit", &context, answered(what, reply)?)?.0.as_str() {
            "restored" => Ok(true),
            "present" => Ok(false),
            other => Err(StoreError::InvariantViolation(format!(
                "message_restore_commit: unexpected script status {other:?}"
            ))),
        }
    }
}

/// The COMMITTED commit a published record stands for (committed, as far as anyone can tell
/// now, when it was created).
fn committed(p: &PublishedRecord) -> (CommitKey, Commit) {
    let r = &p.record;
    let key = CommitKey { tenant: r.tenant, sender: r.sender, client_message_id: r.client_message_id.clone() };
    let request = CommitRequest {
        key: key.clone(),
        conversation: r.conversation,
        kind: r.kind,
        retention: r.retention,
        payload: r.payload.clone(),
    };
    let intent = CommitIntent {
        request,
        seq: r.seq,
        message_id: r.message_id,
        created_at: r.created_at,
        publication: Some(p.publication),
    };
    (key, Commit { intent, state: CommitState::Committed, committed_at: Some(r.created_at) })
}
