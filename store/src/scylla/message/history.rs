//! History: record + index writes, pages, summaries and the expiry count.
//!
//! `put_record` raises its bucket's expiry bound (`buckets.rs`), then writes the canonical record
//! (`message_record`), its index entry (`history_index`, carrying `expires_at`) and, for expiring
//! classes, an expiry entry (`history_expiry`), all as same-value upserts with the record's
//! remaining TTL, then moves the commit RESERVED → RECORDED by LWT. A retry rewrites identical
//! rows; an expired record is rewritten with a 1 s TTL, never resurrected. A reservation recorded
//! late (see [`LATE_RECORD_MILLIS`]) whose record is live also brings the floor down to its bucket.
//!
//! Reads start at the conversation's floor and walk the bucket directory in the page's direction;
//! inside each bucket whose bound is still ahead they walk the index a chunk at a time (one
//! bucket per query, so a query meets at most one bucket of expired entries), and fetch only the
//! records the answer needs, by seq range per `seq_bucket` partition. Buckets whose bound passed
//! are skipped unread. An index entry whose `expires_at` passed by the injected clock is skipped
//! without reading its record (the server may already have dropped the record); every other
//! entry must have a record that decodes, sits at the index position and agrees on
//! `expires_at`, or the read fails with `CorruptEntry`. Each page's `earliest_available` walk
//! also moves the floor over the buckets it found expired.

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use scylla::value::MaybeUnset;

use super::buckets::{bound_of, seq_bucket, Floor, DIRECTORY_CHUNK, LATE_RECORD_MILLIS};
use super::ttl::{ttl_secs, MAX_TTL_SECS};
use super::ScyllaMessageStore;
use crate::codec::{decode_record, encode_record, i64_to_u64, u64_to_i64};
use crate::error::{StoreError, StoreResult};
use crate::ids::{ConversationId, ConversationSeq, TenantId, UnixMillis, UserId};
use crate::message::{
    Commit, CommitIntent, CommitState, ConversationSummary, Direction, HistoryPage, HistoryQuery, MessageRecord,
    ReadPosition, MAX_PAGE_ITEMS, UNREAD_PRECISE_LIMIT,
};
use crate::message_store::{GcReport, HistoryAuthorizer};
use crate::scylla::cql::{corrupt, unavailable};
use crate::scylla::schema::{hour_bucket, HOUR_MILLIS, SEQ_BUCKET_SIZE};

/// Expiry entries outlive their record by this much, so a pass shortly after expiry sees them.
const EXPIRY_ENTRY_GRACE_SECS: i32 = 3600;
/// At most this many hour partitions of `history_expiry` are read by one pass.
const MAX_EXPIRY_BUCKETS_PER_PASS: i64 = 24 * 14;
/// Fewest history index entries read per round trip.
const MIN_INDEX_CHUNK: usize = 32;

/// Bounds of an index walk: seqs strictly between `after` and `before`.
#[derive(Clone, Copy)]
struct Walk {
    direction: Direction,
    after: i64,
    before: i64,
}

impl Walk {
    fn all(direction: Direction) -> Self {
        Self { direction, after: 0, before: i64::MAX }
    }

    /// This walk confined to the seqs of `bucket`.
    fn within(self, bucket: i64) -> Self {
        let size = SEQ_BUCKET_SIZE as i64;
        let start = bucket.saturating_mul(size);
        Self {
            direction: self.direction,
            after: self.after.max(start - 1),
            before: self.before.min(start.saturating_add(size)),
        }
    }
}

