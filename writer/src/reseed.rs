//! Re-seeding the Redis seq counters from durable evidence (DESIGN invariant 7).
//!
//! When Redis lost state (or was never seeded) the store refuses to issue seqs. The evidence of
//! every acknowledged seq is in `qim.messages.v1`: a commit is acknowledged only after its
//! record was published. [`Reseeder::ensure_seeded`] reads the topic from the beginning to the
//! high watermarks taken at the start, writes the records of the hot window back into the hot
//! tier as it goes, with the COMMITTED commits of the last two hours (so a client's retry gets
//! its first answer; `RedisMessageStore::restore_records`), raises each conversation's counter
//! to the highest seq seen, then writes the seed markers (see `qim_store::redis::seeding`).
//! Concurrent callers share one pass.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use metrics::counter;
use qim_store::ids::{ConversationId, ConversationSeq, TenantId, UnixMillis, MILLIS_PER_DAY};
use qim_store::message::Publication;
use qim_store::redis::{PublishedRecord, RedisMessageStore, RestoreReport, SeqEvidence};
use qim_store::topic::{decode_message, HEADER_MESSAGE_ID, HEADER_SCHEMA};
use qim_store::StoreError;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::{Offset, TopicPartitionList};
use tokio::sync::Mutex;

use crate::metrics::{HOT_TIER_RESTORED, RESEEDS};

/// Longest wait for one poll or metadata request while scanning.
const SCAN_TIMEOUT: Duration = Duration::from_secs(10);

/// Records written back into the hot tier per batch (two Redis round trips each).
const RESTORE_BATCH: usize = 512;

/// Re-seeds one Redis store's counters from one topic, and rebuilds its hot tier from it; one
/// pass at a time.
pub struct Reseeder {
    store: RedisMessageStore,
    brokers: String,
    topic: String,
    hot_window_days: u32,
    running: Mutex<()>,
}

impl Reseeder {
    /// A reseeder for `store` reading evidence from `topic` at `brokers`; it restores the
    /// records created within the last `hot_window_days`.
    pub fn new(store: RedisMessageStore, brokers: &str, topic: &str, hot_window_days: u32) -> Arc<Self> {
        Arc::new(Self {
            store,
            brokers: brokers.to_owned(),
            topic: topic.to_owned(),
            hot_window_days,
            running: Mutex::new(()),
        })
    }

    /// Re-seeds if any slot lacks its seed marker; returns how many conversations the evidence
    /// named (0 when nothing was needed).
    pub async fn ensure_seeded(&self) -> Result<usize, StoreError> {
        let _one_at_a_time = self.running.lock().await;
        if self.store.missing_seed_markers().await? == 0 {
            return Ok(0);
        }
        let (brokers, topic, store) = (self.brokers.clone(), self.topic.clone(), self.store.clone());
        let window_start = UnixMillis(UnixMillis::now().0 - i64::from(self.hot_window_days) * MILLIS_PER_DAY);
        let runtime = tokio::runtime::Handle::current();
        let (evidence, restored) = tokio::task::spawn_blocking(move || {
            let mut report = RestoreReport::default();
            let evidence = scan_topic(&brokers, &topic, |records| {
                let batch = runtime.block_on(store.restore_records(&records, window_start))?;
                report.add(batch);
                Ok(())
            })?;
            Ok::<_, ScanError>((evidence, report))
        })
        .await
        .map_err(|e| StoreError::InvariantViolation(format!("evidence scan task failed: {e}")))?
        .map_err(|e| match e {
            ScanError::Kafka(why) => {
                StoreError::Unavailable { message: format!("reading seq evidence: {why}"), source: None }
            }
            ScanError::Store(e) => e,
        })?;
        for reason in &restored.conflicts {
            tracing::error!(%reason, "a record in the topic conflicts with the hot tier; left as it was");
        }
        counter!(HOT_TIER_RESTORED).increment(restored.restored as u64);
        tracing::info!(
            restored = restored.restored,
            present = restored.present,
            removed = restored.removed,
            outside_window = restored.outside_window,
            expired = restored.expired,
            conflicts = restored.conflicts.len(),
            commits_restored = restored.commits_restored,
            commits_present = restored.commits_present,
            "hot tier rebuilt from the topic"
        );
        self.store.reseed(&evidence).await?;
        counter!(RESEEDS).increment(1);
        tracing::info!(conversations = evidence.len(), topic = %self.topic, "seq counters re-seeded");
        Ok(evidence.len())
    }
}

