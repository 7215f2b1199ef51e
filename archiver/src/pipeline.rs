//! What happens to one partition batch, in order: poison to the dead-letter topic, valid
//! records into the archive (acknowledged at LOCAL_QUORUM), the records the archive refused
//! because their coordinates hold another record to the dead-letter topic too (reason
//! `conflicting_record`: DESIGN invariant 8, the archived one stays), then the archived
//! watermarks. Only when all of them are done may the caller store the batch's offset.
//!
//! Each step is idempotent and remembered in [`Progress`], so a retry after a transient failure
//! (Cassandra, Kafka or Redis unavailable) redoes only the steps not yet done, and a batch
//! retried from scratch after a crash writes the same rows again. Transient failures retry with
//! a capped exponential backoff until they succeed, the partition is revoked, or shutdown; a
//! failure that retrying can not fix (the archive refusing a record that passed the checks) is
//! fatal: the archiver stops rather than skip a record.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use qim_runtime::events::emit;
use qim_runtime::retry::Backoff;
use qim_store::ids::{ConversationId, ConversationSeq, TenantId, UnixMillis};
use qim_store::message::{MessageRecord, PublishedRecord};
use qim_store::scylla::ScyllaMessageStore;
use qim_store::SeqHighWater;
use tokio_util::sync::CancellationToken;

use crate::batch::{PartitionBatch, Poison, CONFLICTING};
use crate::dlq::DeadLetters;
use crate::failpoint::crash_point;

use crate::events::{BatchDurable, BatchStepFailed, BatchStepRecovered, RecordRefused, RecordsArchived};
use crate::watermark::Watermarks;

/// First retry pause of a batch step; doubles per attempt (with jitter).
const FIRST_BACKOFF: Duration = Duration::from_millis(200);
/// Retry pauses of a batch step stay below this (the delay doubles to half of it, plus jitter).
const MAX_BACKOFF: Duration = Duration::from_secs(10);

/// Which steps of a batch are done.
#[derive(Clone, Debug, Default)]
pub struct Progress {
    dead_lettered: bool,
    archived: bool,
    /// Records the archive refused (their coordinates hold another record), by batch index.
    refused: Vec<Poison>,
    refused_dead_lettered: bool,
    watermarked: bool,
}

/// A step that failed.
#[derive(Debug)]
pub enum Failure {
    /// Retrying may succeed.
    Transient {
        /// `dead_letter`, `archive` or `watermark`.
        step: &'static str,
        /// What went wrong.
        error: String,
    },
    /// Retrying can not succeed.
    Fatal(String),
}

/// How a batch ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Every step is done: the offset may be stored.
    Done,
    /// Given up before completion (`revoked` or `shutdown`): the offset must not be stored.
    Abandoned(&'static str),
}

/// Whether the archive is failing right now (for `/readyz`).
#[derive(Debug, Default)]
pub struct Health {
    failing: Mutex<Option<String>>,
}

impl Health {
    fn set(&self, failing: Option<String>) {
        *self.failing.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = failing;
    }

    /// `Err(why)` while a batch is retrying a transient failure.
    pub fn check(&self) -> Result<(), String> {
        match self.failing.lock().unwrap_or_else(std::sync::PoisonError::into_inner).as_ref() {
            None => Ok(()),
            Some(why) => Err(why.clone()),
        }
    }
}

/// Applies partition batches (see the module docs).
pub struct Processor {
    archive: ScyllaMessageStore,
    dead_letters: Option<Arc<DeadLetters>>,
    watermarks: Option<Arc<Watermarks>>,
    write_concurrency: usize,
    health: Arc<Health>,
    /// Whether archiving a record also raises its conversation's seq high-water mark (replay).
    raise_high_water: bool,
}

impl Processor {
    /// A processor writing to `archive`. Without `dead_letters` (replay) poison is counted and
    /// logged only; without `watermarks` (Scylla mode, no hot tier) no watermark is kept.
    pub fn new(
        archive: ScyllaMessageStore,
        dead_letters: Option<Arc<DeadLetters>>,
        watermarks: Option<Arc<Watermarks>>,
        write_concurrency: usize,
    ) -> Self {
        Self { archive, dead_letters, watermarks, write_concurrency, health: Arc::default(), raise_high_water: false }
    }

    /// Also raises each archived conversation's durable seq high-water mark to its highest
    /// archived seq: what a replay into a lost keyspace does, so the marks the writer leases
    /// from come back with the records (DESIGN invariant 7). Normal consumption needs none of
    /// it: the writer raised every mark before it issued the seqs.
    pub fn raising_high_water(mut self) -> Self {
        self.raise_high_water = true;
        self
    }

    /// The health the processor reports.
    pub fn health(&self) -> Arc<Health> {
        self.health.clone()
    }

