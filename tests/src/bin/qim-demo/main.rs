//! `qim-demo`: the README's main job, the whole pipeline on the local stack. Starts the
//! writer, archiver and dispatcher (release binaries from `QIM_BIN_DIR`) on a fresh isolated
//! run, drives a realistic workload through the writer's HTTP API, waits for the archiver and
//! the dispatcher to catch up, runs the invariant checker, stops the services and prints a
//! summary. Exit 0: every invariant holds; 1: the checker found violations; 2: the demo failed.
//!
//! `qim-demo [--messages N] [--seed S] [--concurrency C] [--prometheus-targets FILE]`

mod figures;
mod progress;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use qim_tests::checker::{self, files, CheckInput};
use qim_tests::services::{Pipeline, PipelineEnv, ServiceBinaries};
use qim_tests::workload::{self, Plan};

/// Groups: one of two thousand members, the rest small; 1:1 pairs carry four fifths.
const GROUP_SIZES: &[usize] = &[2000, 500, 100, 50, 50, 20, 20, 10, 10, 5];
/// 1:1 conversations.
const PAIRS: usize = 400;
/// One send in this many is retried with the same client message id.
const RETRY_EVERY: usize = 10;

/// The demo: the three services in release, a workload, the checker's verdict.
#[derive(clap::Parser)]
#[command(name = "qim-demo")]
struct Args {
    /// Messages to send.
    #[arg(long, default_value_t = 6000, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    messages: usize,
    /// Seed of the workload (the same seed, the same plan).
    #[arg(long, default_value_t = 2026)]
    seed: u64,
    /// Sends in flight at once.
    #[arg(long, default_value_t = 64, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    concurrency: usize,
    /// Write the three services' `/metrics` addresses to FILE as Prometheus file-based service
    /// discovery (jobs `qim-writer`, `qim-archiver`, `qim-mailbox-dispatcher`) once they are up,
    /// and keep them running 20 s after the checker, for a last scrape
    /// (`deploy/observability/dashboard-snapshot` uses it).
    #[arg(long, value_name = "FILE")]
    prometheus_targets: Option<std::path::PathBuf>,
}

async fn run() -> anyhow::Result<bool> {
    let a: Args = clap::Parser::parse();
    let bins = ServiceBinaries::locate()?;
    println!("==> a fresh run: its own Redis namespace, topics, keyspace and ports");
    let env = PipelineEnv::fresh("demo").await?;
    println!("    run {} (logs in {})", env.name, env.run_dir.display());
    println!("==> starting qim-writer, qim-archiver, qim-mailbox-dispatcher");
    let pipeline = Pipeline::start(&bins, &env).await?;
    if let Some(file) = &a.prometheus_targets {
        write_targets(file, &pipeline)?;
    }

    let plan = Plan::generate(a.seed, a.messages, PAIRS, GROUP_SIZES, RETRY_EVERY);
    let members: usize = plan.conversations.iter().map(|c| c.members.len()).sum();
    println!(
        "==> sending {} messages over {} conversations ({PAIRS} 1:1, {} groups of up to {} members; {members} memberships), \
         every {RETRY_EVERY}th retried, {} in flight",
        a.messages,
        plan.conversations.len(),
        GROUP_SIZES.len(),
        GROUP_SIZES.iter().max().unwrap_or(&0),
        a.concurrency
    );
    let report = workload::run(pipeline.writer.base_url(), None, &plan, a.concurrency, false).await?;
    let sent_at = Instant::now();

    println!("==> waiting for the archiver and the dispatcher to catch up");
    progress::show_until_converged(&pipeline, &report.acks, Duration::from_secs(600)).await?;
    let drained = sent_at.elapsed();
    let metrics = figures::ServiceMetrics::read(&pipeline).await;

    println!("==> running the invariant checker");
    let facts = files::WorkloadFacts {
        retries_mismatched: report.retries_mismatched,
        retries_matched: report.retries_matched,
        hot_exempt_before: None,
    };
    files::save(&env.run_dir, &env, &plan, &report.acks, &facts)?;
    let input = CheckInput::new(env.clone(), &plan, report.acks.clone(), report.retries_mismatched);
    let expect = checker::expect(&input)?;
    let observed = checker::observe(&input, &expect).await?;
    let verdict = checker::rules::evaluate(&expect, &observed);

    if a.prometheus_targets.is_some() {
        println!("==> keeping the services up 20 s for the last scrapes");
        tokio::time::sleep(Duration::from_secs(20)).await;
    }
    println!("==> stopping the services (SIGTERM)");
    pipeline.stop().await?;

    println!();
    figures::print_summary(&figures::Summary {
        report: &report,
        drained,
        metrics,
        observed: &observed,
        verdict: &verdict,
    });
    println!();
    println!("run files: {} (check again: qim-check {})", env.run_dir.display(), env.run_dir.display());
    println!("the services are stopped; the stack is still running: stop it with `deploy/local/stack down`");
    Ok(verdict.is_ok())
}

/// Prometheus file-based service discovery: one target group per service.
fn write_targets(file: &std::path::Path, pipeline: &Pipeline) -> anyhow::Result<()> {
    let group = |job: &str, url: &str| serde_json::json!({ "targets": [url.trim_start_matches("http://")], "labels": { "job": job } });
    let groups = serde_json::json!([
        group("qim-writer", pipeline.writer.base_url()),
        group("qim-archiver", pipeline.archiver.base_url()),
        group("qim-mailbox-dispatcher", pipeline.dispatcher.base_url()),
    ]);
    std::fs::write(file, serde_json::to_vec_pretty(&groups)?)?;
    println!("    prometheus targets in {}", file.display());
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("qim-demo: {e:#}");
            ExitCode::from(2)
        }
    }
}