impl ScyllaMessageStore {
    pub(super) async fn put_record_impl(&self, intent: &CommitIntent) -> StoreResult<Commit> {
        let key = &intent.request.key;
        let commit = self.live_commit(key).await?;
        Self::expect_reserved_intent(&commit, intent)?;
        let now = self.now();
        let expires_at = self.inner.policy.expires_at(intent.request.retention, intent.created_at);
        let ttl = expires_at.map_or(0, |at| ttl_secs(at, now));
        let record = encode_record(&intent.record(expires_at));
        let seq = u64_to_i64("conversation seq", intent.seq.0)?;
        let bucket = seq_bucket(seq);
        let (tenant, conversation) = (key.tenant, intent.request.conversation);
        self.cover_bucket(tenant, conversation, seq_bucket(seq), bound_of(expires_at)).await?;
        let late = now.0.saturating_sub(intent.created_at.0) >= LATE_RECORD_MILLIS;
        if late && expires_at.is_none_or(|at| at > now) {
            self.lower_floor(tenant, conversation, seq_bucket(seq)).await?;
        }
        let (t, c) = (&tenant.0[..], &conversation.0[..]);
        let st = &self.inner.st;
        let session = &self.inner.session;
        let what = format!("writing record {seq} of {conversation}");
        session
            .execute_unpaged(&st.insert_record, (t, c, bucket, seq, &record, ttl))
            .await
            .map_err(|e| unavailable(what.clone(), e))?;
        let expires = expires_at.map_or(MaybeUnset::Unset, |at| MaybeUnset::Set(at.0));
        session
            .execute_unpaged(&st.insert_index, (t, c, seq, expires, ttl))
            .await
            .map_err(|e| unavailable(what.clone(), e))?;
        if let Some(at) = expires_at {
            let entry_ttl = ttl.saturating_add(EXPIRY_ENTRY_GRACE_SECS).min(MAX_TTL_SECS);
            session
                .execute_unpaged(&st.insert_expiry, (hour_bucket(at.0), at.0, t, c, seq, entry_ttl))
                .await
                .map_err(|e| unavailable(what.clone(), e))?;
        }
        let mut next = commit;
        next.state = CommitState::Recorded;
        self.advance(key, CommitState::Reserved, next).await
    }

    /// Up to `want` live records of a conversation along `walk`, in walking order, never looking
    /// below bucket `floor`; and the first bucket with a live bound the walk met (`i64::MAX`: none,
    /// the directory ended), which bounds how far the floor may move.
    async fn live_records(
        &self,
        tenant: TenantId,
        conversation: ConversationId,
        walk: Walk,
        want: usize,
        now: UnixMillis,
        floor: i64,
    ) -> StoreResult<(Vec<MessageRecord>, i64)> {
        let mut out = Vec::new();
        let mut first_live = None;
        let mut lo = floor.max(seq_bucket(walk.after.saturating_add(1)));
        let mut hi = seq_bucket(walk.before.saturating_sub(1));
        while out.len() < want && lo <= hi {
            let rows = self.directory(tenant, conversation, (lo, hi), walk.direction, DIRECTORY_CHUNK).await?;
            let exhausted = rows.len() < DIRECTORY_CHUNK;
            for (bucket, bound) in rows {
                match walk.direction {
                    Direction::Newer => lo = bucket + 1,
                    Direction::Older => hi = bucket - 1,
                }
                if bound <= now.0 {
                    continue;
                }
                first_live.get_or_insert(bucket);
                self.walk_bucket(tenant, conversation, walk.within(bucket), want, now, &mut out).await?;
                if out.len() >= want {
                    break;
                }
            }
            if exhausted {
                break;
            }
        }
        Ok((out, first_live.unwrap_or(i64::MAX)))
    }

    /// Adds live records of one bucket along `walk` to `out` until it holds `want`.
    async fn walk_bucket(
        &self,
        tenant: TenantId,
        conversation: ConversationId,
        mut walk: Walk,
        want: usize,
        now: UnixMillis,
        out: &mut Vec<MessageRecord>,
    ) -> StoreResult<()> {
        let what = format!("reading the history index of {conversation}");
        let (t, c) = (&tenant.0[..], &conversation.0[..]);
        let stmt = match walk.direction {
            Direction::Older => &self.inner.st.index_desc,
            Direction::Newer => &self.inner.st.index_asc,
        };
        while out.len() < want && walk.after < walk.before {
            let need = want - out.len();
            // Index entries are cheap: read at least a chunk, so a run of expired entries costs
            // few round trips. Records are read only for the entries the answer needs.
            let chunk = need.max(MIN_INDEX_CHUNK);
            let limit = i32::try_from(chunk).unwrap_or(i32::MAX);
            let rows = self
                .inner
                .session
                .execute_unpaged(stmt, (t, c, walk.after, walk.before, limit))
                .await
                .map_err(|e| unavailable(what.clone(), e))?
                .into_rows_result()
                .map_err(|e| corrupt(&what, e))?;
            let entries: Vec<(i64, Option<i64>)> = rows
                .rows::<(i64, Option<i64>)>()
                .map_err(|e| corrupt(&what, e))?
                .collect::<Result<_, _>>()
                .map_err(|e| corrupt(&what, e))?;
            let exhausted = entries.len() < chunk;
            let mut taken = Vec::new();
            let mut consumed = 0;
            for &(seq, expires) in &entries {
                consumed += 1;
                match walk.direction {
                    Direction::Older => walk.before = seq,
                    Direction::Newer => walk.after = seq,
                }
                if expires.is_none_or(|at| at > now.0) {
                    taken.push((seq, expires));
                    if taken.len() == need {
                        break;
                    }
                }
            }
            let blobs = self.fetch_records(tenant, conversation, taken.iter().map(|(s, _)| *s)).await?;
            for (seq, expires) in taken {
                let record = check_record(tenant, conversation, seq, expires, blobs.get(&seq))?;
                if !record.is_expired(now) {
                    out.push(record);
                }
            }
            if exhausted && consumed == entries.len() {
                break;
            }
        }
        Ok(())
    }

