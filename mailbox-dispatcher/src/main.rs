//! `qim-mailbox-dispatcher`: `run` (the default), `replay`, `dlq`, `migrate`, `check-config`.
//! See the README.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use qim_mailbox_dispatcher::config::DispatcherEnv;
use qim_runtime::cli::{self, AdminCommand};
use qim_runtime::env::Environment;
use qim_runtime::kafka::dlq::DlqCommand;
use qim_runtime::kafka::replay::ReplayArgs;

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
    /// Rewind the router's and the shard workers' groups to a starting point and dispatch again
    /// up to where the topics end now (idempotent: identical entries at identical seqs), then
    /// exit. Every dispatcher of the group must be stopped.
    Replay {
        #[command(flatten)]
        args: ReplayArgs,
        #[command(flatten)]
        env: Box<DispatcherEnv>,
    },
    /// The dead letters of QIM_DISPATCHER_DLQ_TOPIC: list, show one, re-drive to their source
    /// topic.
    Dlq {
        #[command(subcommand)]
        command: DlqCommand,
        #[command(flatten)]
        env: Box<DispatcherEnv>,
    },
    #[command(flatten)]
    Admin(AdminCommand),
}

async fn run(env: &DispatcherEnv) -> anyhow::Result<()> {
    qim_mailbox_dispatcher::serve::main(env.config().map_err(anyhow::Error::msg)?).await
}

async fn replay(args: &ReplayArgs, env: &DispatcherEnv) -> anyhow::Result<()> {
    qim_mailbox_dispatcher::replay::main(args, env.config().map_err(anyhow::Error::msg)?).await
}

async fn dlq(command: &DlqCommand, env: &DispatcherEnv) -> anyhow::Result<()> {
    let config = env.config().map_err(anyhow::Error::msg)?;
    qim_runtime::kafka::dlq::run(command, &config.kafka.brokers, &config.kafka.dlq_topic).await
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli: Cli = cli::parse::<Cli, DispatcherEnv>("run");
    // Crash points (`FAILPOINTS=dispatcher::worker_after_begin=return(abort)`) are live only with
    // the `failpoints` feature (on in test builds of the workspace).
    let _failpoints = fail::FailScenario::setup();
    match cli.command {
        Command::Run(env) => cli::report(run(&env).await),
        Command::Replay { args, env } => cli::report(replay(&args, &env).await),
        Command::Dlq { command, env } => cli::report(dlq(&command, &env).await),
        Command::Admin(admin) => cli::run_admin::<DispatcherEnv>(&admin).await,
    }
}
