//! `qim-archiver`: `run` (the default), `replay`, `dlq`, `migrate`, `check-config`. See the
//! README.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use qim_archiver::config::ArchiverEnv;
use qim_runtime::cli::{self, AdminCommand};
use qim_runtime::env::Environment;
use qim_runtime::kafka::dlq::DlqCommand;
use qim_runtime::kafka::replay::ReplayArgs;

/// mimalloc: glibc malloc's arena locks and consolidation cost a busy service a third of its CPU.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// qim's archiver: consumes committed records into the Scylla archive, with TTLs equal to the
/// remaining retention.
#[derive(Parser)]
#[command(name = "qim-archiver", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Consume qim.messages.v1 into the archive (the default).
    Run(Box<ArchiverEnv>),
    /// Re-apply the topic from a starting point into the archive (idempotent), raising the seq
    /// high-water marks, then exit.
    Replay {
        #[command(flatten)]
        args: ReplayArgs,
        #[command(flatten)]
        env: Box<ArchiverEnv>,
    },
    /// The dead letters of QIM_DLQ_TOPIC: list, show one, re-drive to their source topic.
    Dlq {
        #[command(subcommand)]
        command: DlqCommand,
        #[command(flatten)]
        env: Box<ArchiverEnv>,
    },
    #[command(flatten)]
    Admin(AdminCommand),
}

async fn run(env: &ArchiverEnv) -> anyhow::Result<()> {
    qim_archiver::serve::main(env.config().map_err(anyhow::Error::msg)?).await
}

async fn replay(args: &ReplayArgs, env: &ArchiverEnv) -> anyhow::Result<()> {
    qim_archiver::replay::main(args, env.config().map_err(anyhow::Error::msg)?).await
}

async fn dlq(command: &DlqCommand, env: &ArchiverEnv) -> anyhow::Result<()> {
    let config = env.config().map_err(anyhow::Error::msg)?;
    qim_runtime::kafka::dlq::run(command, &config.kafka_brokers, &config.dlq_topic).await
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli: Cli = cli::parse::<Cli, ArchiverEnv>("run");
    // Failpoints (`FAILPOINTS=archiver::after_archive=sleep(30000)`) are live only in test builds.
    let _failpoints = fail::FailScenario::setup();
    match cli.command {
        Command::Run(env) => cli::report(run(&env).await),
        Command::Replay { args, env } => cli::report(replay(&args, &env).await),
        Command::Dlq { command, env } => cli::report(dlq(&command, &env).await),
        Command::Admin(admin) => cli::run_admin::<ArchiverEnv>(&admin).await,
    }
}
