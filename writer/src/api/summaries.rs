//! Unread summaries of a viewer's conversations.

use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::Json;
use qim_runtime::auth::{Caller, Scope};
use qim_runtime::http::ApiError;
use qim_runtime::openapi::{NotJson, Refusals};
use qim_store::ids::{ConversationId, ConversationSeq, TenantId, UserId};
use qim_store::message::ReadPosition;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::wire::{id, within};
use super::ApiState;

/// Most conversations one summaries request may name.
const MAX_POSITIONS: usize = 500;

/// `POST /v1/tenants/{tenant}/summaries`.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SummariesBody {
    /// The reader (32 hex digits), a member of every conversation named.
    #[schema(pattern = "^[0-9a-fA-F]{32}$")]
    viewer: String,
    /// 1 to 500 conversations, each with what the reader has read.
    #[schema(min_items = 1, max_items = 500)]
    positions: Vec<PositionBody>,
}

/// How far the viewer read one conversation.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PositionBody {
    /// The conversation (32 hex digits).
    #[schema(pattern = "^[0-9a-fA-F]{32}$")]
    conversation: String,
    /// The highest seq the reader has read (0: none).
    #[serde(default)]
    #[schema(default = 0, minimum = 0)]
    read_through: u64,
}

/// One conversation's summary.
#[derive(Serialize, ToSchema)]
pub struct SummaryView {
    conversation: String,
    last_seq: Option<u64>,
    unread: u32,
    unread_precise: bool,
}

/// Summaries, in request order.
#[derive(Serialize, ToSchema)]
pub struct SummariesView {
    summaries: Vec<SummaryView>,
}

/// Unread counts for the viewer's conversations (messages after `read_through` sent by others).
#[utoipa::path(post, path = "/v1/tenants/{tenant}/summaries", tag = "messages", request_body = SummariesBody,
    params(("tenant" = String, Path, pattern = "^[0-9a-fA-F]{32}$", description = "The tenant")),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "One summary per position, in order", body = SummariesView),
        Refusals,
        NotJson,
    ))]
pub async fn summaries(
    State(state): State<ApiState>,
    caller: Caller,
    Path(tenant): Path<String>,
    body: Result<Json<SummariesBody>, JsonRejection>,
) -> Result<Json<SummariesView>, ApiError> {
    let Json(body) = body?;
    let tenant = id("tenant", &tenant, TenantId::from_hex)?;
    let viewer = id("viewer", &body.viewer, UserId::from_hex)?;
    caller.act_as(tenant, viewer, Scope::Read)?;
    within("positions (count)", body.positions.len(), 1, MAX_POSITIONS)?;
    let mut positions = Vec::with_capacity(body.positions.len());
    for p in &body.positions {
        let conversation = id("conversation", &p.conversation, ConversationId::from_hex)?;
        // Summaries reveal activity: only members may ask.
        state.authorizer.authorize_history(tenant, conversation, viewer).await?;
        positions.push(ReadPosition { conversation, read_through: ConversationSeq(p.read_through) });
    }
    let summaries = state.store.conversation_summaries(tenant, viewer, &positions).await?;
    Ok(Json(SummariesView {
        summaries: summaries
            .into_iter()
            .map(|s| SummaryView {
                conversation: s.conversation.to_hex(),
                last_seq: s.last_seq.map(|q| q.0),
                unread: s.unread,
                unread_precise: s.unread_precise,
            })
            .collect(),
    }))
}
