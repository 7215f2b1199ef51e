//! Archive writes: committed records from `qim.messages.v1` into the same rows `put_record`
//! writes, so [`super::ScyllaMessageStore`]'s history reads serve them unchanged.
//!
//! Per record: `message_record` (canonical blob), `history_index` (`expires_at`) and, for
//! expiring records, `history_expiry`; whole-row `INSERT ... USING TTL` at LOCAL_QUORUM through
//! the statements `put_record` uses (prepared once, marked idempotent). The rows of one partition
//! (a conversation's seq bucket of records, a conversation's index, an hour of expiries) go as
//! unlogged single-partition batches of up to 16 rows and 32 KiB of blobs
//! ([`crate::scylla::batches`]): one mutation each, where a request per row cost the server
//! a coordinator round and a commitlog entry per row. The TTL is the time left
//! until the record's own `expires_at` (fixed at commit by the writer's `RetentionPolicy`), at
//! least 1 s: a late archive still vanishes at the original moment, an expired record is written
//! with 1 s and never resurrected, and a record that never expires (compliance hold, tenant
//! custom) gets no TTL.
//!
//! The server keeps a row's deletion moment in whole seconds: the second it executed the
//! statement plus the TTL. The TTL is therefore counted from the whole second the statement is
//! sent in, up to the expiry rounded up ([`aligned_ttl`]), and a record or index statement whose
//! acknowledgement arrives in a later second than it was sent (the server may have executed it
//! there) is sent again with fresh TTLs (a batch whole), until one is acknowledged in its own
//! second. So a row
//! vanishes in the second after its expiry, never before, however long a busy or restarting
//! server queued the statement. A server that keeps answering a second late for
//! [`TTL_SETTLE_BUDGET`] fails the batch `Unavailable` (it is retried whole), rather than leave
//! a row that outlives its expiry by however late the last answer was. Using the record's expiry rather than recomputing it keeps the blob, the
//! index entry and the hot tier in agreement (history reads check that `expires_at` matches);
//! [`archive_check`] refuses records whose expiry contradicts their class.
//!
//! A batch first reads the records already stored at its coordinates (one read per conversation
//! and seq bucket): a record whose `(tenant, conversation, seq)` already holds a *different*
//! record is refused and left out (DESIGN invariant 8: an archived message is never overwritten;
//! the caller dead-letters it), as is a second, different record for the same coordinates
//! within the batch. Then it writes every record row, then raises the `history_bucket` bound of
//! every seq bucket it touches (reads skip buckets whose bound passed), then every index and
//! expiry row (the index row carries the record's publication), so a concurrent history read
//! never meets an index entry without its record. Same values on every retry or replay: writing
//! a batch twice leaves the same rows. The check reads before it writes: two archivers writing
//! different records at one seq at the same moment could still both land; what it rules out is
//! any later record replacing an archived one.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use futures_util::stream::{self, StreamExt, TryStreamExt};

use super::archive_requests::{writes, Step, Write};
use super::buckets::{bound_of, seq_bucket};
use super::ttl::MAX_TTL_SECS;
use super::ScyllaMessageStore;
use crate::codec::{encode_record, u64_to_i64};
use crate::error::{StoreError, StoreResult};
use crate::ids::{ConversationId, TenantId, UnixMillis};
use crate::message::{MessageRecord, PublishedRecord};
use crate::retention::{RetentionClass, EPHEMERAL_MILLIS};
use crate::scylla::cql::{corrupt, unavailable};
use crate::scylla::schema::SEQ_BUCKET_SIZE;

/// How long (on the store's clock) one record or index statement is sent again while its
/// acknowledgement keeps arriving in a later whole second than it was sent (see the module
/// docs). Past it, the batch fails `Unavailable`.
pub const TTL_SETTLE_BUDGET: Duration = Duration::from_secs(30);

/// The TTL of a row that must vanish at `expires`, for a statement sent at `now`: from the
/// whole second of `now` to the expiry rounded up to a whole second; at least 1 s, at most
/// [`MAX_TTL_SECS`]. Executed within the second of `now`, the row vanishes within one second
/// after `expires`, never before.
pub fn aligned_ttl(expires: UnixMillis, now: UnixMillis) -> i32 {
    let secs = expires.0.div_euclid(1000) + i64::from(expires.0.rem_euclid(1000) != 0) - now.0.div_euclid(1000);
    i32::try_from(secs.max(1)).unwrap_or(MAX_TTL_SECS).min(MAX_TTL_SECS)
}

