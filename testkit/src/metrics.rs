//! A service's `/metrics` (the Prometheus text exposition) read back by metric name and labels,
//! through `prometheus-parse`: what tests assert on and benchmarks report.

use prometheus_parse::{Sample, Scrape, Value};

/// One scrape of a `/metrics` page.
#[derive(Clone, Debug)]
pub struct Exposition {
    samples: Vec<Sample>,
}

impl Exposition {
    /// Parses exposition text. Lines that are not samples, comments or types are ignored (as a
    /// Prometheus server would skip them); a sample whose value is not a number is dropped.
    pub fn parse(text: &str) -> Self {
        let lines = text.lines().map(|l| Ok(l.to_owned()));
        let scrape = Scrape::parse(lines).expect("lines of a string never fail to read");
        Self { samples: scrape.samples }
    }

    /// Every counter, gauge or untyped sample of `name` whose labels include all of `labels`,
    /// as (its labels as `k="v"` pairs sorted by name, its value).
    pub fn values(&self, name: &str, labels: &[(&str, &str)]) -> Vec<(String, f64)> {
        self.matching(name, labels)
            .filter_map(|s| match s.value {
                Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => Some((s.labels.to_string(), v)),
                Value::Histogram(_) | Value::Summary(_) => None,
            })
            .collect()
    }

    /// The sum of [`values`](Self::values) (0 when there is no such sample).
    pub fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.values(name, labels).iter().map(|(_, v)| v).sum()
    }

    /// Whether any sample of `name` with all of `labels` was exported.
    pub fn has(&self, name: &str, labels: &[(&str, &str)]) -> bool {
        self.matching(name, labels).next().is_some()
    }

    /// The histogram `name` (declared `# TYPE <name> histogram`) over every label set with all of
    /// `labels`: cumulative `(upper bound, count)` buckets in ascending bound (`+Inf` last),
    /// with its `_sum` and `_count`.
    pub fn histogram(&self, name: &str, labels: &[(&str, &str)]) -> Histogram {
        let mut buckets: Vec<(f64, f64)> = Vec::new();
        for s in self.matching(name, labels) {
            let Value::Histogram(counts) = &s.value else { continue };
            for c in counts {
                match buckets.iter_mut().find(|(le, _)| *le == c.less_than) {
                    Some((_, n)) => *n += c.count,
                    None => buckets.push((c.less_than, c.count)),
                }
            }
        }
        buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        Histogram {
            buckets,
            sum: self.sum(&format!("{name}_sum"), labels),
            count: self.sum(&format!("{name}_count"), labels),
        }
    }

    /// The distinct values of label `label` among the samples of `name`.
    pub fn label_values(&self, name: &str, label: &str) -> Vec<String> {
        let mut out: Vec<String> =
            self.matching(name, &[]).filter_map(|s| s.labels.get(label).map(str::to_owned)).collect();
        out.sort();
        out.dedup();
        out
    }

    fn matching<'a>(&'a self, name: &'a str, labels: &'a [(&str, &str)]) -> impl Iterator<Item = &'a Sample> {
        self.samples.iter().filter(move |s| s.metric == name && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
    }
}

/// A Prometheus histogram as exported: cumulative buckets, sum and count.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Histogram {
    /// `(upper bound, cumulative count)`, ascending, `+Inf` last.
    pub buckets: Vec<(f64, f64)>,
    /// The `_sum` series.
    pub sum: f64,
    /// The `_count` series.
    pub count: f64,
}

impl Histogram {
    /// The upper bound of the first bucket holding at least `q` of the observations (`None`
    /// without observations or buckets).
    pub fn quantile_bound(&self, q: f64) -> Option<f64> {
        let target = self.count * q;
        self.buckets.iter().find(|(_, c)| self.count > 0.0 && *c >= target).map(|(le, _)| *le)
    }

    /// What was observed between `earlier` and `self` (both of one histogram).
    pub fn since(&self, earlier: &Histogram) -> Histogram {
        let before = |le: f64| earlier.buckets.iter().find(|(l, _)| *l == le).map_or(0.0, |(_, c)| *c);
        Histogram {
            buckets: self.buckets.iter().map(|(le, c)| (*le, c - before(*le))).collect(),
            sum: self.sum - earlier.sum,
            count: self.count - earlier.count,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "# HELP qim_lag lag\n# TYPE qim_lag gauge\nqim_lag{shard=\"0\"} 3\nqim_lag{shard=\"1\"} 0\n\
        # TYPE qim_lag_total counter\nqim_lag_total 9\nqim_other{a=\"x\",b=\"y\"} 1\n\
        # TYPE qim_seconds histogram\n\
        qim_seconds_bucket{stage=\"a\",le=\"0.001\"} 1\nqim_seconds_bucket{stage=\"a\",le=\"0.01\"} 8\n\
        qim_seconds_bucket{stage=\"a\",le=\"+Inf\"} 10\nqim_seconds_sum{stage=\"a\"} 0.05\nqim_seconds_count{stage=\"a\"} 10\n\
        qim_seconds_bucket{stage=\"b\",le=\"0.001\"} 0\nqim_seconds_bucket{stage=\"b\",le=\"0.01\"} 0\n\
        qim_seconds_bucket{stage=\"b\",le=\"+Inf\"} 2\nqim_seconds_sum{stage=\"b\"} 3\nqim_seconds_count{stage=\"b\"} 2\n";

    #[test]
    fn samples_are_found_by_exact_name_and_labels() {
        let e = Exposition::parse(TEXT);
        assert_eq!(e.values("qim_lag", &[]), vec![("shard=\"0\"".to_owned(), 3.0), ("shard=\"1\"".to_owned(), 0.0)]);
        assert_eq!(e.sum("qim_lag_total", &[]), 9.0, "a longer name is another metric");
        assert_eq!(e.sum("qim_lag", &[("shard", "0")]), 3.0);
        assert_eq!(e.sum("qim_other", &[("b", "y"), ("a", "x")]), 1.0, "labels in any order");
        assert!(!e.has("qim_other", &[("a", "z")]));
        assert_eq!(e.sum("qim_missing", &[]), 0.0);
        assert_eq!(e.label_values("qim_seconds", "stage"), vec!["a", "b"]);
    }

    #[test]
    fn histograms_come_back_whole_and_subtract() {
        let e = Exposition::parse(TEXT);
        let a = e.histogram("qim_seconds", &[("stage", "a")]);
        assert_eq!(a.buckets, vec![(0.001, 1.0), (0.01, 8.0), (f64::INFINITY, 10.0)]);
        assert_eq!((a.sum, a.count), (0.05, 10.0));
        assert_eq!(a.quantile_bound(0.5), Some(0.01));
        assert_eq!(a.quantile_bound(0.99), Some(f64::INFINITY));
        let both = e.histogram("qim_seconds", &[]);
        assert_eq!(both.buckets, vec![(0.001, 1.0), (0.01, 8.0), (f64::INFINITY, 12.0)]);
        let d = a.since(&Histogram {
            buckets: vec![(0.001, 1.0), (0.01, 1.0), (f64::INFINITY, 1.0)],
            sum: 0.01,
            count: 1.0,
        });
        assert_eq!(d.buckets, vec![(0.001, 0.0), (0.01, 7.0), (f64::INFINITY, 9.0)]);
        assert_eq!(Histogram::default().quantile_bound(0.5), None);
    }
}
