//! `qim-archiver`: `run` (the default), `replay`, `migrate`, `check-config`. See the README.

use std::process::ExitCode;

/// mimalloc: glibc malloc's arena locks and consolidation cost a busy service a third of its CPU.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const USAGE: &str = "usage: qim-archiver <run|replay|migrate|check-config|help>
  run           consume qim.messages.v1 into the archive (the default)
  replay ...    re-apply the topic: --from earliest | --from-time <RFC 3339 time or ms> | --offsets p:o[,p:o]
  migrate       create or verify the Scylla keyspace and tables
  check-config  validate the QIM_* environment without connecting";

fn report(result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    // Failpoints (`FAILPOINTS=archiver::after_archive=sleep(30000)`) are live only in test builds.
    let _failpoints = fail::FailScenario::setup();
    let mut args = std::env::args().skip(1).peekable();
    match args.peek().map(String::as_str) {
        None | Some("run") => report(qim_archiver::serve::main().await),
        Some("replay") => report(qim_archiver::replay::main(args.skip(1).collect()).await),
        Some("help" | "--help" | "-h") => {
            println!("{USAGE}");
            ExitCode::SUCCESS
        }
        _ => qim_store::admin::main("qim-archiver", qim_archiver::config::ENVIRONMENT, args).await,
    }
}
