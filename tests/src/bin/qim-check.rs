//! `qim-check RUN_DIR [--acks FILE]`: runs the invariant checker over a finished run (the
//! directory the demo or a test left: env.json, plan.json, acks.json, workload.json) and prints
//! the verdict. Exit 0: every invariant holds; 1: violations; 2: the check could not run.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use qim_tests::checker::{self, files};

/// Checks a finished run's invariants.
#[derive(clap::Parser)]
#[command(name = "qim-check")]
struct Args {
    /// A run directory holding env.json, plan.json, acks.json (and workload.json).
    run_dir: PathBuf,
    /// Check these acknowledgements (a JSON list of acks) instead of RUN_DIR/acks.json.
    #[arg(long, value_name = "FILE")]
    acks: Option<PathBuf>,
}

async fn run(args: Args) -> anyhow::Result<bool> {
    let mut input = files::load(&args.run_dir)?;
    if let Some(path) = args.acks {
        let text = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
        input.acks =
            serde_json::from_slice(&text).with_context(|| format!("{} is not a JSON list of acks", path.display()))?;
    }
    let verdict = checker::check(&input).await?;
    println!("{verdict}");
    Ok(verdict.is_ok())
}

#[tokio::main]
async fn main() -> ExitCode {
    // A usage error exits 2 (clap's), like a check that could not run.
    let args: Args = clap::Parser::parse();
    match run(args).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("qim-check: {e:#}");
            ExitCode::from(2)
        }
    }
}
