//! The writer's commit-stage histogram (`qim_writer_commit_stage_seconds{stage}`), read from its
//! `/metrics` before and after a phase: the mean and the 99th-percentile bucket of each stage
//! over that phase.

use qim_tests::services::metric_values;

/// One stage's histogram as exported: sum, count and cumulative buckets `(le, count)`.
#[derive(Clone, Debug, Default)]
struct Stage {
    name: String,
    sum: f64,
    count: f64,
    buckets: Vec<(f64, f64)>,
}

/// The stage histograms at one moment.
#[derive(Clone, Debug, Default)]
pub struct Stages(Vec<Stage>);

/// What one stage did between two snapshots.
pub struct StageFigures {
    /// The stage label.
    pub name: String,
    /// Mean milliseconds.
    pub mean_ms: f64,
    /// The upper bound (ms) of the bucket holding the 99th percentile (infinite past the last
    /// bound); `None` when the histogram has no buckets (rendered as a summary).
    pub p99_bound_ms: Option<f64>,
}

const PREFIX: &str = "qim_writer_commit_stage_seconds";

/// The three series of a Prometheus histogram.
#[derive(Clone, Copy)]
enum Kind {
    Sum,
    Count,
    Bucket,
}

impl Stages {
    /// Reads the writer's `/metrics` at `url`.
    pub async fn read(http: &reqwest::Client, url: &str) -> anyhow::Result<Self> {
        Self::parse(&http.get(url).send().await?.text().await?)
    }

    fn parse(text: &str) -> anyhow::Result<Self> {
        let mut stages: Vec<Stage> = Vec::new();
        for (suffix, kind) in [("_sum", Kind::Sum), ("_count", Kind::Count), ("_bucket", Kind::Bucket)] {
            for (labels, value) in metric_values(text, &format!("{PREFIX}{suffix}")) {
                let label = |name: &str| {
                    labels.split(',').find_map(|l| l.strip_prefix(name)?.strip_prefix("=\"")?.strip_suffix('"'))
                };
                let Some(name) = label("stage") else { continue };
                let stage = match stages.iter().position(|s| s.name == name) {
                    Some(i) => &mut stages[i],
                    None => {
                        stages.push(Stage { name: name.to_owned(), ..Stage::default() });
                        stages.last_mut().expect("just pushed")
                    }
                };
                match kind {
                    Kind::Sum => stage.sum = value,
                    Kind::Count => stage.count = value,
                    Kind::Bucket => {
                        let le = label("le").ok_or_else(|| anyhow::anyhow!("a bucket without `le`: {labels}"))?;
                        let le = if le == "+Inf" { f64::INFINITY } else { le.parse()? };
                        stage.buckets.push((le, value));
                    }
                }
            }
        }
        Ok(Self(stages))
    }

    /// Each stage's figures over the interval from `before` to `self`, for stages that ran.
    pub fn since(&self, before: &Stages) -> Vec<StageFigures> {
        let mut out = Vec::new();
        for stage in &self.0 {
            let earlier = before.0.iter().find(|s| s.name == stage.name);
            let count = stage.count - earlier.map_or(0.0, |s| s.count);
            if count <= 0.0 {
                continue;
            }
            let sum = stage.sum - earlier.map_or(0.0, |s| s.sum);
            let mut buckets = stage.buckets.clone();
            buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
            let earlier_count =
                |le: f64| earlier.and_then(|s| s.buckets.iter().find(|(l, _)| *l == le)).map_or(0.0, |(_, c)| *c);
            let p99_bound = (!buckets.is_empty()).then(|| {
                buckets
                    .iter()
                    .find(|(le, cumulative)| cumulative - earlier_count(*le) >= 0.99 * count)
                    .map_or(f64::INFINITY, |(le, _)| *le)
            });
            out.push(StageFigures {
                name: stage.name.clone(),
                mean_ms: sum * 1e3 / count,
                p99_bound_ms: p99_bound.map(|b| b * 1e3),
            });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_cover_only_the_interval() {
        let before = Stages::parse(
            "qim_writer_commit_stage_seconds_bucket{stage=\"publish\",le=\"0.001\"} 10\n\
             qim_writer_commit_stage_seconds_bucket{stage=\"publish\",le=\"0.01\"} 10\n\
             qim_writer_commit_stage_seconds_bucket{stage=\"publish\",le=\"+Inf\"} 10\n\
             qim_writer_commit_stage_seconds_sum{stage=\"publish\"} 0.005\n\
             qim_writer_commit_stage_seconds_count{stage=\"publish\"} 10\n",
        )
        .unwrap();
        let after = Stages::parse(
            "qim_writer_commit_stage_seconds_bucket{stage=\"publish\",le=\"0.001\"} 10\n\
             qim_writer_commit_stage_seconds_bucket{stage=\"publish\",le=\"0.01\"} 109\n\
             qim_writer_commit_stage_seconds_bucket{stage=\"publish\",le=\"+Inf\"} 110\n\
             qim_writer_commit_stage_seconds_sum{stage=\"publish\"} 0.505\n\
             qim_writer_commit_stage_seconds_count{stage=\"publish\"} 110\n\
             qim_writer_commits_total{outcome=\"committed\"} 110\n",
        )
        .unwrap();
        let figures = after.since(&before);
        assert_eq!(figures.len(), 1);
        assert_eq!(figures[0].name, "publish");
        assert!((figures[0].mean_ms - 5.0).abs() < 1e-9, "{}", figures[0].mean_ms);
        assert_eq!(figures[0].p99_bound_ms, Some(10.0));
        assert!(before.since(&before).is_empty());
    }
}
