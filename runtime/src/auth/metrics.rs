//! The metric names of authentication and rate limiting, the same in every service.

/// Counter, label `reason` (`missing`, `bad_signature`, `expired`, `wrong_issuer`,
/// `bad_claims`): `/v1` requests refused 401.
pub const AUTH_REJECTED: &str = "qim_api_auth_rejected_total";
/// Counter, label `limit` (`tenant`, `user`): `/v1` requests refused 429.
pub const RATE_LIMITED: &str = "qim_api_rate_limited_total";
/// Gauge, label `limit` (`tenant`, `user`): the configured requests per second (0: unlimited).
pub const RATE_LIMIT_PER_SECOND: &str = "qim_api_rate_limit_per_second";

/// Describes them (each service calls this with its own metrics).
pub fn describe() {
    use metrics::{describe_counter, describe_gauge};
    describe_counter!(AUTH_REJECTED, "API requests refused 401, by reason.");
    describe_counter!(RATE_LIMITED, "API requests refused 429, by the limit they were over.");
    describe_gauge!(RATE_LIMIT_PER_SECOND, "Configured API requests per second, by limit (0: unlimited).");
    // Present from the start, so dashboards show 0 and an alert sees the first refusal as an
    // increase.
    for reason in super::verifier::Rejection::REASONS {
        metrics::counter!(AUTH_REJECTED, "reason" => reason).increment(0);
    }
    for limit in ["tenant", "user"] {
        metrics::counter!(RATE_LIMITED, "limit" => limit).increment(0);
    }
}
