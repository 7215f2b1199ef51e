//! The unarchived tail of `qim.messages.v1`: the records past the archiver's committed offsets,
//! which Redis may have lost and the archive does not hold yet.
//!
//! A conversation revalidated after Redis lost state needs every record of it that was
//! published before the loss. The archive holds those below the archiver's committed offsets;
//! the rest are here. A scan reads, in every partition, from the archiver group's committed
//! offset (the beginning when it has none) to the end the partition had when the scan began,
//! so a scan that *began* after a caller asked covers everything published before it asked.
//! Concurrent callers share scans: a caller takes the newest finished scan if it began after
//! the caller asked, else waits for (or runs) the next one. Normally the tail is a few seconds
//! of records; it grows only while the archiver is behind, and a scan refuses to hold more than
//! [`MAX_TAIL_RECORDS`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use qim_runtime::kafka::messages::decode;
use qim_store::ids::{ConversationId, TenantId};
use qim_store::message::{Publication, PublishedRecord};
use qim_store::StoreError;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};

/// Longest wait for one poll, metadata or offsets request while scanning.
const SCAN_TIMEOUT: Duration = Duration::from_secs(10);

/// A scan holding more records than this fails: the archiver is far behind, and restoring from
/// the topic would hold the whole backlog in memory.
pub const MAX_TAIL_RECORDS: usize = 2_000_000;

/// How long a finished scan is kept for the callers that waited for it (they take it within
/// moments; a scan is of no use to callers that ask later, and may be large).
const KEEP_SCAN: Duration = Duration::from_secs(30);

/// One finished scan: the tail's records by conversation, and when the scan began.
pub struct Tail {
    began: Instant,
    records: HashMap<(TenantId, ConversationId), Vec<PublishedRecord>>,
    /// Records read in all.
    pub scanned: usize,
}

impl Tail {
    /// The tail's records of one conversation.
    pub fn of(&self, tenant: TenantId, conversation: ConversationId) -> &[PublishedRecord] {
        self.records.get(&(tenant, conversation)).map_or(&[], Vec::as_slice)
    }
}

/// Scans the tail on demand, sharing scans between callers (see the module docs).
pub struct TailScanner {
    brokers: String,
    topic: String,
    archiver_group: String,
    /// The newest scan, for [`KEEP_SCAN`].
    latest: Arc<Mutex<Option<Arc<Tail>>>>,
    scanning: tokio::sync::Mutex<()>,
}

impl TailScanner {
    /// A scanner of `topic` at `brokers`, whose archive ends at `archiver_group`'s committed
    /// offsets.
    pub fn new(brokers: &str, topic: &str, archiver_group: &str) -> Self {
        Self {
            brokers: brokers.to_owned(),
            topic: topic.to_owned(),
            archiver_group: archiver_group.to_owned(),
            latest: Arc::default(),
            scanning: tokio::sync::Mutex::new(()),
        }
    }

    fn newest_since(&self, asked: Instant) -> Option<Arc<Tail>> {
        self.latest.lock().unwrap_or_else(PoisonError::into_inner).clone().filter(|t| t.began > asked)
    }

    /// A scan that began after `asked`.
    pub async fn tail_since(&self, asked: Instant) -> Result<Arc<Tail>, StoreError> {
        if let Some(tail) = self.newest_since(asked) {
            return Ok(tail);
        }
        let _one_at_a_time = self.scanning.lock().await;
        if let Some(tail) = self.newest_since(asked) {
            return Ok(tail);
        }
        let (brokers, topic, group) = (self.brokers.clone(), self.topic.clone(), self.archiver_group.clone());
        let began = Instant::now();
        let (records, scanned) = tokio::task::spawn_blocking(move || scan(&brokers, &topic, &group))
            .await
            .map_err(|e| StoreError::InvariantViolation(format!("the tail scan task failed: {e}")))?
            .map_err(|why| StoreError::Unavailable {
                message: format!("reading the unarchived tail of {}: {why}", self.topic),
                source: None,
            })?;
        tracing::info!(topic = %self.topic, scanned, conversations = records.len(), took_ms = began.elapsed().as_millis() as u64, "unarchived tail scanned");
        let tail = Arc::new(Tail { began, records, scanned });
        *self.latest.lock().unwrap_or_else(PoisonError::into_inner) = Some(tail.clone());
        let latest = Arc::clone(&self.latest);
        tokio::spawn(async move {
            tokio::time::sleep(KEEP_SCAN).await;
            let mut latest = latest.lock().unwrap_or_else(PoisonError::into_inner);
            if latest.as_ref().is_some_and(|t| t.began == began) {
                *latest = None;
            }
        });
        Ok(tail)
    }
}

