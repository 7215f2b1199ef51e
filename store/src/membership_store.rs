//! The `MembershipStore` contract: who belongs to a conversation.
//!
//! Membership is the history authorizer's source (only members read history) and the mailbox
//! router's source (every member gets a mailbox entry). The writer's admin API manages it.

use async_trait::async_trait;

use crate::error::{StoreError, StoreResult};
use crate::ids::{ConversationId, TenantId, UserId};
use crate::message_store::HistoryAuthorizer;

/// Largest number of users one `add_members`/`remove_members` call takes.
pub const MAX_MEMBERS_PER_CALL: usize = 1_000;
/// Largest page `members_page` returns.
pub const MAX_MEMBERS_PAGE: usize = 10_000;

/// Conversation membership, per tenant.
#[async_trait]
pub trait MembershipStore: Send + Sync {
    /// Adds `users` (1..=[`MAX_MEMBERS_PER_CALL`], duplicates allowed) to the conversation.
    /// Idempotent. Returns how many were not members before.
    async fn add_members(&self, tenant: TenantId, conversation: ConversationId, users: &[UserId])
        -> StoreResult<usize>;

    /// Removes `users` (1..=[`MAX_MEMBERS_PER_CALL`]). Idempotent. Returns how many were members.
    async fn remove_members(
        &self,
        tenant: TenantId,
        conversation: ConversationId,
        users: &[UserId],
    ) -> StoreResult<usize>;

    /// Whether `user` is a member now.
    async fn is_member(&self, tenant: TenantId, conversation: ConversationId, user: UserId) -> StoreResult<bool>;

    /// Members strictly after `after` in byte order, ascending, at most `limit`
    /// (1..=[`MAX_MEMBERS_PAGE`]). An empty page means there are no more.
    async fn members_page(
        &self,
        tenant: TenantId,
        conversation: ConversationId,
        after: Option<UserId>,
        limit: usize,
    ) -> StoreResult<Vec<UserId>>;
}

/// Checks the size of one add/remove call; shared by every backend.
pub(crate) fn check_member_batch(users: &[UserId]) -> StoreResult<()> {
    if users.is_empty() || users.len() > MAX_MEMBERS_PER_CALL {
        return Err(StoreError::InvalidInput(format!(
            "a membership change takes 1..={MAX_MEMBERS_PER_CALL} users, got {}",
            users.len()
        )));
    }
    Ok(())
}

/// Checks a page limit; shared by every backend.
pub(crate) fn check_page_limit(limit: usize) -> StoreResult<()> {
    if limit == 0 || limit > MAX_MEMBERS_PAGE {
        return Err(StoreError::InvalidInput(format!("member page limit must be 1..={MAX_MEMBERS_PAGE}, got {limit}")));
    }
    Ok(())
}

/// Every member of a conversation, read page by page.
pub async fn all_members(
    store: &dyn MembershipStore,
    tenant: TenantId,
    conversation: ConversationId,
) -> StoreResult<Vec<UserId>> {
    let mut out = Vec::new();
    loop {
        let page = store.members_page(tenant, conversation, out.last().copied(), MAX_MEMBERS_PAGE).await?;
        if page.is_empty() {
            return Ok(out);
        }
        out.extend(page);
    }
}

/// The history authorizer of the deployment: members may read, everyone else is `Forbidden`.
pub struct MembershipAuthorizer<M: ?Sized> {
    members: std::sync::Arc<M>,
}

impl<M: MembershipStore + ?Sized> MembershipAuthorizer<M> {
    /// Authorizes against `members`.
    pub fn new(members: std::sync::Arc<M>) -> Self {
        Self { members }
    }
}

#[async_trait]
impl<M: MembershipStore + ?Sized> HistoryAuthorizer for MembershipAuthorizer<M> {
    async fn authorize_history(
        &self,
        tenant: TenantId,
        conversation: ConversationId,
        viewer: UserId,
    ) -> StoreResult<()> {
        if self.members.is_member(tenant, conversation, viewer).await? {
            Ok(())
        } else {
            Err(StoreError::Forbidden(format!("{viewer} is not a member of conversation {conversation}")))
        }
    }
}
