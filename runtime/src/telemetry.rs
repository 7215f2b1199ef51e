//! Logs and metrics initialisation.

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// Latency buckets (seconds) for every `*_seconds` histogram: 0.5 ms to 10 s.
const LATENCY_BUCKETS: &[f64] = &[0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0];

/// Installs the log subscriber with `filter` (`QIM_LOG`, `EnvFilter` syntax). Safe to call
/// twice (tests): the second call keeps the first subscriber.
pub fn init_logs(filter: &str) -> Result<(), String> {
    let filter = tracing_subscriber::EnvFilter::try_new(filter).map_err(|e| format!("QIM_LOG={filter:?}: {e}"))?;
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_target(false).try_init();
    Ok(())
}

/// Installs the process-wide Prometheus recorder and returns the handle `/metrics` renders.
/// A second call (tests starting several services in one process) builds a recorder that is
/// not installed globally, so its handle renders only what was recorded through it.
pub fn install_metrics() -> PrometheusHandle {
    let builder = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".to_owned()), LATENCY_BUCKETS)
        .expect("the bucket list is not empty");
    match builder.install_recorder() {
        Ok(handle) => handle,
        Err(_) => PrometheusBuilder::new().build_recorder().handle(),
    }
}
