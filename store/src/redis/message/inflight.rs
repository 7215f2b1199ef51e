//! What a [`super::RedisMessageStore`] itself last wrote (or read) for commits still in flight,
//! so the next step of the same send can go straight to its compare-and-set instead of reading
//! the commit first.
//!
//! It is a hint, never a source of truth: every step that uses it still compares the commit's
//! whole head in its CAS script, and a mismatch is answered exactly as a changed commit was
//! before (`Conflict`, or `NotFound` when it is gone). The one write made on the strength of the
//! hint before any CAS, `put_record`'s record, is guarded in the script against everything a
//! stale hint could ask for (see `message_put_record.lua`, mode `known`).
//!
//! An entry is used for at most two [`GENERATION`]s; memory is bounded by keeping two
//! generations (the young one closed early after [`GENERATION_BYTES`] of payload). A send
//! finishing (COMMITTED) or failing a step drops its entry at once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::Loc;
use crate::message::{Commit, CommitKey};

/// How long one generation collects entries.
const GENERATION: Duration = Duration::from_secs(30);

/// Payload bytes (plus a fixed overhead per entry) after which a generation is closed early.
const GENERATION_BYTES: usize = 32 << 20;

/// Bytes an entry is counted for beyond its payload.
const ENTRY_OVERHEAD: usize = 256;

/// A commit exactly as this store last saw it in Redis.
#[derive(Debug)]
pub(super) struct Known {
    /// The commit; its canonical encoding is the blob stored under its key.
    pub(super) commit: Commit,
    /// Where its hash is.
    pub(super) loc: Loc,
    /// Whether this store registered the record with the hot tier (expiry index, trim window)
    /// and saw every registration succeed.
    pub(super) registered: bool,
    /// When this store took the key's claim (group-commit layout; just before it sent the
    /// claim that set it): the claim's TTL counts from no earlier than this. `None` when the
    /// claim was there already or the commit was read.
    pub(super) claimed: Option<Instant>,
    /// When it was remembered.
    at: Instant,
}

#[derive(Default)]
struct Generations {
    young: HashMap<CommitKey, Arc<Known>>,
    old: HashMap<CommitKey, Arc<Known>>,
    young_since: Option<Instant>,
    young_bytes: usize,
}

impl Generations {
    /// Ages the generations: the young one becomes old after [`GENERATION`] (or when full), and
    /// an old one past its generation is dropped.
    fn age(&mut self, now: Instant) {
        let Some(since) = self.young_since else {
            self.young_since = Some(now);
            return;
        };
        let elapsed = now.saturating_duration_since(since);
        if elapsed >= GENERATION || self.young_bytes >= GENERATION_BYTES {
            self.old = std::mem::take(&mut self.young);
            if elapsed >= 2 * GENERATION {
                self.old.clear();
            }
            self.young_since = Some(now);
            self.young_bytes = 0;
        }
    }
}

/// The in-flight hints of one store (shared by its clones).
#[derive(Default)]
pub(super) struct InFlight {
    inner: Mutex<Generations>,
}

impl std::fmt::Debug for InFlight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InFlight").finish_non_exhaustive()
    }
}

impl InFlight {
    fn lock(&self) -> std::sync::MutexGuard<'_, Generations> {
        // The map holds no invariant a panicking holder could break halfway.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// What this store last saw under `key`, if recent.
    pub(super) fn get(&self, key: &CommitKey) -> Option<Arc<Known>> {
        let mut g = self.lock();
        let now = Instant::now();
        g.age(now);
        let known = g.young.get(key).or_else(|| g.old.get(key))?;
        (now.saturating_duration_since(known.at) < 2 * GENERATION).then(|| Arc::clone(known))
    }

    /// Remembers `commit` (not yet COMMITTED) as what Redis holds under its key, at `loc`.
    pub(super) fn remember(&self, commit: Commit, loc: Loc, registered: bool) {
        self.remember_claimed(commit, loc, registered, None);
    }

    /// [`Self::remember`], with when this store took the key's claim ([`Known::claimed`]).
    pub(super) fn remember_claimed(&self, commit: Commit, loc: Loc, registered: bool, claimed: Option<Instant>) {
        let key = commit.intent.request.key.clone();
        let bytes = commit.intent.request.payload.len() + ENTRY_OVERHEAD;
        let now = Instant::now();
        let mut g = self.lock();
        g.age(now);
        g.old.remove(&key);
        g.young_bytes += bytes;
        g.young.insert(key, Arc::new(Known { commit, loc, registered, claimed, at: now }));
    }

    /// Forgets `key` (the send finished, or a step found the commit other than remembered).
    pub(super) fn forget(&self, key: &CommitKey) {
        let mut g = self.lock();
        g.young.remove(key);
        g.old.remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generations_age_out() {
        let mut g = Generations::default();
        let t0 = Instant::now();
        g.age(t0);
        g.young.insert(key("a"), known());
        g.age(t0 + GENERATION / 2);
        assert_eq!((g.young.len(), g.old.len()), (1, 0));
        g.age(t0 + GENERATION);
        assert_eq!((g.young.len(), g.old.len()), (0, 1), "a closed generation is still consulted");
        g.age(t0 + 2 * GENERATION);
        assert_eq!((g.young.len(), g.old.len()), (0, 0));
        g.young.insert(key("b"), known());
        g.age(t0 + 5 * GENERATION);
        assert_eq!((g.young.len(), g.old.len()), (0, 0), "an idle store returns nothing stale");
    }

    fn key(id: &str) -> CommitKey {
        CommitKey {
            tenant: crate::ids::TenantId([1; 16]),
            sender: crate::ids::UserId([2; 16]),
            client_message_id: crate::ids::ClientMessageId::new(id).unwrap(),
        }
    }

    fn known() -> Arc<Known> {
        use crate::message::{CommitIntent, CommitRequest, CommitState, MessageKind};
        let request = CommitRequest {
            key: key("x"),
            conversation: crate::ids::ConversationId([3; 16]),
            kind: MessageKind::Normal,
            retention: crate::retention::RetentionClass::Default,
            payload: vec![],
        };
        let intent = CommitIntent {
            request,
            seq: crate::ids::ConversationSeq(1),
            message_id: crate::ids::MessageId([4; 16]),
            created_at: crate::ids::UnixMillis(0),
            publication: None,
        };
        let commit = Commit { intent, state: CommitState::Reserved, committed_at: None };
        Arc::new(Known { commit, loc: Loc::Sender, registered: false, claimed: None, at: Instant::now() })
    }
}
