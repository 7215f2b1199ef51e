//! The commit row (`message_commit`): reserve, ordered state transitions and loads.
//!
//! A commit row holds the canonical request blob (the stable identity), the canonical commit
//! blob (the whole answer, decoded as-is), `state` (the LWT condition), `created_at` and
//! `committed_at`. A row is one of:
//! - live: returned by loads; replays compare the request blob byte for byte;
//! - gone: its auxiliary TTL ended (by the injected clock: `committed_at + 2 h <= now`), or the
//!   server already expired its columns (the reserve INSERT's row marker survives an
//!   `UPDATE ... USING TTL`, so such a row reads back with null columns). Loads answer `None`,
//!   and a new reserve of the key takes the row over with
//!   `IF request_blob = <what it read> AND commit_blob = <what it read>` (both conditions, so a
//!   lost race returns both columns of the winner).

use super::buckets::bound_of;
use super::commit_row::{classify, key_values, state_code, Found, COMMITTED_ROW_TTL_SECS, RESERVE_DEADLINE_MILLIS};
use super::ScyllaMessageStore;
use crate::codec::{encode_commit, encode_intent, encode_request};
use crate::error::{StoreError, StoreResult};
use crate::ids::{MessageId, UnixMillis};
use crate::message::{Commit, CommitIntent, CommitKey, CommitRequest, CommitState, Publication};
use crate::rules::{check_request, expect_message, expect_state, not_found};
use crate::rules::{conflict, describe};

/// Times a reserve LWT that timed out in Paxos is sent again before the reserve answers
/// `Unavailable` (each after [`contention_pause`], all within the reserve deadline).
const MAX_RESERVE_RESENDS: usize = 8;
use crate::scylla::cql::{contention_pause, corrupt, paxos_timed_out, unavailable, LwtOutcome};

impl ScyllaMessageStore {
    /// Reads and classifies the commit row of `key` at `now`.
    pub(super) async fn find(&self, key: &CommitKey, now: UnixMillis) -> StoreResult<Found> {
        let what = format!("reading {}", describe(key));
        let rows = self
            .inner
            .session
            .execute_unpaged(&self.inner.st.select_commit, key_values(key))
            .await
            .map_err(|e| unavailable(what.clone(), e))?
            .into_rows_result()
            .map_err(|e| corrupt(&what, e))?;
        let row = rows.maybe_first_row::<(Option<Vec<u8>>, Option<Vec<u8>>)>().map_err(|e| corrupt(&what, e))?;
        match row {
            None => Ok(Found::Absent),
            Some((request_blob, commit_blob)) => classify(key, request_blob, commit_blob, now),
        }
    }

    /// The live commit of `key`, or `NotFound`.
    pub(super) async fn live_commit(&self, key: &CommitKey) -> StoreResult<Commit> {
        match self.find(key, self.now()).await? {
            Found::Live { commit, .. } => Ok(commit),
            Found::Absent | Found::Gone { .. } => Err(not_found(key)),
        }
    }

