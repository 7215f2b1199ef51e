//! Re-seeding the Redis seq counters from durable evidence (DESIGN invariant 7).
//!
//! When Redis lost state (or was never seeded) the store refuses to issue seqs. The evidence of
//! every acknowledged seq is in `qim.messages.v1`: a commit is acknowledged only after its
//! record was published. [`Reseeder::ensure_seeded`] reads the topic from the beginning to the
//! high watermarks taken at the start, raises each conversation's counter to the highest seq
//! seen, then writes the seed markers (see `qim_store::redis::seeding`). Concurrent callers
//! share one pass.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use metrics::counter;
use qim_store::ids::{ConversationId, ConversationSeq, TenantId};
use qim_store::redis::{RedisMessageStore, SeqEvidence};
use qim_store::topic::{decode_message, HEADER_MESSAGE_ID, HEADER_SCHEMA};
use qim_store::StoreError;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::{Offset, TopicPartitionList};
use tokio::sync::Mutex;

use crate::metrics::RESEEDS;

/// Longest wait for one poll or metadata request while scanning.
const SCAN_TIMEOUT: Duration = Duration::from_secs(10);

/// Re-seeds one Redis store's counters from one topic; one pass at a time.
pub struct Reseeder {
    store: RedisMessageStore,
    brokers: String,
    topic: String,
    running: Mutex<()>,
}

impl Reseeder {
    /// A reseeder for `store` reading evidence from `topic` at `brokers`.
    pub fn new(store: RedisMessageStore, brokers: &str, topic: &str) -> Arc<Self> {
        Arc::new(Self { store, brokers: brokers.to_owned(), topic: topic.to_owned(), running: Mutex::new(()) })
    }

    /// Re-seeds if any slot lacks its seed marker; returns how many conversations the evidence
    /// named (0 when nothing was needed).
    pub async fn ensure_seeded(&self) -> Result<usize, StoreError> {
        let _one_at_a_time = self.running.lock().await;
        if self.store.missing_seed_markers().await? == 0 {
            return Ok(0);
        }
        let (brokers, topic) = (self.brokers.clone(), self.topic.clone());
        let evidence = tokio::task::spawn_blocking(move || scan_topic(&brokers, &topic))
            .await
            .map_err(|e| StoreError::InvariantViolation(format!("evidence scan task failed: {e}")))?
            .map_err(|why| StoreError::Unavailable { message: format!("reading seq evidence: {why}"), source: None })?;
        self.store.reseed(&evidence).await?;
        counter!(RESEEDS).increment(1);
        tracing::info!(conversations = evidence.len(), topic = %self.topic, "seq counters re-seeded");
        Ok(evidence.len())
    }
}

/// The highest seq of every conversation in `topic`, from the beginning to the current end.
fn scan_topic(brokers: &str, topic: &str) -> Result<Vec<SeqEvidence>, String> {
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
        return Err(format!("topic {topic} has no partitions (does it exist?)"));
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
    let mut undecodable = 0u64;
    if !remaining.is_empty() {
        consumer.assign(&assignment).map_err(|e| format!("assigning {topic}: {e}"))?;
    }
    while !remaining.is_empty() {
        let Some(message) = consumer.poll(SCAN_TIMEOUT) else {
            return Err(format!("no progress reading {topic} within {SCAN_TIMEOUT:?}"));
        };
        let message = message.map_err(|e| format!("reading {topic}: {e}"))?;
        let header =
            |name: &str| message.headers().and_then(|h| h.iter().find(|x| x.key == name).and_then(|x| x.value));
        match decode_message(message.key(), message.payload(), header(HEADER_SCHEMA), header(HEADER_MESSAGE_ID)) {
            Ok(r) => {
                let seq = max.entry((r.tenant, r.conversation)).or_default();
                *seq = (*seq).max(r.seq.0);
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
    if undecodable > 0 {
        tracing::warn!(undecodable, %topic, "re-seed evidence skipped undecodable records");
    }
    Ok(max
        .into_iter()
        .map(|((tenant, conversation), seq)| SeqEvidence { tenant, conversation, max_seq: ConversationSeq(seq) })
        .collect())
}
