//! The writer's commit-stage histogram (`qim_writer_commit_stage_seconds{stage}`), read from its
//! `/metrics` before and after a phase: the mean and the 99th-percentile bucket of each stage
//! over that phase.

use qim_tests::services::{Exposition, Histogram};

/// The stage histograms at one moment, by stage label.
#[derive(Clone, Debug, Default)]
pub struct Stages(Vec<(String, Histogram)>);

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

const NAME: &str = "qim_writer_commit_stage_seconds";

impl Stages {
    /// Reads the writer's `/metrics` at `url`.
    pub async fn read(http: &reqwest::Client, url: &str) -> anyhow::Result<Self> {
        Ok(Self::parse(&http.get(url).send().await?.text().await?))
    }

    fn parse(text: &str) -> Self {
        let metrics = Exposition::parse(text);
        let stages = metrics.label_values(&format!("{NAME}_count"), "stage");
        Self(stages.into_iter().map(|s| (s.clone(), metrics.histogram(NAME, &[("stage", &s)]))).collect())
    }

    /// Each stage's figures over the interval from `before` to `self`, for stages that ran.
    pub fn since(&self, before: &Stages) -> Vec<StageFigures> {
        let mut out = Vec::new();
        for (name, now) in &self.0 {
            let interval = match before.0.iter().find(|(n, _)| n == name) {
                Some((_, earlier)) => now.since(earlier),
                None => now.clone(),
            };
            if interval.count <= 0.0 {
                continue;
            }
            out.push(StageFigures {
                name: name.clone(),
                mean_ms: interval.sum * 1e3 / interval.count,
                p99_bound_ms: interval.quantile_bound(0.99).map(|b| b * 1e3),
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
            "# TYPE qim_writer_commit_stage_seconds histogram\n\
             qim_writer_commit_stage_seconds_bucket{stage=\"publish\",le=\"0.001\"} 10\n\
             qim_writer_commit_stage_seconds_bucket{stage=\"publish\",le=\"0.01\"} 10\n\
             qim_writer_commit_stage_seconds_bucket{stage=\"publish\",le=\"+Inf\"} 10\n\
             qim_writer_commit_stage_seconds_sum{stage=\"publish\"} 0.005\n\
             qim_writer_commit_stage_seconds_count{stage=\"publish\"} 10\n",
        );
        let after = Stages::parse(
            "# TYPE qim_writer_commit_stage_seconds histogram\n\
             qim_writer_commit_stage_seconds_bucket{stage=\"publish\",le=\"0.001\"} 10\n\
             qim_writer_commit_stage_seconds_bucket{stage=\"publish\",le=\"0.01\"} 109\n\
             qim_writer_commit_stage_seconds_bucket{stage=\"publish\",le=\"+Inf\"} 110\n\
             qim_writer_commit_stage_seconds_sum{stage=\"publish\"} 0.505\n\
             qim_writer_commit_stage_seconds_count{stage=\"publish\"} 110\n\
             qim_writer_commits_total{outcome=\"committed\"} 110\n",
        );
        let figures = after.since(&before);
        assert_eq!(figures.len(), 1);
        assert_eq!(figures[0].name, "publish");
        assert!((figures[0].mean_ms - 5.0).abs() < 1e-9, "{}", figures[0].mean_ms);
        assert_eq!(figures[0].p99_bound_ms, Some(10.0));
        assert!(before.since(&before).is_empty());
    }
}
