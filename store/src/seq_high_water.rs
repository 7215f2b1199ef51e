//! The durable seq high-water mark (DESIGN invariant 7).
//!
//! The Redis hot tier issues conversation seqs from a counter, and Redis can lose or roll back
//! its counters (a flush, a restart without AOF, the last second of an `everysec` AOF, a restore
//! of an older snapshot, a failover to a replica that missed writes). Neither the topic
//! (retention) nor the archive (TTL) remembers every seq ever issued, so neither can bound a
//! counter after such a loss. This mark can: it lives outside Redis, has no TTL, only ever moves
//! up, and is moved *before* Redis may hand out any seq up to it. The Redis store leases seqs in
//! blocks: it moves the mark to the end of a block first, then lets its counter issue up to
//! there (see [`crate::redis::message`], "Seq leases"). So every seq ever issued is at or below
//! the mark, and a counter that Redis lost restarts above it.
//!
//! The mark also names its *holder*, the Redis process allowed to issue up to it, and moves only
//! by compare-and-set of both. A lease is extended only from the mark its holder left, so two
//! Redis processes that both believe they hold a conversation's lease (an old master still
//! serving during a failover, and the new one) never extend over the same seqs: whoever moved
//! the mark last holds it, and the other one's compare fails and it revalidates above the mark.

use async_trait::async_trait;

use crate::error::{StoreError, StoreResult};
use crate::ids::{ConversationId, ConversationSeq, TenantId};

/// A conversation's mark: every seq ever issued is at or below `through`; `holder` names who
/// may issue up to it (a Redis process's run id; empty: nobody, e.g. raised by a replay).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HighWater {
    /// The highest seq that may have been issued.
    pub through: ConversationSeq,
    /// Who may issue up to `through`.
    pub holder: String,
}

/// A durable, TTL-less, only-increasing per-conversation seq high-water mark.
///
/// Every backend satisfies `qim_store::testsuite::high_water` (memory and Scylla).
#[async_trait]
pub trait SeqHighWater: Send + Sync {
    /// The conversation's mark; `through` 0 and no holder when it was never moved. A read sees
    /// every move acknowledged before the read began.
    async fn high_water(&self, tenant: TenantId, conversation: ConversationId) -> StoreResult<HighWater>;

    /// Moves the mark from exactly `expected` (both fields; the default mark for one never
    /// moved) to `to` (`to.through > expected.through`). `Ok(None)` when it moved;
    /// `Ok(Some(current))` when the mark was something else (nothing changed). Durable when it
    /// returns.
    async fn advance_high_water(
        &self,
        tenant: TenantId,
        conversation: ConversationId,
        expected: &HighWater,
        to: &HighWater,
    ) -> StoreResult<Option<HighWater>>;

    /// Raises the mark to at least `to`, holder cleared (a lower value changes nothing): what a
    /// replay of the topic into a lost keyspace does. By compare-and-set from whatever the mark
    /// is, until one lands or the mark is already there; `Unavailable` when the mark kept
    /// moving under [`RAISE_RACES`] attempts.
    async fn raise_high_water(
        &self,
        tenant: TenantId,
        conversation: ConversationId,
        to: ConversationSeq,
    ) -> StoreResult<()> {
        let mut current = self.high_water(tenant, conversation).await?;
        for _ in 0..RAISE_RACES {
            if current.through >= to {
                return Ok(());
            }
            let target = HighWater { through: to, holder: String::new() };
            match self.advance_high_water(tenant, conversation, &current, &target).await? {
                None => return Ok(()),
                Some(now) => current = now,
            }
        }
        if current.through >= to {
            return Ok(());
        }
        Err(StoreError::Unavailable {
            message: format!(
                "conversation {conversation}: its seq high-water mark kept moving while raising it to {to}"
            ),
            source: None,
        })
    }
}

/// How many compare-and-sets [`SeqHighWater::raise_high_water`] tries before it gives up (each
/// failed one means another process moved the mark meanwhile).
pub const RAISE_RACES: u32 = 16;

/// What every backend checks before a move: the mark only moves up.
pub(crate) fn check_move(expected: &HighWater, to: &HighWater) -> StoreResult<()> {
    if to.through <= expected.through {
        return Err(StoreError::InvalidInput(format!(
            "a seq high-water mark moves up, not from {} to {}",
            expected.through, to.through
        )));
    }
    Ok(())
}
