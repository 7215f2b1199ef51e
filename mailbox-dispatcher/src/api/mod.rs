//! The mailbox read API, versioned under `/v1` (JSON), plus `/healthz`, `/readyz`, `/metrics`.
//!
//! | method | path | what | credential |
//! |---|---|---|---|
//! | GET | `/v1/tenants/{tenant}/users/{user}/mailbox?after=&limit=` | entries after a cursor, and the covered cursor | `read` as `{user}`; or `gateway` |
//! | POST | `/v1/tenants/{tenant}/users/{user}/mailbox/truncate` | the client acknowledged up to `through` | `read` as `{user}`; or `gateway` |
//!
//! Ids are 32 hex digits; cursors are mailbox seqs written `epoch:position`. A page never goes
//! past the user's lane watermark, so it never shows an entry whose dispatch is still being
//! written, and `covered` never claims a seq that unfinished or expired work could contradict.
//! Errors are `{"error": {"code", "message"}}`: 400 `invalid_request`/`invalid_query`/
//! `invalid_json` for bad input, 401 `unauthorized`, 403 `forbidden` (another user's or tenant's
//! mailbox), 429 `rate_limited`, 410 `cursor_expired` (with
//! `error.earliest`, the earliest valid cursor), 503 `unavailable` when the store is down.

mod mailbox;

use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::middleware;
use axum::routing::{get, post};
use axum::Router;
use metrics_exporter_prometheus::PrometheusHandle;
use qim_runtime::auth::{authenticate, Authenticator};
use qim_runtime::http::{count_requests, operational_routes, ReadinessCheck};
use qim_runtime::openapi::BearerJwt;
use qim_store::mailbox::ShardEpoch;
use qim_store::MailboxStore;
use utoipa::OpenApi;

use crate::metrics::HTTP_REQUESTS;

/// Largest request body (a truncate request is a few dozen bytes).
const MAX_BODY_BYTES: usize = 4 * 1024;

/// What the handlers share.
#[derive(Clone)]
pub struct ApiState {
    /// Mailboxes and watermarks.
    pub store: Arc<dyn MailboxStore>,
    /// Mailbox shards (to find a user's shard).
    pub shards: u16,
    /// The current shard epoch.
    pub epoch: ShardEpoch,
}

/// The OpenAPI document of the mailbox API.
#[derive(OpenApi)]
#[openapi(
    info(title = "qim mailbox API", description = "Per-user mailboxes: read after a cursor, truncate (README: The mailbox dispatcher)."),
    paths(mailbox::range, mailbox::truncate),
    modifiers(&BearerJwt),
    tags((name = "mailbox", description = "A user's mailbox")),
)]
pub struct MailboxApi;

/// The whole router: `/v1` behind `auth`, operational routes and `/openapi.json` open.
pub fn router(state: ApiState, auth: Arc<Authenticator>, metrics: PrometheusHandle, ready: ReadinessCheck) -> Router {
    let v1 = Router::new()
        .route("/v1/tenants/{tenant}/users/{user}/mailbox", get(mailbox::range))
        .route("/v1/tenants/{tenant}/users/{user}/mailbox/truncate", post(mailbox::truncate))
        .layer(middleware::from_fn_with_state(auth, authenticate))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(state);
    v1.merge(operational_routes(metrics, ready))
        .merge(qim_runtime::openapi::route(&MailboxApi::openapi()))
        .layer(middleware::from_fn_with_state(HTTP_REQUESTS, count_requests))
}
