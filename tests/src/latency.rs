//! Latency quantiles for the benchmarks and the demo, from an HDR histogram (microsecond
//! resolution, three significant digits): one definition of p50 and p99 everywhere.

use std::time::Duration;

use hdrhistogram::Histogram;

/// Per-operation latencies, summarised.
pub struct Latencies(Histogram<u64>);

impl Latencies {
    /// The histogram of `samples` (each clamped to at least 1 µs).
    pub fn of(samples: &[Duration]) -> Self {
        // Three significant digits over 1 µs .. 1 hour; longer samples count as an hour.
        let mut histogram =
            Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("these bounds and digits are supported");
        for sample in samples {
            let micros = u64::try_from(sample.as_micros()).unwrap_or(u64::MAX).max(1);
            histogram.saturating_record(micros);
        }
        Self(histogram)
    }

    /// The `q`-quantile (0.0..=1.0); zero without samples.
    pub fn quantile(&self, q: f64) -> Duration {
        if self.0.is_empty() {
            return Duration::ZERO;
        }
        Duration::from_micros(self.0.value_at_quantile(q))
    }

    /// The median and the 99th percentile.
    pub fn p50_p99(&self) -> (Duration, Duration) {
        (self.quantile(0.50), self.quantile(0.99))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_of_a_known_spread() {
        let samples: Vec<Duration> = (1..=1000).map(Duration::from_millis).collect();
        let (p50, p99) = Latencies::of(&samples).p50_p99();
        let near = |d: Duration, ms: u64| d.abs_diff(Duration::from_millis(ms)) <= Duration::from_millis(ms / 500 + 1);
        assert!(near(p50, 500), "{p50:?}");
        assert!(near(p99, 990), "{p99:?}");
        assert_eq!(Latencies::of(&[]).quantile(0.5), Duration::ZERO);
    }
}
