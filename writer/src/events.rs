//! What the writer reports, one type per event: each writes its log line and updates its metrics
//! (names in [`crate::metrics`]) in one place. Emitted with [`qim_runtime::events::emit`].

use std::time::Duration;

use metrics::{counter, gauge, histogram};
use qim_runtime::events::InternalEvent;
use qim_store::error::StoreError;
use qim_store::ids::MessageId;
use qim_store::redis::WriterId;

use crate::metrics::{
    AUX_COLLECTED, COMMITS, COMMIT_STAGE_SECONDS, EXPIRY_DRAINED, IN_FLIGHT, KAFKA_DELIVERY_ERRORS, RECOVERY_ACTIONS,
    RECOVERY_BACKLOG, SENDS_JOINED, WRITER_ID_RENEWALS,
};

/// A send was answered.
pub struct SendAnswered {
    /// `committed`, `replayed` (an identical retry of a finished commit), or the error's outcome.
    pub outcome: &'static str,
    /// From the request to the answer, for answered commits (`None` for errors).
    pub elapsed: Option<Duration>,
}

impl InternalEvent for SendAnswered {
    fn emit(self) {
        counter!(COMMITS, "outcome" => self.outcome).increment(1);
        if let Some(elapsed) = self.elapsed {
            histogram!(COMMIT_STAGE_SECONDS, "stage" => "total").record(elapsed);
        }
    }
}

/// A commit stage finished (`reserve_and_record`, `reserve`, `record`, `publish`, `outbox`,
/// `commit`).
pub struct StageDone {
    /// The stage.
    pub stage: &'static str,
    /// How long it took.
    pub elapsed: Duration,
}

impl InternalEvent for StageDone {
    fn emit(self) {
        histogram!(COMMIT_STAGE_SECONDS, "stage" => self.stage).record(self.elapsed);
    }
}

/// A commit took (`true`) or gave back (`false`) an in-flight permit.
pub struct InFlightChanged(pub bool);

impl InternalEvent for InFlightChanged {
    fn emit(self) {
        if self.0 {
            gauge!(IN_FLIGHT).increment(1.0);
        } else {
            gauge!(IN_FLIGHT).decrement(1.0);
        }
    }
}

/// A send waited for another send of its request key to land (see [`crate::flights`]).
pub struct SendJoined;

impl InternalEvent for SendJoined {
    fn emit(self) {
        counter!(SENDS_JOINED).increment(1);
    }
}

/// A Kafka delivery failed or timed out (the send answers an error; recovery finishes it).
pub struct DeliveryFailed;

impl InternalEvent for DeliveryFailed {
    fn emit(self) {
        counter!(KAFKA_DELIVERY_ERRORS).increment(1);
    }
}

/// The recovery loop drove a left-behind commit (or failed to; the next pass tries again).
pub struct CommitRecovered<'a> {
    /// The commit's message id.
    pub message_id: MessageId,
    /// The state it was found in.
    pub from_state: &'static str,
    /// What failed, if it did.
    pub error: Option<&'a dyn std::fmt::Display>,
}

impl InternalEvent for CommitRecovered<'_> {
    fn emit(self) {
        let Self { message_id, from_state, error } = self;
        match error {
            None => {
                counter!(RECOVERY_ACTIONS, "action" => "completed").increment(1);
                tracing::info!(%message_id, from_state, "recovered a left-behind commit");
            }
            Some(error) => {
                counter!(RECOVERY_ACTIONS, "action" => "failed").increment(1);
                tracing::warn!(%message_id, from_state, %error, "recovering a commit failed, retrying next pass");
            }
        }
    }
}

/// A recovery pass ended: of the commits it found past the grace, `left` are still unfinished.
pub struct RecoveryPassDone {
    /// Commits the pass found due.
    pub found: usize,
    /// Of those, the ones it could not drive to COMMITTED.
    pub left: usize,
}

impl InternalEvent for RecoveryPassDone {
    fn emit(self) {
        gauge!(RECOVERY_BACKLOG).set(self.left as f64);
        if self.found > 0 {
            tracing::debug!(found = self.found, left = self.left, "recovery pass done");
        }
    }
}

/// Auxiliary facts of committed commits were collected.
pub struct AuxCollected {
    /// How many.
    pub removed: usize,
}

impl InternalEvent for AuxCollected {
    fn emit(self) {
        counter!(AUX_COLLECTED).increment(self.removed as u64);
    }
}

/// Expired history was drained from the hot tier.
pub struct ExpiryDrained {
    /// Records removed.
    pub removed: usize,
    /// Index entries whose record was already gone.
    pub orphans_cleaned: usize,
}

impl InternalEvent for ExpiryDrained {
    fn emit(self) {
        counter!(EXPIRY_DRAINED).increment(self.removed as u64);
        if self.orphans_cleaned > 0 {
            tracing::warn!(orphans = self.orphans_cleaned, "expiry cleaned index entries without records");
        }
    }
}

/// A renewal of the writer-id lease ([`crate::message_ids::keep`]).
pub enum WriterIdRenewed {
    /// Extended.
    Held,
    /// The id had been lost (expired or taken while this process could not renew it); another
    /// is held now.
    Replaced {
        /// The id lost.
        lost: WriterId,
        /// The id now held.
        now: WriterId,
    },
    /// Redis did not answer; the lease runs out (and the writer is fenced) unless a later
    /// renewal lands in time.
    Failed {
        /// Why.
        error: StoreError,
    },
}

impl InternalEvent for WriterIdRenewed {
    fn emit(self) {
        let outcome = match self {
            Self::Held => "held",
            Self::Replaced { lost, now } => {
                tracing::warn!(%lost, %now, "writer id lease was lost; holding another id now");
                "replaced"
            }
            Self::Failed { error } => {
                tracing::warn!(%error, "renewing the writer id lease failed; retrying at the next tick");
                "failed"
            }
        };
        counter!(WRITER_ID_RENEWALS, "outcome" => outcome).increment(1);
    }
}

/// The writer-id lease was given back at shutdown (or could not be: it then runs out).
pub struct WriterIdReleased {
    /// The release's outcome.
    pub result: Result<(), StoreError>,
}

impl InternalEvent for WriterIdReleased {
    fn emit(self) {
        match self.result {
            Ok(()) => tracing::info!("writer id released"),
            Err(error) => tracing::warn!(%error, "releasing the writer id failed; it runs out on its own"),
        }
    }
}
