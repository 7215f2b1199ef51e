//! The one retry policy of the services' steps after start-up: capped exponential backoff with
//! jitter (`backon`), whose pauses a cancellation token interrupts. A started attempt always
//! runs to its end; only the pause between attempts races the token, so shutdown or a revoked
//! partition never cuts a write in half. (Start-up steps retry with the same builder until a
//! deadline: [`super::startup`].)

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};
use tokio_util::sync::CancellationToken;

/// First pause of [`Backoff::default`].
pub const FIRST_PAUSE: Duration = Duration::from_millis(50);
/// [`Backoff::default`]'s pauses stay below this.
pub const MAX_PAUSE: Duration = Duration::from_secs(5);

/// The pauses between attempts of one step, never running out: a delay from `first` doubling up
/// to half of `max`, each pause that delay lengthened by a random part of itself (within
/// `[delay, 2 × delay)`, so retries of many steps spread out and no pause reaches `max`).
#[derive(Debug)]
pub struct Backoff {
    delays: ExponentialBackoff,
    max: Duration,
    retried: bool,
}

impl Default for Backoff {
    fn default() -> Self {
        Self::new(FIRST_PAUSE, MAX_PAUSE)
    }
}

impl Backoff {
    /// Pauses from `first` up to (not reaching) `max`.
    pub fn new(first: Duration, max: Duration) -> Self {
        let delays = ExponentialBuilder::default()
            .with_min_delay(first.min(max / 2))
            .with_max_delay(max / 2)
            .with_jitter()
            .without_max_times()
            .build();
        Self { delays, max, retried: false }
    }

    /// The next pause (for a log line before [`Self::sleep`]).
    pub fn next_pause(&mut self) -> Duration {
        self.retried = true;
        // Without a limit on attempts the builder never runs out; `max` if it ever did.
        self.delays.next().unwrap_or(self.max)
    }

    /// Sleeps `pause`; `false` when `cancel` fired first.
    pub async fn sleep(pause: Duration, cancel: &CancellationToken) -> bool {
        tokio::select! {
            () = cancel.cancelled() => false,
            () = tokio::time::sleep(pause) => true,
        }
    }

    /// Sleeps the next pause; `false` when `cancel` fired first.
    pub async fn pause(&mut self, cancel: &CancellationToken) -> bool {
        let pause = self.next_pause();
        Self::sleep(pause, cancel).await
    }

    /// Whether any pause was taken (the step failed at least once).
    pub fn retried(&self) -> bool {
        self.retried
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_grow_from_the_first_and_stay_under_the_cap_with_jitter() {
        let (first, max) = (Duration::from_millis(100), Duration::from_millis(1600));
        let mut b = Backoff::new(first, max);
        assert!(!b.retried());
        let pauses: Vec<Duration> = (0..12).map(|_| b.next_pause()).collect();
        assert!(b.retried());
        for p in &pauses {
            assert!(*p >= first && *p < max, "a pause of {p:?} outside [{first:?}, {max:?})");
        }
        let late: Duration = pauses[6..].iter().sum();
        assert!(late >= max * 3, "late pauses reach half the cap or more: {pauses:?}");
    }

    #[tokio::test]
    async fn a_cancelled_token_cuts_the_pause_short() {
        let cancel = CancellationToken::new();
        let mut b = Backoff::new(Duration::from_secs(30), Duration::from_secs(60));
        cancel.cancel();
        let began = std::time::Instant::now();
        assert!(!b.pause(&cancel).await);
        assert!(began.elapsed() < Duration::from_secs(1));
    }
}
