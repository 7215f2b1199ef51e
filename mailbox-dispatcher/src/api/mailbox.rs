//! Reading a user's mailbox after a cursor, and acknowledging (trimming) it.

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use qim_runtime::auth::{Caller, Scope};
use qim_runtime::http::ApiError;
use qim_runtime::openapi::{ErrorBody, NotJson, Refusals};
use qim_store::ids::{TenantId, UserId};
use qim_store::mailbox::{lane_of, shard_of, EventGroup, MailboxSeq};
use qim_store::StoreError;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::ApiState;

/// Most events one page may ask for.
pub const MAX_LIMIT: usize = 1_000;

/// Query of a mailbox page.
#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct RangeParams {
    /// Resume after this cursor (`epoch:position`); absent = from the earliest available entry.
    #[param(pattern = "^[0-9]+:[0-9]+$")]
    after: Option<String>,
    /// Events at most (whole entries; the first may exceed it).
    #[serde(default = "default_limit")]
    #[param(default = 100, minimum = 1, maximum = 1000)]
    limit: usize,
}

const fn default_limit() -> usize {
    100
}

/// One message an event announces.
#[derive(Serialize, ToSchema)]
pub struct MessageView {
    tenant: String,
    conversation: String,
    seq: u64,
    message_id: String,
    sender: String,
    #[schema(value_type = String)]
    kind: &'static str,
    created_at: i64,
}

/// One event.
#[derive(Serialize, ToSchema)]
pub struct EventView {
    ordinal: u16,
    event_id: String,
    message: MessageView,
}

/// One entry (event group) of the mailbox.
#[derive(Serialize, ToSchema)]
pub struct EntryView {
    seq: String,
    expires_at: i64,
    events: Vec<EventView>,
}

/// A mailbox page: resume with `after = covered`.
#[derive(Serialize, ToSchema)]
pub struct PageView {
    entries: Vec<EntryView>,
    covered: String,
    has_more: bool,
}

impl From<EventGroup> for EntryView {
    fn from(g: EventGroup) -> Self {
        Self {
            seq: g.seq.to_string(),
            expires_at: g.expires_at.0,
            events: g
                .events
                .into_iter()
                .map(|e| EventView {
                    ordinal: e.ordinal,
                    event_id: e.event_id.to_hex(),
                    message: MessageView {
                        tenant: e.message.tenant.to_hex(),
                        conversation: e.message.conversation.to_hex(),
                        seq: e.message.seq.0,
                        message_id: e.message.message_id.to_hex(),
                        sender: e.message.sender.to_hex(),
                        kind: e.message.kind.as_str(),
                        created_at: e.message.created_at.0,
                    },
                })
                .collect(),
        }
    }
}

/// A failed mailbox request: the common error body, plus `error.earliest` on 410.
pub enum MailboxError {
    /// Any other failure.
    Api(ApiError),
    /// The cursor is below the earliest valid one.
    Expired {
        /// What the client sent.
        message: String,
        /// Where it may resume.
        earliest: MailboxSeq,
    },
}

impl From<ApiError> for MailboxError {
    fn from(e: ApiError) -> Self {
        MailboxError::Api(e)
    }
}

impl From<StoreError> for MailboxError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::CursorExpired { earliest } => MailboxError::Expired { message: e.to_string(), earliest },
            other => MailboxError::Api(other.into()),
        }
    }
}

impl From<QueryRejection> for MailboxError {
    fn from(r: QueryRejection) -> Self {
        MailboxError::Api(r.into())
    }
}

impl From<JsonRejection> for MailboxError {
    fn from(r: JsonRejection) -> Self {
        MailboxError::Api(r.into())
    }
}

impl IntoResponse for MailboxError {
    fn into_response(self) -> Response {
        match self {
            MailboxError::Api(e) => e.into_response(),
            MailboxError::Expired { message, earliest } => {
                let body = serde_json::json!({ "error": {
                    "code": "cursor_expired", "message": message, "earliest": earliest.to_string(),
                }});
                (StatusCode::GONE, Json(body)).into_response()
            }
        }
    }
}

fn target(tenant: &str, user: &str) -> Result<(TenantId, UserId), ApiError> {
    let bad = |field: &str, text: &str| {
        ApiError::invalid(format!("{field} must be 32 hexadecimal digits (16 bytes), got {text:?}"))
    };
    Ok((
        TenantId::from_hex(tenant).map_err(|_| bad("tenant", tenant))?,
        UserId::from_hex(user).map_err(|_| bad("user", user))?,
    ))
}

fn cursor(field: &str, text: &str) -> Result<MailboxSeq, ApiError> {
    text.parse().map_err(|e: String| ApiError::invalid(format!("{field}: {e}")))
}

/// The highest seq delivered to `user` so far: their lane's watermark, as a seq.
async fn delivered(state: &ApiState, tenant: TenantId, user: UserId) -> Result<MailboxSeq, StoreError> {
    let wm = state.store.lane_watermark(shard_of(&tenant, &user, state.shards), lane_of(&tenant, &user)).await?;
    let bound = wm.through.and_then(|o| MailboxSeq::from_offset(state.epoch, o));
    Ok(bound.unwrap_or_else(|| MailboxSeq::origin(state.epoch)))
}

