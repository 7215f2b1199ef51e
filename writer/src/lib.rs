//! qim-writer: the commit service (HTTP API → RESERVED → RECORDED → OUTBOXED → COMMITTED).
//!
//! - [`config`]: the documented environment and its typed form;
//! - [`committer`]: the durable state machine driver;
//! - [`publisher`]: the idempotent Kafka producer;
//! - [`recovery`], [`expiry`], [`reseed`]: the background duties;
//! - [`api`]: the HTTP API; [`serve`]: startup, run and shutdown.

pub mod api;
pub mod backend;
pub mod committer;
pub mod config;
pub mod expiry;
pub mod metrics;
pub mod publisher;
pub mod recovery;
pub mod reseed;
pub mod serve;
