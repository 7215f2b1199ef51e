//! qim-writer: the commit service (HTTP API → RESERVED → RECORDED → OUTBOXED → COMMITTED).
//!
//! - [`config`]: the documented environment and its typed form;
//! - [`committer`]: the durable state machine driver; [`message_ids`]: the ids it mints and the
//!   writer-id lease they carry;
//! - [`publisher`]: the idempotent Kafka producer;
//! - [`recovery`], [`expiry`]: the background duties;
//! - [`recent`], [`tail`]: where a conversation's recent records come back from after Redis
//!   lost state;
//! - [`api`]: the HTTP API; [`serve`]: startup, run and shutdown;
//! - [`metrics`]: metric names; [`events`]: what the writer reports, each event's log line and
//!   metrics in one place.

pub mod api;
pub mod backend;
pub mod committer;
pub mod config;
pub mod events;
pub mod expiry;
pub mod flights;
pub mod message_ids;
pub mod metrics;
pub mod publisher;
pub mod recent;
pub mod recovery;
pub mod serve;
pub mod tail;
