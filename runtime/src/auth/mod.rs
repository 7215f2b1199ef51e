//! Who may call the `/v1` APIs, and how often.
//!
//! Every `/v1` request carries `Authorization: Bearer <JWT>`, verified with the deployment's
//! keys (HS256 secret, an RS256/ES256 public key, or a JWK set); its claims name the tenant
//! (`tenant`, 32 hex digits), the user (`sub`, 32 hex digits) and the scopes (`scope`:
//! `send`, `read`, `admin`, `gateway`, space-separated); `exp` is required, `iss`/`aud` when
//! configured. [`authenticate`] refuses a missing or invalid token with 401, a request over its
//! tenant's or user's rate with 429 and `Retry-After`, and otherwise puts the [`Caller`] in the
//! request, whose checks each handler makes against the ids it reads from the body or path
//! (403 when they name another tenant or user).
//!
//! With `QIM_AUTH_DISABLED=true` there are no tokens and no limits: every request may act as
//! anyone. It exists for development stacks and is logged as a warning at start-up.

mod caller;
mod limits;
pub mod metrics;
mod verifier;

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

pub use caller::{Caller, Identity, Scope, Scopes};
pub use limits::{Limited, RateLimitConfig, RateLimits};
pub use verifier::{Expectations, KeyError, KeySource, Rejection, TokenVerifier, MIN_HS256_SECRET_BYTES};

use crate::http::ApiError;

/// A deployment's authentication settings (`QIM_AUTH_*`, `QIM_RATE_LIMIT_*`).
#[derive(Clone, Debug)]
pub struct AuthConfig {
    /// The verification keys; `None` disables authentication (development only).
    pub keys: Option<KeySource>,
    /// Issuer, audience, clock skew.
    pub expect: Expectations,
    /// Requests per second per tenant and per user.
    pub limits: RateLimitConfig,
}

impl AuthConfig {
    /// No authentication and no limits: for in-process tests and benchmarks of other things.
    pub fn disabled() -> Self {
        Self { keys: None, expect: Expectations::default(), limits: RateLimitConfig::default() }
    }
}

/// The state of [`authenticate`]: the verifier and the limiters of one service.
pub struct Authenticator {
    verifier: Option<TokenVerifier>,
    limits: RateLimits,
}

impl Authenticator {
    /// Builds the verifier of `config` (and exports the configured limits).
    ///
    /// # Errors
    ///
    /// The keys can not verify anything (see [`TokenVerifier::new`]).
    pub fn new(config: &AuthConfig) -> Result<Arc<Self>, KeyError> {
        let verifier = config.keys.as_ref().map(|k| TokenVerifier::new(k, &config.expect)).transpose()?;
        if verifier.is_none() {
            tracing::warn!("authentication is disabled (QIM_AUTH_DISABLED): every /v1 request may act as anyone");
        }
        Ok(Arc::new(Self { verifier, limits: RateLimits::new(config.limits) }))
    }

    /// Who `request` acts for.
    fn caller(&self, request: &Request) -> Result<Caller, Refused> {
        let Some(verifier) = &self.verifier else { return Ok(Caller::Anyone) };
        let bearer = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
            .map(str::trim);
        let identity =
            bearer.ok_or(Rejection::Missing).and_then(|t| verifier.verify(t)).map_err(Refused::Unauthorized)?;
        self.limits.check(&identity).map_err(Refused::Limited)?;
        Ok(Caller::Token(identity))
    }
}

/// Middleware of every `/v1` route (`axum::middleware::from_fn_with_state(authenticator,
/// authenticate)`): 401 for a missing or invalid token, 429 over a rate, else the handler runs
/// with the [`Caller`] in the request's extensions.
pub async fn authenticate(State(auth): State<Arc<Authenticator>>, mut request: Request, next: Next) -> Response {
    match auth.caller(&request) {
        Ok(caller) => {
            request.extensions_mut().insert(caller);
            next.run(request).await
        }
        Err(Refused::Unauthorized(why)) => unauthorized(why),
        Err(Refused::Limited(over)) => too_many(over),
    }
}

/// Why [`authenticate`] answers instead of the handler.
enum Refused {
    Unauthorized(Rejection),
    Limited(Limited),
}

fn unauthorized(why: Rejection) -> Response {
    ::metrics::counter!(metrics::AUTH_REJECTED, "reason" => why.reason()).increment(1);
    tracing::debug!(reason = why.reason(), "request refused: {why}");
    let mut response = ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", why.to_string()).into_response();
    response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    response
}

fn too_many(over: Limited) -> Response {
    // Whole seconds (RFC 9110 §10.2.3), rounded up so a client that waits them passes.
    let secs = over.retry_after.as_secs() + u64::from(over.retry_after.subsec_nanos() > 0);
    let message = format!("over the {} rate limit; retry after {secs} s", over.limit);
    let mut response = ApiError::new(StatusCode::TOO_MANY_REQUESTS, "rate_limited", message).into_response();
    response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs.max(1)));
    response
}
