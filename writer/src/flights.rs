//! Sends in flight, by request key: a retry of a key already in flight in this writer waits for
//! that flight to land, then runs as a replay of what it stored, instead of racing it through
//! the commit's states (two drivers of one commit cost compare-and-set conflicts, re-reads and a
//! second publication).
//!
//! Only this process's flights are seen; a retry that lands on another writer races as before,
//! which the commit's compare-and-sets keep safe.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use qim_store::message::CommitKey;
use tokio::sync::{Mutex as AsyncMutex, OwnedMutexGuard};

/// The keys in flight, each with the lock its flight holds and its retries wait on.
#[derive(Default)]
pub struct Flights {
    keys: Mutex<HashMap<CommitKey, Arc<AsyncMutex<()>>>>,
}

/// A place on the flight of one key, held until dropped.
pub struct Boarded<'a> {
    flights: &'a Flights,
    key: CommitKey,
    seat: Option<OwnedMutexGuard<()>>,
    /// Whether another send of the key was in flight when this one arrived.
    pub waited: bool,
}

impl Flights {
    /// Waits until no other send of `key` is in flight here, then holds the key until the
    /// returned place is dropped.
    pub async fn board(&self, key: &CommitKey) -> Boarded<'_> {
        let lock = {
            let mut keys = self.keys.lock().unwrap_or_else(PoisonError::into_inner);
            Arc::clone(keys.entry(key.clone()).or_default())
        };
        let (seat, waited) = match Arc::clone(&lock).try_lock_owned() {
            Ok(seat) => (seat, false),
            Err(_) => (lock.lock_owned().await, true),
        };
        Boarded { flights: self, key: key.clone(), seat: Some(seat), waited }
    }

    /// Keys with a send in flight or waiting (for tests).
    #[doc(hidden)]
    pub fn len(&self) -> usize {
        self.keys.lock().unwrap_or_else(PoisonError::into_inner).len()
    }

    /// Whether no key is in flight.
    #[doc(hidden)]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Drop for Boarded<'_> {
    fn drop(&mut self) {
        // Under the map's lock, so no send can take the key's lock between the release and the
        // check: the entry goes once nothing but the map holds it.
        let mut keys = self.flights.keys.lock().unwrap_or_else(PoisonError::into_inner);
        drop(self.seat.take());
        if keys.get(&self.key).is_some_and(|lock| Arc::strong_count(lock) == 1) {
            keys.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use qim_store::ids::{ClientMessageId, TenantId, UserId};
    use std::time::Duration;

    fn key(id: &str) -> CommitKey {
        CommitKey {
            tenant: TenantId([1; 16]),
            sender: UserId([2; 16]),
            client_message_id: ClientMessageId::new(id).expect("a valid id"),
        }
    }

    #[tokio::test]
    async fn a_second_send_of_a_key_waits_for_the_first_and_others_do_not() {
        let flights = Arc::new(Flights::default());
        let first = flights.board(&key("a")).await;
        assert!(!first.waited);
        let other = flights.board(&key("b")).await;
        assert!(!other.waited, "another key flies at once");
        let (f, k) = (Arc::clone(&flights), key("a"));
        let retry = tokio::spawn(async move { f.board(&k).await.waited });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!retry.is_finished(), "the retry waits while the first is in flight");
        drop(first);
        assert!(retry.await.unwrap(), "then boards, knowing it waited");
        drop(other);
        assert!(flights.is_empty(), "landed keys are forgotten");
    }
}
