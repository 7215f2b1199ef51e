//! The HTTP conventions of every qim API: one JSON error body with a machine-readable code,
//! and the operational endpoints (authentication is [`crate::auth`]).
//!
//! Error body: `{"error": {"code": "<snake_case>", "message": "<for people>"}}`.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{MatchedPath, Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use metrics_exporter_prometheus::PrometheusHandle;

use qim_store::error::{ErrorKind, StoreError};

/// An API failure: a status and a stable code clients can match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// A stable snake_case code.
    pub code: &'static str,
    /// A human-readable explanation.
    pub message: String,
}

impl ApiError {
    /// An error with `status` and `code`.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self { status, code, message: message.into() }
    }

    /// 400 `invalid_request`: a field is missing, malformed or out of range.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request", message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({ "error": { "code": self.code, "message": self.message } });
        (self.status, Json(body)).into_response()
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        let (status, code) = match e.kind() {
            ErrorKind::Conflict | ErrorKind::DispatchConflict => (StatusCode::CONFLICT, "conflict"),
            ErrorKind::NotFound => (StatusCode::NOT_FOUND, "not_found"),
            ErrorKind::Forbidden => (StatusCode::FORBIDDEN, "forbidden"),
            ErrorKind::InvalidInput => (StatusCode::BAD_REQUEST, "invalid_request"),
            ErrorKind::CursorExpired => (StatusCode::GONE, "cursor_expired"),
            ErrorKind::Unavailable | ErrorKind::StateLost => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
            ErrorKind::CorruptEntry | ErrorKind::InvariantViolation => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
        };
        if status.is_server_error() {
            tracing::error!(error = %e, "request failed");
        }
        Self::new(status, code, e.to_string())
    }
}

impl From<JsonRejection> for ApiError {
    fn from(r: JsonRejection) -> Self {
        match r {
            JsonRejection::MissingJsonContentType(_) => {
                Self::new(StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type", r.body_text())
            }
            JsonRejection::BytesRejection(_) if r.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                Self::new(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large", r.body_text())
            }
            _ => Self::new(StatusCode::BAD_REQUEST, "invalid_json", r.body_text()),
        }
    }
}

impl From<QueryRejection> for ApiError {
    fn from(r: QueryRejection) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_query", r.body_text())
    }
}

/// A readiness probe: `Ok(())` when the service can do its work, otherwise why not.
pub type ReadinessCheck = Arc<dyn Fn() -> Pin<Box<dyn Future<Output = Result<(), String>> + Send>> + Send + Sync>;

/// Middleware counting every answer under the counter `metric`, labelled by matched route and
/// status (never the raw path: ids would explode cardinality). Use with
/// `axum::middleware::from_fn_with_state(metric, count_requests)`.
pub async fn count_requests(State(metric): State<&'static str>, request: Request, next: Next) -> Response {
    let route = request.extensions().get::<MatchedPath>().map_or("unmatched", |p| p.as_str()).to_owned();
    let response = next.run(request).await;
    metrics::counter!(metric, "route" => route, "status" => response.status().as_u16().to_string()).increment(1);
    response
}
/// Gauge: 1 when the service's readiness check passed at the last scrape of `/metrics`, else 0
/// (what alerting reads: `/readyz` answers probes, which Prometheus does not keep).
pub const READY: &str = "qim_ready";

/// How long a scrape waits for the readiness check before it reports the service not ready.
const READY_AT_SCRAPE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// `/healthz` (the process answers), `/readyz` (`ready` runs: 200, or 503 with the reason) and
/// `/metrics` (Prometheus text; each scrape runs `ready` first, bounded by two seconds, and
/// reports it as [`READY`]). Never behind the bearer token: probes and scrapers don't hold it.
pub fn operational_routes(metrics: PrometheusHandle, ready: ReadinessCheck) -> Router {
    metrics::describe_gauge!(READY, "1 when the service's readiness check passed at this scrape, else 0.");
    let ready_at_scrape = ready.clone();
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route(
            "/readyz",
            get(move || {
                let ready = ready.clone();
                async move {
                    match ready().await {
                        Ok(()) => (StatusCode::OK, "ready\n".to_owned()),
                        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {why}\n")),
                    }
                }
            }),
        )
        .route(
            "/metrics",
            get(move || {
                let (ready, metrics) = (ready_at_scrape.clone(), metrics.clone());
                async move {
                    let passed = matches!(tokio::time::timeout(READY_AT_SCRAPE_TIMEOUT, ready()).await, Ok(Ok(())));
                    metrics::gauge!(READY).set(if passed { 1.0 } else { 0.0 });
                    metrics.render()
                }
            }),
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_errors_map_to_stable_statuses() {
        let conflict: ApiError = StoreError::Conflict("x".into()).into();
        assert_eq!((conflict.status, conflict.code), (StatusCode::CONFLICT, "conflict"));
        let forbidden: ApiError = StoreError::Forbidden("x".into()).into();
        assert_eq!(forbidden.status, StatusCode::FORBIDDEN);
        let corrupt: ApiError = StoreError::CorruptEntry("x".into()).into();
        assert_eq!((corrupt.status, corrupt.code), (StatusCode::INTERNAL_SERVER_ERROR, "internal"));
    }
}