    pub(super) async fn reserve_impl(&self, request: &CommitRequest, proposed_id: MessageId) -> StoreResult<Commit> {
        check_request(request)?;
        let key = &request.key;
        let request_blob = encode_request(request);
        let takeover = match self.find(key, self.now()).await? {
            Found::Live { request_blob: stored, commit } => {
                return if stored == request_blob {
                    Ok(commit)
                } else {
                    Err(conflict(key, "the same key was reserved for different content"))
                };
            }
            Found::Gone { request_blob, commit_blob } => Some((request_blob, commit_blob)),
            Found::Absent => None,
        };
        // The seq comes with its `created_at`: ours, or the conversation's clock when another
        // writer's is ahead (never below the previous seq's). A crash after it leaves a hole.
        let (policy, retention) = (self.inner.policy, request.retention);
        let bound = move |at: UnixMillis| bound_of(policy.expires_at(retention, at));
        let (seq, created_at) = self.allocate_seq(key.tenant, request.conversation, self.now(), &bound).await?;
        // The recovery entry (at the commit's `created_at`, which the scan compares) comes before
        // the reserve LWT: a crash after that LWT leaves it for the scan.
        self.put_entry(created_at.0, key, false).await?;
        if self.now().0.saturating_sub(created_at.0) > RESERVE_DEADLINE_MILLIS {
            // Past the deadline the recovery scan may already have fenced this entry (entries.rs).
            return Err(StoreError::Unavailable {
                message: format!("reserving {}: no LWT within {RESERVE_DEADLINE_MILLIS} ms", describe(key)),
                source: None,
            });
        }
        let intent =
            CommitIntent { request: request.clone(), seq, message_id: proposed_id, created_at, publication: None };
        let commit = Commit { intent, state: CommitState::Reserved, committed_at: None };
        let commit_blob = encode_commit(&commit);
        let (t, s, c) = key_values(key);
        let state = state_code(CommitState::Reserved);
        let st = &self.inner.st;
        let what = format!("reserving {}", describe(key));
        // A reserve LWT that timed out in Paxos (contention with the other reserver of this key)
        // has an unknown outcome: it is sent again unchanged, as the seq CAS is (seq.rs), while
        // the deadline allows. If the first one applied, the condition now fails and answers our
        // own row, which is read as a replay below.
        let mut attempt = 0;
        let result = loop {
            let result = match &takeover {
                None => {
                    let values = (t, s, c, &request_blob, &commit_blob, state, created_at.0);
                    self.inner.session.execute_unpaged(&st.insert_commit, values).await
                }
                Some((old_request, old_commit)) => {
                    let values = (&request_blob, &commit_blob, state, created_at.0, t, s, c, old_request, old_commit);
                    self.inner.session.execute_unpaged(&st.takeover_commit, values).await
                }
            };
            let in_time = self.now().0.saturating_sub(created_at.0) <= RESERVE_DEADLINE_MILLIS;
            match result {
                Err(e) if paxos_timed_out(&e) && in_time && attempt < MAX_RESERVE_RESENDS => {
                    attempt += 1;
                    contention_pause(attempt).await;
                }
                result => break result,
            }
        };
        let outcome = LwtOutcome::read(&what, result.map_err(|e| unavailable(what.clone(), e))?)?;
        if outcome.applied() {
            return Ok(commit);
        }
        // Another reserve of this key won; our seq stays a hole. Decide on the winner's row as the
        // LWT returned it.
        let winner =
            classify(key, outcome.blob(&what, "request_blob")?, outcome.blob(&what, "commit_blob")?, self.now())?;
        match winner {
            Found::Live { request_blob: stored, commit } if stored == request_blob => Ok(commit),
            Found::Live { .. } => Err(conflict(key, "the same key was reserved for different content")),
            Found::Absent | Found::Gone { .. } => Err(conflict(key, "a concurrent reserve of this key interfered")),
        }
    }

    /// Moves `key` from `from` to `next.state`, storing `next`; `Conflict` when the state moved
    /// meanwhile.
    pub(super) async fn advance(&self, key: &CommitKey, from: CommitState, next: Commit) -> StoreResult<Commit> {
        let what = format!("moving {} to {}", describe(key), next.state.as_str());
        let blob = encode_commit(&next);
        let (t, s, c) = key_values(key);
        let st = &self.inner.st;
        let result = if next.state == CommitState::Committed {
            // The commit facts now start their auxiliary TTL: every regular column is rewritten
            // with it, so the whole commit expires together.
            let committed_at = next.committed_at.map(|at| at.0);
            let request_blob = encode_request(&next.intent.request);
            let values = (
                COMMITTED_ROW_TTL_SECS,
                &request_blob,
                &blob,
                state_code(next.state),
                next.intent.created_at.0,
                committed_at,
                t,
                s,
                c,
                state_code(from),
            );
            self.inner.session.execute_unpaged(&st.finish_commit, values).await
        } else {
            let values = (&blob, state_code(next.state), t, s, c, state_code(from));
            self.inner.session.execute_unpaged(&st.advance_commit, values).await
        };
        let outcome = LwtOutcome::read(&what, result.map_err(|e| unavailable(what.clone(), e))?)?;
        if !outcome.applied() {
            return Err(conflict(key, format!("the state is no longer {}", from.as_str())));
        }
        if next.state == CommitState::Committed {
            self.expire_commit_row(key, &next, &blob).await?;
            // Finished: its recovery entry may now expire (if this write fails, the scan retires
            // it when it passes).
            self.put_entry(next.intent.created_at.0, key, true).await?;
        }
        Ok(next)
    }

