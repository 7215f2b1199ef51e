//! The durable seq high-water mark (DESIGN invariant 7).
//!
//! The Redis hot tier issues conversation seqs with `INCR`, and Redis can lose or roll back its
//! counters (a flush, a restart without AOF, the last second of an `everysec` AOF, a restore of
//! an older snapshot, a failover to a replica that missed writes). Neither the topic (retention)
//! nor the archive (TTL) remembers every seq ever issued, so neither can bound a counter after
//! such a loss. This mark can: it lives outside Redis, has no TTL, only ever moves up, and is
//! raised *before* Redis may hand out any seq up to it. The Redis store leases seqs in blocks:
//! it raises the mark to the end of a block first, then lets its counter issue up to there (see
//! [`crate::redis::message`], "Seq leases"). So every seq ever issued is at or below the mark,
//! and a counter that Redis lost restarts above it.

use async_trait::async_trait;

use crate::error::StoreResult;
use crate::ids::{ConversationId, ConversationSeq, TenantId};

/// A durable, TTL-less, only-increasing per-conversation seq high-water mark.
///
/// Every backend satisfies `qim_store::testsuite::high_water` (memory and Scylla).
#[async_trait]
pub trait SeqHighWater: Send + Sync {
    /// The conversation's mark; `ConversationSeq(0)` when it was never raised. A read sees at
    /// least every raise that was acknowledged before the read began.
    async fn high_water(&self, tenant: TenantId, conversation: ConversationId) -> StoreResult<ConversationSeq>;

    /// Raises the conversation's mark to at least `to` (a lower value changes nothing; the
    /// highest raise wins whatever the order of concurrent raises). Durable when it returns.
    async fn raise_high_water(
        &self,
        tenant: TenantId,
        conversation: ConversationId,
        to: ConversationSeq,
    ) -> StoreResult<()>;
}
