//! `qim-mailbox-dispatcher`: `run` (the default), `migrate`, `check-config`. See the README.

use std::process::ExitCode;

/// mimalloc: glibc malloc's arena locks and consolidation cost a busy service a third of its CPU.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> ExitCode {
    // Crash points (`FAILPOINTS=dispatcher::worker_after_begin=return(abort)`) are live only with
    // the `failpoints` feature (on in test builds of the workspace).
    let _failpoints = fail::FailScenario::setup();
    let mut args = std::env::args().skip(1).peekable();
    match args.peek().map(String::as_str) {
        None | Some("run") => match qim_mailbox_dispatcher::serve::main().await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e:#}");
                ExitCode::FAILURE
            }
        },
        _ => qim_store::admin::main("qim-mailbox-dispatcher", qim_mailbox_dispatcher::config::ENVIRONMENT, args).await,
    }
}
