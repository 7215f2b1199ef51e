//! The seq high-water mark held in process memory: durable for the life of the process, which
//! is what the embedded mode and the Redis store's tests need.

use std::collections::HashMap;
use std::sync::Mutex;

use async_trait::async_trait;

use super::lock;
use crate::error::StoreResult;
use crate::ids::{ConversationId, ConversationSeq, TenantId};
use crate::seq_high_water::SeqHighWater;

/// Per-conversation high-water marks in process memory.
#[derive(Default, Debug)]
pub struct MemorySeqHighWater {
    marks: Mutex<HashMap<(TenantId, ConversationId), ConversationSeq>>,
}

impl MemorySeqHighWater {
    /// No marks yet.
    pub fn new() -> Self {
        Self::default()
    }
}

#[async_trait]
impl SeqHighWater for MemorySeqHighWater {
    async fn high_water(&self, tenant: TenantId, conversation: ConversationId) -> StoreResult<ConversationSeq> {
        Ok(lock(&self.marks).get(&(tenant, conversation)).copied().unwrap_or(ConversationSeq(0)))
    }

    async fn raise_high_water(
        &self,
        tenant: TenantId,
        conversation: ConversationId,
        to: ConversationSeq,
    ) -> StoreResult<()> {
        let mut marks = lock(&self.marks);
        let mark = marks.entry((tenant, conversation)).or_insert(ConversationSeq(0));
        *mark = (*mark).max(to);
        Ok(())
    }
}
