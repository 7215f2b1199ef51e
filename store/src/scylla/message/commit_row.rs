//! What a commit row (`message_commit`) holds, as the commit, the recovery entries and the
//! auxiliary count read it: the `state` codes the LWTs compare, the row's TTLs, the reserve
//! deadline, and how a row read back is classified ([`Found`]).

use crate::codec::{decode_commit, encode_request};
use crate::error::{StoreError, StoreResult};
use crate::ids::UnixMillis;
use crate::message::{Commit, CommitKey, CommitState};
use crate::message_store::COMMIT_AUX_TTL_MILLIS;
use crate::rules::describe;

/// The `state` column's value of each state (the LWT conditions compare it).
pub(super) const fn state_code(state: CommitState) -> i32 {
    match state {
        CommitState::Reserved => 0,
        CommitState::Recorded => 1,
        CommitState::Outboxed => 2,
        CommitState::Committed => 3,
    }
}

/// The auxiliary TTL in whole seconds (2 h).
pub(super) const AUX_TTL_SECS: i32 = (COMMIT_AUX_TTL_MILLIS / 1000) as i32;

/// The server TTL of a COMMITTED commit row: the auxiliary TTL plus an hour of slack, because the
/// server counts from its own write time. Whether the window is still open is decided on the
/// injected clock (`committed_at` + 2 h); a row outliving it is taken over like an expired one.
pub(super) const COMMITTED_ROW_TTL_SECS: i32 = AUX_TTL_SECS + 3_600;

/// A reserve that has not sent its LWT this long after its `created_at` gives up (`Unavailable`;
/// its seq stays a hole), so a fence never meets a reserve that started later.
pub(super) const RESERVE_DEADLINE_MILLIS: i64 = 30_000;

/// What a commit row says.
pub(super) enum Found {
    /// No row.
    Absent,
    /// A row whose auxiliary facts are gone; the blobs are what the row still holds.
    Gone { request_blob: Option<Vec<u8>>, commit_blob: Option<Vec<u8>> },
    /// A live commit and its stable request identity.
    Live { request_blob: Vec<u8>, commit: Commit },
}

/// The key columns of a commit, as bound to CQL.
pub(super) fn key_values(key: &CommitKey) -> (&[u8], &[u8], &str) {
    (&key.tenant.0[..], &key.sender.0[..], key.client_message_id.as_str())
}

/// Whether a commit's auxiliary facts have outlived their TTL at `now`.
pub(super) fn aux_expired(commit: &Commit, now: UnixMillis) -> bool {
    commit.committed_at.is_some_and(|at| at.plus_millis(COMMIT_AUX_TTL_MILLIS) <= now)
}

/// Decodes a commit row (request blob, commit blob) of `key` and decides whether it is live.
pub(super) fn classify(
    key: &CommitKey,
    request_blob: Option<Vec<u8>>,
    commit_blob: Option<Vec<u8>>,
    now: UnixMillis,
) -> StoreResult<Found> {
    let Some(blob) = commit_blob else {
        return Ok(Found::Gone { request_blob, commit_blob: None });
    };
    let commit = decode_commit(&blob)?;
    if commit.intent.request.key != *key {
        return Err(StoreError::CorruptEntry(format!(
            "the row of {} holds the commit of {}",
            describe(key),
            describe(&commit.intent.request.key)
        )));
    }
    let Some(request_blob) = request_blob else {
        return Err(StoreError::CorruptEntry(format!("{} has a commit but no request identity", describe(key))));
    };
    if request_blob != encode_request(&commit.intent.request) {
        return Err(StoreError::CorruptEntry(format!("{}: request identity and commit disagree", describe(key))));
    }
    if aux_expired(&commit, now) {
        return Ok(Found::Gone { request_blob: Some(request_blob), commit_blob: Some(blob) });
    }
    Ok(Found::Live { request_blob, commit })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_auxiliary_ttl_is_two_hours() {
        assert_eq!(AUX_TTL_SECS, 7_200);
    }

    #[test]
    fn state_codes_are_distinct_and_ordered() {
        let states = [CommitState::Reserved, CommitState::Recorded, CommitState::Outboxed, CommitState::Committed];
        let codes: Vec<i32> = states.iter().map(|s| state_code(*s)).collect();
        assert_eq!(codes, vec![0, 1, 2, 3]);
    }
}
