//! What every qim OpenAPI document shares: the error body, the bearer-token security scheme and
//! the route serving a document. Each service derives its own document from its handlers
//! (`utoipa::path` on each, `utoipa::OpenApi` on the list).

use axum::http::header::CONTENT_TYPE;
use axum::routing::get;
use axum::Router;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::OpenApi;
use utoipa::{IntoResponses, Modify, ToSchema};

/// A 32-hex-digit id (16 bytes), as every id in the APIs is written.
pub const ID_PATTERN: &str = "^[0-9a-fA-F]{32}$";

/// Every error: `{"error": {"code", "message"}}` ([`crate::http::ApiError`]).
#[derive(ToSchema)]
pub struct ErrorBody {
    /// What went wrong.
    pub error: ErrorDetail,
}

/// The error itself.
#[derive(ToSchema)]
pub struct ErrorDetail {
    /// A stable snake_case code clients match (`invalid_request`, `forbidden`, ...).
    pub code: String,
    /// For people.
    pub message: String,
    /// With 410 `cursor_expired`: the earliest cursor still valid.
    #[schema(required = false)]
    pub earliest: Option<String>,
}

/// The refusals every `/v1` route may answer, each with an [`ErrorBody`].
#[derive(IntoResponses)]
pub enum Refusals {
    /// A malformed path, query, body or field.
    #[response(status = 400)]
    BadRequest(ErrorBody),
    /// No valid token.
    #[response(status = 401)]
    Unauthorized(ErrorBody),
    /// The token may not act as the user or tenant the request names, or the user is not a
    /// member of the conversation.
    #[response(status = 403)]
    Forbidden(ErrorBody),
    /// Over a rate limit (`Retry-After` says when to come back).
    #[response(status = 429)]
    RateLimited(ErrorBody),
    /// A backend is unavailable: retry the same request.
    #[response(status = 503)]
    Unavailable(ErrorBody),
}

/// A route with a JSON body answers 415 to a request without `Content-Type: application/json`.
#[derive(IntoResponses)]
#[response(status = 415)]
pub struct NotJson(pub ErrorBody);

/// Adds the `bearer` security scheme (a JWT, see the README's Identity section) the operations
/// name.
pub struct BearerJwt;

impl Modify for BearerJwt {
    fn modify(&self, openapi: &mut OpenApi) {
        let scheme = HttpBuilder::new()
            .scheme(HttpAuthScheme::Bearer)
            .bearer_format("JWT")
            .description(Some("A JWT naming the tenant, the user and the scopes (README: Identity)."))
            .build();
        openapi
            .components
            .get_or_insert_with(Default::default)
            .add_security_scheme("bearer", SecurityScheme::Http(scheme));
    }
}

/// `GET /openapi.json`: `doc`, rendered once. Never behind the bearer token.
pub fn route(doc: &OpenApi) -> Router {
    let body = doc.to_pretty_json().unwrap_or_else(|e| format!("{{\"error\": \"rendering the document: {e}\"}}"));
    Router::new().route("/openapi.json", get(move || std::future::ready(([(CONTENT_TYPE, "application/json")], body))))
}
