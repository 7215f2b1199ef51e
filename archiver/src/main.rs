//! `qim-archiver`: `run` (the default), `replay`, `migrate`, `check-config`. See the README.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use qim_archiver::replay::ReplayArgs;
use qim_runtime::cli::{self, AdminCommand};

/// mimalloc: glibc malloc's arena locks and consolidation cost a busy service a third of its CPU.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// qim's archiver: consumes committed records into the Scylla archive, with TTLs equal to the
/// remaining retention.
#[derive(Parser)]
#[command(name = "qim-archiver", version)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Consume qim.messages.v1 into the archive (the default).
    Run,
    /// Re-apply the topic from a starting point into the archive (idempotent), raising the seq
    /// high-water marks, then exit.
    Replay(ReplayArgs),
    #[command(flatten)]
    Admin(AdminCommand),
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli: Cli = cli::parse(qim_archiver::config::ENVIRONMENT);
    // Failpoints (`FAILPOINTS=archiver::after_archive=sleep(30000)`) are live only in test builds.
    let _failpoints = fail::FailScenario::setup();
    match cli.command.unwrap_or(Command::Run) {
        Command::Run => cli::report(qim_archiver::serve::main().await),
        Command::Replay(args) => cli::report(qim_archiver::replay::main(&args).await),
        Command::Admin(admin) => cli::run_admin(qim_archiver::config::ENVIRONMENT, &admin).await,
    }
}
