//! `qim-bench`: how fast the store's paths are against the raw primitives they are built
//! from, measured in the same run on the same servers (these machines are noisy: compare ratios,
//! not absolute numbers).
//!
//! ```text
//! cargo run --release -p qim-tests --bin qim-bench -- redis [--count N] [--concurrency C] [--cluster] [--commit-layout sender|conversation]
//! cargo run --release -p qim-tests --bin qim-bench -- scylla [--count N] [--concurrency C]
//! cargo run --release -p qim-tests --bin qim-bench -- writer [--count N] [--concurrency C] [--cluster]
//! cargo run --release -p qim-tests --bin qim-bench -- archiver [--count N] [--concurrency C]
//! cargo run --release -p qim-tests --bin qim-bench -- dispatcher [--backend redis|scylla|both] [--members M] [--cluster]
//! cargo run --release -p qim-tests --bin qim-bench -- restart --count 1000000 [--conversations N] [--tail N]
//! cargo build --release -p qim-writer -p qim-archiver -p qim-mailbox-dispatcher \
//!   && cargo run --release -p qim-tests --bin qim-bench -- pipeline [--count N] [--fanout M] [--json FILE]
//! ```
//!
//! Options (`qim-bench --help`): [`Args`].

mod archiver;
mod cpu;
mod dispatcher;
mod http_hop;
mod path_costs;
mod pipeline;
mod redis;
mod redis_server;
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

/// Which benchmark runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Bench {
    Redis,
    Scylla,
    Writer,
    Archiver,
    Dispatcher,
    Pipeline,
    Restart,
}

/// The command line: a benchmark and its options.
#[derive(clap::Parser)]
#[command(name = "qim-bench", about = "How fast qim's paths are against the raw primitives they are built from")]
struct Cli {
    /// The benchmark to run.
    #[arg(value_enum)]
    bench: Bench,
    #[command(flatten)]
    args: Args,
}

/// Benchmark options.
#[derive(Clone, Debug, clap::Args)]
pub struct Args {
    /// Operations per measured path (at least --concurrency).
    #[arg(long, default_value_t = 20_000)]
    pub count: u64,
    /// Operations in flight at once.
    #[arg(long, default_value_t = 64, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub concurrency: usize,
    /// Distinct conversations the operations spread over.
    #[arg(long, default_value_t = 256, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub conversations: usize,
    /// Payload bytes per message.
    #[arg(long, default_value_t = 200)]
    pub payload: usize,
    /// Redis to measure against (default: the local stack's server, or with `--cluster` its
    /// Redis Cluster; `redis://...` or `redis+cluster://host:port,...`).
    #[arg(long)]
    redis_url: Option<String>,
    /// Measure on the local stack's Redis Cluster (`deploy/local/stack cluster up`) instead of
    /// its single server.
    #[arg(long, conflicts_with = "redis_url")]
    pub cluster: bool,
    /// Cassandra/ScyllaDB contact points, comma-separated.
    #[arg(long, default_value = "127.0.0.1:9042")]
    pub scylla_hosts: String,
    /// Where to write the figures as JSON, if anywhere (`pipeline` always writes them, by
    /// default to `target/qim-bench-pipeline.json`).
    #[arg(long)]
    pub json: Option<String>,
    /// Which backends the dispatcher benchmark runs on: `redis`, `scylla` or `both`.
    #[arg(long, default_value = "both", value_parser = ["redis", "scylla", "both"])]
    pub backend: String,
    /// Where the Redis store creates commits in the `redis`, `writer` and `restart` benchmarks
    /// (the writer's `QIM_REDIS_COMMIT_LAYOUT`): `sender` (the sender's slot, the default) or
    /// `conversation` (the group-commit layout).
    #[arg(long, value_enum, default_value = "sender")]
    pub commit_layout: qim_writer::config::CommitLayoutArg,
    /// Whether the Redis store shares the round trips of sends in flight (group commit) in the
    /// `redis` and `writer` benchmarks (the writer's `QIM_REDIS_GROUP_COMMIT`).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub group_commit: bool,
    /// Members per conversation in the dispatcher benchmark (0: one run with 5000, one with 500).
    #[arg(long, default_value_t = 0)]
    pub members: u64,
    /// Members of every conversation of the pipeline benchmark: `--conversations` groups of this
    /// size, so every message reaches this many mailboxes (0: the standard mix, `--conversations`
    /// 1:1 conversations and groups of 20 and 200 members).
    #[arg(long, default_value_t = 0, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(0..=100_000))]
    pub fanout: usize,
    /// Records the archiver's group is behind in the restart benchmark.
    #[arg(long, default_value_t = 10_000)]
    pub tail: u64,
    /// The writer's `QIM_WRITER_KAFKA_LINGER_MS` in the writer and restart benchmarks (the writer
    /// and the raw loop's producer alike; `pipeline` runs the writer's defaults); default: the
    /// writer's default.
    #[arg(long)]
    pub linger_ms: Option<u64>,
    /// The writer's `QIM_WRITER_KAFKA_COMPRESSION`, likewise.
    #[arg(long, value_enum)]
    pub compression: Option<qim_writer::publisher::Compression>,
}

impl Args {
    /// The Redis URL measured against: `--redis-url`, else the local stack's cluster
    /// (`--cluster`) or server, as the test kit names them.
    pub fn redis_url(&self) -> String {
        match &self.redis_url {
            Some(url) => url.clone(),
            None if self.cluster => qim_testkit::stack::redis_cluster_url(),
            None => qim_testkit::stack::redis_url(),
        }
    }

    /// The writer's producer tuning: the defaults, with `--linger-ms` and `--compression`.
    pub fn producer(&self) -> qim_writer::publisher::ProducerTuning {
        let default = qim_writer::publisher::ProducerTuning::default();
        qim_writer::publisher::ProducerTuning {
            linger: self.linger_ms.map_or(default.linger, Duration::from_millis),
            compression: self.compression.unwrap_or(default.compression),
        }
    }

    /// The store's commit layout (`--commit-layout`).
    pub fn commit_layout(&self) -> qim_store::redis::CommitLayout {
        self.commit_layout.into()
    }

    /// `redis cluster` or `redis single node`, for the printed figures.
    pub fn topology(&self) -> &'static str {
        match qim_store::redis::Topology::parse(&self.redis_url()) {
            Ok(qim_store::redis::Topology::Cluster(_)) => "redis cluster",
            _ => "redis single node",
        }
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
    let Cli { bench, args } = clap::Parser::parse();
    if args.count < args.concurrency as u64 {
        bail!("need --count ≥ --concurrency");
    }
    // Runs that failed or were killed left their namespaces: every AOF rewrite copies them.
    qim_testkit::redis::sweep_leftover_namespaces(&args.redis_url(), qim_testkit::stack::MIN_AGE).await;
    let figures = match bench {
        Bench::Redis => redis::run(&args).await?,
        Bench::Scylla => scylla::run(&args).await?,
        Bench::Writer => writer::run(&args).await?,
        Bench::Archiver => archiver::run(&args).await?,
        Bench::Dispatcher => dispatcher::run(&args).await?,
        Bench::Pipeline => pipeline::run(&args).await?,
        Bench::Restart => restart::run(&args).await?,
    };
    let json =
        args.json.clone().or_else(|| (bench == Bench::Pipeline).then(|| "target/qim-bench-pipeline.json".to_owned()));
    if let Some(path) = &json {
        std::fs::write(path, serde_json::to_vec_pretty(&figures)?).with_context(|| format!("writing {path}"))?;
        println!("figures written to {path}");
    }
    Ok(())
}
