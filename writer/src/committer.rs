//! The `DurableMessageCommitter`: drives one send through RESERVED → RECORDED → OUTBOXED →
//! COMMITTED and answers only at COMMITTED.
//!
//! Every step is a durable store transition, so a crash between any two leaves a commit the
//! recovery loop (or the client's retry) drives forward from where it stopped: an identical
//! retry re-enters [`DurableMessageCommitter::commit`], gets the stored commit back from
//! `reserve` (same seq, same message id) and continues it. Publication happens between RECORDED
//! and OUTBOXED; a crash after the broker acknowledged but before OUTBOXED was stored publishes
//! again (a physical duplicate with the same seq, which consumers absorb).
//!
//! A retry of a send still in flight in this writer waits for it to land (see
//! [`crate::flights`]) and is then answered as a replay. Two drivers of one commit (a retry on
//! another writer, or the recovery loop racing either) are harmless: a transition from the
//! wrong state is a `Conflict`, after which the loser re-reads the commit and continues from its
//! current state.

use std::sync::Arc;
use std::time::{Duration, Instant};

use qim_runtime::events::emit;
use qim_store::ids::UnixMillis;
use qim_store::message::{Commit, CommitRequest, CommitState};
use qim_store::retention::RetentionPolicy;
use qim_store::{ErrorKind, HistoryAuthorizer, MessageStore, StoreError};
use tokio::sync::Semaphore;

use crate::events::{DeliveryFailed, InFlightChanged, SendAnswered, SendJoined, StageDone};
use crate::flights::Flights;
use crate::message_ids::MessageIds;
use crate::publisher::{Publish, PublishError};

/// How often one commit re-reads a state another driver holds before giving up.
const MAX_STALLS: u32 = 100;
/// Pause between those re-reads.
const STALL_PAUSE: Duration = Duration::from_millis(20);

/// Why a commit did not reach COMMITTED.
#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    /// The store refused or failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Kafka did not acknowledge the record; the commit stays RECORDED for the recovery loop.
    #[error(transparent)]
    Publish(#[from] PublishError),
    /// A failpoint stopped the commit (tests only).
    #[error("interrupted at failpoint {0}")]
    Interrupted(&'static str),
}

impl CommitError {
    /// The `outcome` label of this failure.
    pub fn outcome(&self) -> &'static str {
        match self {
            CommitError::Store(e) => match e.kind() {
                ErrorKind::Conflict | ErrorKind::DispatchConflict => "conflict",
                ErrorKind::InvalidInput => "invalid",
                ErrorKind::Forbidden => "forbidden",
                ErrorKind::Unavailable => "unavailable",
                _ => "failed",
            },
            CommitError::Publish(_) => "unavailable",
            CommitError::Interrupted(_) => "failed",
        }
    }
}

/// Stops a commit at a named boundary when the failpoint is configured: `return` interrupts
/// this commit (the process lives on), `return(abort)` kills the process like `kill -9`.
macro_rules! boundary {
    ($name:literal) => {
        fail::fail_point!($name, |arg: Option<String>| {
            if arg.as_deref() == Some("abort") {
                std::process::abort();
            }
            Err(CommitError::Interrupted($name))
        });
    };
}

/// A commit this send reserved moments ago that is now missing (`NotFound`) was lost by the
/// store under it (Redis rolled back or lost state): the client should retry the same request,
/// which reserves again or, when the send was published before the loss, gets its restored
/// answer. So it is `Unavailable` (503), never 404.
fn lost_mid_flight(error: CommitError) -> CommitError {
    match error {
        CommitError::Store(StoreError::NotFound(why)) => CommitError::Store(StoreError::Unavailable {
            message: format!("the store lost this send's commit while it was being driven ({why}); retry it"),
            source: None,
        }),
        other => other,
    }
}

/// Drives sends through the commit state machine, at most `max_in_flight` at once.
pub struct DurableMessageCommitter {
    store: Arc<dyn MessageStore>,
    publisher: Arc<dyn Publish>,
    policy: RetentionPolicy,
    permits: Semaphore,
    flights: Flights,
    ids: Arc<MessageIds>,
}

impl DurableMessageCommitter {
    /// A committer over `store`, publishing through `publisher`, minting message ids with
    /// `ids`. `policy` must be the store's (the published record carries the same expiry as the
    /// stored one).
    pub fn new(
        store: Arc<dyn MessageStore>,
        publisher: Arc<dyn Publish>,
        policy: RetentionPolicy,
        max_in_flight: usize,
        ids: Arc<MessageIds>,
    ) -> Self {
        let permits = Semaphore::new(max_in_flight.max(1));
        Self { store, publisher, policy, permits, flights: Flights::default(), ids }
    }

    /// Commits `request` from a member of its conversation, as `members` decides (refused with
    /// `Forbidden` before anything is reserved otherwise): the answer is the COMMITTED commit
    /// (the same one for every identical retry). Waits for a permit when `max_in_flight` commits
    /// are running.
    pub async fn commit(
        &self,
        request: &CommitRequest,
        members: &dyn HistoryAuthorizer,
    ) -> Result<Commit, CommitError> {
        let started = Instant::now();
        let result = self.commit_inner(request, members).await;
        let outcome = match &result {
            Ok((_, true)) => "replayed",
            Ok((_, false)) => "committed",
            Err(e) => e.outcome(),
        };
        emit(SendAnswered { outcome, elapsed: result.is_ok().then(|| started.elapsed()) });
        result.map(|(commit, _)| commit)
    }

