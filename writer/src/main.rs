//! `qim-writer`: `serve` (the default), `migrate`, `check-config`. See the README.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use qim_runtime::cli::{self, AdminCommand};

/// mimalloc: glibc malloc's arena locks and consolidation cost a busy service a third of its CPU.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// qim's writer: commits each chat message (Redis hot tier, then Kafka) and answers at COMMITTED.
#[derive(Parser)]
#[command(name = "qim-writer", version)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the HTTP API (the default).
    Serve,
    #[command(flatten)]
    Admin(AdminCommand),
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli: Cli = cli::parse(qim_writer::config::ENVIRONMENT);
    // Failpoints (`FAILPOINTS=writer::after_record=return(abort)`) are live only in test builds.
    let _failpoints = fail::FailScenario::setup();
    match cli.command.unwrap_or(Command::Serve) {
        Command::Serve => cli::report(qim_writer::serve::main().await),
        Command::Admin(admin) => cli::run_admin(qim_writer::config::ENVIRONMENT, &admin).await,
    }
}
