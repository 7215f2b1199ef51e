//! `qim-writer`: for now the administrative subcommands (`check-config`, `migrate`); the service
//! itself arrives with its issue. See the README.

use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
    qim_store::admin::main("qim-writer", qim_writer::config::ENVIRONMENT, std::env::args().skip(1)).await
}
