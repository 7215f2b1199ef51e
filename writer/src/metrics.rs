//! The writer's metric names (Prometheus), in one place. Labels are low-cardinality enums.

/// Counter, label `outcome`: `committed`, `replayed` (an identical retry of a finished
/// commit), `conflict`, `invalid`, `unavailable`, `failed`.
pub const COMMITS: &str = "qim_writer_commits_total";
/// Histogram (seconds), label `stage`: `reserve_and_record` (a send's first two steps, the
/// hot path), `reserve` and `record` (each on its own: failpoint runs, a send another driver
/// moved on), `publish`, `outbox` (from RECORDED:
/// the publication and the store steps after it, OUTBOXED and, stored together with it,
/// COMMITTED), `commit` (OUTBOXED → COMMITTED on its own: recovery, another driver), `total`.
pub const COMMIT_STAGE_SECONDS: &str = "qim_writer_commit_stage_seconds";
/// Gauge: commits holding an in-flight permit.
pub const IN_FLIGHT: &str = "qim_writer_commits_in_flight";
/// Counter, label `action`: `completed` (a left-behind commit driven to COMMITTED), `failed`.
pub const RECOVERY_ACTIONS: &str = "qim_writer_recovery_actions_total";
/// Gauge: commits the last recovery pass found due (reserved more than the grace ago, not
/// COMMITTED) and could not drive to COMMITTED; stays above 0 while recovery keeps failing.
pub const RECOVERY_BACKLOG: &str = "qim_writer_recovery_backlog";
/// Counter: expired history records drained from the hot tier.
pub const EXPIRY_DRAINED: &str = "qim_writer_expiry_drained_total";
/// Counter: committed-commit auxiliary facts collected.
pub const AUX_COLLECTED: &str = "qim_writer_commit_aux_collected_total";
/// Counter: Kafka deliveries that failed or timed out.
pub const KAFKA_DELIVERY_ERRORS: &str = "qim_writer_kafka_delivery_errors_total";
/// Counter: sends that arrived while another send of their request key was in flight in this
/// writer, and waited for it to land instead of racing it.
pub const SENDS_JOINED: &str = "qim_writer_sends_joined_total";
/// Counter, label `outcome`: renewals of the writer-id lease, `held`, `replaced` (the id was
/// lost and another taken), `failed` (Redis did not answer).
pub const WRITER_ID_RENEWALS: &str = "qim_writer_id_renewals_total";
/// Counter, labels `route` and `status`: HTTP requests answered.
pub const HTTP_REQUESTS: &str = "qim_writer_http_requests_total";

/// Describes every metric once at startup (the store's too), so `/metrics` documents them.
pub fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
    qim_store::metrics::describe();
    qim_runtime::auth::metrics::describe();
    describe_counter!(COMMITS, "Send requests by outcome.");
    describe_histogram!(COMMIT_STAGE_SECONDS, Unit::Seconds, "Commit latency by state-machine stage.");
    describe_gauge!(IN_FLIGHT, "Commits in flight.");
    describe_counter!(RECOVERY_ACTIONS, "Commits the recovery loop drove forward, by result.");
    describe_gauge!(RECOVERY_BACKLOG, "Commits past the recovery grace the last recovery pass left unfinished.");
    describe_counter!(EXPIRY_DRAINED, "Expired history records removed from the hot tier.");
    describe_counter!(AUX_COLLECTED, "Auxiliary facts of committed commits collected.");
    describe_counter!(KAFKA_DELIVERY_ERRORS, "Kafka deliveries that failed or timed out.");
    describe_counter!(HTTP_REQUESTS, "HTTP requests by route and status.");
    describe_counter!(WRITER_ID_RENEWALS, "Renewals of the writer-id lease, by outcome.");
    describe_counter!(SENDS_JOINED, "Sends that waited for a send of the same key in flight here.");
    // Series the alert rules (deploy/observability/alerts.yml) read, present from the start so
    // that their first increase is seen as one.
    metrics::gauge!(RECOVERY_BACKLOG).set(0.0);
    metrics::counter!(KAFKA_DELIVERY_ERRORS).increment(0);
    metrics::counter!(qim_store::metrics::SEQ_LEASES, "step" => "revalidated").increment(0);
    metrics::counter!(qim_store::metrics::RECORDS_RESTORED).increment(0);
    for action in ["completed", "failed"] {
        metrics::counter!(RECOVERY_ACTIONS, "action" => action).increment(0);
    }
}
