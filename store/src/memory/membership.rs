//! In-memory conversation membership.

use std::collections::{BTreeSet, HashMap};
use std::ops::Bound;
use std::sync::Mutex;

use async_trait::async_trait;

use super::lock;
use crate::error::StoreResult;
use crate::ids::{ConversationId, TenantId, UserId};
use crate::membership_store::{check_member_batch, check_page_limit, MembershipStore};

/// Membership held in process memory.
#[derive(Default)]
pub struct MemoryMembershipStore {
    conversations: Mutex<HashMap<(TenantId, ConversationId), BTreeSet<UserId>>>,
}

impl MemoryMembershipStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }
}

#[async_trait]
impl MembershipStore for MemoryMembershipStore {
    async fn add_members(
        &self,
        tenant: TenantId,
        conversation: ConversationId,
        users: &[UserId],
    ) -> StoreResult<usize> {
        check_member_batch(users)?;
        let mut all = lock(&self.conversations);
        let set = all.entry((tenant, conversation)).or_default();
        Ok(users.iter().filter(|u| set.insert(**u)).count())
    }

    async fn remove_members(
        &self,
        tenant: TenantId,
        conversation: ConversationId,
        users: &[UserId],
    ) -> StoreResult<usize> {
        check_member_batch(users)?;
        let mut all = lock(&self.conversations);
        let Some(set) = all.get_mut(&(tenant, conversation)) else { return Ok(0) };
        Ok(users.iter().filter(|u| set.remove(u)).count())
    }

    async fn is_member(&self, tenant: TenantId, conversation: ConversationId, user: UserId) -> StoreResult<bool> {
        Ok(lock(&self.conversations).get(&(tenant, conversation)).is_some_and(|s| s.contains(&user)))
    }

    async fn members_page(
        &self,
        tenant: TenantId,
        conversation: ConversationId,
        after: Option<UserId>,
        limit: usize,
    ) -> StoreResult<Vec<UserId>> {
        check_page_limit(limit)?;
        let all = lock(&self.conversations);
        let Some(set) = all.get(&(tenant, conversation)) else { return Ok(Vec::new()) };
        let start = after.map_or(Bound::Unbounded, Bound::Excluded);
        Ok(set.range((start, Bound::Unbounded)).take(limit).copied().collect())
    }
}
