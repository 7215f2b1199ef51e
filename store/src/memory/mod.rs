//! The in-memory backend: the complete reference implementation of both store traits, used as
//! the embedded mode, by the services' unit tests, and as the model for property tests.
//!
//! Everything is kept as the same canonical blobs the durable backends store, so idempotency is
//! decided by byte equality here too, and sabotage (for the contract suites' corruption tests)
//! works on bytes.

mod high_water;
mod mailbox;
mod membership;
mod message;

pub use high_water::MemorySeqHighWater;
pub use mailbox::MemoryMailboxStore;
pub use membership::MemoryMembershipStore;
pub use message::MemoryMessageStore;

use std::sync::{Mutex, MutexGuard};

/// Locks a mutex, recovering the data if a panicking thread poisoned it: every critical section
/// here validates before it mutates, so a panic can not leave half-applied state.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
