//! Sending a message and reading history.

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::Json;
use qim_runtime::auth::{Caller, Scope};
use qim_runtime::http::ApiError;
use qim_runtime::openapi::{ErrorBody, NotJson, Refusals};
use qim_store::ids::{ClientMessageId, ConversationId, ConversationSeq, TenantId, UserId};
use qim_store::message::{
    CommitKey, CommitRequest, Direction, HistoryQuery, MessageKind, MessageRecord, MAX_PAGE_ITEMS,
};
use qim_store::retention::RetentionClass;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::wire::{id, named, within, ConversationPath};
use super::ApiState;
use crate::committer::CommitError;

/// `POST /v1/messages`.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SendBody {
    /// The tenant (32 hex digits).
    #[schema(pattern = "^[0-9a-fA-F]{32}$")]
    tenant: String,
    /// The conversation (32 hex digits).
    #[schema(pattern = "^[0-9a-fA-F]{32}$")]
    conversation: String,
    /// The sender, a member of the conversation (32 hex digits).
    #[schema(pattern = "^[0-9a-fA-F]{32}$")]
    sender: String,
    /// The client's id of this message: retries with it get the first answer.
    #[schema(min_length = 1, max_length = 64, pattern = "^[!-~]+$")]
    client_message_id: String,
    /// `normal`, `edited` or `control`.
    #[serde(default = "normal")]
    #[schema(default = "normal", pattern = "^(normal|edited|control)$")]
    kind: String,
    /// The message (UTF-8), at most `QIM_MAX_BODY_BYTES` bytes.
    body: String,
    /// `default`, `ephemeral_24h`, `compliance_hold` or `tenant_custom`.
    #[serde(default = "default_retention")]
    #[schema(default = "default", pattern = "^(default|ephemeral_24h|compliance_hold|tenant_custom)$")]
    retention: String,
}

fn normal() -> String {
    MessageKind::Normal.as_str().to_owned()
}

fn default_retention() -> String {
    RetentionClass::Default.as_str().to_owned()
}

/// The answer to a send, given only at COMMITTED (and identically to every retry).
#[derive(Serialize, ToSchema)]
pub struct SendAnswer {
    message_id: String,
    conversation_seq: u64,
    created_at: i64,
}

impl SendBody {
    fn into_request(self, max_body_bytes: usize) -> Result<CommitRequest, ApiError> {
        if self.body.len() > max_body_bytes {
            return Err(ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "payload_too_large",
                format!("body is {} bytes, the limit is {max_body_bytes}", self.body.len()),
            ));
        }
        let client_message_id = ClientMessageId::new(self.client_message_id)
            .map_err(|e| ApiError::invalid(format!("client_message_id: {e}")))?;
        Ok(CommitRequest {
            key: CommitKey {
                tenant: id("tenant", &self.tenant, TenantId::from_hex)?,
                sender: id("sender", &self.sender, UserId::from_hex)?,
                client_message_id,
            },
            conversation: id("conversation", &self.conversation, ConversationId::from_hex)?,
            kind: named("kind", &self.kind, &MessageKind::ALL, MessageKind::as_str)?,
            retention: named("retention", &self.retention, &RetentionClass::ALL, RetentionClass::as_str)?,
            payload: self.body.into_bytes(),
        })
    }
}

/// Commits one message from a member of the conversation; 200 with the committed coordinates.
#[utoipa::path(post, path = "/v1/messages", tag = "messages", request_body = SendBody,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Committed; an identical retry gets the same answer", body = SendAnswer),
        Refusals,
        (status = 409, description = "The client message id was used with other bytes", body = ErrorBody),
        (status = 413, description = "The body is over the limit", body = ErrorBody),
        NotJson,
    ))]
/// A caller that may not act as the sender, or a sender who is not a member, gets 403 before
/// anything is reserved (no seq, record, Kafka record or mailbox entry).
pub async fn send(
    State(state): State<ApiState>,
    caller: Caller,
    body: Result<Json<SendBody>, JsonRejection>,
) -> Result<Json<SendAnswer>, ApiError> {
    let Json(body) = body?;
    let request = body.into_request(state.max_body_bytes)?;
    let key = &request.key;
    caller.act_as(key.tenant, key.sender, Scope::Send)?;
    let commit = state.committer.commit(&request, state.authorizer.as_ref()).await.map_err(|e| match e {
        CommitError::Store(e) => ApiError::from(e),
        CommitError::Publish(e) => {
            tracing::warn!(error = %e, "publication failed; the recovery loop will finish the commit");
            ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", format!("{e}; retry the same request"))
        }
        CommitError::Interrupted(at) => {
            ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", format!("interrupted at {at}; retry"))
        }
    })?;
    let intent = commit.intent;
    Ok(Json(SendAnswer {
        message_id: intent.message_id.to_hex(),
        conversation_seq: intent.seq.0,
        created_at: intent.created_at.0,
    }))
}

