//! Ticks: concurrent callers' work gathered and done together, one batch at a time.
//!
//! A caller hands its item to a [`Ticker`] and waits for its answer. When no tick is running,
//! the item starts one at once; items arriving while a tick runs wait for it to land and go
//! together in the next. There is no fixed linger: under light load every item is its own
//! tick, under load each tick carries what arrived during the one before.
//!
//! A tick runs on a task of its own, so a caller that stops waiting (its request cancelled)
//! never stops the tick half way: the batch is sent whole, and only that caller's answer is
//! dropped. (Hand-written rather than a batching crate: the few on crates.io linger on a timer
//! or a size, which is what this must not do.)

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::oneshot;

/// What runs one tick: the items in arrival order in, one answer per item (same order) out.
pub type TickFn<I, O> = Arc<dyn Fn(Vec<I>) -> Pin<Box<dyn Future<Output = Vec<O>> + Send>> + Send + Sync>;

/// Gathers items into ticks (see the module docs). Clones share the queue.
pub struct Ticker<I, O> {
    shared: Arc<Shared<I, O>>,
}

impl<I, O> Clone for Ticker<I, O> {
    fn clone(&self) -> Self {
        Self { shared: Arc::clone(&self.shared) }
    }
}

struct Shared<I, O> {
    run: TickFn<I, O>,
    max_items: usize,
    state: Mutex<State<I, O>>,
}

struct State<I, O> {
    waiting: Vec<(I, oneshot::Sender<O>)>,
    /// Whether a task is running ticks (it takes what waits until nothing does).
    running: bool,
}

/// The tick carrying an item ended without answering it (its task panicked).
#[derive(Debug, thiserror::Error)]
#[error("the batch carrying this call was abandoned")]
pub struct Abandoned;

impl<I: Send + 'static, O: Send + 'static> Ticker<I, O> {
    /// A ticker whose ticks carry at most `max_items` items each (at least one), run by `run`.
    pub fn new(max_items: usize, run: TickFn<I, O>) -> Self {
        let state = Mutex::new(State { waiting: Vec::new(), running: false });
        Self { shared: Arc::new(Shared { run, max_items: max_items.max(1), state }) }
    }

    /// Hands `item` to the next tick and waits for its answer. Needs a Tokio runtime.
    pub async fn submit(&self, item: I) -> Result<O, Abandoned> {
        let (tx, rx) = oneshot::channel();
        let start = {
            let mut state = self.shared.state.lock().unwrap_or_else(PoisonError::into_inner);
            state.waiting.push((item, tx));
            !std::mem::replace(&mut state.running, true)
        };
        if start {
            tokio::spawn(Self::run_ticks(Arc::clone(&self.shared)));
        }
        rx.await.map_err(|_| Abandoned)
    }

    /// Runs ticks until nothing waits.
    async fn run_ticks(shared: Arc<Shared<I, O>>) {
        let mut stop = Stopped { shared: &shared, done: false };
        loop {
            let tick = {
                let mut state = shared.state.lock().unwrap_or_else(PoisonError::into_inner);
                if state.waiting.is_empty() {
                    state.running = false;
                    stop.done = true;
                    return;
                }
                let take = state.waiting.len().min(shared.max_items);
                state.waiting.drain(..take).collect::<Vec<_>>()
            };
            let (items, answers): (Vec<I>, Vec<oneshot::Sender<O>>) = tick.into_iter().unzip();
            let outputs = (shared.run)(items).await;
            for (answer, output) in answers.into_iter().zip(outputs) {
                // The caller may have stopped waiting: its answer is dropped, nothing else.
                let _ = answer.send(output);
            }
        }
    }
}

/// A task that stops running ticks other than by finding nothing to do (a panic in `run`, its
/// runtime shutting down) leaves the ticker usable: what waits is answered [`Abandoned`] and
/// the next item starts a new task.
struct Stopped<'a, I, O> {
    shared: &'a Shared<I, O>,
    /// Set when the task found nothing waiting and stopped (`running` already cleared).
    done: bool,
}