type ByConversation = HashMap<(TenantId, ConversationId), Vec<PublishedRecord>>;

/// Reads every partition from the archiver's committed offset to its current end.
fn scan(brokers: &str, topic: &str, archiver_group: &str) -> Result<(ByConversation, usize), String> {
    let reader: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", "qim-writer-tail")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "false")
        .create()
        .map_err(|e| format!("creating a consumer: {e}"))?;
    let partitions = qim_runtime::kafka::partition_ids(reader.client(), topic, SCAN_TIMEOUT)?;
    let committed = archived_through(brokers, topic, archiver_group, &partitions)?;
    let mut remaining = HashMap::new();
    let mut assignment = TopicPartitionList::new();
    for p in partitions {
        let (low, high) =
            reader.fetch_watermarks(topic, p, SCAN_TIMEOUT).map_err(|e| format!("watermarks of {topic}/{p}: {e}"))?;
        let start = committed.get(&p).copied().unwrap_or(low).max(low);
        if high > start {
            remaining.insert(p, high);
            assignment.add_partition_offset(topic, p, Offset::Offset(start)).map_err(|e| e.to_string())?;
        }
    }
    let mut out: ByConversation = HashMap::new();
    let mut scanned = 0usize;
    if !remaining.is_empty() {
        reader.assign(&assignment).map_err(|e| format!("assigning {topic}: {e}"))?;
    }
    while !remaining.is_empty() {
        let Some(message) = reader.poll(SCAN_TIMEOUT) else {
            return Err(format!("no progress reading {topic} within {SCAN_TIMEOUT:?}"));
        };
        let message = message.map_err(|e| format!("reading {topic}: {e}"))?;
        match decode(&message) {
            Ok(record) => {
                scanned += 1;
                if scanned > MAX_TAIL_RECORDS {
                    return Err(format!(
                        "more than {MAX_TAIL_RECORDS} records are not archived yet (is the archiver group {archiver_group} running?)"
                    ));
                }
                let publication = Publication { partition: message.partition(), offset: message.offset() };
                out.entry((record.tenant, record.conversation))
                    .or_default()
                    .push(PublishedRecord { record, publication });
            }
            // The archiver dead-letters these; nothing of them can be restored.
            Err(e) => {
                tracing::warn!(partition = message.partition(), offset = message.offset(), error = %e, "undecodable record in the unarchived tail skipped")
            }
        }
        if remaining.get(&message.partition()).is_some_and(|high| message.offset() + 1 >= *high) {
            remaining.remove(&message.partition());
        }
    }
    Ok((out, scanned))
}

/// The archiver group's committed offsets (the next record each partition would archive).
/// Read with a consumer that carries the group's id but never joins it, assigns or commits.
fn archived_through(brokers: &str, topic: &str, group: &str, partitions: &[i32]) -> Result<HashMap<i32, i64>, String> {
    let probe: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .create()
        .map_err(|e| format!("creating an offsets probe: {e}"))?;
    let mut wanted = TopicPartitionList::new();
    for p in partitions {
        wanted.add_partition(topic, *p);
    }
    let committed = probe
        .committed_offsets(wanted, SCAN_TIMEOUT)
        .map_err(|e| format!("committed offsets of group {group}: {e}"))?;
    Ok(committed
        .elements()
        .iter()
        .filter_map(|e| match e.offset() {
            Offset::Offset(o) => Some((e.partition(), o)),
            _ => None,
        })
        .collect())
}
