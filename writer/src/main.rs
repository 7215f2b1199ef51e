//! `qim-writer`: `serve` (the default), `migrate`, `check-config`. See the README.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use qim_runtime::cli::{self, AdminCommand};
use qim_runtime::env::Environment;
use qim_writer::config::WriterEnv;

/// mimalloc: glibc malloc's arena locks and consolidation cost a busy service a third of its CPU.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// qim's writer: commits each chat message (Redis hot tier, then Kafka) and answers at COMMITTED.
#[derive(Parser)]
#[command(name = "qim-writer", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the HTTP API (the default).
    Serve(Box<WriterEnv>),
    #[command(flatten)]
    Admin(AdminCommand),
}

async fn serve(env: &WriterEnv) -> anyhow::Result<()> {
    qim_writer::serve::main(env.config().map_err(anyhow::Error::msg)?).await
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli: Cli = cli::parse::<Cli, WriterEnv>("serve");
    // Failpoints (`FAILPOINTS=writer::after_record=return(abort)`) are live only in test builds.
    let _failpoints = fail::FailScenario::setup();
    match cli.command {
        Command::Serve(env) => cli::report(serve(&env).await),
        Command::Admin(admin) => cli::run_admin::<WriterEnv>(&admin).await,
    }
}