/// Why a scan stopped.
#[derive(Debug, thiserror::Error)]
enum ScanError {
    /// Reading the topic failed.
    #[error("{0}")]
    Kafka(String),
    /// Restoring records failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<String> for ScanError {
    fn from(why: String) -> Self {
        ScanError::Kafka(why)
    }
}

/// The highest seq of every conversation in `topic`, from the beginning to the current end;
/// every decoded record is also handed to `restore`, in batches of [`RESTORE_BATCH`].
fn scan_topic(
    brokers: &str,
    topic: &str,
    mut restore: impl FnMut(Vec<PublishedRecord>) -> Result<(), StoreError>,
) -> Result<Vec<SeqEvidence>, ScanError> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", "qim-writer-reseed")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "false")
        .create()
        .map_err(|e| format!("creating a consumer: {e}"))?;
    let md = consumer.fetch_metadata(Some(topic), SCAN_TIMEOUT).map_err(|e| format!("metadata of {topic}: {e}"))?;
    let partitions: Vec<i32> =
        md.topics().iter().flat_map(|t| t.partitions().iter().map(|p| p.id())).collect::<Vec<_>>();
    if partitions.is_empty() {
        return Err(format!("topic {topic} has no partitions (does it exist?)").into());
    }
    let mut remaining = HashMap::new();
    let mut assignment = TopicPartitionList::new();
    for p in partitions {
        let (low, high) =
            consumer.fetch_watermarks(topic, p, SCAN_TIMEOUT).map_err(|e| format!("watermarks of {topic}/{p}: {e}"))?;
        if high > low {
            remaining.insert(p, high);
            assignment.add_partition_offset(topic, p, Offset::Beginning).map_err(|e| e.to_string())?;
        }
    }
    let mut max: HashMap<(TenantId, ConversationId), u64> = HashMap::new();
    let mut pending = Vec::with_capacity(RESTORE_BATCH);
    let mut undecodable = 0u64;
    if !remaining.is_empty() {
        consumer.assign(&assignment).map_err(|e| format!("assigning {topic}: {e}"))?;
    }
    while !remaining.is_empty() {
        let Some(message) = consumer.poll(SCAN_TIMEOUT) else {
            return Err(format!("no progress reading {topic} within {SCAN_TIMEOUT:?}").into());
        };
        let message = message.map_err(|e| format!("reading {topic}: {e}"))?;
        let header =
            |name: &str| message.headers().and_then(|h| h.iter().find(|x| x.key == name).and_then(|x| x.value));
        match decode_message(message.key(), message.payload(), header(HEADER_SCHEMA), header(HEADER_MESSAGE_ID)) {
            Ok(r) => {
                let seq = max.entry((r.tenant, r.conversation)).or_default();
                *seq = (*seq).max(r.seq.0);
                let publication = Publication { partition: message.partition(), offset: message.offset() };
                pending.push(PublishedRecord { record: r, publication });
                if pending.len() >= RESTORE_BATCH {
                    restore(std::mem::take(&mut pending))?;
                }
            }
            Err(e) => {
                undecodable += 1;
                tracing::warn!(partition = message.partition(), offset = message.offset(), error = %e, "undecodable record skipped while re-seeding");
            }
        }
        if remaining.get(&message.partition()).is_some_and(|high| message.offset() + 1 >= *high) {
            remaining.remove(&message.partition());
        }
    }
    if !pending.is_empty() {
        restore(pending)?;
    }
    if undecodable > 0 {
        tracing::warn!(undecodable, %topic, "re-seed evidence skipped undecodable records");
    }
    Ok(max
        .into_iter()
        .map(|((tenant, conversation), seq)| SeqEvidence { tenant, conversation, max_seq: ConversationSeq(seq) })
        .collect())
}