    /// Runs the steps of `batch` not yet done in `progress`.
    pub async fn apply(&self, batch: &PartitionBatch, progress: &mut Progress) -> Result<(), Failure> {
        if !progress.dead_lettered && !batch.poison.is_empty() {
            self.dead_letter(&batch.poison).await?;
        }
        progress.dead_lettered = true;
        crash_point("archiver::after_dead_letter");
        if !progress.archived && !batch.valid.is_empty() {
            let published: Vec<PublishedRecord> = batch.valid.iter().map(|v| v.published()).collect();
            let report = match self.archive.archive_records(&published, self.write_concurrency).await {
                Ok(report) => report,
                Err(e) if e.kind().is_retryable() => {
                    return Err(Failure::Transient { step: "archive", error: e.to_string() });
                }
                Err(e) => return Err(Failure::Fatal(format!("the archive refused a checked record: {e}"))),
            };
            progress.refused = report
                .conflicts
                .into_iter()
                .map(|c| Poison {
                    incoming: batch.valid[c.index].incoming.clone(),
                    reason: CONFLICTING,
                    detail: c.detail,
                })
                .collect();
            emit(RecordsArchived { records: &batch.valid, written: report.written, now_ms: UnixMillis::now().0 });
            if self.raise_high_water {
                self.raise_marks(batch).await?;
            }
        }
        progress.archived = true;
        // Tests park a batch here (rows durable, offset not stored) to kill the process.
        crash_point("archiver::after_archive");
        if !progress.refused_dead_lettered && !progress.refused.is_empty() {
            self.dead_letter(&progress.refused).await?;
        }
        progress.refused_dead_lettered = true;
        if !progress.watermarked {
            if let Some(watermarks) = &self.watermarks {
                let refused: Vec<(i32, i64)> =
                    progress.refused.iter().map(|p| (p.incoming.partition, p.incoming.offset)).collect();
                let records: Vec<MessageRecord> = batch
                    .valid
                    .iter()
                    .filter(|v| !refused.contains(&(v.incoming.partition, v.incoming.offset)))
                    .map(|v| v.record.clone())
                    .collect();
                watermarks.observe(&records).await.map_err(|e| match e.kind().is_retryable() {
                    true => Failure::Transient { step: "watermark", error: e.to_string() },
                    false => Failure::Fatal(format!("archived watermarks: {e}")),
                })?;
            }
        }
        progress.watermarked = true;
        crash_point("archiver::after_watermark");
        Ok(())
    }

    /// Raises the high-water mark of every conversation of `batch` to its highest seq there.
    async fn raise_marks(&self, batch: &PartitionBatch) -> Result<(), Failure> {
        let mut highest: std::collections::HashMap<(TenantId, ConversationId), ConversationSeq> = Default::default();
        for v in &batch.valid {
            let seq = highest.entry((v.record.tenant, v.record.conversation)).or_insert(v.record.seq);
            *seq = (*seq).max(v.record.seq);
        }
        for ((tenant, conversation), seq) in highest {
            self.archive.raise_high_water(tenant, conversation, seq).await.map_err(|e| {
                match e.kind().is_retryable() {
                    true => Failure::Transient { step: "high_water", error: e.to_string() },
                    false => Failure::Fatal(format!("raising a seq high-water mark: {e}")),
                }
            })?;
        }
        Ok(())
    }

    /// Dead-letters `poison` (or only counts and logs it, without a dead-letter topic: replay).
    async fn dead_letter(&self, poison: &[Poison]) -> Result<(), Failure> {
        if let Some(dlq) = &self.dead_letters {
            dlq.send_all(poison).await.map_err(|error| Failure::Transient { step: "dead_letter", error })?;
        }
        for p in poison {
            emit(RecordRefused { poison: p, dead_lettered: self.dead_letters.is_some() });
        }
        Ok(())
    }

    /// Applies `batch` until done, retrying transient failures with backoff. Before each retry
    /// `still_wanted` may name a reason to give up (`revoked`); shutdown gives up too. Fatal
    /// failures are returned.
    pub async fn apply_with_retry(
        &self,
        batch: &PartitionBatch,
        still_wanted: impl Fn() -> Option<&'static str>,
        shutdown: &CancellationToken,
    ) -> Result<Outcome, String> {
        let started = Instant::now();
        let mut progress = Progress::default();
        let mut backoff = Backoff::new(FIRST_BACKOFF, MAX_BACKOFF);
        loop {
            match self.apply(batch, &mut progress).await {
                Ok(()) => break,
                Err(Failure::Fatal(why)) => return Err(why),
                Err(Failure::Transient { step, error }) => {
                    let pause = backoff.next_pause();
                    emit(BatchStepFailed { partition: batch.partition, step, error: &error, retry_in: pause });
                    self.health.set(Some(format!("{step}: {error}")));
                    if !Backoff::sleep(pause, shutdown).await {
                        return Ok(Outcome::Abandoned("shutdown"));
                    }
                    if let Some(cause) = still_wanted() {
                        return Ok(Outcome::Abandoned(cause));
                    }
                }
            }
        }
        if backoff.retried() {
            self.health.set(None);
            emit(BatchStepRecovered { partition: batch.partition });
        }
        emit(BatchDurable { elapsed: started.elapsed() });
        Ok(Outcome::Done)
    }
}
