//! The bucket directory (`history_bucket`) and the floor (`history_floor`): how a history read
//! never walks through a conversation's expired entries.
//!
//! # Why
//!
//! Records and index entries expire by TTL, and an expired cell is a tombstone to the server until
//! compaction purges it. `history_index` keeps a whole conversation in one partition, so a read
//! starting at seq 0 would walk every expired entry before the first live one, and past 100 000 of
//! them the server refuses the read (`tombstone_failure_threshold`). Retention is per record (a
//! ComplianceHold record never expires, an ephemeral one does after 24 h), so the live records are
//! not a suffix of the seqs: a plain "highest expired seq" could hide a held record.
//!
//! # The directory
//!
//! Seqs are grouped in buckets of [`SEQ_BUCKET_SIZE`] (the `message_record` partitions). Per bucket,
//! `history_bucket.max_expires_at` is a *bound*: at or after it no record of the bucket can be live
//! (the record expiries rounded up to the hour; [`NEVER`] for classes that never expire). It is
//! written
//! - by `reserve`, for the bucket of the seq it is about to take, **before** the CAS that issues
//!   that seq, with the expiry its record will have ([`ScyllaMessageStore::cover_bucket`]);
//! - by `put_record`, with the record's own expiry (it differs only if the retention policy
//!   changed in between).
//!
//! Each write carries `USING TIMESTAMP highest_wins_timestamp(bound)` (the highest bound wins in
//! any arrival order) and `TTL` = the time left until the bound (none for [`NEVER`]): the row
//! vanishes exactly when nothing in its bucket can be live. A process remembers the bounds it
//! wrote and skips a write that one of them already covers, so a busy conversation costs about
//! one directory write per bucket and hour.
//!
//! Reads walk the directory in the page's direction and read `history_index` only inside buckets
//! whose bound is still ahead, one bucket per query: a query meets at most [`SEQ_BUCKET_SIZE`]
//! entries, live or expired. A skipped bucket holds no live record: every record of it was
//! reserved after its bound covered it, and the bound only rises.
//!
//! # The floor
//!
//! The directory too keeps one expired row per bucket until compaction, so every walk starts at
//! `history_floor.floor_bucket`, which history reads move up ([`ScyllaMessageStore::raise_floor`])
//! over buckets that can never again hold a live record, checked in this order:
//! 1. `last_seq` of the conversation: every bucket below `(last_seq + 1) / SEQ_BUCKET_SIZE` had all
//!    its seqs issued, and each issuing CAS came after its reservation wrote the bucket's bound,
//!    so a directory read made after this read sees every such bound;
//! 2. a fresh read of those buckets' directory rows: each must be absent (expired by its TTL) or
//!    hold a bound that passed.
//!
//! Such a bucket can still receive a record only by `put_record` of an older reservation, whose
//! record expires when its bound said: already expired, never shown. Unless the retention policy
//! changed in between: so `put_record` of a reservation older than the shortest expiring
//! retention (less an hour of clock slack), whose record is live, first raises the bound, then
//! moves the floor back down to its bucket ([`ScyllaMessageStore::lower_floor`]). The floor is
//! moved only by LWT (`IF floor_bucket = ? AND pin = ?`) and the lowering also bumps `pin`, so a
//! reader that computed a higher floor from the bound before it was raised fails its LWT.
//!
//! A floor LWT costs one Paxos round per bucket that expires in a conversation (readers racing
//! for the same step: one wins, the others carry on with the floor they read). `pin` and the floor
//! never expire: one small row per conversation, like `conversation_sequence`.
//!
//! Rows written before these tables existed have no bound and are not shown: an upgrade from such
//! data needs one `history_bucket` row per bucket in use (`max_expires_at = NEVER`, no TTL).

use std::sync::PoisonError;

use super::ttl::ttl_secs;
use super::ScyllaMessageStore;
use crate::error::{StoreError, StoreResult};
use crate::ids::{ConversationId, TenantId, UnixMillis};
use crate::message::Direction;
use crate::retention::EPHEMERAL_MILLIS;
use crate::scylla::cql::{corrupt, unavailable, LwtOutcome};
use crate::scylla::mailbox::highest_wins_timestamp;
use crate::scylla::schema::{HOUR_MILLIS, SEQ_BUCKET_SIZE};

/// The bound of a bucket whose records never expire.
pub(super) const NEVER: i64 = i64::MAX;
/// Directory rows read per query.
pub(super) const DIRECTORY_CHUNK: usize = 64;
/// The floor moves at most this many buckets per step (one directory read).
const FLOOR_STEP: usize = 256;
/// A reservation recorded this long after it was made may find the floor above its bucket: the
/// shortest retention of any expiring class (24 h), less an hour of clock slack.
pub(super) const LATE_RECORD_MILLIS: i64 = EPHEMERAL_MILLIS - HOUR_MILLIS;
/// More remembered bounds than this and they are forgotten.
const MAX_REMEMBERED_BOUNDS: usize = 10_000;
/// Rounds of the floor-lowering LWT before giving up as `Unavailable`.
const MAX_FLOOR_ATTEMPTS: usize = 16;

