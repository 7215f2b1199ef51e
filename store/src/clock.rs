//! The time source of stores: the system clock in services, a manual clock in tests.

use std::sync::atomic::{AtomicI64, Ordering};

use crate::ids::UnixMillis;

/// Where a store reads "now" (creation times, expiry, GC cut-offs).
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// The current time.
    fn now(&self) -> UnixMillis;
}

/// Wall-clock time.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> UnixMillis {
        UnixMillis::now()
    }
}

/// A clock that moves only when told to; for tests of expiry and GC.
#[derive(Debug)]
pub struct ManualClock(AtomicI64);

impl ManualClock {
    /// A clock standing at `start`.
    pub fn new(start: UnixMillis) -> Self {
        Self(AtomicI64::new(start.0))
    }

    /// Moves the clock forward (or back, for a negative `millis`).
    pub fn advance(&self, millis: i64) {
        self.0.fetch_add(millis, Ordering::SeqCst);
    }

    /// Sets the clock.
    pub fn set(&self, at: UnixMillis) {
        self.0.store(at.0, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> UnixMillis {
        UnixMillis(self.0.load(Ordering::SeqCst))
    }
}
