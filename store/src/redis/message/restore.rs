//! Rebuilding the hot tier from `qim.messages.v1` after Redis lost state (DESIGN invariant 7):
//! the records the topic holds are written back into each conversation's history, with their
//! hot-tier registrations, without ever overwriting or resurrecting anything.

use super::scripts::{answered, run, status, Batch, RESTORE_RECORD};
use super::RedisMessageStore;
use crate::codec::encode_record;
use crate::error::{StoreError, StoreResult};
use crate::ids::UnixMillis;
use crate::message::MessageRecord;

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
    }
}

impl RedisMessageStore {
    /// Writes `records` (decoded from `qim.messages.v1`) back into the hot tier, with their
    /// expiry and window registrations, in two round trips. Idempotent: a record already there
    /// is left alone; a seq that holds another record is never overwritten (counted in
    /// [`RestoreReport::conflicts`]); a record the trim or the expiry drain removed is not
    /// resurrected; records created before `window_start` or already expired are skipped.
    /// Seq counters are not touched: that is [`Self::reseed`]'s job.
    ///
    /// Errors: only a failing Redis or a corrupt reply; the outcome of every record is in the
    /// report.
    pub async fn restore_records(
        &self,
        records: &[MessageRecord],
        window_start: UnixMillis,
    ) -> StoreResult<RestoreReport> {
        let now = self.clock.now();
        let mut report = RestoreReport::default();
        let mut candidates = Vec::with_capacity(records.len());
        for record in records {
            if record.created_at < window_start {
                report.outside_window += 1;
            } else if record.expires_at.is_some_and(|at| at <= now) {
                report.expired += 1;
            } else {
                candidates.push(record);
            }
        }
        if candidates.is_empty() {
            return Ok(report);
        }
        let mut batch = Batch::default();
        for r in &candidates {
            let keys = [
                self.keys.index(r.tenant, r.conversation),
                self.keys.records(r.tenant, r.conversation),
                self.keys.lower_bound(r.tenant, r.conversation),
                self.keys.gc_tombstones(r.tenant, r.conversation),
            ];
            batch.script(&RESTORE_RECORD, &keys.each_ref().map(String::as_str)).arg(r.seq.0).arg(encode_record(r));
        }
        let what = "restoring a history record";
        let mut registrations = Batch::default();
        for (r, reply) in candidates.iter().zip(run(&self.con, what, batch).await?) {
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
}
