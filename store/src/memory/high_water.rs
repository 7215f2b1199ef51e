//! The seq high-water mark held in process memory: durable for the life of the process, which
//! is what the embedded mode and the Redis store's tests need.

use std::collections::HashMap;
use std::sync::Mutex;

use async_trait::async_trait;

use super::lock;
use crate::error::StoreResult;
use crate::ids::{ConversationId, TenantId};
use crate::seq_high_water::{check_move, HighWater, SeqHighWater};

/// Per-conversation high-water marks in process memory.
#[derive(Default, Debug)]
pub struct MemorySeqHighWater {
    marks: Mutex<HashMap<(TenantId, ConversationId), HighWater>>,
}

impl MemorySeqHighWater {
    /// No marks yet.
    pub fn new() -> Self {
        Self::default()
    }
}

#[async_trait]
impl SeqHighWater for MemorySeqHighWater {
    async fn high_water(&self, tenant: TenantId, conversation: ConversationId) -> StoreResult<HighWater> {
        Ok(lock(&self.marks).get(&(tenant, conversation)).cloned().unwrap_or_default())
    }

    async fn advance_high_water(
        &self,
        tenant: TenantId,
        conversation: ConversationId,
        expected: &HighWater,
        to: &HighWater,
    ) -> StoreResult<Option<HighWater>> {
        check_move(expected, to)?;
        let mut marks = lock(&self.marks);
        let mark = marks.entry((tenant, conversation)).or_default();
        if mark != expected {
            return Ok(Some(mark.clone()));
        }
        *mark = to.clone();
        Ok(None)
    }
}