    /// The record blobs of `seqs`, by seq (one range read per `seq_bucket` partition).
    pub(super) async fn fetch_records(
        &self,
        tenant: TenantId,
        conversation: ConversationId,
        seqs: impl Iterator<Item = i64>,
    ) -> StoreResult<HashMap<i64, Vec<u8>>> {
        let mut ranges: HashMap<i64, (i64, i64)> = HashMap::new();
        for seq in seqs {
            let bucket = seq_bucket(seq);
            let range = ranges.entry(bucket).or_insert((seq, seq));
            *range = (range.0.min(seq), range.1.max(seq));
        }
        let what = format!("reading records of {conversation}");
        let mut out = HashMap::new();
        for (bucket, (lo, hi)) in ranges {
            let values = (&tenant.0[..], &conversation.0[..], bucket, lo, hi);
            let rows = self
                .inner
                .session
                .execute_unpaged(&self.inner.st.records_range, values)
                .await
                .map_err(|e| unavailable(what.clone(), e))?
                .into_rows_result()
                .map_err(|e| corrupt(&what, e))?;
            for row in rows.rows::<(i64, Vec<u8>)>().map_err(|e| corrupt(&what, e))? {
                let (seq, blob) = row.map_err(|e| corrupt(&what, e))?;
                out.insert(seq, blob);
            }
        }
        Ok(out)
    }

    pub(super) async fn history_page_impl(
        &self,
        query: &HistoryQuery,
        authorizer: &dyn HistoryAuthorizer,
    ) -> StoreResult<HistoryPage> {
        authorizer.authorize_history(query.tenant, query.conversation, query.viewer).await?;
        if query.max_items == 0 || query.max_items > MAX_PAGE_ITEMS {
            return Err(StoreError::InvalidInput(format!(
                "max_items must be 1..={MAX_PAGE_ITEMS}, got {}",
                query.max_items
            )));
        }
        let anchor = query.anchor.map(|a| u64_to_i64("history anchor", a.0)).transpose()?;
        let now = self.now();
        let (t, conv) = (query.tenant, query.conversation);
        let floor = self.read_floor(t, conv).await?;
        let (earliest, first_live) =
            self.live_records(t, conv, Walk::all(Direction::Newer), 1, now, floor.bucket).await?;
        self.raise_floor(t, conv, floor, first_live, now).await?;
        let walk = match (query.direction, anchor) {
            (Direction::Older, a) => Walk { direction: Direction::Older, after: 0, before: a.unwrap_or(i64::MAX) },
            (Direction::Newer, a) => Walk { direction: Direction::Newer, after: a.unwrap_or(0), before: i64::MAX },
        };
        let (candidates, _) = self.live_records(t, conv, walk, query.max_items + 1, now, floor.bucket).await?;
        let mut records = Vec::new();
        let mut bytes = 0usize;
        let mut has_more = false;
        for record in candidates {
            let fits = records.is_empty()
                || (records.len() < query.max_items && bytes + record.page_bytes() <= query.max_bytes);
            if !fits {
                has_more = true;
                break;
            }
            bytes += record.page_bytes();
            records.push(record);
        }
        Ok(HistoryPage { records, earliest_available: earliest.first().map(|r| r.seq), has_more })
    }

