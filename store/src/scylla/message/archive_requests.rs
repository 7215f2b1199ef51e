//! The requests of one archive batch ([`super::archive`]): each step's rows (records, then
//! index and expiry rows) grouped by partition into single-partition unlogged batches
//! ([`crate::scylla::batches`]), each sent with TTLs taken at its sending and sent again while
//! its acknowledgement arrives in a later second.

use std::collections::BTreeMap;

use scylla::value::MaybeUnset;

use super::archive::{Row, TTL_SETTLE_BUDGET};
use super::ttl::MAX_TTL_SECS;
use super::ScyllaMessageStore;
use crate::error::{StoreError, StoreResult};
use crate::scylla::batches::{write_rows, BLOB_BYTES_PER_BATCH, ROWS_PER_BATCH};
use crate::scylla::cql::unavailable;
use crate::scylla::schema::hour_bucket;

/// Expiry entries outlive their record by this much (as `put_record` writes them).
const EXPIRY_ENTRY_GRACE_SECS: i32 = 3600;

/// Which row of a record a write makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Step {
    Record,
    Index,
    /// Only of records that expire.
    Expiry,
}

/// One request of an archive batch: `step`'s rows of `rows`, all in one partition, at most
/// [`ROWS_PER_BATCH`] of them and [`BLOB_BYTES_PER_BATCH`] of record blobs (a larger record
/// alone): a plain statement for one row, an unlogged single-partition batch for more.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Write {
    step: Step,
    rows: Vec<usize>,
}

/// The requests that write `step`'s rows of `rows`, partition by partition, in the rows' order
/// within each partition.
pub(super) fn writes(rows: &[Row], step: Step) -> Vec<Write> {
    let mut partitions: BTreeMap<([u8; 16], [u8; 16], i64), Vec<usize>> = BTreeMap::new();
    for (i, row) in rows.iter().enumerate() {
        let partition = match (step, row.expires_at) {
            (Step::Record, _) => row.place(),
            (Step::Index, _) => (row.tenant, row.conversation, 0),
            (Step::Expiry, Some(at)) => ([0; 16], [0; 16], hour_bucket(at)),
            (Step::Expiry, None) => continue,
        };
        partitions.entry(partition).or_default().push(i);
    }
    let mut out = Vec::new();
    for members in partitions.into_values() {
        let mut current = Write { step, rows: Vec::new() };
        let mut bytes = 0;
        for i in members {
            let size = if step == Step::Record { rows[i].blob.len() } else { 0 };
            let full = current.rows.len() == ROWS_PER_BATCH || bytes + size > BLOB_BYTES_PER_BATCH;
            if full && !current.rows.is_empty() {
                out.push(std::mem::replace(&mut current, Write { step, rows: Vec::new() }));
                bytes = 0;
            }
            current.rows.push(i);
            bytes += size;
        }
        out.push(current);
    }
    out
}

