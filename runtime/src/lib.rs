//! qim-runtime: the plumbing every qim service shares, so the writer, the archiver and the
//! mailbox dispatcher behave the same for operators:
//!
//! - [`env`]: the `QIM_*` environment contract: one clap group per service, checked as a whole;
//! - [`cli`]: the command line (clap): the shared admin subcommands and `--help` listing every
//!   variable;
//! - [`admin`]: what `migrate` does;
//! - [`telemetry`]: logs (`QIM_LOG` filter) and the Prometheus recorder behind `/metrics`;
//! - [`events`]: what a service reports, one type per event emitting its log line and metrics;
//! - [`auth`]: who may call `/v1` (JWT bearer tokens, scopes, a trusted gateway) and how often;
//! - [`http`]: the JSON error body, `/healthz`, `/readyz`, `/metrics`;
//! - [`shutdown`]: SIGTERM/SIGINT → a cancellation token;
//! - [`kafka`]: the producer and group-consumer configuration, the dead-letter format and the
//!   metadata probe every service uses the same way;
//! - [`startup`]: start-up steps that retry their servers with backoff until a deadline;
//! - [`retry`]: the pauses between attempts of a step after start-up (backoff with jitter,
//!   interrupted by a cancellation token).

pub mod admin;
pub mod auth;
pub mod cli;
pub mod env;
pub mod events;
pub mod http;
pub mod kafka;
pub mod openapi;
pub mod retry;
pub mod shutdown;
pub mod startup;
pub mod telemetry;
