//! qim-store owns every durable fact of the qim pipeline and every versioned encoding.
//!
//! - Domain: [`ids`], [`message`], [`mailbox`], [`retention`].
//! - Encodings: [`codec`] (versioned, canonical, fail-closed).
//! - Contracts: [`MessageStore`], [`MailboxStore`], [`HistoryAuthorizer`], with errors in
//!   [`error`].
//! - Backends: [`memory`] (the reference model and embedded mode), [`redis`] (the default).
//! - [`testsuite`] (feature `testsuite`): the contract suites every backend runs.

pub mod clock;
pub mod codec;
pub mod env;
pub mod error;
pub mod ids;
pub mod mailbox;
mod mailbox_store;
pub mod memory;
pub mod message;
mod message_store;
pub mod redis;
pub mod retention;
pub mod scylla;
#[cfg(any(test, feature = "testsuite"))]
pub mod testsuite;

pub use error::{ErrorKind, StoreError, StoreResult};
pub use mailbox_store::MailboxStore;
pub use message_store::{GcReport, HistoryAuthorizer, MessageStore, COMMIT_AUX_TTL_MILLIS};