impl ScyllaMessageStore {
    /// Executes `write` (see [`Write`]), with TTLs taken just before it is sent, and sends it
    /// again with fresh TTLs while its acknowledgement arrives in a later whole second than it
    /// was sent and one of its rows has a TTL (see the module docs), for at most
    /// [`TTL_SETTLE_BUDGET`].
    pub(super) async fn write_settled(&self, rows: &[Row], write: &Write) -> StoreResult<()> {
        let (session, st) = (&self.inner.session, &self.inner.st);
        let mine = || write.rows.iter().map(|&i| &rows[i]);
        let what = || match write.rows.len() {
            1 => rows[write.rows[0]].what(),
            n => format!("{} and {} more of its partition", rows[write.rows[0]].what(), n - 1),
        };
        let first = self.now();
        loop {
            let sent = self.now();
            let result = match write.step {
                Step::Record => {
                    let values: Vec<_> = mine()
                        .map(|r| (&r.tenant[..], &r.conversation[..], r.bucket, r.seq, &r.blob, r.ttl(sent)))
                        .collect();
                    write_rows(session, &st.insert_record, &values).await
                }
                Step::Index => {
                    let values: Vec<_> = mine()
                        .map(|r| {
                            let expires = r.expires_at.map_or(MaybeUnset::Unset, MaybeUnset::Set);
                            (&r.tenant[..], &r.conversation[..], r.seq, expires, r.partition, r.offset, r.ttl(sent))
                        })
                        .collect();
                    write_rows(session, &st.insert_archived_index, &values).await
                }
                Step::Expiry => {
                    // Outlives the record by an hour: its second needs no care.
                    let values: Vec<_> = mine()
                        .filter_map(|r| {
                            let at = r.expires_at?;
                            let ttl = r.ttl(sent).saturating_add(EXPIRY_ENTRY_GRACE_SECS).min(MAX_TTL_SECS);
                            Some((hour_bucket(at), at, &r.tenant[..], &r.conversation[..], r.seq, ttl))
                        })
                        .collect();
                    write_rows(session, &st.insert_expiry, &values).await
                }
            };
            result.map_err(|e| unavailable(what(), e))?;
            let settled = write.step == Step::Expiry
                || mine().all(|r| r.ttl(sent) == 0)
                || self.now().0.div_euclid(1000) == sent.0.div_euclid(1000);
            if settled {
                return Ok(());
            }
            if self.now().0 - first.0 >= TTL_SETTLE_BUDGET.as_millis() as i64 {
                return Err(StoreError::Unavailable {
                    message: format!(
                        "{}: for {} s every acknowledgement arrived in a later second than its \
                         statement was sent, so the row's TTL may be late; the batch is retried",
                        what(),
                        TTL_SETTLE_BUDGET.as_secs()
                    ),
                    source: None,
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scylla::schema::SEQ_BUCKET_SIZE;

    fn row(conversation: u8, seq: i64, blob_bytes: usize, expires_at: Option<i64>) -> Row {
        Row {
            tenant: [1; 16],
            conversation: [conversation; 16],
            bucket: seq / SEQ_BUCKET_SIZE as i64,
            seq,
            blob: vec![0; blob_bytes],
            expires_at,
            partition: 0,
            offset: seq,
        }
    }

    fn rows_of(writes: &[Write]) -> Vec<Vec<usize>> {
        writes.iter().map(|w| w.rows.clone()).collect()
    }

    #[test]
    fn writes_group_one_partitions_rows_bounded_by_count_and_blob_bytes() {
        let hour = 3_600_000;
        let bucket = SEQ_BUCKET_SIZE as i64;
        let mut rows: Vec<Row> = (0..20).map(|i| row(1, i, 100, Some(10 * hour))).collect();
        rows.push(row(2, 1, 100, None));
        rows.push(row(1, bucket, 100, Some(11 * hour)));
        rows.push(row(2, 2, 100, Some(10 * hour + 1)));
        let first_sixteen: Vec<usize> = (0..16).collect();
        assert_eq!(
            rows_of(&writes(&rows, Step::Record)),
            vec![first_sixteen.clone(), vec![16, 17, 18, 19], vec![21], vec![20, 22]],
            "by conversation and seq bucket, 16 rows at most"
        );
        assert_eq!(
            rows_of(&writes(&rows, Step::Index)),
            vec![first_sixteen.clone(), vec![16, 17, 18, 19, 21], vec![20, 22]],
            "by conversation"
        );
        let mut by_hour: Vec<usize> = (0..20).collect();
        by_hour.push(22);
        assert_eq!(
            rows_of(&writes(&rows, Step::Expiry)),
            vec![by_hour[..16].to_vec(), by_hour[16..].to_vec(), vec![21]],
            "by hour, and only the rows that expire"
        );
        assert!(writes(&rows, Step::Expiry).iter().all(|w| w.step == Step::Expiry));

        let big = BLOB_BYTES_PER_BATCH / 3 + 1;
        let rows = vec![row(1, 1, big, None), row(1, 2, big, None), row(1, 3, big, None), row(1, 4, 40 * 1024, None)];
        assert_eq!(
            rows_of(&writes(&rows, Step::Record)),
            vec![vec![0, 1], vec![2], vec![3]],
            "blob bytes bound a batch; a record larger than the bound goes alone"
        );
        assert!(writes(&[], Step::Record).is_empty());
    }
}
