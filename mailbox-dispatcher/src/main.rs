//! `qim-mailbox-dispatcher`: `run` (the default), `migrate`, `check-config`. See the README.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use qim_runtime::cli::{self, AdminCommand};

/// mimalloc: glibc malloc's arena locks and consolidation cost a busy service a third of its CPU.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// qim's mailbox dispatcher: turns committed messages into per-user mailbox entries over 64
/// lanes, and serves the mailboxes.
#[derive(Parser)]
#[command(name = "qim-mailbox-dispatcher", version)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Route, fan out and serve mailboxes (the default).
    Run,
    #[command(flatten)]
    Admin(AdminCommand),
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli: Cli = cli::parse(qim_mailbox_dispatcher::config::ENVIRONMENT);
    // Crash points (`FAILPOINTS=dispatcher::worker_after_begin=return(abort)`) are live only with
    // the `failpoints` feature (on in test builds of the workspace).
    let _failpoints = fail::FailScenario::setup();
    match cli.command.unwrap_or(Command::Run) {
        Command::Run => cli::report(qim_mailbox_dispatcher::serve::main().await),
        Command::Admin(admin) => cli::run_admin(qim_mailbox_dispatcher::config::ENVIRONMENT, &admin).await,
    }
}
