//! Retrying a store step with the services' one retry policy
//! ([`qim_runtime::retry::Backoff`]: capped exponential backoff with jitter).
//!
//! Only the pause races the cancellation token: a started step always runs to its end, so
//! shutdown or a revoked partition never cuts a write in half.

use std::future::Future;

use qim_runtime::events::emit;
use qim_store::{ErrorKind, StoreError};
use tokio_util::sync::CancellationToken;

use crate::events::StoreStepFailed;

pub use qim_runtime::retry::Backoff;

/// Runs `op` until it succeeds or fails with an error `gives_up` accepts (returned to the
/// caller). Every other failure is counted, logged (a warning when the backend was unavailable,
/// an error otherwise: those need a person) and retried after a pause. `None` when `cancel`
/// fired during a pause.
pub async fn retry_store<T, F, Fut>(
    step: &'static str,
    cancel: &CancellationToken,
    gives_up: impl Fn(ErrorKind) -> bool,
    mut op: F,
) -> Option<Result<T, StoreError>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, StoreError>>,
{
    let mut backoff = Backoff::default();
    loop {
        match op().await {
            Ok(v) => return Some(Ok(v)),
            Err(e) if gives_up(e.kind()) => return Some(Err(e)),
            Err(error) => {
                emit(StoreStepFailed { step, error: &error });
                if !backoff.pause(cancel).await {
                    return None;
                }
            }
        }
    }
}

/// Never gives up: every failure is retried.
pub fn never(_: ErrorKind) -> bool {
    false
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn unavailable_is_retried_and_refusals_are_returned() {
        let calls = AtomicU32::new(0);
        let cancel = CancellationToken::new();
        let got = retry_store(
            "t",
            &cancel,
            |k| k == ErrorKind::InvalidInput,
            || async {
                if calls.fetch_add(1, Ordering::Relaxed) < 3 {
                    Err(StoreError::Unavailable { message: "down".into(), source: None })
                } else {
                    Ok(7)
                }
            },
        )
        .await;
        assert_eq!(got.unwrap().unwrap(), 7);
        assert_eq!(calls.load(Ordering::Relaxed), 4);

        let got: Option<Result<(), _>> = retry_store(
            "t",
            &cancel,
            |k| k == ErrorKind::InvalidInput,
            || async { Err(StoreError::InvalidInput("bad".into())) },
        )
        .await;
        assert_eq!(got.unwrap().unwrap_err().kind(), ErrorKind::InvalidInput);
    }

    #[tokio::test(start_paused = true)]
    async fn cancellation_stops_the_backoff_not_the_step() {
        let cancel = CancellationToken::new();
        cancel.cancel();
        let calls = AtomicU32::new(0);
        let got: Option<Result<(), _>> = retry_store("t", &cancel, never, || async {
            calls.fetch_add(1, Ordering::Relaxed);
            Err(StoreError::Unavailable { message: "down".into(), source: None })
        })
        .await;
        assert!(got.is_none());
        assert_eq!(calls.load(Ordering::Relaxed), 1, "the step ran once, the pause was cut");
    }
}
