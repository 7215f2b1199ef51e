//! Seq allocation on `conversation_sequence`: one number per successful CAS, with the
//! conversation's clock.
//!
//! The row holds `last_seq`, the highest seq ever issued, and `last_created_at`, the
//! `created_at` issued with it (seed 000's hybrid logical clock, per conversation). The first
//! reserve of a conversation creates it with `INSERT ... IF NOT EXISTS` (issuing 1 at the
//! proposed time); every later one moves it from `(n, t)` to `(n + 1, max(proposal, t))` with
//! `UPDATE ... IF last_seq = n AND last_created_at = t` and owns `n + 1`, at that time, only when
//! `[applied]` is true. So within a conversation `created_at` never decreases as the seq grows,
//! whatever the skew between writers' clocks. A failed condition returns the current pair,
//! which the next attempt uses. Nothing is leased in advance, so a crash or an unknown outcome
//! costs at most a hole, never a reuse. (A row from before the clock column has a null
//! `last_created_at`, which the condition matches as null.)
//!
//! Before each attempt, the bucket of the seq it would issue gets the reservation's expiry bound
//! (`buckets.rs`), so a bucket is never fully issued before every bound of it is written.
//!
//! Within one process, reserves of one conversation queue on a lock that also caches the last
//! value seen, so a busy conversation costs one LWT per seq instead of Paxos contention with
//! itself; other processes are still ordered by the CAS alone.
//!
//! A CAS that timed out in Paxos (`WriteTimeout` of write type CAS: contention with another
//! process, or a replica too slow) has an unknown outcome. It is sent again, unchanged, after a
//! short random pause: if the first one applied, the condition now fails and answers the value
//! it wrote, so its seq stays a hole and the next attempt moves on from there; never a reuse.
//! Measured on the three-node ring: two stores contending for one conversation got such
//! timeouts within a second.

use std::sync::Arc;

use super::buckets::seq_bucket;
use super::{ScyllaMessageStore, SeqSlot, MAX_SEQ_SLOTS};
use crate::codec::{i64_to_u64, u64_to_i64};
use crate::error::{StoreError, StoreResult};
use crate::ids::{ConversationId, ConversationSeq, TenantId, UnixMillis};
use crate::scylla::cql::{contention_pause, corrupt, paxos_timed_out, unavailable, LwtOutcome};

/// CAS attempts before a reserve gives up as `Unavailable` (heavy cross-process contention).
const MAX_CAS_ATTEMPTS: usize = 64;

impl ScyllaMessageStore {
    fn seq_slot(&self, tenant: TenantId, conversation: ConversationId) -> SeqSlot {
        let mut slots = self.inner.seq_slots.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if slots.len() >= MAX_SEQ_SLOTS {
            slots.retain(|_, slot| Arc::strong_count(slot) > 1);
        }
        Arc::clone(slots.entry((tenant, conversation)).or_default())
    }

    /// Issues the next seq of `(tenant, conversation)` and its `created_at`: `proposal`, or the
    /// conversation's clock when that is later. Before each CAS the directory bound of the seq's
    /// bucket is made at least `bound(created_at)` (see `buckets.rs`: the bound must be visible
    /// before the CAS that issues the seq).
    pub(super) async fn allocate_seq(
        &self,
        tenant: TenantId,
        conversation: ConversationId,
        proposal: UnixMillis,
        bound: &(dyn Fn(UnixMillis) -> i64 + Send + Sync),
    ) -> StoreResult<(ConversationSeq, UnixMillis)> {
        let slot = self.seq_slot(tenant, conversation);
        let mut cached = slot.lock().await;
        let result = self.allocate_locked(tenant, conversation, *cached, proposal.0, bound).await;
        // After any failure the outcome of the last CAS is unknown: forget the cached value.
        *cached = result.as_ref().ok().map(|(seq, at)| (*seq, Some(*at)));
        let (issued, at) = result?;
        Ok((ConversationSeq(i64_to_u64("conversation seq", issued)?), UnixMillis(at)))
    }

    async fn allocate_locked(
        &self,
        tenant: TenantId,
        conversation: ConversationId,
        cached: Option<(i64, Option<i64>)>,
        proposal: i64,
        bound: &(dyn Fn(UnixMillis) -> i64 + Send + Sync),
    ) -> StoreResult<(i64, i64)> {
        let (t, c) = (&tenant.0[..], &conversation.0[..]);
        let what = format!("allocating a seq in {conversation}");
        let session = &self.inner.session;
        let st = &self.inner.st;
        let mut current = match cached {
            Some(value) => value,
            None => {
                self.cover_bucket(tenant, conversation, seq_bucket(1), bound(UnixMillis(proposal))).await?;
                let mut attempt = 0;
                let result = loop {
                    match session.execute_unpaged(&st.init_seq, (t, c, 1i64, proposal)).await {
                        Err(e) if paxos_timed_out(&e) && attempt + 1 < MAX_CAS_ATTEMPTS => {
                            contention_pause(attempt).await;
                            attempt += 1;
                        }
                        other => break other,
                    }
                };
                let outcome = LwtOutcome::read(&what, result.map_err(|e| unavailable(what.clone(), e))?)?;
                if outcome.applied() {
                    return Ok((1, proposal));
                }
                current_value(&what, &outcome)?
            }
        };
        for attempt in 0..MAX_CAS_ATTEMPTS {
            let (last, clock) = current;
            let next = u64_to_i64("conversation seq", i64_to_u64("last_seq", last)?.saturating_add(1))?;
            let at = clock.map_or(proposal, |clock| clock.max(proposal));
            self.cover_bucket(tenant, conversation, seq_bucket(next), bound(UnixMillis(at))).await?;
            let result = session.execute_unpaged(&st.cas_seq, (next, at, t, c, last, clock)).await;
            let result = match result {
                Err(e) if paxos_timed_out(&e) && attempt + 1 < MAX_CAS_ATTEMPTS => {
                    contention_pause(attempt).await;
                    continue;
                }
                other => other,
            };
            let outcome = LwtOutcome::read(&what, result.map_err(|e| unavailable(what.clone(), e))?)?;
            if outcome.applied() {
                return Ok((next, at));
            }
            current = current_value(&what, &outcome)?;
        }
        Err(StoreError::Unavailable {
            message: format!("{what}: still contended after {MAX_CAS_ATTEMPTS} attempts"),
            source: None,
        })
    }
}

/// The `(last_seq, last_created_at)` a failed LWT answered.
fn current_value(what: &str, outcome: &LwtOutcome) -> StoreResult<(i64, Option<i64>)> {
    let last =
        outcome.bigint(what, "last_seq")?.ok_or_else(|| corrupt(what, "conversation_sequence has no last_seq"))?;
    Ok((last, outcome.bigint(what, "last_created_at")?))
}