/// The directory bucket of a seq.
pub(super) fn seq_bucket(seq: i64) -> i64 {
    seq.div_euclid(SEQ_BUCKET_SIZE as i64)
}

/// The bound a record expiring at `expires_at` needs: rounded up to the hour, so one row write
/// covers a busy bucket for an hour; [`NEVER`] for a record that never expires.
pub(super) fn bound_of(expires_at: Option<UnixMillis>) -> i64 {
    match expires_at {
        None => NEVER,
        Some(at) => at.0.checked_add(HOUR_MILLIS - 1).map_or(NEVER, |up| up.div_euclid(HOUR_MILLIS) * HOUR_MILLIS),
    }
}

/// Where walks start, as read.
#[derive(Clone, Copy, Debug)]
pub(super) struct Floor {
    /// No bucket below this one can hold a live record.
    pub bucket: i64,
    /// The LWT guard (`None`: no floor row yet).
    pin: Option<i64>,
}

impl ScyllaMessageStore {
    /// Makes `history_bucket` of `bucket` at least `bound` (see the module docs). Skipped when this
    /// process already wrote a bound at least as high that has not passed.
    pub(super) async fn cover_bucket(
        &self,
        tenant: TenantId,
        conversation: ConversationId,
        bucket: i64,
        bound: i64,
    ) -> StoreResult<()> {
        let now = self.now().0;
        let key = (tenant, conversation, bucket);
        let covered = {
            let bounds = self.inner.bounds.lock().unwrap_or_else(PoisonError::into_inner);
            bounds.get(&key).is_some_and(|&b| b >= bound && b > now)
        };
        if covered {
            return Ok(());
        }
        let ttl = if bound == NEVER { 0 } else { ttl_secs(UnixMillis(bound), UnixMillis(now)) };
        let values = (&tenant.0[..], &conversation.0[..], bucket, bound, ttl, highest_wins_timestamp(bound.max(0)));
        self.inner
            .session
            .execute_unpaged(&self.inner.st.insert_bucket, values)
            .await
            .map_err(|e| unavailable(format!("writing the bound of bucket {bucket} of {conversation}"), e))?;
        let mut bounds = self.inner.bounds.lock().unwrap_or_else(PoisonError::into_inner);
        if bounds.len() >= MAX_REMEMBERED_BOUNDS {
            bounds.clear();
        }
        let slot = bounds.entry(key).or_insert(bound);
        *slot = (*slot).max(bound);
        Ok(())
    }

    /// The floor of a conversation (bucket 0 when it has none yet).
    pub(super) async fn read_floor(&self, tenant: TenantId, conversation: ConversationId) -> StoreResult<Floor> {
        let what = format!("reading the history floor of {conversation}");
        let rows = self
            .inner
            .session
            .execute_unpaged(&self.inner.st.select_floor, (&tenant.0[..], &conversation.0[..]))
            .await
            .map_err(|e| unavailable(what.clone(), e))?
            .into_rows_result()
            .map_err(|e| corrupt(&what, e))?;
        match rows.maybe_first_row::<(Option<i64>, Option<i64>)>().map_err(|e| corrupt(&what, e))? {
            None => Ok(Floor { bucket: 0, pin: None }),
            Some((Some(bucket), Some(pin))) if bucket >= 0 => Ok(Floor { bucket, pin: Some(pin) }),
            Some(other) => Err(corrupt(&what, format!("the floor row holds {other:?}"))),
        }
    }

    /// Directory rows `(bucket, bound)` with `lo <= bucket <= hi`, in `direction` order, at most
    /// `limit`.
    pub(super) async fn directory(
        &self,
        tenant: TenantId,
        conversation: ConversationId,
        (lo, hi): (i64, i64),
        direction: Direction,
        limit: usize,
    ) -> StoreResult<Vec<(i64, i64)>> {
        let what = format!("reading the bucket directory of {conversation}");
        let stmt = match direction {
            Direction::Newer => &self.inner.st.buckets_asc,
            Direction::Older => &self.inner.st.buckets_desc,
        };
        let limit = i32::try_from(limit).unwrap_or(i32::MAX);
        let rows = self
            .inner
            .session
            .execute_unpaged(stmt, (&tenant.0[..], &conversation.0[..], lo, hi, limit))
            .await
            .map_err(|e| unavailable(what.clone(), e))?
            .into_rows_result()
            .map_err(|e| corrupt(&what, e))?;
        let out: Vec<(i64, Option<i64>)> = rows
            .rows::<(i64, Option<i64>)>()
            .map_err(|e| corrupt(&what, e))?
            .collect::<Result<_, _>>()
            .map_err(|e| corrupt(&what, e))?;
        out.into_iter()
            .map(|(bucket, bound)| bound.map(|b| (bucket, b)).ok_or_else(|| corrupt(&what, "a bucket without a bound")))
            .collect()
    }