/// Query of a history page.
#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct HistoryParams {
    /// The reader, a member of the conversation (32 hex digits).
    #[param(pattern = "^[0-9a-fA-F]{32}$")]
    viewer: String,
    /// `older` (from the newest, or from before `anchor`) or `newer` (after `anchor`).
    #[serde(default = "older")]
    #[param(default = "older", pattern = "^(older|newer)$")]
    direction: String,
    /// The seq the page starts next to (excluded).
    #[param(minimum = 0)]
    anchor: Option<u64>,
    /// Records at most.
    #[serde(default = "default_items")]
    #[param(default = 50, minimum = 1, maximum = 500)]
    max_items: usize,
    /// Body bytes at most (a first record is always given whole).
    #[serde(default = "default_bytes")]
    #[param(default = 1048576, minimum = 1, maximum = 67108864)]
    max_bytes: usize,
}

fn older() -> String {
    "older".to_owned()
}
const fn default_items() -> usize {
    50
}
const fn default_bytes() -> usize {
    1024 * 1024
}

/// One history record as the API shows it.
#[derive(Serialize, ToSchema)]
pub struct RecordView {
    seq: u64,
    message_id: String,
    sender: String,
    client_message_id: String,
    #[schema(value_type = String)]
    kind: &'static str,
    #[schema(value_type = String)]
    retention: &'static str,
    created_at: i64,
    expires_at: Option<i64>,
    body: String,
}

impl From<MessageRecord> for RecordView {
    fn from(r: MessageRecord) -> Self {
        Self {
            seq: r.seq.0,
            message_id: r.message_id.to_hex(),
            sender: r.sender.to_hex(),
            client_message_id: r.client_message_id.as_str().to_owned(),
            kind: r.kind.as_str(),
            retention: r.retention.as_str(),
            created_at: r.created_at.0,
            expires_at: r.expires_at.map(|t| t.0),
            body: String::from_utf8_lossy(&r.payload).into_owned(),
        }
    }
}

/// A history page.
#[derive(Serialize, ToSchema)]
pub struct PageView {
    records: Vec<RecordView>,
    earliest_available: Option<u64>,
    has_more: bool,
}

/// Reads one page of a conversation's history for a member (the store asks the authorizer).
#[utoipa::path(get, path = "/v1/tenants/{tenant}/conversations/{conversation}/messages", tag = "messages",
    params(
        ConversationPath,
        HistoryParams,
    ),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "A page, in the direction asked", body = PageView),
        Refusals,
    ))]
pub async fn history(
    State(state): State<ApiState>,
    caller: Caller,
    Path(path): Path<ConversationPath>,
    params: Result<Query<HistoryParams>, QueryRejection>,
) -> Result<Json<PageView>, ApiError> {
    let Query(p) = params?;
    let (tenant, conversation) = path.ids()?;
    let direction = match p.direction.as_str() {
        "older" => Direction::Older,
        "newer" => Direction::Newer,
        other => return Err(ApiError::invalid(format!("direction {other:?} is not one of older, newer"))),
    };
    let query = HistoryQuery {
        tenant,
        conversation,
        viewer: id("viewer", &p.viewer, UserId::from_hex)?,
        direction,
        anchor: p.anchor.map(ConversationSeq),
        max_items: within("max_items", p.max_items, 1, MAX_PAGE_ITEMS)?,
        max_bytes: within("max_bytes", p.max_bytes, 1, 64 * 1024 * 1024)?,
    };
    caller.act_as(query.tenant, query.viewer, Scope::Read)?;
    let page = state.store.history_page(&query, state.authorizer.as_ref()).await?;
    Ok(Json(PageView {
        records: page.records.into_iter().map(RecordView::from).collect(),
        earliest_available: page.earliest_available.map(|s| s.0),
        has_more: page.has_more,
    }))
}
