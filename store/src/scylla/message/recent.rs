//! A conversation's recently archived records with where they were published: what the Redis
//! hot tier writes back when it revalidates a conversation after losing state (see
//! [`crate::redis::RecentRecords`]).
//!
//! The archiver stores each record's partition and offset in its `history_index` row. The read
//! walks the bucket directory from the newest bucket down (skipping buckets whose bound passed)
//! and each bucket's index newest first, fetching the records of the live entries, and stops at
//! the first record created before `since` less [`CLOCK_SKEW_MILLIS`]: everything above it in
//! seq order was returned, so the answer is a seq suffix of the archive.

use super::buckets::seq_bucket;
use super::history::check_record;
use super::ScyllaMessageStore;
use crate::error::StoreResult;
use crate::ids::{ConversationId, TenantId, UnixMillis};
use crate::message::{Direction, Publication, PublishedRecord};
use crate::scylla::cql::{corrupt, unavailable};
use crate::scylla::schema::SEQ_BUCKET_SIZE;

/// How much older than `since` a record may be and still not end the walk: seqs follow the
/// writers' clocks, which may disagree by this much.
pub const CLOCK_SKEW_MILLIS: i64 = 5 * 60 * 1000;

/// Index entries read per round trip.
const CHUNK: i32 = 256;

/// One `history_index` row with its publication columns.
type PublishedEntry = (i64, Option<i64>, Option<i32>, Option<i64>);

impl ScyllaMessageStore {
    /// The conversation's archived, unexpired records created at or after `since` (and every
    /// one above the oldest of them), newest first, at most `limit`, each with its publication.
    /// Records archived without one (written by `put_record` in Scylla mode) are left out.
    pub async fn recent_published(
        &self,
        tenant: TenantId,
        conversation: ConversationId,
        since: UnixMillis,
        limit: usize,
    ) -> StoreResult<Vec<PublishedRecord>> {
        let now = self.now();
        let stop_below = since.0.saturating_sub(CLOCK_SKEW_MILLIS);
        let floor = self.read_floor(tenant, conversation).await?.bucket;
        let (t, c) = (&tenant.0[..], &conversation.0[..]);
        let what = format!("reading recent publications of {conversation}");
        let mut out = Vec::new();
        let mut hi = seq_bucket(i64::MAX - 1);
        while floor <= hi && out.len() < limit {
            let buckets = self.directory(tenant, conversation, (floor, hi), Direction::Older, 64).await?;
            let exhausted = buckets.len() < 64;
            for (bucket, bound) in buckets {
                hi = bucket - 1;
                if bound <= now.0 {
                    continue;
                }
                let size = SEQ_BUCKET_SIZE as i64;
                let (after, mut before) = (bucket.saturating_mul(size) - 1, bucket.saturating_mul(size) + size);
                loop {
                    let rows = self
                        .inner
                        .session
                        .execute_unpaged(&self.inner.st.published_desc, (t, c, after, before, CHUNK))
                        .await
                        .map_err(|e| unavailable(what.clone(), e))?
                        .into_rows_result()
                        .map_err(|e| corrupt(&what, e))?;
                    let entries: Vec<PublishedEntry> = rows
                        .rows::<PublishedEntry>()
                        .map_err(|e| corrupt(&what, e))?
                        .collect::<Result<_, _>>()
                        .map_err(|e| corrupt(&what, e))?;
                    let Some(last) = entries.last() else { break };
                    before = last.0;
                    let live: Vec<&PublishedEntry> =
                        entries.iter().filter(|(_, expires, _, _)| expires.is_none_or(|at| at > now.0)).collect();
                    let blobs = self.fetch_records(tenant, conversation, live.iter().map(|e| e.0)).await?;
                    for &&(seq, expires, partition, offset) in &live {
                        let record = check_record(tenant, conversation, seq, expires, blobs.get(&seq))?;
                        if record.created_at.0 < stop_below {
                            return Ok(out);
                        }
                        if let (Some(partition), Some(offset)) = (partition, offset) {
                            if !record.is_expired(now) {
                                out.push(PublishedRecord { record, publication: Publication { partition, offset } });
                            }
                        }
                        if out.len() >= limit {
                            return Ok(out);
                        }
                    }
                    if entries.len() < CHUNK as usize {
                        break;
                    }
                }
            }
            if exhausted {
                break;
            }
        }
        Ok(out)
    }
}