    pub(super) async fn conversation_summaries_impl(
        &self,
        tenant: TenantId,
        viewer: UserId,
        positions: &[ReadPosition],
    ) -> StoreResult<Vec<ConversationSummary>> {
        let now = self.now();
        let window = UNREAD_PRECISE_LIMIT as usize + 1;
        let mut out = Vec::with_capacity(positions.len());
        for p in positions {
            let read = u64_to_i64("read position", p.read_through.0)?;
            let floor: Floor = self.read_floor(tenant, p.conversation).await?;
            let after = Walk { direction: Direction::Older, after: read, before: i64::MAX };
            let (newer, _) = self.live_records(tenant, p.conversation, after, window, now, floor.bucket).await?;
            let last_seq = match newer.first() {
                Some(r) => Some(r.seq),
                None => {
                    let older = Walk::all(Direction::Older);
                    let (head, _) = self.live_records(tenant, p.conversation, older, 1, now, floor.bucket).await?;
                    head.first().map(|r| r.seq)
                }
            };
            let (unread, unread_precise) = if newer.len() > UNREAD_PRECISE_LIMIT as usize {
                (UNREAD_PRECISE_LIMIT, false)
            } else {
                let n = newer.iter().filter(|r| r.sender != viewer && r.kind.counts_as_unread()).count();
                (u32::try_from(n).unwrap_or(UNREAD_PRECISE_LIMIT), true)
            };
            out.push(ConversationSummary { conversation: p.conversation, last_seq, unread, unread_precise });
        }
        Ok(out)
    }

    /// Counts records whose expiry passed since the last pass (by the injected clock). Nothing is
    /// deleted: record and index rows carry their TTL.
    pub(super) async fn gc_expired_history_impl(&self, limit: usize) -> StoreResult<GcReport> {
        let now = self.now().0;
        let since = self.inner.history_counted_through.load(Ordering::SeqCst);
        if now <= since || limit == 0 {
            return Ok(GcReport::default());
        }
        let first = hour_bucket(since);
        let last = hour_bucket(now).min(first + MAX_EXPIRY_BUCKETS_PER_PASS - 1);
        // When the window spans more hours than one pass reads, count through the last hour read.
        let mut through = if last < hour_bucket(now) { (last + 1) * HOUR_MILLIS - 1 } else { now };
        let mut counted = 0usize;
        for bucket in first..=last {
            let remaining = i32::try_from(limit - counted).unwrap_or(i32::MAX);
            let what = format!("scanning history_expiry hour {bucket}");
            let rows = self
                .inner
                .session
                .execute_unpaged(&self.inner.st.scan_expiry, (bucket, since, through, remaining))
                .await
                .map_err(|e| unavailable(what.clone(), e))?
                .into_rows_result()
                .map_err(|e| corrupt(&what, e))?;
            let expiries: Vec<i64> = rows
                .rows::<(i64,)>()
                .map_err(|e| corrupt(&what, e))?
                .map(|r| r.map(|(at,)| at))
                .collect::<Result<_, _>>()
                .map_err(|e| corrupt(&what, e))?;
            counted += expiries.len();
            if counted >= limit {
                through = expiries.last().copied().unwrap_or(through);
                break;
            }
        }
        self.inner.history_counted_through.fetch_max(through, Ordering::SeqCst);
        Ok(GcReport { removed: counted, orphans_cleaned: 0 })
    }
}

/// Decodes the record found for index entry `seq` and checks it against the entry.
pub(super) fn check_record(
    tenant: TenantId,
    conversation: ConversationId,
    seq: i64,
    index_expires: Option<i64>,
    blob: Option<&Vec<u8>>,
) -> StoreResult<MessageRecord> {
    let blob = blob.ok_or_else(|| {
        StoreError::CorruptEntry(format!("history index holds seq {seq} of {conversation} but its record is missing"))
    })?;
    let record = decode_record(blob)?;
    if record.tenant != tenant
        || record.conversation != conversation
        || record.seq != ConversationSeq(i64_to_u64("conversation seq", seq)?)
    {
        return Err(StoreError::CorruptEntry(format!(
            "record at seq {seq} of {conversation} belongs to seq {} of {}",
            record.seq, record.conversation
        )));
    }
    if record.expires_at.map(|at| at.0) != index_expires {
        return Err(StoreError::CorruptEntry(format!(
            "record at seq {seq} of {conversation} expires at {:?}, its index entry at {index_expires:?}",
            record.expires_at
        )));
    }
    Ok(record)
}
