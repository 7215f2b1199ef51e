//! The store steps of a shard pipeline, each one task: begin a batch of records, write a batch of
//! chunks, advance a page of lane watermarks, collect old dispatches. Failures are retried here
//! (see [`crate::retry`]); a step returns only when its effect is durable, refused, or abandoned
//! because its partition was revoked (or shutdown gave up waiting).

use std::sync::Arc;
use std::time::{Duration, Instant};

use qim_runtime::events::emit;
use qim_store::mailbox::{
    ChunkId, DispatchManifest, DispatchReceipt, LaneId, LaneWatermark, ShardEpoch, ShardFence, ShardId,
};
use qim_store::topic::decode_dispatch;
use qim_store::{ChunkWrite, DispatchBegin, ErrorKind, MailboxStore, StoreError, StoreResult};
use rdkafka::consumer::StreamConsumer;
use tokio_util::sync::CancellationToken;

use super::marks::Written;
use crate::config::KafkaConfig;
use qim_runtime::kafka::consumer::GroupContext;

use crate::kafka::{dead_letter, AckedProducer, Refused};

use crate::events::{ChunksWritten, DispatchBegun, DispatchRefused};
use crate::retry::{never, retry_store};

/// What every shard pipeline of one worker shares.
pub struct ShardContext {
    /// Mailbox state.
    pub store: Arc<dyn MailboxStore>,
    /// For dead letters.
    pub producer: AckedProducer,
    /// For storing offsets.
    pub consumer: Arc<StreamConsumer<GroupContext>>,
    /// Topic names.
    pub kafka: KafkaConfig,
    /// The epoch of every seq issued.
    pub epoch: ShardEpoch,
    /// Chunks in flight per shard.
    pub chunks_in_flight: usize,
    /// How long completed dispatches are remembered after they were last seen.
    pub keep: Duration,
    /// How often lane watermarks advance (one page of completed records per lane each time).
    pub advance_every: Duration,
}

/// One dispatch record as received.
#[derive(Debug)]
pub struct Record {
    /// Its offset in the shard's partition.
    pub offset: u64,
    /// Key bytes.
    pub key: Option<Vec<u8>>,
    /// Value bytes.
    pub value: Option<Vec<u8>>,
    /// Headers, kept if the record is dead-lettered.
    pub headers: Vec<(String, Option<Vec<u8>>)>,
}

/// The outcome of beginning a record.
pub enum Begun {
    /// Refused and dead-lettered: not a source.
    Refused,
    /// Cancelled before its effect was durable.
    Abandoned,
    /// The store lost state since the pipeline took the shard over (its fence broke).
    StateLost,
    /// Recorded by the store.
    Dispatch {
        /// The canonical receipt (the first observation's seq).
        receipt: DispatchReceipt,
        /// The frozen manifest.
        manifest: Arc<DispatchManifest>,
        /// For a duplicate: the chunks already durably complete.
        completed: Option<Vec<ChunkId>>,
    },
}

