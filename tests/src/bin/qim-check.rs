//! `qim-check RUN_DIR [--acks FILE]`: runs the invariant checker over a finished run (the
//! directory the demo or a test left: env.json, plan.json, acks.json, workload.json) and prints
//! the verdict. Exit 0: every invariant holds; 1: violations; 2: the check could not run.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context};
use qim_tests::checker::{self, files};

const USAGE: &str = "usage: qim-check RUN_DIR [--acks FILE]
  RUN_DIR      a run directory holding env.json, plan.json, acks.json (and workload.json)
  --acks FILE  check these acknowledgements (a JSON Vec<Ack>) instead of RUN_DIR/acks.json";

fn args() -> anyhow::Result<(PathBuf, Option<PathBuf>)> {
    let mut dir = None;
    let mut acks = None;
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--acks" => acks = Some(PathBuf::from(it.next().context("--acks needs a file")?)),
            "-h" | "--help" | "help" => bail!("{USAGE}"),
            _ if dir.is_none() && !a.starts_with('-') => dir = Some(PathBuf::from(a)),
            other => bail!("unexpected argument {other:?}\n{USAGE}"),
        }
    }
    Ok((dir.context(USAGE)?, acks))
}

async fn run() -> anyhow::Result<bool> {
    let (dir, acks) = args()?;
    let mut input = files::load(&dir)?;
    if let Some(path) = acks {
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
    match run().await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("qim-check: {e:#}");
            ExitCode::from(2)
        }
    }
}