/// A cursor of another epoch: a later one is bad input; an earlier one expired (the log was
/// restarted: the client re-syncs from the current epoch).
fn check_epoch(state: &ApiState, after: MailboxSeq) -> Result<(), MailboxError> {
    if after.epoch() > state.epoch {
        return Err(
            ApiError::invalid(format!("cursor {after} is of an epoch after the current {}", state.epoch.0)).into()
        );
    }
    if after.epoch() < state.epoch {
        let earliest = MailboxSeq::origin(state.epoch);
        return Err(MailboxError::Expired { message: format!("cursor {after} is of an earlier epoch"), earliest });
    }
    Ok(())
}

/// `GET /v1/tenants/{tenant}/users/{user}/mailbox`: entries after `after`, at most `limit`
/// events (whole entries; the first may exceed it), never past what was delivered.
#[utoipa::path(get, path = "/v1/tenants/{tenant}/users/{user}/mailbox", tag = "mailbox",
    params(
        ("tenant" = String, Path, pattern = "^[0-9a-fA-F]{32}$", description = "The tenant"),
        ("user" = String, Path, pattern = "^[0-9a-fA-F]{32}$", description = "The mailbox's owner"),
        RangeParams,
    ),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "OK", body = PageView),
        Refusals,
        (status = 410, description = "The cursor lies in an expired or trimmed region: resume from `error.earliest`", body = ErrorBody),
    ))]
pub async fn range(
    State(state): State<ApiState>,
    caller: Caller,
    Path((tenant, user)): Path<(String, String)>,
    params: Result<Query<RangeParams>, QueryRejection>,
) -> Result<Json<PageView>, MailboxError> {
    let Query(p) = params?;
    let (tenant, user) = target(&tenant, &user)?;
    caller.act_as(tenant, user, Scope::Read)?;
    if !(1..=MAX_LIMIT).contains(&p.limit) {
        return Err(ApiError::invalid(format!("limit must be in 1..={MAX_LIMIT}, got {}", p.limit)).into());
    }
    let explicit = p.after.as_deref().map(|a| cursor("after", a)).transpose()?;
    let after = explicit.unwrap_or_else(|| MailboxSeq::origin(state.epoch));
    check_epoch(&state, after)?;
    let up_to = delivered(&state, tenant, user).await?;
    let page = match state.store.range_scan(tenant, user, after, up_to, p.limit).await {
        // Without a cursor the client asked for "everything still there": start at the earliest.
        Err(StoreError::CursorExpired { earliest }) if explicit.is_none() => {
            state.store.range_scan(tenant, user, earliest, up_to.max(earliest), p.limit).await?
        }
        other => other?,
    };
    Ok(Json(PageView {
        has_more: page.covered < up_to,
        covered: page.covered.to_string(),
        entries: page.groups.into_iter().map(EntryView::from).collect(),
    }))
}

/// Body of a truncate.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TruncateBody {
    /// The last entry the client acknowledged (`epoch:position`), at most what was delivered.
    #[schema(pattern = "^[0-9]+:[0-9]+$")]
    through: String,
}

/// The trim in force after a truncate.
#[derive(Serialize, ToSchema)]
pub struct TrimView {
    trim: String,
}

/// `POST /v1/tenants/{tenant}/users/{user}/mailbox/truncate`: the client acknowledged every
/// entry up to and including `through` (not past what was delivered); cursors below it expire.
#[utoipa::path(post, path = "/v1/tenants/{tenant}/users/{user}/mailbox/truncate", tag = "mailbox", request_body = TruncateBody,
    params(
        ("tenant" = String, Path, pattern = "^[0-9a-fA-F]{32}$", description = "The tenant"),
        ("user" = String, Path, pattern = "^[0-9a-fA-F]{32}$", description = "The mailbox's owner"),
    ),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "OK", body = TrimView),
        Refusals,
        (status = 410, description = "The cursor lies in an expired or trimmed region: resume from `error.earliest`", body = ErrorBody),
        NotJson,
    ))]
pub async fn truncate(
    State(state): State<ApiState>,
    caller: Caller,
    Path((tenant, user)): Path<(String, String)>,
    body: Result<Json<TruncateBody>, JsonRejection>,
) -> Result<Json<TrimView>, MailboxError> {
    let Json(body) = body?;
    let (tenant, user) = target(&tenant, &user)?;
    caller.act_as(tenant, user, Scope::Read)?;
    let through = cursor("through", &body.through)?;
    if through.epoch() != state.epoch {
        return Err(
            ApiError::invalid(format!("through {through} is not of the current epoch {}", state.epoch.0)).into()
        );
    }
    let delivered = delivered(&state, tenant, user).await?;
    if through > delivered {
        return Err(ApiError::invalid(format!("through {through} is beyond what was delivered ({delivered})")).into());
    }
    let trim = state.store.truncate_before(tenant, user, through).await?;
    Ok(Json(TrimView { trim: trim.to_string() }))
}
