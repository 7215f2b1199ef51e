//! `qim-bench`: how fast the store's paths are against the raw primitives they are built
//! from, measured in the same run on the same servers (these machines are noisy: compare ratios,
//! not absolute numbers).
//!
//! ```text
//! cargo run --release -p qim-tests --bin qim-bench -- redis [--count N] [--concurrency C]
//! cargo run --release -p qim-tests --bin qim-bench -- scylla [--count N] [--concurrency C]
//! cargo run --release -p qim-tests --bin qim-bench -- writer [--count N] [--concurrency C]
//! cargo run --release -p qim-tests --bin qim-bench -- archiver [--count N] [--concurrency C]
//! cargo run --release -p qim-tests --bin qim-bench -- dispatcher [--backend redis|scylla|both] [--members M]
//! cargo run --release -p qim-tests --bin qim-bench -- restart --count 1000000 [--conversations N] [--tail N]
//! cargo build --release -p qim-writer -p qim-archiver -p qim-mailbox-dispatcher \
//!   && cargo run --release -p qim-tests --bin qim-bench -- pipeline [--count N] [--json FILE]
//! ```
//!
//! Options: `--count` commits (default 20000), `--concurrency` tasks in flight (64),
//! `--conversations` (256), `--payload` bytes (200), `--redis-url` (redis://127.0.0.1:6379/0),
//! `--scylla-hosts` (127.0.0.1:9042), `--backend` (dispatcher: `both`), `--members` (dispatcher:
//! members per conversation; default two runs, 5000 and 500), `--tail` (restart: records the
//! archiver's group is behind, 10000),
//! `--json FILE` to also write the figures (`pipeline` always writes them, by default to
//! `target/qim-bench-pipeline.json`).

mod archiver;
mod cpu;
mod dispatcher;
mod http_hop;
mod path_costs;
mod pipeline;
mod redis;
mod restart;
mod scylla;
mod scylla_mailbox;
mod stages;
mod writer;

use std::time::Duration;

use anyhow::{bail, Context};
use qim_tests::latency::Latencies;

/// The services' allocator (mimalloc), so the services it runs in process are measured as they run.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
    /// Cassandra/ScyllaDB contact points, comma-separated.
    pub scylla_hosts: String,
    /// Where to write the figures as JSON, if anywhere.
    pub json: Option<String>,
    /// Which backends the dispatcher benchmark runs on: `redis`, `scylla` or `both`.
    pub backend: String,
    /// Members per conversation in the dispatcher benchmark (0: one run with 5000, one with 500).
    pub members: u64,
    /// Records the archiver's group is behind in the restart benchmark.
    pub tail: u64,
}

impl Args {
    fn parse(mut words: impl Iterator<Item = String>) -> anyhow::Result<(String, Self)> {
        let what = words.next().context(
            "usage: qim-bench redis|scylla|writer|archiver|dispatcher|pipeline|restart [options] (see the module docs)",
        )?;
        let mut args = Args {
            count: 20_000,
            concurrency: 64,
            conversations: 256,
            payload: 200,
            redis_url: "redis://127.0.0.1:6379/0".into(),
            scylla_hosts: "127.0.0.1:9042".into(),
            json: None,
            backend: "both".into(),
            members: 0,
            tail: 10_000,
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
                "--scylla-hosts" => args.scylla_hosts = value,
                "--json" => args.json = Some(value),
                "--backend" => args.backend = value,
                "--members" => args.members = number()?,
                "--tail" => args.tail = number()?,
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
    pub fn new(latencies: &[Duration], wall: Duration) -> Self {
        let per_second = latencies.len() as f64 / wall.as_secs_f64();
        let (p50, p99) = Latencies::of(latencies).p50_p99();
        Self { per_second, p50, p99 }
    }
}

/// Runs `op(0..count)` with `concurrency` operations in flight (each task takes every
/// `concurrency`-th index) and measures each operation's latency and the whole run's throughput.
pub async fn drive<F, Fut>(count: u64, concurrency: usize, op: F) -> anyhow::Result<Measurement>
where
    F: Fn(u64) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = anyhow::Result<()>> + Send,
{
    let start = std::time::Instant::now();
    let mut tasks = Vec::with_capacity(concurrency);
    for first in 0..concurrency as u64 {
        let op = op.clone();
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let mut i = first;
            while i < count {
                let began = std::time::Instant::now();
                op(i).await?;
                latencies.push(began.elapsed());
                i += concurrency as u64;
            }
            anyhow::Ok(latencies)
        }));
    }
    let mut latencies = Vec::with_capacity(count as usize);
    for task in tasks {
        latencies.extend(task.await??);
    }
    Ok(Measurement::new(&latencies, start.elapsed()))
}

/// Milliseconds, for printing.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let (what, args) = Args::parse(std::env::args().skip(1))?;
    let figures = match what.as_str() {
        "redis" => redis::run(&args).await?,
        "scylla" => scylla::run(&args).await?,
        "writer" => writer::run(&args).await?,
        "archiver" => archiver::run(&args).await?,
        "dispatcher" => dispatcher::run(&args).await?,
        "pipeline" => pipeline::run(&args).await?,
        "restart" => restart::run(&args).await?,
        other => {
            bail!("unknown benchmark {other:?} (known: redis, scylla, writer, archiver, dispatcher, pipeline, restart)")
        }
    };
    let json = args.json.clone().or_else(|| (what == "pipeline").then(|| "target/qim-bench-pipeline.json".to_owned()));
    if let Some(path) = &json {
        std::fs::write(path, serde_json::to_vec_pretty(&figures)?).with_context(|| format!("writing {path}"))?;
        println!("figures written to {path}");
    }
    Ok(())
}