/// Why a record can not be archived: it would contradict the retention rules or the schema.
/// A record refused here is refused forever (a consumer dead-letters it, never retries).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ArchiveRefusal {
    /// Its `expires_at` contradicts its retention class.
    #[error("retention {class} with expires_at {expires_at:?} (created {created_at}): {why}")]
    Retention {
        /// The record's class name.
        class: &'static str,
        /// The record's expiry.
        expires_at: Option<i64>,
        /// The record's creation time.
        created_at: i64,
        /// What is wrong.
        why: &'static str,
    },
    /// A value does not fit its CQL column.
    #[error("{0}")]
    Range(String),
}

impl ArchiveRefusal {
    /// A short, stable reason for dead-letter headers and metric labels.
    pub const fn reason(&self) -> &'static str {
        match self {
            ArchiveRefusal::Retention { .. } => "bad_retention",
            ArchiveRefusal::Range(_) => "out_of_range",
        }
    }
}

/// Checks that `record` can be archived as it is:
/// - compliance hold and tenant custom never expire: `expires_at` must be absent;
/// - ephemeral records expire exactly 24 h after creation;
/// - default records carry an expiry (services always inject the retention period);
/// - seq and bucket fit a CQL `bigint`.
///
/// A default record whose expiry differs from this process's policy is accepted (its expiry
/// was fixed at commit); callers compare with their own policy to report configuration drift.
pub fn archive_check(record: &MessageRecord) -> Result<(), ArchiveRefusal> {
    let refuse = |why| ArchiveRefusal::Retention {
        class: record.retention.as_str(),
        expires_at: record.expires_at.map(|at| at.0),
        created_at: record.created_at.0,
        why,
    };
    match (record.retention, record.expires_at) {
        (RetentionClass::ComplianceHold | RetentionClass::TenantCustom, Some(_)) => {
            return Err(refuse("this class never expires"));
        }
        (RetentionClass::Ephemeral24h, at) if at != Some(record.created_at.plus_millis(EPHEMERAL_MILLIS)) => {
            return Err(refuse("ephemeral records expire 24 h after creation"));
        }
        (RetentionClass::Default, None) => return Err(refuse("default records must carry their expiry")),
        (RetentionClass::Default, Some(at)) if at <= record.created_at => {
            return Err(refuse("the expiry is not after the creation"));
        }
        _ => {}
    }
    u64_to_i64("conversation seq", record.seq.0).map_err(|e| ArchiveRefusal::Range(e.to_string()))?;
    Ok(())
}

/// One record's bound values.
pub(super) struct Row {
    pub(super) tenant: [u8; 16],
    pub(super) conversation: [u8; 16],
    pub(super) bucket: i64,
    pub(super) seq: i64,
    pub(super) blob: Vec<u8>,
    pub(super) expires_at: Option<i64>,
    pub(super) partition: i32,
    pub(super) offset: i64,
}

impl Row {
    fn new(published: &PublishedRecord) -> StoreResult<Self> {
        let record = &published.record;
        archive_check(record).map_err(|e| StoreError::InvalidInput(e.to_string()))?;
        Ok(Self {
            tenant: record.tenant.0,
            conversation: record.conversation.0,
            bucket: u64_to_i64("seq bucket", record.seq.0 / SEQ_BUCKET_SIZE)?,
            seq: u64_to_i64("conversation seq", record.seq.0)?,
            blob: encode_record(record),
            expires_at: record.expires_at.map(|at| at.0),
            partition: published.publication.partition,
            offset: published.publication.offset,
        })
    }

    /// Where the record's row lives: its partition and its clustering seq.
    pub(super) fn place(&self) -> ([u8; 16], [u8; 16], i64) {
        (self.tenant, self.conversation, self.bucket)
    }

    /// The TTL a statement sent at `now` carries (0: no TTL). Taken per statement, just before
    /// it is sent: a TTL taken earlier would keep a row alive past its expiry by however long
    /// the statement waited (slow batches, a restarting server).
    pub(super) fn ttl(&self, now: UnixMillis) -> i32 {
        self.expires_at.map_or(0, |at| aligned_ttl(UnixMillis(at), now))
    }

    pub(super) fn what(&self) -> String {
        format!("archiving seq {} of {}", self.seq, crate::ids::ConversationId(self.conversation))
    }
}