/// Decodes and begins `records` of the fenced shard in one store call, in log order: a first
/// observation fixes the seq, a duplicate reuses the first receipt (and reports which chunks are
/// done), a conflicting or undecodable record is dead-lettered. One outcome per record, in order.
/// The records must not share a dispatch id (a duplicate is begun after its first observation
/// was answered).
pub async fn begin(
    ctx: Arc<ShardContext>,
    fence: Arc<ShardFence>,
    records: &[Record],
    cancel: CancellationToken,
) -> Vec<Begun> {
    let shard = fence.shard;
    let partition = i32::from(shard.0);
    let decoded: Vec<_> = records
        .iter()
        .map(|r| decode_dispatch(r.key.as_deref(), r.value.as_deref(), partition).map(Arc::new))
        .collect();
    let (manifests, offsets): (Vec<Arc<DispatchManifest>>, Vec<u64>) =
        decoded.iter().zip(records).filter_map(|(m, r)| m.as_ref().ok().map(|m| (Arc::clone(m), r.offset))).unzip();
    let begins: Vec<DispatchBegin<'_>> = manifests
        .iter()
        .zip(&offsets)
        .map(|(manifest, &observed_offset)| DispatchBegin { manifest, observed_offset })
        .collect();
    let refusal = |k: ErrorKind| matches!(k, ErrorKind::DispatchConflict | ErrorKind::InvalidInput);
    let begun = retry_store(
        "begin_dispatch",
        &cancel,
        |k| k == ErrorKind::StateLost,
        || async {
            let mut answers = ctx.store.begin_dispatches_fenced(&fence, ctx.epoch, &begins).await?;
            // A record's own failure that is not a refusal (a corrupt row) is retried with the call:
            // beginning the others again is harmless.
            let retried = answers.iter().position(|a| matches!(a, Err(e) if !refusal(e.kind())));
            if let Some(Err(e)) = retried.map(|i| answers.swap_remove(i)) {
                return Err(e);
            }
            Ok(answers)
        },
    )
    .await;
    let answers = match begun {
        None => return records.iter().map(|_| Begun::Abandoned).collect(),
        Some(Err(_)) => return records.iter().map(|_| Begun::StateLost).collect(),
        Some(Ok(answers)) => answers,
    };
    crate::failpoint::crash_point("dispatcher::worker_after_begin");
    let mut answers = answers.into_iter().zip(manifests);
    let mut outcomes = Vec::with_capacity(records.len());
    for (record, decoded) in records.iter().zip(decoded) {
        let outcome = match decoded {
            Err(e) => {
                tracing::warn!(shard = shard.0, offset = record.offset, error = %e, "undecodable dispatch record");
                refuse(&ctx, shard, record, (e.reason(), &e.to_string()), "invalid", &cancel).await
            }
            Ok(_) => match answers.next() {
                Some((Ok(receipt), manifest)) => begun_one(&ctx, record, receipt, manifest, &cancel).await,
                Some((Err(e), _)) => {
                    let outcome = if e.kind() == ErrorKind::DispatchConflict { "conflict" } else { "invalid" };
                    tracing::error!(shard = shard.0, offset = record.offset, error = %e, "dispatch record refused");
                    refuse(&ctx, shard, record, (e.kind().as_str(), &e.to_string()), outcome, &cancel).await
                }
                None => {
                    tracing::error!(
                        shard = shard.0,
                        offset = record.offset,
                        "the store answered fewer begins than asked"
                    );
                    Begun::Abandoned
                }
            },
        };
        outcomes.push(outcome);
    }
    outcomes
}

/// A begun record: a first observation as is, a duplicate with the chunks already done.
async fn begun_one(
    ctx: &ShardContext,
    record: &Record,
    receipt: DispatchReceipt,
    manifest: Arc<DispatchManifest>,
    cancel: &CancellationToken,
) -> Begun {
    let duplicate_of = receipt.duplicate.then_some(receipt.canonical_offset);
    emit(DispatchBegun { shard: receipt.id.shard, offset: record.offset, duplicate_of });
    if !receipt.duplicate {
        return Begun::Dispatch { receipt, manifest, completed: None };
    }
    let progress = retry_store("dispatch_progress", cancel, never, || ctx.store.dispatch_progress(receipt.id)).await;
    match progress {
        Some(Ok(p)) => {
            Begun::Dispatch { receipt, manifest, completed: Some(p.map(|p| p.completed).unwrap_or_default()) }
        }
        _ => Begun::Abandoned,
    }
}

async fn refuse(
    ctx: &ShardContext,
    shard: ShardId,
    record: &Record,
    (reason, detail): (&str, &str),
    outcome: &'static str,
    cancel: &CancellationToken,
) -> Begun {
    let refused = Refused {
        topic: &ctx.kafka.dispatch_topic,
        partition: i32::from(shard.0),
        offset: i64::try_from(record.offset).unwrap_or(i64::MAX),
        key: record.key.as_deref(),
        value: record.value.as_deref(),
        headers: &record.headers,
        reason,
        detail,
    };
    if dead_letter(&ctx.producer, &ctx.kafka.dlq_topic, refused, cancel).await {
        emit(DispatchRefused { outcome });
        Begun::Refused
    } else {
        Begun::Abandoned
    }
}

