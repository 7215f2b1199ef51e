//! Logs and metrics initialisation.

use std::sync::OnceLock;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// Latency buckets (seconds) for every `*_seconds` histogram: 0.5 ms to 10 s.
const LATENCY_BUCKETS: &[f64] = &[0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0];
/// Buckets (seconds) of the `*_end_to_end_seconds` histograms (a commit until archived, or until
/// readable in the mailboxes): 10 ms to 10 minutes, since a consumer catching up after a
/// restart or under a burst is seconds to minutes behind.
const END_TO_END_BUCKETS: &[f64] =
    &[0.01, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0];

/// How log lines are written (`QIM_LOG_FORMAT`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One human-readable line per event, coloured only on a terminal.
    #[default]
    Text,
    /// One JSON object per line (`timestamp`, `level`, `fields` with `message`, and the span
    /// fields), for log collectors.
    Json,
}

/// What [`init_logs`] installs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogSettings {
    /// The filter (`QIM_LOG`, `EnvFilter` syntax).
    pub filter: String,
    /// The line format.
    pub format: LogFormat,
}

impl LogSettings {
    /// Text lines with `filter`.
    pub fn text(filter: &str) -> Self {
        Self { filter: filter.to_owned(), format: LogFormat::Text }
    }
}

/// Installs the log subscriber of `settings`, writing to stdout. Safe to call twice (tests): the
/// second call keeps the first subscriber.
pub fn init_logs(settings: &LogSettings) -> Result<(), String> {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_new(&settings.filter)
        .map_err(|e| format!("QIM_LOG={:?}: {e}", settings.filter))?;
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_target(false).with_writer(std::io::stdout);
    let _ = match settings.format {
        LogFormat::Text => builder.with_ansi(std::io::stdout().is_terminal()).try_init(),
        LogFormat::Json => builder.json().with_current_span(false).try_init(),
    };
    Ok(())
}

/// The process-wide Prometheus recorder, installed by the first call; every call returns a
/// handle to it. A process runs one service, so `/metrics` renders that service's metrics;
/// tests that start several services in one process see the sum of theirs.
pub fn install_metrics() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            // Suffix matchers are tried in the order of their text: `_end_to_end_seconds`
            // before `_seconds` (the exporter sorts them).
            let builder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_end_to_end_seconds".to_owned()), END_TO_END_BUCKETS)
                .and_then(|b| b.set_buckets_for_metric(Matcher::Suffix("_seconds".to_owned()), LATENCY_BUCKETS))
                .expect("the bucket lists are not empty");
            // Refused only when a recorder that is not qim's was installed first: `/metrics`
            // then renders an empty page rather than the process failing.
            builder.install_recorder().unwrap_or_else(|_| PrometheusBuilder::new().build_recorder().handle())
        })
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn end_to_end_histograms_reach_minutes_and_latencies_stop_at_ten_seconds() {
        let metrics = install_metrics();
        metrics::histogram!("qim_test_end_to_end_seconds").record(42.0);
        metrics::histogram!("qim_test_stage_seconds").record(0.003);
        let text = metrics.render();
        assert!(text.contains("qim_test_end_to_end_seconds_bucket{le=\"60\"} 1"), "{text}");
        assert!(text.contains("qim_test_stage_seconds_bucket{le=\"10\"} 1"), "{text}");
        assert!(!text.contains("qim_test_stage_seconds_bucket{le=\"60\"}"), "{text}");
    }
}
