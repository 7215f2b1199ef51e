//! `qim-mailbox-dispatcher`: for now the administrative subcommands (`check-config`, `migrate`); the service
//! itself arrives with its issue. See the README.

use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
    qim_store::admin::main(
        "qim-mailbox-dispatcher",
        qim_mailbox_dispatcher::config::ENVIRONMENT,
        std::env::args().skip(1),
    )
    .await
}