    /// Moves the floor from `floor` towards `candidate` (the first bucket a walk from the floor
    /// found a live bound in, or `i64::MAX`), over buckets that are fully issued and whose bounds
    /// passed at `now` (see the module docs for the order of the reads). A lost LWT is left alone:
    /// another reader moved the floor, or `put_record` pinned it.
    pub(super) async fn raise_floor(
        &self,
        tenant: TenantId,
        conversation: ConversationId,
        floor: Floor,
        candidate: i64,
        now: UnixMillis,
    ) -> StoreResult<()> {
        if candidate <= floor.bucket {
            return Ok(());
        }
        let what = format!("reading the last seq of {conversation}");
        let rows = self
            .inner
            .session
            .execute_unpaged(&self.inner.st.select_last_seq, (&tenant.0[..], &conversation.0[..]))
            .await
            .map_err(|e| unavailable(what.clone(), e))?
            .into_rows_result()
            .map_err(|e| corrupt(&what, e))?;
        let last_seq = rows.maybe_first_row::<(Option<i64>,)>().map_err(|e| corrupt(&what, e))?.and_then(|(s,)| s);
        let issued = last_seq.unwrap_or(0).saturating_add(1).div_euclid(SEQ_BUCKET_SIZE as i64);
        let mut target = candidate.min(issued);
        if target <= floor.bucket {
            return Ok(());
        }
        let rows =
            self.directory(tenant, conversation, (floor.bucket, target - 1), Direction::Newer, FLOOR_STEP).await?;
        if let Some(&(live, _)) = rows.iter().find(|(_, bound)| *bound > now.0) {
            target = live;
        } else if rows.len() == FLOOR_STEP {
            target = rows[FLOOR_STEP - 1].0 + 1;
        }
        if target <= floor.bucket {
            return Ok(());
        }
        let (t, c) = (&tenant.0[..], &conversation.0[..]);
        let what = format!("raising the history floor of {conversation}");
        let result = match floor.pin {
            None => self.inner.session.execute_unpaged(&self.inner.st.insert_floor, (t, c, target, 0i64)).await,
            Some(pin) => {
                let values = (target, pin, t, c, floor.bucket, pin);
                self.inner.session.execute_unpaged(&self.inner.st.cas_floor, values).await
            }
        };
        LwtOutcome::read(&what, result.map_err(|e| unavailable(what.clone(), e))?)?;
        Ok(())
    }

    /// Brings the floor down to `bucket` if it is above, and bumps `pin` either way, so no floor
    /// computed before this call can be stored after it (the caller raised the bucket's bound
    /// first).
    pub(super) async fn lower_floor(
        &self,
        tenant: TenantId,
        conversation: ConversationId,
        bucket: i64,
    ) -> StoreResult<()> {
        let (t, c) = (&tenant.0[..], &conversation.0[..]);
        let what = format!("lowering the history floor of {conversation} to bucket {bucket}");
        let mut floor = self.read_floor(tenant, conversation).await?;
        for _ in 0..MAX_FLOOR_ATTEMPTS {
            let result = match floor.pin {
                None => self.inner.session.execute_unpaged(&self.inner.st.insert_floor, (t, c, 0i64, 1i64)).await,
                Some(pin) => {
                    let values = (floor.bucket.min(bucket), pin + 1, t, c, floor.bucket, pin);
                    self.inner.session.execute_unpaged(&self.inner.st.cas_floor, values).await
                }
            };
            let outcome = LwtOutcome::read(&what, result.map_err(|e| unavailable(what.clone(), e))?)?;
            if outcome.applied() {
                return Ok(());
            }
            floor = match (outcome.bigint(&what, "floor_bucket")?, outcome.bigint(&what, "pin")?) {
                (Some(bucket), Some(pin)) => Floor { bucket, pin: Some(pin) },
                _ => self.read_floor(tenant, conversation).await?,
            };
        }
        Err(StoreError::Unavailable { message: format!("{what}: still contended"), source: None })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_round_up_to_the_hour_and_never_is_highest() {
        assert_eq!(bound_of(None), NEVER);
        assert_eq!(bound_of(Some(UnixMillis(0))), 0);
        assert_eq!(bound_of(Some(UnixMillis(1))), HOUR_MILLIS);
        assert_eq!(bound_of(Some(UnixMillis(HOUR_MILLIS))), HOUR_MILLIS);
        assert_eq!(bound_of(Some(UnixMillis(HOUR_MILLIS + 1))), 2 * HOUR_MILLIS);
        assert_eq!(bound_of(Some(UnixMillis(i64::MAX - 1))), NEVER, "no bound below its expiry, even at the edge");
        let at = UnixMillis(1_790_000_123_456);
        assert!(bound_of(Some(at)) >= at.0 && bound_of(Some(at)) - at.0 < HOUR_MILLIS);
    }

    #[test]
    fn buckets_group_seqs() {
        let size = SEQ_BUCKET_SIZE as i64;
        assert_eq!((seq_bucket(0), seq_bucket(size - 1), seq_bucket(size)), (0, 0, 1));
    }
}
