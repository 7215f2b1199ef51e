//! Logs and metrics initialisation.

use std::sync::OnceLock;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// Latency buckets (seconds) for every `*_seconds` histogram: 0.5 ms to 10 s.
const LATENCY_BUCKETS: &[f64] = &[0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0];

/// Installs the log subscriber with `filter` (`QIM_LOG`, `EnvFilter` syntax), writing to
/// stdout, coloured only when stdout is a terminal (a file or a log collector gets plain text).
/// Safe to call twice (tests): the second call keeps the first subscriber.
pub fn init_logs(filter: &str) -> Result<(), String> {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_new(filter).map_err(|e| format!("QIM_LOG={filter:?}: {e}"))?;
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_writer(std::io::stdout)
        .with_ansi(std::io::stdout().is_terminal())
        .try_init();
    Ok(())
}

/// The process-wide Prometheus recorder, installed by the first call; every call returns a
/// handle to it. A process runs one service, so `/metrics` renders that service's metrics;
/// tests that start several services in one process see the sum of theirs.
pub fn install_metrics() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let builder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_seconds".to_owned()), LATENCY_BUCKETS)
                .expect("the bucket list is not empty");
            // Refused only when a recorder that is not qim's was installed first: `/metrics`
            // then renders an empty page rather than the process failing.
            builder.install_recorder().unwrap_or_else(|_| PrometheusBuilder::new().build_recorder().handle())
        })
        .clone()
}
