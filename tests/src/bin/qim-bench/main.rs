//! `qim-bench`: how fast the store's paths are against the raw primitives they are built
//! from, measured in the same run on the same servers (these machines are noisy: compare ratios,
//! not absolute numbers).
//!
//! ```text
//! cargo run --release -p qim-tests --bin qim-bench -- redis [--count N] [--concurrency C]
//! ```
//!
//! Options: `--count` commits (default 20000), `--concurrency` tasks in flight (64),
//! `--conversations` (256), `--payload` bytes (200), `--redis-url` (redis://127.0.0.1:6379/0),
//! `--json FILE` to also write the figures.

mod redis;

use std::time::Duration;

use anyhow::{bail, Context};

/// Benchmark options.
#[derive(Clone, Debug)]
pub struct Args {
    /// Operations per measured path.
    pub count: u64,
    /// Operations in flight at once.
    pub concurrency: usize,
    /// Distinct conversations the operations spread over.
    pub conversations: usize,
    /// Payload bytes per message.
    pub payload: usize,
    /// Redis to measure against.
    pub redis_url: String,
    /// Where to write the figures as JSON, if anywhere.
    pub json: Option<String>,
}

impl Args {
    fn parse(mut words: impl Iterator<Item = String>) -> anyhow::Result<(String, Self)> {
        let what = words.next().context("usage: qim-bench redis [options] (see the module docs)")?;
        let mut args = Args {
            count: 20_000,
            concurrency: 64,
            conversations: 256,
            payload: 200,
            redis_url: "redis://127.0.0.1:6379/0".into(),
            json: None,
        };
        while let Some(flag) = words.next() {
            let value = words.next().with_context(|| format!("{flag} needs a value"))?;
            let number = || value.parse::<u64>().with_context(|| format!("{flag} {value:?} is not a whole number"));
            match flag.as_str() {
                "--count" => args.count = number()?,
                "--concurrency" => args.concurrency = number()? as usize,
                "--conversations" => args.conversations = number()? as usize,
                "--payload" => args.payload = number()? as usize,
                "--redis-url" => args.redis_url = value,
                "--json" => args.json = Some(value),
                other => bail!("unknown option {other}"),
            }
        }
        if args.concurrency == 0 || args.conversations == 0 || args.count < args.concurrency as u64 {
            bail!("need --concurrency ≥ 1, --conversations ≥ 1 and --count ≥ --concurrency");
        }
        Ok((what, args))
    }
}

/// Throughput and latency of one measured path.
pub struct Measurement {
    /// Operations per second.
    pub per_second: f64,
    /// Median latency.
    pub p50: Duration,
    /// 99th-percentile latency.
    pub p99: Duration,
}

impl Measurement {
    /// Summarises per-operation latencies over the wall time they took.
    pub fn new(mut latencies: Vec<Duration>, wall: Duration) -> Self {
        let per_second = latencies.len() as f64 / wall.as_secs_f64();
        Self { per_second, p50: percentile(&mut latencies, 0.50), p99: percentile(&mut latencies, 0.99) }
    }
}

/// The `q`-quantile (nearest rank) of `values`; zero when empty.
pub fn percentile(values: &mut [Duration], q: f64) -> Duration {
    if values.is_empty() {
        return Duration::ZERO;
    }
    values.sort_unstable();
    let rank = ((values.len() as f64 * q).ceil() as usize).clamp(1, values.len());
    values[rank - 1]
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let (what, args) = Args::parse(std::env::args().skip(1))?;
    let figures = match what.as_str() {
        "redis" => redis::run(&args).await?,
        other => bail!("unknown benchmark {other:?} (known: redis)"),
    };
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_vec_pretty(&figures)?).with_context(|| format!("writing {path}"))?;
    }
    Ok(())
}
