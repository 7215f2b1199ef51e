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

/// A hybrid logical clock: the time a process stamps the events it orders with others'.
///
/// [`Self::stamp`] is the physical clock's time, or the latest time [`Self::observe`]d if that
/// is later: a process whose clock runs behind another's stamps with the other's time once it
/// saw it, instead of going back. Millisecond resolution, without a logical counter: two stamps
/// may be equal, so what must be ordered strictly carries its own order beside the stamp (a
/// conversation's seq orders its messages; their `created_at` only never decreases).
#[derive(Debug)]
pub struct HybridClock {
    physical: std::sync::Arc<dyn Clock>,
    latest: AtomicI64,
}

impl HybridClock {
    /// A clock reading `physical`, having observed nothing yet.
    pub fn new(physical: std::sync::Arc<dyn Clock>) -> Self {
        Self { physical, latest: AtomicI64::new(i64::MIN) }
    }

    /// The current stamp: `max(physical now, latest observed or stamped)`; never below an earlier
    /// stamp of this clock.
    pub fn stamp(&self) -> UnixMillis {
        let now = self.physical.now().0;
        let before = self.latest.fetch_max(now, Ordering::SeqCst);
        UnixMillis(before.max(now))
    }

    /// Takes in a time another process stamped (as it came back from shared state): later
    /// stamps are at or above it.
    pub fn observe(&self, at: UnixMillis) {
        self.latest.fetch_max(at.0, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn a_stamp_never_goes_below_what_was_observed_or_stamped() {
        let physical = Arc::new(ManualClock::new(UnixMillis(1_000)));
        let clock = HybridClock::new(physical.clone());
        assert_eq!(clock.stamp(), UnixMillis(1_000));
        // Another writer's clock runs 5 s ahead: once seen, this one stamps with its time.
        clock.observe(UnixMillis(6_000));
        physical.advance(10);
        assert_eq!(clock.stamp(), UnixMillis(6_000));
        // Its own clock stepping back changes nothing.
        physical.set(UnixMillis(500));
        assert_eq!(clock.stamp(), UnixMillis(6_000));
        // An older observation does not pull it back; the physical clock passing it moves on.
        clock.observe(UnixMillis(2_000));
        physical.set(UnixMillis(7_000));
        assert_eq!(clock.stamp(), UnixMillis(7_000));
        assert_eq!(clock.stamp(), UnixMillis(7_000));
    }
}