/// A record [`ScyllaMessageStore::archive_records`] refused because its coordinates hold another
/// record: refused forever (a consumer dead-letters it), the stored one left as it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArchiveConflict {
    /// The record's position in the batch.
    pub index: usize,
    /// What differs, for the dead letter and the log.
    pub detail: String,
}

/// What [`ScyllaMessageStore::archive_records`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ArchiveReport {
    /// Records written (or rewritten with the same values).
    pub written: usize,
    /// Records refused: their coordinates hold another record.
    pub conflicts: Vec<ArchiveConflict>,
}

impl ScyllaMessageStore {
    /// Writes `records` into the archive (see the module docs), with at most `concurrency`
    /// statements in flight. Returns once every row is acknowledged at LOCAL_QUORUM, with the
    /// records it refused because their coordinates hold a different record.
    ///
    /// Errors: `InvalidInput` when a record fails [`archive_check`] (nothing is written);
    /// `Unavailable` when the server did not answer a read or acknowledge a write (retry the
    /// whole batch: rows already written are rewritten with the same values).
    pub async fn archive_records(&self, records: &[PublishedRecord], concurrency: usize) -> StoreResult<ArchiveReport> {
        let concurrency = concurrency.max(1);
        let all = records.iter().map(Row::new).collect::<StoreResult<Vec<_>>>()?;
        let conflicts = self.conflicts(&all, concurrency).await?;
        let refused: std::collections::HashSet<usize> = conflicts.iter().map(|c| c.index).collect();
        let (rows, records_in): (Vec<Row>, Vec<&MessageRecord>) = all
            .into_iter()
            .zip(records)
            .enumerate()
            .filter(|(i, _)| !refused.contains(i))
            .map(|(_, (row, p))| (row, &p.record))
            .unzip();
        let written = rows.len();
        let rows = &rows;
        // Owned work items (which rows, which statement): closures over borrowed tuples would
        // make the returned future's `Send` bound higher-ranked.
        let write = |write: Write| async move { self.write_settled(rows, &write).await };
        stream::iter(writes(rows, Step::Record).into_iter().map(Ok))
            .try_for_each_concurrent(concurrency, write)
            .await?;
        // History reads only visit buckets whose bound says something may be live there
        // (`buckets.rs`): raise each touched bucket's bound to its latest expiry first.
        let mut bounds: BTreeMap<([u8; 16], [u8; 16], i64), i64> = Default::default();
        for (row, record) in rows.iter().zip(records_in) {
            let bound = bounds.entry((row.tenant, row.conversation, seq_bucket(row.seq))).or_insert(i64::MIN);
            *bound = (*bound).max(bound_of(record.expires_at));
        }
        let cover = |((tenant, conversation, bucket), bound): (([u8; 16], [u8; 16], i64), i64)| async move {
            self.cover_bucket(TenantId(tenant), ConversationId(conversation), bucket, bound).await
        };
        stream::iter(bounds.into_iter().map(Ok)).try_for_each_concurrent(concurrency, cover).await?;
        // Index (and expiry) rows only after every record row of the batch is durable.
        let rest = writes(rows, Step::Index).into_iter().chain(writes(rows, Step::Expiry));
        stream::iter(rest.map(Ok)).try_for_each_concurrent(concurrency, write).await?;
        Ok(ArchiveReport { written, conflicts })
    }

