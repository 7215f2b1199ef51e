//! qim-store owns every durable fact of the qim pipeline and every versioned encoding.
//!
//! - Domain: [`ids`], [`message`], [`mailbox`], [`retention`].
//! - Encodings: [`codec`] (versioned, canonical, fail-closed); the Kafka wire contract in
//!   [`topic`].
//! - Contracts: [`MessageStore`], [`MailboxStore`], [`MembershipStore`], [`HistoryAuthorizer`],
//!   [`SeqHighWater`] (the durable seq floor of DESIGN invariant 7), with errors in [`error`].
//! - Backends: [`memory`] (the reference model and embedded mode), `redis` (feature `redis`:
//!   the default and the hot tier), `scylla` (feature `scylla`: CQL against ScyllaDB, or Apache
//!   Cassandra 5 on our machines), `tiered` (both features: the Redis hot tier and the Scylla
//!   archive behind one `MessageStore`). Without the backend features nothing here needs a
//!   driver.
//! - [`testsuite`] (feature `testsuite`): the contract suites every backend runs.
//!
//! What the three services share (command line, environment, telemetry, HTTP, Kafka) is the
//! `qim-runtime` crate, built on this one.

pub mod clock;
pub mod codec;
pub mod error;
pub mod ids;
pub mod mailbox;
mod mailbox_store;
mod membership_store;
pub mod memory;
pub mod message;
mod message_store;
pub mod metrics;
#[cfg(feature = "redis")]
pub mod redis;
pub mod retention;
mod rules;
#[cfg(feature = "scylla")]
pub mod scylla;
mod seq_high_water;
#[cfg(any(test, feature = "testsuite"))]
pub mod testsuite;
#[cfg(all(feature = "redis", feature = "scylla"))]
pub mod tiered;
pub mod topic;

pub use error::{ErrorKind, StoreError, StoreResult};
pub use mailbox_store::{ChunkWrite, DispatchBegin, MailboxStore};
pub use membership_store::{
    all_members, MembershipAuthorizer, MembershipStore, MAX_MEMBERS_PAGE, MAX_MEMBERS_PER_CALL,
};
pub use message_store::{GcReport, HistoryAuthorizer, MessageStore, COMMIT_AUX_TTL_MILLIS};
pub use seq_high_water::{HighWater, SeqHighWater};
