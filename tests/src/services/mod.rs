//! The three real service binaries as child processes against the running stack, one isolated
//! run at a time (issue 9).
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use qim_tests::services::{Pipeline, PipelineEnv, ServiceBinaries};
//! let bins = ServiceBinaries::locate()?;
//! let env = PipelineEnv::fresh("demo").await?; // topics created, keyspace migrated
//! let pipeline = Pipeline::start(&bins, &env).await?;
//! // ... drive the writer at pipeline.writer.base_url() ...
//! pipeline.converge(&[], std::time::Duration::from_secs(60)).await?;
//! pipeline.stop().await?;
//! # Ok(()) }
//! ```
//!
//! Everything that talks to a server is `async` (the stack clients are). A missing server or
//! binary is an error naming it and the command that provides it, never a skip.

mod binaries;
mod converge;
mod env;
mod pipeline;
mod process;
mod state;

pub use binaries::{ServiceBinaries, BIN_DIR_ENV};
pub use converge::{consumer_group_lag, Lag};
pub use env::{PipelineEnv, RUN_DIR_ENV};
pub use pipeline::Pipeline;
pub use process::Service;
pub use qim_testkit::metrics::{Exposition, Histogram};
pub use state::{recreate_keyspace, reset_group_with_kafka_tool, run_command, wipe_redis_namespace};

/// One of the three services.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ServiceKind {
    /// `qim-writer serve`.
    Writer,
    /// `qim-archiver run`.
    Archiver,
    /// `qim-mailbox-dispatcher run`.
    Dispatcher,
}

impl ServiceKind {
    /// All three, in start order.
    pub const ALL: [ServiceKind; 3] = [ServiceKind::Writer, ServiceKind::Archiver, ServiceKind::Dispatcher];

    /// The binary's file name.
    pub fn binary(self) -> &'static str {
        match self {
            ServiceKind::Writer => "qim-writer",
            ServiceKind::Archiver => "qim-archiver",
            ServiceKind::Dispatcher => "qim-mailbox-dispatcher",
        }
    }

    /// The cargo package that builds the binary.
    pub fn package(self) -> &'static str {
        self.binary()
    }

    /// The subcommand that runs the service.
    pub fn subcommand(self) -> &'static str {
        match self {
            ServiceKind::Writer => "serve",
            ServiceKind::Archiver | ServiceKind::Dispatcher => "run",
        }
    }

    /// The variable that sets the address its HTTP server listens on.
    pub fn http_addr_var(self) -> &'static str {
        match self {
            ServiceKind::Writer => "QIM_WRITER_HTTP_ADDR",
            ServiceKind::Archiver => "QIM_ARCHIVER_HTTP_ADDR",
            ServiceKind::Dispatcher => "QIM_DISPATCHER_HTTP_ADDR",
        }
    }

    /// A short lowercase name for logs and file names.
    pub fn name(self) -> &'static str {
        match self {
            ServiceKind::Writer => "writer",
            ServiceKind::Archiver => "archiver",
            ServiceKind::Dispatcher => "dispatcher",
        }
    }
}

impl std::fmt::Display for ServiceKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
