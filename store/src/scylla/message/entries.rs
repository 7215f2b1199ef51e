//! Recovery entries one at a time: what an entry says about its reservation ([`Verdict`]), and
//! the writes that place, move and retire entries.
//!
//! An entry `(position, key)` is written by `reserve` at `position = created_at` before the
//! reserve LWT, **without** TTL; it gets its TTL (retirement) only once its reservation is known
//! finished: by `mark_committed`, or by the scan for a reservation that lost, was taken over, or
//! was fenced. Every write of an entry carries `USING TIMESTAMP` [`entry_timestamp`]`(position,
//! phase)`, so the retirement (phase 1) beats the placement (phase 0) whatever the arrival order,
//! and a late duplicate placement can not revive a retired entry.
//!
//! An entry names its key only, so it can be *moved*: placed again at a later position, then
//! retired at the old one. A moved entry names the commit of its key whose `created_at` is at or
//! before its position.
//!
//! An entry whose key has no commit row (or only a row older than the entry) is either a reserve
//! still between its entry and its LWT, or one that failed. It is [`Verdict::Pending`] until it is
//! [`FENCE_AGE_MILLIS`] old; then the scan *fences* the key by LWT: it writes a gone row (no
//! commit, `request_blob` = a fence marker naming the position) over the row it read, so the
//! reserve's LWT, whose condition was read before, can no longer apply. Reserves give up before
//! their LWT once [`super::commit_row::RESERVE_DEADLINE_MILLIS`] passed since `created_at`, so a fence (and its TTL)
//! can not be outlived by a reserve that had not yet sent its LWT. The fenced row reads as gone:
//! the next reserve of the key takes it over.

use super::commit_row::{classify, key_values, Found, COMMITTED_ROW_TTL_SECS};
use super::ScyllaMessageStore;
use crate::error::StoreResult;
use crate::ids::UnixMillis;
use crate::message::{Commit, CommitKey, CommitState};
use crate::rules::describe;
use crate::scylla::cql::{corrupt, unavailable, LwtOutcome};
use crate::scylla::mailbox::highest_wins_timestamp;
use crate::scylla::schema::hour_bucket;

/// An entry without its commit this old is fenced: well past [`super::commit_row::RESERVE_DEADLINE_MILLIS`] plus the
/// LWT's request timeout.
pub(super) const FENCE_AGE_MILLIS: i64 = 5 * 60_000;
/// The `request_blob` prefix of a fence row (never a canonical request encoding).
const FENCE_PREFIX: &[u8] = b"qim-recovery-fence\x01";

/// A commit row's `(request_blob, commit_blob)` as read.
type CommitRow = (Option<Vec<u8>>, Option<Vec<u8>>);

/// What an entry says, read against its key's commit row.
pub(super) enum Verdict {
    /// It names this commit, which is not COMMITTED.
    Unfinished(Commit),
    /// Its reservation may still be between the entry and the reserve LWT.
    Pending,
    /// Its reservation is finished (committed, taken over, lost or fenced). `retire`: the entry
    /// has no TTL yet (a COMMITTED commit's own entry got it from `mark_committed`).
    Finished { retire: bool },
}

/// The write timestamp of an entry write: placement (phase 0) loses to retirement (phase 1) at
/// the same position, and both lie in the past (see [`highest_wins_timestamp`]).
pub(super) fn entry_timestamp(position: i64, phase: i64) -> i64 {
    highest_wins_timestamp(position.max(0).saturating_mul(2).saturating_add(phase))
}

fn fence_blob(position: i64) -> Vec<u8> {
    [FENCE_PREFIX, &position.to_be_bytes()[..]].concat()
}

/// The position a fence row was written for, if `request_blob` is a fence marker.
fn fenced_position(request_blob: Option<&[u8]>) -> Option<i64> {
    let rest = request_blob?.strip_prefix(FENCE_PREFIX)?;
    Some(i64::from_be_bytes(rest.try_into().ok()?))
}

impl ScyllaMessageStore {
    /// Writes the entry of `key` at `position`: placed (no TTL) or retired (the committed-row
    /// TTL, long enough that a retired entry is never a tombstone where a scan still reads).
    pub(super) async fn put_entry(&self, position: i64, key: &CommitKey, retire: bool) -> StoreResult<()> {
        let (t, s, c) = key_values(key);
        let (ttl, phase) = if retire { (COMMITTED_ROW_TTL_SECS, 1) } else { (0, 0) };
        let values = (hour_bucket(position), position, t, s, c, ttl, entry_timestamp(position, phase));
        let what = format!("writing the recovery entry of {} at {position}", describe(key));
        self.inner
            .session
            .execute_unpaged(&self.inner.st.insert_recovery, values)
            .await
            .map_err(|e| unavailable(what, e))?;
        Ok(())
    }