/// One chunk to write: the recipients of `chunk` of the record at `offset`.
#[derive(Clone)]
pub struct ChunkJob {
    /// The record's offset (the slot it completes).
    pub offset: u64,
    /// The receipt to write under.
    pub receipt: DispatchReceipt,
    /// The manifest.
    pub manifest: Arc<DispatchManifest>,
    /// Which chunk.
    pub chunk: ChunkId,
    /// How many entries it writes.
    pub entries: usize,
}

/// A chunk batch's end.
pub struct ChunksDone {
    /// The lane the chunks are of.
    pub lane: LaneId,
    /// Every chunk of the batch.
    pub chunks: Vec<Written>,
    /// `true` when all were written (their completion is still to be marked); `false` when
    /// abandoned.
    pub written: bool,
    /// The store no longer knows a dispatch of the batch (`NotFound`): it lost its state.
    pub lost_dispatch: bool,
}

/// Writes the entries of a batch of chunks of one lane of the fenced shard (one store call). Their
/// completion is marked by the shard's next [`super::marks::mark_chunks`] call.
pub async fn write_chunks(
    store: Arc<dyn MailboxStore>,
    lane: LaneId,
    jobs: Vec<ChunkJob>,
    cancel: CancellationToken,
) -> ChunksDone {
    let started = Instant::now();
    let chunks: Vec<Written> = jobs.iter().map(|j| (j.offset, j.receipt.id, j.chunk)).collect();
    let writes: Vec<ChunkWrite<'_>> =
        jobs.iter().map(|j| ChunkWrite { receipt: &j.receipt, manifest: &j.manifest, chunk: j.chunk }).collect();
    // A dispatch the store does not know (any more) was begun here: the store lost its state,
    // and retrying can not bring it back; the pipeline reads the log again.
    let lost = |k: ErrorKind| k == ErrorKind::NotFound;
    let written = retry_store("append_chunks", &cancel, lost, || store.append_chunks(&writes)).await;
    let Some(Ok(entries)) = written else {
        let lost_dispatch = matches!(written, Some(Err(e)) if lost(e.kind()));
        return ChunksDone { lane, chunks, written: false, lost_dispatch };
    };
    crate::failpoint::crash_point("dispatcher::worker_after_chunk_write");
    emit(ChunksWritten { entries, chunks: chunks.len(), elapsed: started.elapsed() });
    ChunksDone { lane, chunks, written: true, lost_dispatch: false }
}

/// Advances lanes of the fenced shard to their targets in one store call (one attempt; the next
/// page retries what failed).
pub async fn advance(
    store: Arc<dyn MailboxStore>,
    fence: Arc<ShardFence>,
    targets: Vec<(LaneId, u64)>,
) -> Vec<(LaneId, StoreResult<LaneWatermark>)> {
    let mut advanced = store.advance_watermarks_fenced(&fence, &targets).await.into_iter();
    crate::failpoint::crash_point("dispatcher::worker_after_advance");
    // Every lane gets an answer, so none is left waiting for one.
    let missing = || Err(StoreError::InvariantViolation("advance_watermarks answered fewer results than lanes".into()));
    targets.into_iter().map(|(lane, _)| (lane, advanced.next().unwrap_or_else(missing))).collect()
}

/// Reads every lane's watermark of `shard` (where an earlier owner left them).
pub async fn read_watermarks(store: Arc<dyn MailboxStore>, shard: ShardId) -> StoreResult<Vec<LaneWatermark>> {
    let mut out = Vec::with_capacity(usize::from(qim_store::mailbox::LANES));
    for lane in LaneId::all() {
        out.push(store.lane_watermark(shard, lane).await?);
    }
    Ok(out)
}