    /// The rows of `rows` whose coordinates already hold another record (one read per
    /// conversation and seq bucket), or whose coordinates an earlier row of the batch takes with
    /// another record.
    async fn conflicts(&self, rows: &[Row], concurrency: usize) -> StoreResult<Vec<ArchiveConflict>> {
        let mut places: HashMap<([u8; 16], [u8; 16], i64), Vec<i64>> = HashMap::new();
        for row in rows {
            places.entry(row.place()).or_default().push(row.seq);
        }
        let read = |(place, seqs): (([u8; 16], [u8; 16], i64), Vec<i64>)| async move {
            let (tenant, conversation, bucket) = place;
            let what = format!("reading archived records of {}", ConversationId(conversation));
            let rows = self
                .inner
                .session
                .execute_unpaged(&self.inner.st.records_at, (&tenant[..], &conversation[..], bucket, seqs))
                .await
                .map_err(|e| unavailable(what.clone(), e))?
                .into_rows_result()
                .map_err(|e| corrupt(&what, e))?;
            let found: Vec<(i64, Vec<u8>)> = rows
                .rows::<(i64, Vec<u8>)>()
                .map_err(|e| corrupt(&what, e))?
                .collect::<Result<_, _>>()
                .map_err(|e| corrupt(&what, e))?;
            Ok::<_, StoreError>(found.into_iter().map(move |(seq, blob)| ((tenant, conversation, seq), blob)))
        };
        let mut stored: HashMap<([u8; 16], [u8; 16], i64), Vec<u8>> = HashMap::new();
        let mut reads = stream::iter(places).map(read).buffer_unordered(concurrency);
        while let Some(found) = reads.next().await {
            stored.extend(found?);
        }
        let mut conflicts = Vec::new();
        for (index, row) in rows.iter().enumerate() {
            let at = (row.tenant, row.conversation, row.seq);
            match stored.get(&at) {
                Some(blob) if *blob != row.blob => conflicts.push(ArchiveConflict {
                    index,
                    detail: format!(
                        "seq {} of {} already holds another record ({} bytes stored, {} offered)",
                        row.seq,
                        ConversationId(row.conversation),
                        blob.len(),
                        row.blob.len()
                    ),
                }),
                Some(_) => {}
                None => {
                    stored.insert(at, row.blob.clone());
                }
            }
        }
        Ok(conflicts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_ttl_counts_from_the_sending_second_to_the_expiry_rounded_up() {
        let now = UnixMillis(10_700);
        assert_eq!(aligned_ttl(UnixMillis(20_000), now), 10, "an expiry on a whole second");
        assert_eq!(aligned_ttl(UnixMillis(20_001), now), 11, "rounded up: never early");
        assert_eq!(aligned_ttl(UnixMillis(10_900), now), 1, "within the second: at least 1 s");
        assert_eq!(aligned_ttl(UnixMillis(5_000), now), 1, "expired: 1 s, never resurrected");
        assert_eq!(aligned_ttl(UnixMillis(i64::MAX), now), MAX_TTL_SECS);
        // Executed in the second of `now`, the row vanishes at ⌊now⌋ + ttl: in [expiry, expiry + 1 s).
        for expires in [20_000, 20_001, 20_999, 86_400_123] {
            let vanishes = now.0.div_euclid(1000) * 1000 + i64::from(aligned_ttl(UnixMillis(expires), now)) * 1000;
            assert!((expires..expires + 1000).contains(&vanishes), "{expires} vanishes at {vanishes}");
        }
    }
    use crate::ids::{ClientMessageId, ConversationId, ConversationSeq, MessageId, TenantId, UserId, MILLIS_PER_DAY};
    use crate::message::MessageKind;

    fn record(retention: RetentionClass, expires_at: Option<UnixMillis>) -> MessageRecord {
        MessageRecord {
            tenant: TenantId([1; 16]),
            conversation: ConversationId([2; 16]),
            seq: ConversationSeq(7),
            message_id: MessageId([3; 16]),
            sender: UserId([4; 16]),
            client_message_id: ClientMessageId::new("c").unwrap(),
            kind: MessageKind::Normal,
            retention,
            created_at: UnixMillis(1_790_000_000_000),
            expires_at,
            payload: b"x".to_vec(),
        }
    }

    #[test]
    fn each_class_accepts_only_its_own_kind_of_expiry() {
        let created = UnixMillis(1_790_000_000_000);
        let day = created.plus_millis(MILLIS_PER_DAY);
        assert_eq!(archive_check(&record(RetentionClass::Ephemeral24h, Some(day))), Ok(()));
        assert_eq!(archive_check(&record(RetentionClass::Default, Some(day.plus_millis(MILLIS_PER_DAY)))), Ok(()));
        assert_eq!(archive_check(&record(RetentionClass::ComplianceHold, None)), Ok(()));
        assert_eq!(archive_check(&record(RetentionClass::TenantCustom, None)), Ok(()));
        for bad in [
            record(RetentionClass::ComplianceHold, Some(day)),
            record(RetentionClass::TenantCustom, Some(day)),
            record(RetentionClass::Ephemeral24h, Some(day.plus_millis(1))),
            record(RetentionClass::Ephemeral24h, None),
            record(RetentionClass::Default, None),
            record(RetentionClass::Default, Some(created)),
        ] {
            let refusal = archive_check(&bad).unwrap_err();
            assert_eq!(refusal.reason(), "bad_retention", "{bad:?}");
        }
    }
}