impl<I, O> Drop for Stopped<'_, I, O> {
    fn drop(&mut self) {
        if !self.done {
            let mut state = self.shared.state.lock().unwrap_or_else(PoisonError::into_inner);
            state.waiting.clear();
            state.running = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// The items of each tick run so far.
    type Ticks = Arc<Mutex<Vec<Vec<u32>>>>;

    /// A ticker that records each tick's items, answering each item doubled, after `pause`.
    fn recording(max_items: usize, pause: Duration) -> (Ticker<u32, u32>, Ticks) {
        let ticks = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&ticks);
        let run: TickFn<u32, u32> = Arc::new(move |items: Vec<u32>| {
            seen.lock().unwrap().push(items.clone());
            Box::pin(async move {
                tokio::time::sleep(pause).await;
                items.into_iter().map(|i| i * 2).collect()
            })
        });
        (Ticker::new(max_items, run), ticks)
    }

    #[tokio::test]
    async fn items_arriving_during_a_tick_go_together_in_the_next() {
        let (ticker, ticks) = recording(100, Duration::from_millis(50));
        let first = tokio::spawn({
            let t = ticker.clone();
            async move { t.submit(1).await.unwrap() }
        });
        tokio::time::sleep(Duration::from_millis(10)).await;
        let rest: Vec<_> = (2..=5)
            .map(|i| {
                let t = ticker.clone();
                tokio::spawn(async move { t.submit(i).await.unwrap() })
            })
            .collect();
        assert_eq!(first.await.unwrap(), 2);
        for (i, r) in (2..=5).zip(rest) {
            assert_eq!(r.await.unwrap(), i * 2, "each caller gets its own answer");
        }
        let ticks = ticks.lock().unwrap().clone();
        assert_eq!(ticks.len(), 2, "one tick for the first item, one for all that came meanwhile: {ticks:?}");
        assert_eq!(ticks[0], vec![1]);
        let mut second = ticks[1].clone();
        second.sort();
        assert_eq!(second, vec![2, 3, 4, 5]);
    }

    #[tokio::test]
    async fn a_tick_carries_at_most_max_items() {
        let (ticker, ticks) = recording(2, Duration::from_millis(20));
        let all: Vec<_> = (0..5)
            .map(|i| {
                let t = ticker.clone();
                tokio::spawn(async move { t.submit(i).await.unwrap() })
            })
            .collect();
        for r in all {
            r.await.unwrap();
        }
        assert!(ticks.lock().unwrap().iter().all(|t| t.len() <= 2), "{:?}", ticks.lock().unwrap());
    }

    #[tokio::test]
    async fn a_caller_that_stops_waiting_does_not_stop_the_tick() {
        let (ticker, ticks) = recording(100, Duration::from_millis(30));
        let gave_up = tokio::time::timeout(Duration::from_millis(5), ticker.submit(7)).await;
        assert!(gave_up.is_err(), "the caller stopped waiting");
        assert_eq!(ticker.submit(8).await.unwrap(), 16, "the ticker goes on");
        assert_eq!(ticks.lock().unwrap().concat(), vec![7, 8], "the abandoned item was still carried");
    }

    #[test]
    fn a_runtime_shut_down_mid_tick_leaves_the_ticker_usable() {
        let (ticker, _) = recording(10, Duration::from_millis(200));
        let runtime = || tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let first = runtime();
        let t = ticker.clone();
        first.block_on(async move {
            let waited = tokio::time::timeout(Duration::from_millis(20), t.submit(1)).await;
            assert!(waited.is_err(), "the tick was still running");
        });
        drop(first);
        assert_eq!(runtime().block_on(ticker.submit(2)).unwrap(), 4, "a new tick runs in another runtime");
    }

    #[tokio::test]
    async fn a_panicking_tick_abandons_its_items_and_the_ticker_recovers() {
        let run: TickFn<u32, u32> = Arc::new(|items: Vec<u32>| {
            Box::pin(async move {
                assert!(!items.contains(&0), "zero is refused");
                items
            })
        });
        let ticker = Ticker::new(10, run);
        assert!(ticker.submit(0).await.is_err(), "the panicked tick's item is abandoned");
        assert_eq!(ticker.submit(3).await.unwrap(), 3, "a later item starts a new tick");
    }
}