    /// Reads the commit row of `key` and decides what the entry at `position` says at `now`,
    /// fencing the key when the entry is old and names no commit.
    pub(super) async fn resolve(&self, position: i64, key: &CommitKey, now: UnixMillis) -> StoreResult<Verdict> {
        let young = now.0.saturating_sub(position) < FENCE_AGE_MILLIS;
        // A fence LWT that loses means the row changed: read it once more.
        for _ in 0..2 {
            let what = format!("reading {}", describe(key));
            let rows = self
                .inner
                .session
                .execute_unpaged(&self.inner.st.select_commit, key_values(key))
                .await
                .map_err(|e| unavailable(what.clone(), e))?
                .into_rows_result()
                .map_err(|e| corrupt(&what, e))?;
            let row = rows.maybe_first_row::<CommitRow>().map_err(|e| corrupt(&what, e))?;
            let Some((request_blob, commit_blob)) = row else {
                if young {
                    return Ok(Verdict::Pending);
                }
                if self.fence(key, position, None).await? {
                    return Ok(Verdict::Finished { retire: true });
                }
                continue;
            };
            if commit_blob.is_none() && fenced_position(request_blob.as_deref()).is_some_and(|at| at >= position) {
                return Ok(Verdict::Finished { retire: true });
            }
            let (commit, live) = match classify(key, request_blob.clone(), commit_blob.clone(), now)? {
                Found::Live { commit, .. } => (Some(commit), true),
                Found::Gone { commit_blob: Some(blob), .. } => (Some(crate::codec::decode_commit(&blob)?), false),
                Found::Gone { commit_blob: None, .. } | Found::Absent => (None, false),
            };
            let created_at = commit.as_ref().map(|c| c.intent.created_at.0);
            if created_at.is_some_and(|c| c > position) {
                // A later reservation of the key: this entry's reservation lost or was taken over.
                return Ok(Verdict::Finished { retire: true });
            }
            match commit {
                Some(commit) if live && commit.state.is_recoverable() => return Ok(Verdict::Unfinished(commit)),
                Some(commit) if live && created_at == Some(position) => {
                    debug_assert_eq!(commit.state, CommitState::Committed);
                    return Ok(Verdict::Finished { retire: false });
                }
                Some(_) if live => {
                    // Committed at an earlier position: this is a moved entry of that commit, or
                    // (within clock skew of the commit's auxiliary TTL) a new reservation still in
                    // flight, whose LWT would have shown by now if it was sent.
                    return Ok(if young { Verdict::Pending } else { Verdict::Finished { retire: true } });
                }
                Some(_) if created_at == Some(position) => return Ok(Verdict::Finished { retire: true }),
                _ => {}
            }
            // Gone at an earlier position, or no commit at all: a takeover may be in flight.
            if young {
                return Ok(Verdict::Pending);
            }
            if self.fence(key, position, Some((request_blob, commit_blob))).await? {
                return Ok(Verdict::Finished { retire: true });
            }
        }
        Ok(Verdict::Pending)
    }

    /// Writes a fence row for the entry at `position` over the row as read (`None`: no row).
    /// Whether it applied.
    async fn fence(&self, key: &CommitKey, position: i64, read: Option<CommitRow>) -> StoreResult<bool> {
        let what = format!("fencing {} for its recovery entry at {position}", describe(key));
        let (t, s, c) = key_values(key);
        let fence = fence_blob(position);
        let result = match read {
            None => {
                let values = (t, s, c, &fence, COMMITTED_ROW_TTL_SECS);
                self.inner.session.execute_unpaged(&self.inner.st.fence_absent, values).await
            }
            Some((request_blob, commit_blob)) => {
                // A null column meets `IF col = null`.
                let values = (COMMITTED_ROW_TTL_SECS, &fence, t, s, c, request_blob, commit_blob);
                self.inner.session.execute_unpaged(&self.inner.st.fence_gone, values).await
            }
        };
        let outcome = LwtOutcome::read(&what, result.map_err(|e| unavailable(what.clone(), e))?)?;
        Ok(outcome.applied())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retirement_beats_placement_and_later_positions_beat_earlier() {
        let p = 1_790_000_000_000;
        assert!(entry_timestamp(p, 1) > entry_timestamp(p, 0));
        assert!(entry_timestamp(p + 1, 0) > entry_timestamp(p, 1));
        assert!(entry_timestamp(p, 1) < 0, "in the past");
        assert!(entry_timestamp(-5, 0) > i64::MIN);
    }

    #[test]
    fn fence_markers_name_their_position_and_nothing_else_is_one() {
        assert_eq!(fenced_position(Some(&fence_blob(42))), Some(42));
        assert_eq!(fenced_position(Some(b"qim-recovery-fence\x01short")), None);
        assert_eq!(fenced_position(Some(&crate::codec::encode_request(&sample_request()))), None);
        assert_eq!(fenced_position(None), None);
    }

    fn sample_request() -> crate::message::CommitRequest {
        crate::message::CommitRequest {
            key: CommitKey {
                tenant: crate::ids::TenantId([1; 16]),
                sender: crate::ids::UserId([2; 16]),
                client_message_id: crate::ids::ClientMessageId::new("c").unwrap(),
            },
            conversation: crate::ids::ConversationId([3; 16]),
            kind: crate::message::MessageKind::Normal,
            retention: crate::retention::RetentionClass::Default,
            payload: b"x".to_vec(),
        }
    }
}