    /// Rewrites a COMMITTED commit as a whole row with its TTL, so the reserve INSERT's row marker
    /// (which carries no TTL) expires with the columns instead of leaving a key-only row forever.
    /// Same values as the LWT just stored; if this write fails the commit is still COMMITTED and a
    /// key-only row may remain, which reads as absent and is taken over on reuse.
    async fn expire_commit_row(&self, key: &CommitKey, committed: &Commit, blob: &[u8]) -> StoreResult<()> {
        let (t, s, c) = key_values(key);
        let request_blob = encode_request(&committed.intent.request);
        let values = (
            t,
            s,
            c,
            &request_blob,
            blob,
            state_code(committed.state),
            committed.intent.created_at.0,
            committed.committed_at.map(|at| at.0),
            COMMITTED_ROW_TTL_SECS,
        );
        self.inner.session.execute_unpaged(&self.inner.st.commit_row_ttl, values).await.map_err(|e| {
            unavailable(format!("{} is COMMITTED; giving its row the auxiliary TTL failed", describe(key)), e)
        })?;
        Ok(())
    }

    pub(super) async fn mark_outbox_published_impl(
        &self,
        key: &CommitKey,
        message_id: MessageId,
        publication: Publication,
    ) -> StoreResult<Commit> {
        crate::rules::check_publication(publication)?;
        let commit = self.live_commit(key).await?;
        expect_message(key, &commit, message_id)?;
        expect_state(key, &commit, CommitState::Recorded)?;
        let mut next = commit;
        next.intent.publication = Some(publication);
        next.state = CommitState::Outboxed;
        self.advance(key, CommitState::Recorded, next).await
    }

    pub(super) async fn mark_committed_impl(&self, key: &CommitKey, message_id: MessageId) -> StoreResult<Commit> {
        let now = self.now();
        let commit = self.live_commit(key).await?;
        expect_message(key, &commit, message_id)?;
        expect_state(key, &commit, CommitState::Outboxed)?;
        let mut next = commit;
        next.state = CommitState::Committed;
        next.committed_at = Some(now);
        self.advance(key, CommitState::Outboxed, next).await
    }

    pub(super) async fn load_commit_impl(&self, key: &CommitKey) -> StoreResult<Option<Commit>> {
        match self.find(key, self.now()).await? {
            Found::Live { commit, .. } => Ok(Some(commit)),
            Found::Absent | Found::Gone { .. } => Ok(None),
        }
    }

    pub(super) async fn load_commit_for_request_impl(&self, request: &CommitRequest) -> StoreResult<Option<Commit>> {
        match self.find(&request.key, self.now()).await? {
            Found::Live { request_blob, commit } if request_blob == encode_request(request) => Ok(Some(commit)),
            Found::Live { .. } => Err(conflict(&request.key, "the key belongs to a different request")),
            Found::Absent | Found::Gone { .. } => Ok(None),
        }
    }

    /// Checks `intent` against the reserved one, byte for byte, and the state.
    pub(super) fn expect_reserved_intent(commit: &Commit, intent: &CommitIntent) -> StoreResult<()> {
        let key = &intent.request.key;
        if encode_intent(&commit.intent) != encode_intent(intent) {
            return Err(conflict(key, "the intent differs from the reserved one"));
        }
        expect_state(key, commit, CommitState::Reserved)
    }
}
