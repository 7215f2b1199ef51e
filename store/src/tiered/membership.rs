//! Membership durable in the Scylla table, cached in Redis (DESIGN invariant 9: membership
//! survives any Redis loss; Redis may cache it).
//!
//! - A change goes to the durable table first (its answer counts the members), then to the
//!   cache ([`RedisMembershipCache::changed`]). A failure of the cache update is returned: the
//!   change is durable, and the caller's retry (idempotent) updates the cache.
//! - A read asks the cache; when it is missing or not trusted (after a flush, restart, failover
//!   or restore) the whole membership is read from the durable table, answered from, and filled
//!   into the cache unless a change raced the read. A read whose cache is unreachable is
//!   answered from the durable table.

use async_trait::async_trait;
use metrics::counter;

use crate::error::StoreResult;
use crate::ids::{ConversationId, TenantId, UserId};
use crate::membership_store::{all_members, check_page_limit, MembershipStore};
use crate::metrics::MEMBERSHIP_CACHE_FILLS;
use crate::redis::membership_cache::{Cached, RedisMembershipCache};
use crate::scylla::ScyllaMembershipStore;

/// The durable membership table behind the Redis member cache (see the module docs).
#[derive(Clone, Debug)]
pub struct TieredMembershipStore {
    durable: ScyllaMembershipStore,
    cache: RedisMembershipCache,
}

impl TieredMembershipStore {
    /// Membership in `durable`, cached in `cache`.
    pub fn new(durable: ScyllaMembershipStore, cache: RedisMembershipCache) -> Self {
        Self { durable, cache }
    }

    /// Every member, from the durable table, filled into the cache if `generation` still holds.
    async fn load(&self, tenant: TenantId, conversation: ConversationId, generation: &str) -> StoreResult<Vec<UserId>> {
        let members = all_members(&self.durable, tenant, conversation).await?;
        match self.cache.fill(tenant, conversation, generation, &members).await {
            Ok(true) => counter!(MEMBERSHIP_CACHE_FILLS, "outcome" => "filled").increment(1),
            Ok(false) => counter!(MEMBERSHIP_CACHE_FILLS, "outcome" => "raced").increment(1),
            Err(e) => {
                tracing::warn!(%conversation, error = %e, "filling the member cache failed; answered from the durable table")
            }
        }
        Ok(members)
    }
}

#[async_trait]
impl MembershipStore for TieredMembershipStore {
    async fn add_members(
        &self,
        tenant: TenantId,
        conversation: ConversationId,
        users: &[UserId],
    ) -> StoreResult<usize> {
        let added = self.durable.add_members(tenant, conversation, users).await?;
        self.cache.changed(tenant, conversation, true, users).await?;
        Ok(added)
    }

    async fn remove_members(
        &self,
        tenant: TenantId,
        conversation: ConversationId,
        users: &[UserId],
    ) -> StoreResult<usize> {
        let removed = self.durable.remove_members(tenant, conversation, users).await?;
        self.cache.changed(tenant, conversation, false, users).await?;
        Ok(removed)
    }

    async fn is_member(&self, tenant: TenantId, conversation: ConversationId, user: UserId) -> StoreResult<bool> {
        match self.cache.is_member(tenant, conversation, user).await {
            Ok(Cached::Hit(member)) => Ok(member),
            Ok(Cached::Miss { generation }) => {
                Ok(self.load(tenant, conversation, &generation).await?.binary_search(&user).is_ok())
            }
            Err(e) => {
                tracing::warn!(%conversation, error = %e, "the member cache is unreachable; reading the durable table");
                self.durable.is_member(tenant, conversation, user).await
            }
        }
    }

    async fn members_page(
        &self,
        tenant: TenantId,
        conversation: ConversationId,
        after: Option<UserId>,
        limit: usize,
    ) -> StoreResult<Vec<UserId>> {
        check_page_limit(limit)?;
        match self.cache.members_page(tenant, conversation, after, limit).await {
            Ok(Cached::Hit(page)) => Ok(page),
            Ok(Cached::Miss { generation }) => {
                let all = self.load(tenant, conversation, &generation).await?;
                let start = after.map_or(0, |a| all.partition_point(|u| *u <= a));
                Ok(all[start..].iter().take(limit).copied().collect())
            }
            Err(e) => {
                tracing::warn!(%conversation, error = %e, "the member cache is unreachable; reading the durable table");
                self.durable.members_page(tenant, conversation, after, limit).await
            }
        }
    }
}
