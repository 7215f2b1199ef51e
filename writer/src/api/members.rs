//! Membership administration: the history authorizer's and the mailbox router's source.

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::Json;
use qim_runtime::auth::{Caller, Scope};
use qim_runtime::http::ApiError;
use qim_runtime::openapi::{NotJson, Refusals};
use qim_store::ids::UserId;
use qim_store::{MAX_MEMBERS_PAGE, MAX_MEMBERS_PER_CALL};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::wire::{id, within, ConversationPath};
use super::ApiState;

/// Body of add/remove.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UsersBody {
    /// 1 to 1,000 users (32 hex digits each).
    #[schema(min_items = 1, max_items = 1000, pattern = "^[0-9a-fA-F]{32}$")]
    users: Vec<String>,
}

/// Result of add/remove: how many changed.
#[derive(Serialize, ToSchema)]
pub struct ChangedView {
    changed: usize,
}

/// Query of a members page.
#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct PageParams {
    /// Members after this user (32 hex digits; absent: from the first).
    #[param(pattern = "^[0-9a-fA-F]{32}$")]
    after: Option<String>,
    /// Members at most.
    #[serde(default = "default_limit")]
    #[param(default = 1000, minimum = 1, maximum = 10000)]
    limit: usize,
}

const fn default_limit() -> usize {
    1_000
}

/// A page of members in byte order; `next_after` is set when more may follow.
#[derive(Serialize, ToSchema)]
pub struct MembersView {
    members: Vec<String>,
    next_after: Option<String>,
}

fn users(body: Result<Json<UsersBody>, JsonRejection>) -> Result<Vec<UserId>, ApiError> {
    let Json(body) = body?;
    within("users (count)", body.users.len(), 1, MAX_MEMBERS_PER_CALL)?;
    body.users.iter().map(|u| id("users[]", u, UserId::from_hex)).collect()
}

/// Adds members (scope `admin`); answers how many were new.
#[utoipa::path(post, path = "/v1/tenants/{tenant}/conversations/{conversation}/members/add", tag = "members", request_body = UsersBody,
    params(
        ConversationPath,
    ),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "OK", body = ChangedView),
        Refusals,
        NotJson,
    ))]
pub async fn add(
    State(state): State<ApiState>,
    caller: Caller,
    Path(path): Path<ConversationPath>,
    body: Result<Json<UsersBody>, JsonRejection>,
) -> Result<Json<ChangedView>, ApiError> {
    let (tenant, conversation) = path.ids()?;
    caller.administer(tenant)?;
    let changed = state.members.add_members(tenant, conversation, &users(body)?).await?;
    Ok(Json(ChangedView { changed }))
}

/// Removes members (scope `admin`); answers how many were members.
#[utoipa::path(post, path = "/v1/tenants/{tenant}/conversations/{conversation}/members/remove", tag = "members", request_body = UsersBody,
    params(
        ConversationPath,
    ),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "OK", body = ChangedView),
        Refusals,
        NotJson,
    ))]
pub async fn remove(
    State(state): State<ApiState>,
    caller: Caller,
    Path(path): Path<ConversationPath>,
    body: Result<Json<UsersBody>, JsonRejection>,
) -> Result<Json<ChangedView>, ApiError> {
    let (tenant, conversation) = path.ids()?;
    caller.administer(tenant)?;
    let changed = state.members.remove_members(tenant, conversation, &users(body)?).await?;
    Ok(Json(ChangedView { changed }))
}

/// Lists members after `after`, at most `limit`: to a member (scope `read`), an admin or a
/// gateway of the tenant.
#[utoipa::path(get, path = "/v1/tenants/{tenant}/conversations/{conversation}/members", tag = "members",
    params(
        ConversationPath,
        PageParams,
    ),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "OK", body = MembersView),
        Refusals,
    ))]
pub async fn list(
    State(state): State<ApiState>,
    caller: Caller,
    Path(path): Path<ConversationPath>,
    params: Result<Query<PageParams>, QueryRejection>,
) -> Result<Json<MembersView>, ApiError> {
    let Query(p) = params?;
    let (tenant, conversation) = path.ids()?;
    if !caller.oversees(tenant) {
        if let Some(user) = caller.own_user()? {
            caller.act_as(tenant, user, Scope::Read)?;
            state.authorizer.authorize_history(tenant, conversation, user).await?;
        }
    }
    let after = p.after.as_deref().map(|a| id("after", a, UserId::from_hex)).transpose()?;
    let limit = within("limit", p.limit, 1, MAX_MEMBERS_PAGE)?;
    let page = state.members.members_page(tenant, conversation, after, limit).await?;
    let next_after = (page.len() == limit).then(|| page.last().map(UserId::to_hex)).flatten();
    Ok(Json(MembersView { members: page.iter().map(UserId::to_hex).collect(), next_after }))
}
