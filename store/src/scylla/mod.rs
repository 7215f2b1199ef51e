//! The Scylla (CQL) backend: ScyllaDB in production, Apache Cassandra 5 on our machines.
//!
//! - [`config`]: [`ScyllaConfig`] from explicit production or test variables.
//! - [`schema`]: tables, keys, server flavour and replication decisions (pure).
//! - [`migrate()`] / [`readiness()`]: the explicit migration and the schema re-check.
//! - [`ScyllaMessageStore`]: `MessageStore` per seed 000 (LWT only for first facts and ordered
//!   state transitions, LOCAL_QUORUM for everything else), plus the archiver's writes
//!   (`archive_records`: the same history rows with TTL = remaining retention).
//! - [`ScyllaMailboxStore`]: `MailboxStore` per DESIGN.md's dispatch departure (no LWT on the
//!   dispatch path; monotonic state through value-derived write timestamps).
//! - [`ScyllaMembershipStore`]: `MembershipStore` on `conversation_member` (LOCAL_QUORUM, no
//!   LWT; counts are informational).

mod batches;
pub mod config;
mod cql;
pub mod mailbox;
pub mod membership;
mod message;
mod migrate;
pub mod schema;

pub use config::{ScyllaConfig, ScyllaConfigError};
pub use cql::open_session;
pub use mailbox::ScyllaMailboxStore;
pub use membership::ScyllaMembershipStore;
pub use message::{
    aligned_ttl, archive_check, ArchiveConflict, ArchiveRefusal, ArchiveReport, ScyllaMessageStore, CLOCK_SKEW_MILLIS,
    TTL_SETTLE_BUDGET,
};
pub use migrate::{migrate, read_flavour, readiness, Readiness};
