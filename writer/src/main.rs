//! `qim-writer`: `serve` (the default), `migrate`, `check-config`. See the README.

use std::process::ExitCode;

/// mimalloc: glibc malloc's arena locks and consolidation cost a busy service a third of its CPU.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> ExitCode {
    // Failpoints (`FAILPOINTS=writer::after_record=return(abort)`) are live only in test builds.
    let _failpoints = fail::FailScenario::setup();
    let mut args = std::env::args().skip(1).peekable();
    match args.peek().map(String::as_str) {
        None | Some("serve") => match qim_writer::serve::main().await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e:#}");
                ExitCode::FAILURE
            }
        },
        _ => qim_store::admin::main("qim-writer", qim_writer::config::ENVIRONMENT, args).await,
    }
}
