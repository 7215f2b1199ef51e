//! `qim-mailbox-dispatcher`: `run` (the default), `migrate`, `check-config`. See the README.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use qim_mailbox_dispatcher::config::DispatcherEnv;
use qim_runtime::cli::{self, AdminCommand};
use qim_runtime::env::Environment;

/// mimalloc: glibc malloc's arena locks and consolidation cost a busy service a third of its CPU.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// qim's mailbox dispatcher: turns committed messages into per-user mailbox entries over 64
/// lanes, and serves the mailboxes.
#[derive(Parser)]
#[command(name = "qim-mailbox-dispatcher", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Route, fan out and serve mailboxes (the default).
    Run(Box<DispatcherEnv>),
    #[command(flatten)]
    Admin(AdminCommand),
}

async fn run(env: &DispatcherEnv) -> anyhow::Result<()> {
    qim_mailbox_dispatcher::serve::main(env.config().map_err(anyhow::Error::msg)?).await
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli: Cli = cli::parse::<Cli, DispatcherEnv>("run");
    // Crash points (`FAILPOINTS=dispatcher::worker_after_begin=return(abort)`) are live only with
    // the `failpoints` feature (on in test builds of the workspace).
    let _failpoints = fail::FailScenario::setup();
    match cli.command {
        Command::Run(env) => cli::report(run(&env).await),
        Command::Admin(admin) => cli::run_admin::<DispatcherEnv>(&admin).await,
    }
}