    async fn commit_inner(
        &self,
        request: &CommitRequest,
        members: &dyn HistoryAuthorizer,
    ) -> Result<(Commit, bool), CommitError> {
        // A send of this key in flight here lands first (before this one takes a permit).
        let boarded = self.flights.board(&request.key).await;
        if boarded.waited {
            emit(SendJoined);
        }
        let _permit = self.permits.acquire().await.expect("the semaphore is never closed");
        emit(InFlightChanged(true));
        let _in_flight = InFlight;
        // The failpoint is read once per send (its counts, such as `20*off`, count sends).
        let stop = stop_after_reserve();
        let started = self.reserve(request, members, stop.is_none()).await?;
        if started.state == CommitState::Committed {
            return Ok((started, true));
        }
        if let Some(arg) = stop {
            if arg.as_deref() == Some("abort") {
                std::process::abort();
            }
            return Err(CommitError::Interrupted("writer::after_reserve"));
        }
        if started.state == CommitState::Recorded {
            boundary!("writer::after_record");
        }
        self.drive(started).await.map(|c| (c, false)).map_err(lost_mid_flight)
    }

    /// The send's reservation and, with `and_record`, its record: the store's
    /// `reserve_and_record`, which takes both steps in as few round trips as it can.
    async fn reserve(
        &self,
        request: &CommitRequest,
        members: &dyn HistoryAuthorizer,
        and_record: bool,
    ) -> Result<Commit, CommitError> {
        let timer = Instant::now();
        // A retry of a reserved key gets its first id back; this one then goes unused.
        let proposed = self.ids.mint(UnixMillis::now())?;
        let (stage, started) = if and_record {
            ("reserve_and_record", self.store.reserve_and_record(request, proposed, members).await?)
        } else {
            ("reserve", self.store.reserve_from_member(request, proposed, members).await?)
        };
        emit(StageDone { stage, elapsed: timer.elapsed() });
        Ok(started)
    }

    /// Drives a reserved commit forward to COMMITTED from whatever state it is in (the
    /// recovery loop's entry point). Idempotent.
    pub async fn drive(&self, mut commit: Commit) -> Result<Commit, CommitError> {
        let mut stalls = 0;
        loop {
            let timer = Instant::now();
            let (stage, step) = match commit.state {
                CommitState::Committed => return Ok(commit),
                CommitState::Reserved => ("record", self.store.put_record(&commit.intent).await),
                CommitState::Recorded => ("outbox", self.publish_and_mark(&commit).await?),
                CommitState::Outboxed => {
                    ("commit", self.store.mark_committed(&commit.intent.request.key, commit.intent.message_id).await)
                }
            };
            match step {
                Ok(next) => {
                    emit(StageDone { stage, elapsed: timer.elapsed() });
                    commit = next;
                    if commit.state == CommitState::Recorded {
                        boundary!("writer::after_record");
                    }
                }
                Err(StoreError::Conflict(why)) => {
                    // Another driver moved it, or the key now names something else: re-read.
                    let key = &commit.intent.request.key;
                    let current =
                        self.store.load_commit(key).await?.ok_or_else(|| {
                            StoreError::NotFound(format!("commit {key:?} vanished while being driven"))
                        })?;
                    if current.intent.message_id != commit.intent.message_id {
                        return Err(StoreError::Conflict(why).into());
                    }
                    if current.state == commit.state {
                        stalls += 1;
                        if stalls > MAX_STALLS {
                            return Err(StoreError::Conflict(why).into());
                        }
                        tokio::time::sleep(STALL_PAUSE).await;
                    }
                    commit = current;
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// RECORDED → publish → OUTBOXED → COMMITTED. A publish failure is returned as is (the
    /// commit stays RECORDED); the store steps' result is handed back to `drive`. OUTBOXED and
    /// COMMITTED are stored by one store call (still two durable transitions, OUTBOXED first);
    /// only the `writer::after_outbox` failpoint makes them two calls, to stop in between.
    async fn publish_and_mark(&self, commit: &Commit) -> Result<Result<Commit, StoreError>, CommitError> {
        let intent = &commit.intent;
        let record = intent.record(self.policy.expires_at(intent.request.retention, intent.created_at));
        let timer = Instant::now();
        let publication = match self.publisher.publish(&record).await {
            Ok(p) => p,
            Err(e) => {
                emit(DeliveryFailed);
                return Err(e.into());
            }
        };
        emit(StageDone { stage: "publish", elapsed: timer.elapsed() });
        boundary!("writer::after_publish");
        let (key, id) = (&intent.request.key, intent.message_id);
        if let Some(arg) = stop_after_outbox() {
            let outboxed = self.store.mark_outbox_published(key, id, publication).await;
            if outboxed.is_ok() {
                if arg.as_deref() == Some("abort") {
                    std::process::abort();
                }
                return Err(CommitError::Interrupted("writer::after_outbox"));
            }
            return Ok(outboxed);
        }
        Ok(self.store.mark_outbox_published_and_committed(key, id, publication).await)
    }
}

/// `Some(argument)` when the `writer::after_reserve` failpoint fires (tests: stop a send once
/// reserved, before its record; `return(abort)` kills the process like `kill -9`). Its other
/// actions (`sleep`, `panic`) act before the reservation. Never in release builds.
fn stop_after_reserve() -> Option<Option<String>> {
    fail::fail_point!("writer::after_reserve", Some);
    None
}

/// `Some(argument)` when the `writer::after_outbox` failpoint fires (tests: stop a commit at
/// OUTBOXED; `return(abort)` kills the process like `kill -9`). Never in release builds.
fn stop_after_outbox() -> Option<Option<String>> {
    fail::fail_point!("writer::after_outbox", Some);
    None
}

/// Decrements the in-flight gauge however the commit ends.
struct InFlight;

impl Drop for InFlight {
    fn drop(&mut self) {
        emit(InFlightChanged(false));
    }
}
