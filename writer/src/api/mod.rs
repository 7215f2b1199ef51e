//! The writer's HTTP API, versioned under `/v1` (JSON), plus `/healthz`, `/readyz`, `/metrics`.
//!
//! | method | path | what | credential |
//! |---|---|---|---|
//! | POST | `/v1/messages` | send; answered at COMMITTED | `send` as `sender`, a member; or `gateway` |
//! | GET | `/v1/tenants/{tenant}/conversations/{conversation}/messages` | a history page | `read` as `viewer`, a member; or `gateway` |
//! | POST | `/v1/tenants/{tenant}/summaries` | unread summaries for a viewer | `read` as `viewer`; or `gateway` |
//! | GET | `/v1/tenants/{tenant}/conversations/{conversation}/members` | members, paged | `read`, a member; or `admin`, `gateway` |
//! | POST | `/v1/tenants/{tenant}/conversations/{conversation}/members/add` | add members | `admin` |
//! | POST | `/v1/tenants/{tenant}/conversations/{conversation}/members/remove` | remove members | `admin` |
//!
//! Every credential is a token of the tenant the request names ([`qim_runtime::auth`]). Every
//! id is 32 hex digits. Errors are `{"error": {"code", "message"}}` with a 4xx status for bad
//! input (`invalid_json`, `invalid_request`, `invalid_query`, `payload_too_large`,
//! `unauthorized`, `forbidden`, `conflict`, `rate_limited`) and 503 `unavailable` when a
//! backend is down.
//!
//! `GET /openapi.json` (no token) serves the OpenAPI 3.1 document of `/v1` ([`WriterApi`]),
//! generated from the handlers' types.

mod members;
mod messages;
mod summaries;
mod wire;

use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::middleware;
use axum::routing::{get, post};
use axum::Router;
use metrics_exporter_prometheus::PrometheusHandle;
use qim_runtime::auth::{authenticate, Authenticator};
use qim_runtime::http::{count_requests, operational_routes, ReadinessCheck};
use qim_runtime::openapi::BearerJwt;
use qim_store::{HistoryAuthorizer, MembershipStore, MessageStore};
use utoipa::OpenApi;

use crate::committer::DurableMessageCommitter;
use crate::metrics::HTTP_REQUESTS;

/// JSON envelope overhead allowed on top of the largest body (ids, names, escaping).
const ENVELOPE_ALLOWANCE: usize = 4 * 1024;

/// What the handlers share.
#[derive(Clone)]
pub struct ApiState {
    /// Drives sends.
    pub committer: Arc<DurableMessageCommitter>,
    /// History and summaries.
    pub store: Arc<dyn MessageStore>,
    /// Conversation membership.
    pub members: Arc<dyn MembershipStore>,
    /// Admits members only: history viewers, senders, members listing.
    pub authorizer: Arc<dyn HistoryAuthorizer>,
    /// Largest message body in bytes.
    pub max_body_bytes: usize,
}

/// The OpenAPI document of the writer's `/v1`.
#[derive(OpenApi)]
#[openapi(
    info(title = "qim writer API", description = "Sends, history, unread summaries and membership (README: The writer)."),
    paths(messages::send, messages::history, summaries::summaries, members::list, members::add, members::remove),
    modifiers(&BearerJwt),
    tags((name = "messages", description = "Sends and reads"), (name = "members", description = "Conversation membership")),
)]
pub struct WriterApi;

/// The whole router: `/v1` behind `auth`, operational routes and `/openapi.json` open.
pub fn router(state: ApiState, auth: Arc<Authenticator>, metrics: PrometheusHandle, ready: ReadinessCheck) -> Router {
    // JSON escaping can grow a body up to six-fold; the payload limit itself is checked after
    // decoding, so the transport limit only has to stop abuse.
    let transport_limit = state.max_body_bytes.saturating_mul(6).saturating_add(ENVELOPE_ALLOWANCE);
    let v1 = Router::new()
        .route("/v1/messages", post(messages::send))
        .route("/v1/tenants/{tenant}/conversations/{conversation}/messages", get(messages::history))
        .route("/v1/tenants/{tenant}/summaries", post(summaries::summaries))
        .route("/v1/tenants/{tenant}/conversations/{conversation}/members", get(members::list))
        .route("/v1/tenants/{tenant}/conversations/{conversation}/members/add", post(members::add))
        .route("/v1/tenants/{tenant}/conversations/{conversation}/members/remove", post(members::remove))
        .layer(middleware::from_fn_with_state(auth, authenticate))
        .layer(DefaultBodyLimit::max(transport_limit))
        .with_state(state);
    v1.merge(operational_routes(metrics, ready))
        .merge(qim_runtime::openapi::route(&WriterApi::openapi()))
        .layer(middleware::from_fn_with_state(HTTP_REQUESTS, count_requests))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `/v1` route is in the document, and every id field carries the id pattern.
    #[test]
    fn the_document_covers_every_route_and_constrains_ids() {
        let doc = serde_json::to_value(WriterApi::openapi()).expect("the document serialises");
        let paths: Vec<&String> = doc["paths"].as_object().expect("paths").keys().collect();
        assert_eq!(paths.len(), 6, "{paths:?}");
        let users = &doc["components"]["schemas"]["UsersBody"]["properties"]["users"];
        assert_eq!(users["items"]["pattern"], qim_runtime::openapi::ID_PATTERN, "{users}");
        let send = &doc["components"]["schemas"]["SendBody"];
        assert_eq!(send["additionalProperties"], false, "{send}");
        for field in ["tenant", "conversation", "sender"] {
            assert_eq!(send["properties"][field]["pattern"], qim_runtime::openapi::ID_PATTERN, "{field}");
        }
    }
}
