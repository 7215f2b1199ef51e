//! `MailboxStore` on CQL (ScyllaDB in production, Apache Cassandra 5 here).
//!
//! DESIGN.md's dispatch departure from seed 000: **no LWT on the hot path**. Duplicates reuse the
//! first receipt, replays write identical rows, and stale writers can not regress state because
//! every piece of monotonic state is a cell written with a client-side write timestamp derived
//! from the value itself (`USING TIMESTAMP`), so CQL's last-write-wins means "highest value
//! wins" (or, for first receipts, "lowest offset wins"). The only LWTs are on the per-user
//! retention meta, issued only when the set of live expiry days changes: at most once per user
//! per day. [`ScyllaMailboxStore::lwt_count`] counts them.
//!
//! # Tables (see [`MAILBOX_TABLES`])
//!
//! Per user (partition `(tenant_id, user_id)`):
//! - `mailbox_entry (.., mailbox_seq) → grp`: one whole event group per seq (canonical
//!   [`encode_event_group`](crate::codec::encode_event_group) bytes). A replay upserts identical
//!   bytes. `TTL` = time left until the group's expiry (on the injected clock) plus one day of
//!   slack ([`ENTRY_TTL_SLACK_SECS`]); groups already expired are never written (no
//!   resurrection). Reads still filter on the injected clock: an expired group above the
//!   boundary is `CorruptEntry`, as in the memory reference. Trimmed groups are not deleted (no
//!   range deletes): reads never look below the trim, the TTL removes them.
//! - `mailbox_retention_meta → (format_version = 5, ledger_generation, active_ledger)`: the
//!   [`RetentionLedger`](crate::codec::RetentionLedger) of live expiry days. Changed only by LWT
//!   (`INSERT IF NOT EXISTS` / `UPDATE IF ledger_generation = ?`), and only when a batch brings a
//!   day the ledger does not list yet; the same LWT drops the days that expired (after their
//!   proofs were merged into the gap) and folds the live days' proofs into their items. A
//!   ledger item's `max_seq` is therefore a lower bound (exact as of the user's last
//!   registration); the current one is in the bucket proof.
//! - `mailbox_retention_bucket_v3 (.., expiry_day, epoch) → max_seq`: the bucket proof, written
//!   before the ledger registration and before the entry, `USING TIMESTAMP`
//!   [`highest_wins_timestamp`]`(seq)`, so the highest seq written into the day wins without a
//!   read or a condition. No TTL while the ledger lists the day: a day the ledger lists needs
//!   its proof, at least as high as the ledger item (seed 000), so a proof below it and a
//!   missing one are `CorruptEntry`, however long the user was idle. The registration LWT that
//!   drops an expired day then gives its rows [`RETIRED_PROOF_TTL_SECS`] to live (rewritten one
//!   write timestamp higher), enough for a reader that read the ledger before that LWT.
//! - `mailbox_retention_bucket_v2`: the proofs of metas in the legacy format 4 (earlier builds),
//!   with a TTL of their day's expiry plus [`LEGACY_PROOF_TTL_SLACK_SECS`]. Read only for such a
//!   meta, whose missing proof past that slack is taken as gone by TTL (the ledger item stands
//!   in); the user's next registration copies its live days' proofs into the current table and
//!   rewrites the meta in format 5.
//! - `mailbox_floor → (trim, gap)`: two independent cells, each written with the seq's
//!   [`highest_wins_timestamp`]:
//!   the trim (from `truncate_before`) and the expired-gap boundary (from replays of expired
//!   groups and from consumed ledger days) only rise, whatever order writers arrive in. No TTL.
//!
//! `range_scan` is read-only: its boundary is `max(trim, gap, max_seq of every ledger day whose
//! expiry passed)` (the last term read from the proofs), which equals what the memory reference
//! computes by consuming those days; a cursor below it is `CursorExpired`. Consuming a day
//! (raising `gap` first, then the LWT that removes it) happens only inside a registration LWT,
//! so it costs no extra LWT and keeps the ledger within its 32 items.
//!
//! Per dispatch (partition `(shard, message_id)`), all with a fixed TTL written at insert
//! ([`DISPATCH_TTL_SECS`]; never `UPDATE … USING TTL`):
//! - `mailbox_dispatch → (manifest, canonical_offset, mailbox_seq, lane_chunks, generation)`:
//!   the first receipt of the dispatch's newest generation, written `USING TIMESTAMP`
//!   [`first_wins_timestamp`]`(generation, offset)`. Within a generation the timestamp
//!   *decreases* with the observed offset, so the lowest offset's write wins however the writes
//!   interleave; every writer reads the row back and returns what won. A different manifest
//!   (canonical bytes compared) is `DispatchConflict` and writes nothing else.
//! - `mailbox_dispatch_observation (.., generation, observed_offset) → observed_at`: every
//!   observation (max observed offset, last seen time for GC).
//! - `mailbox_dispatch_chunk (.., generation, lane, chunk_index)`: durable chunk completions.
//! - `mailbox_dispatch_collected → generation`: the GC marker, written with the generation's
//!   [`highest_wins_timestamp`]. Every generation up to it is forgotten: progress is `None`,
//!   chunks are `NotFound`, its sources no longer count. Observing the dispatch again starts
//!   a newer generation, whose receipt timestamps beat the older ones, and whose observations
//!   and chunks are separate rows: the store answers as if the old rows were gone (as the memory
//!   reference does), while they wait for their TTL (no deletes).
//!
//! A generation is started (no live receipt: never observed, collected, or expired) at
//! `max(stored + 1, collected + 1, `[`calendar_generation`]`(now))`. The stored and collected
//! terms order it after every generation still readable; the calendar term after every one
//! whose rows already expired: an expired cell, and the tombstone compaction turns it into, keeps
//! its write timestamp and would otherwise shadow a replay's identical write (same offset, same
//! timestamp) until `gc_grace_seconds` passed and compaction ran. The receipt is read back after
//! its write; one that reads back absent lost to such a tombstone anyway and is written again one
//! generation higher.
//!
//! Per shard:
//! - `mailbox_dispatch_source ((shard, bucket), observed_offset) → (message_id, generation)` with
//!   `bucket = offset >> 20`, and `mailbox_source_bucket ((shard), bucket)` listing the
//!   buckets: the shard log as observed, so a watermark can check every source it passes.
//! - `mailbox_lane_watermark ((shard), lane) → through`, written with the offset's
//!   [`highest_wins_timestamp`]: the
//!   highest offset wins, so a zombie worker's stale advance can never move it back.
//!   `advance_watermark` first checks every source in `(current, through]` has its lane's chunks
//!   all complete (else `Conflict` naming the first incomplete offset), then writes.
//! - `mailbox_gc_cursor ((shard)) → (claimed, through)` and `mailbox_gc_pending ((shard),
//!   observed_offset) → (message_id, generation)`: where GC reads the shard log from, so a call
//!   reads only sources it has not passed yet (see [`gc`]).
//!
//! Time always comes from the injected [`Clock`]; CQL TTLs run on the server's clock, so every
//! TTL carries slack and every read filters on the injected clock.
//!
//! # Why each guarantee holds
//!
//! - *Duplicates reuse the first receipt*: `begin_dispatch` writes the receipt only when it reads
//!   no live one, and always answers with the row it reads back; the row's cells are identical
//!   for one offset, and between offsets the lowest wins (decreasing timestamps).
//! - *Replays write identical rows*: every row is a pure function of its key and the canonical
//!   manifest / group bytes (observation rows also carry the injected time of the observation).
//! - *No regression by stale writers*: trim, gap, bucket proofs, watermarks and GC markers are
//!   cells whose write timestamp is the value, so a lower value written later loses.
//! - *Watermarks never pass incomplete work*: the advance reads every source in
//!   `(current, through]` and the lane's durable chunk rows before writing.
//! - *No silent gap*: a group is written only after its day is listed in the ledger and its
//!   proof carries a seq at least as high; once the day expires, the boundary covers the proof's
//!   seq. Readers read the meta before the floor, and writers raise the gap before their LWT
//!   drops an expired day, so one of the two is always seen.
//!
//! # Known limits
//!
//! - Two *concurrent* first observations of one dispatch at different offsets (a zombie worker
//!   racing its successor within one round trip) can both return receipts before the lower offset
//!   wins; the loser's later chunks fail (`Conflict`, the receipt seq is re-read per chunk) but chunks it
//!   already wrote stay at its seq. Closing that window needs an LWT per dispatch, which DESIGN.md
//!   rules out on the hot path.
//! - Proofs have no TTL while listed, and only a registration LWT drops expired days from the
//!   ledger: a user who never writes again keeps its ledger's days' proof rows (at most 32, one
//!   per listed day and epoch) for good, like its meta and floor rows. A writer that dies
//!   between the LWT that dropped a day and the proof rows' retirement leaves them without TTL.
//! - A meta still in the legacy format 4 (not registered since the upgrade) keeps the earlier
//!   rule for its days: a proof gone by the legacy TTL is replaced by the ledger item, whose seq
//!   is exact as of the user's last registration.
//! - `gc_completed_dispatches` reads the shard log from its cursor up to the lowest watermark (at
//!   most 100 000 sources per call), and again from the first dispatch it could not collect yet:
//!   a dispatch observed again and again keeps the sources after it in every call's reading.
//! - Sources and dispatch rows expire [`DISPATCH_TTL_SECS`] after they were written, so a
//!   duplicate observed almost that long after its first observation can outlive its receipt row
//!   (`CorruptEntry` if a watermark still has to pass it).
//! - GC is not atomic with `begin_dispatch`: a duplicate observed while GC marks its dispatch's
//!   generation collected is forgotten with it, so `advance_watermark` to that offset is
//!   `InvalidInput` until the observation is repeated (which starts the next generation). GC's
//!   `seen_before` cut-off makes this need a duplicate of a long-quiet dispatch.
//! - Watermarks are keyed by `(shard, lane)` as the trait is: a shard log restarting its offsets
//!   (a new epoch) can not move them below their old high point.
//! - A dispatch collected and observed again more often than once a day for two weeks can have
//!   generations ahead of the calendar; if all its rows then expire and it is replayed, the
//!   receipt still lands (read back, written again one generation higher), but a GC marker of a
//!   generation at or below the expired one's may be shadowed too: that generation is then left
//!   to its TTL instead of being forgotten at once.
//! - Every client write timestamp lies at or before 1970, so a row deleted with a server
//!   timestamp (an operator's `DELETE`, a user erasure) shadows every later write of these
//!   tables for good: such deletes are final by design; never "reset" state by deleting it.
//! - The "another dispatch at this offset" check is a read before the write, not atomic (a log
//!   offset names one record, so only a bug can race it).

mod chunks;
mod dispatch;
mod gc;
mod schema;
mod statements;
mod timestamps;
mod user;
mod watermark;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use scylla::client::session::Session;
use scylla::response::query_result::QueryResult;
use scylla::value::{CqlValue, Row};

pub use self::schema::{mailbox_table_ddl, mailbox_table_names, KEYSPACE_PLACEHOLDER, MAILBOX_TABLES};
use self::statements::Statements;
pub use self::timestamps::{
    calendar_generation, first_wins_timestamp, highest_wins_timestamp, GENERATION_EPOCH_MILLIS, MAX_GENERATION,
};
use crate::clock::Clock;
use crate::error::{StoreError, StoreResult};
use crate::ids::{TenantId, UserId};
use crate::mailbox::{
    ChunkId, DispatchId, DispatchManifest, DispatchProgress, DispatchReceipt, LaneId, LaneWatermark, MailboxEntry,
    MailboxPage, MailboxRetention, MailboxSeq, ShardEpoch, ShardId,
};
use crate::mailbox_store::{ChunkWrite, MailboxStore};

/// Entries outlive their expiry (on the injected clock) by this much on the server, so a server
/// clock ahead of ours can not drop a group the ledger still counts as live.
pub const ENTRY_TTL_SLACK_SECS: i64 = 86_400;
/// Legacy bucket proofs (in `mailbox_retention_bucket_v2`, written by earlier builds) outlived
/// their day's expiry by this much.
pub const LEGACY_PROOF_TTL_SLACK_SECS: i64 = 60 * 86_400;
/// A bucket proof row of a day a registration dropped lives this long after that registration,
/// so a reader that read the ledger just before it still finds the proof.
pub const RETIRED_PROOF_TTL_SECS: i32 = 86_400;
/// Dispatch bookkeeping rows live this long after they are written.
pub const DISPATCH_TTL_SECS: i32 = 14 * 86_400;
/// Offsets per source bucket (`bucket = offset >> SOURCE_BUCKET_BITS`).
pub const SOURCE_BUCKET_BITS: u32 = 20;

/// `MailboxStore` on a CQL session. Cheap to clone; clones share the session and counters.
#[derive(Clone)]
pub struct ScyllaMailboxStore {
    inner: Arc<Inner>,
}

struct Inner {
    session: Arc<Session>,
    keyspace: String,
    st: Statements,
    retention: MailboxRetention,
    clock: Arc<dyn Clock>,
    lwts: AtomicU64,
    /// Shard-log (source) rows read by watermark advances and GC.
    source_rows: AtomicU64,
    /// Manifests `append_chunk` already checked against the stored first receipt (byte-exact),
    /// so the chunks of one dispatch do not each re-read a manifest of up to 1.6 MB.
    verified: std::sync::Mutex<HashMap<DispatchId, Verified>>,
    /// Expiry days each user's durable ledger is known to list (see `user::ListedDays`).
    listed: user::ListedDays,
}

/// A dispatch row as read, for [`Inner::verified`].
#[derive(Clone)]
struct Verified {
    at: Instant,
    generation: i32,
    manifest: Arc<Vec<u8>>,
}

/// How long a verified manifest is trusted without re-reading its row.
const VERIFIED_FOR: Duration = Duration::from_secs(30);
/// Most verified manifests kept (the map is cleared when full).
const VERIFIED_CAP: usize = 256;

impl std::fmt::Debug for ScyllaMailboxStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScyllaMailboxStore")
            .field("keyspace", &self.inner.keyspace)
            .field("retention", &self.inner.retention)
            .finish_non_exhaustive()
    }
}

/// Whether `name` is a plain (unquoted) CQL identifier we accept as a keyspace.
fn valid_keyspace(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_lowercase())
        && name.len() <= 48
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

impl ScyllaMailboxStore {
    /// Prepares every statement against `keyspace` (whose tables [`mailbox_table_ddl`] created;
    /// this never runs DDL). Dispatched entries live per `retention`; time comes from `clock`.
    pub async fn connect(
        session: Arc<Session>,
        keyspace: &str,
        retention: MailboxRetention,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, StoreError> {
        if !valid_keyspace(keyspace) {
            return Err(StoreError::InvalidInput(format!("keyspace {keyspace:?} is not a lowercase CQL identifier")));
        }
        let st = Statements::prepare_all(&session, keyspace).await?;
        Ok(Self {
            inner: Arc::new(Inner {
                session,
                keyspace: keyspace.to_owned(),
                st,
                retention,
                clock,
                lwts: AtomicU64::new(0),
                source_rows: AtomicU64::new(0),
                verified: std::sync::Mutex::default(),
                listed: user::ListedDays::default(),
            }),
        })
    }

    /// How many shard-log rows (`mailbox_dispatch_source`) this store (and its clones) read so
    /// far, in watermark advances and GC: the work both do is proportional to it.
    pub fn source_rows_read(&self) -> u64 {
        self.inner.source_rows.load(Ordering::Relaxed)
    }

    /// How many LWTs this store (and its clones) issued so far.
    pub fn lwt_count(&self) -> u64 {
        self.inner.lwts.load(Ordering::Relaxed)
    }

    /// The keyspace it works in.
    pub fn keyspace(&self) -> &str {
        &self.inner.keyspace
    }

    /// The stored manifest bytes of a dispatch's `generation` read less than [`VERIFIED_FOR`] ago.
    fn verified(&self, id: &DispatchId, generation: i32) -> Option<Arc<Vec<u8>>> {
        let map = self.inner.verified.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        map.get(id).filter(|v| v.generation == generation && v.at.elapsed() < VERIFIED_FOR).map(|v| v.manifest.clone())
    }

    fn remember_verified(&self, id: DispatchId, generation: i32, manifest: Arc<Vec<u8>>) {
        let mut map = self.inner.verified.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if map.len() >= VERIFIED_CAP {
            map.clear();
        }
        map.insert(id, Verified { at: Instant::now(), generation, manifest });
    }

    fn session(&self) -> &Session {
        &self.inner.session
    }

    fn st(&self) -> &Statements {
        &self.inner.st
    }
}

/// A driver failure: the server could not be reached or failed; retryable.
fn db<E: std::error::Error + Send + Sync + 'static>(what: &'static str) -> impl FnOnce(E) -> StoreError {
    move |e| StoreError::unavailable(what, e)
}

/// A row that does not have the shape we wrote: corrupt.
fn shape<E: std::fmt::Display>(what: &'static str) -> impl FnOnce(E) -> StoreError {
    move |e| StoreError::CorruptEntry(format!("{what}: {e}"))
}

/// Rows of `result` as `T`s.
fn rows<T>(result: QueryResult, what: &'static str) -> StoreResult<Vec<T>>
where
    T: for<'f, 'm> scylla::deserialize::row::DeserializeRow<'f, 'm>,
{
    let rows = result.into_rows_result().map_err(shape(what))?;
    rows.rows::<T>().map_err(shape(what))?.map(|r| r.map_err(shape(what))).collect()
}

/// The first row of `result` as a `T`, if any.
fn first<T>(result: QueryResult, what: &'static str) -> StoreResult<Option<T>>
where
    T: for<'f, 'm> scylla::deserialize::row::DeserializeRow<'f, 'm>,
{
    Ok(rows::<T>(result, what)?.into_iter().next())
}

/// Reads an LWT's `[applied]` by column name (a failed condition adds the row's columns).
fn applied(result: QueryResult, what: &'static str) -> StoreResult<bool> {
    let rows = result.into_rows_result().map_err(shape(what))?;
    let (idx, _) = rows
        .column_specs()
        .get_by_name("[applied]")
        .ok_or_else(|| StoreError::CorruptEntry(format!("{what}: LWT result without [applied]")))?;
    let row: Row = rows.single_row().map_err(shape(what))?;
    match row.columns.get(idx) {
        Some(Some(CqlValue::Boolean(b))) => Ok(*b),
        other => Err(StoreError::CorruptEntry(format!("{what}: [applied] is {other:?}"))),
    }
}

#[async_trait]
impl MailboxStore for ScyllaMailboxStore {
    async fn append_batch(&self, entries: &[MailboxEntry]) -> StoreResult<()> {
        let groups = user::canonical_groups(entries)?;
        self.write_groups(groups).await
    }

    async fn begin_dispatch(
        &self,
        epoch: ShardEpoch,
        manifest: &DispatchManifest,
        observed_offset: u64,
    ) -> StoreResult<DispatchReceipt> {
        self.begin(epoch, manifest, observed_offset).await
    }

    async fn append_chunk(
        &self,
        receipt: &DispatchReceipt,
        manifest: &DispatchManifest,
        chunk: ChunkId,
    ) -> StoreResult<usize> {
        self.write_chunks(&[ChunkWrite { receipt, manifest, chunk }]).await
    }

    async fn mark_chunk_completed(&self, dispatch: DispatchId, chunk: ChunkId) -> StoreResult<()> {
        self.mark_chunks(&[(dispatch, chunk)]).await
    }

    async fn append_chunks(&self, writes: &[ChunkWrite<'_>]) -> StoreResult<usize> {
        self.write_chunks(writes).await
    }

    async fn mark_chunks_completed(&self, chunks: &[(DispatchId, ChunkId)]) -> StoreResult<()> {
        self.mark_chunks(chunks).await
    }

    async fn chunk_completed(&self, dispatch: DispatchId, chunk: ChunkId) -> StoreResult<bool> {
        self.is_chunk_completed(dispatch, chunk).await
    }

    async fn dispatch_progress(&self, dispatch: DispatchId) -> StoreResult<Option<DispatchProgress>> {
        self.progress(dispatch).await
    }

    async fn range_scan(
        &self,
        tenant: TenantId,
        user: UserId,
        after: MailboxSeq,
        up_to: MailboxSeq,
        max_items: usize,
    ) -> StoreResult<MailboxPage> {
        if let Some(page) = crate::rules::range_preamble(after, up_to, max_items)? {
            return Ok(page);
        }
        self.scan(tenant, user, after, up_to, max_items).await
    }

    async fn truncate_before(&self, tenant: TenantId, user: UserId, through: MailboxSeq) -> StoreResult<MailboxSeq> {
        self.truncate(tenant, user, through).await
    }

    async fn lane_watermark(&self, shard: ShardId, lane: LaneId) -> StoreResult<LaneWatermark> {
        self.watermark(shard, lane).await
    }

    async fn advance_watermark(&self, shard: ShardId, lane: LaneId, through: u64) -> StoreResult<LaneWatermark> {
        self.advance(shard, lane, through).await
    }

    async fn advance_watermarks(&self, shard: ShardId, targets: &[(LaneId, u64)]) -> Vec<StoreResult<LaneWatermark>> {
        self.advance_lanes(shard, targets).await
    }

    async fn gc_completed_dispatches(
        &self,
        shard: ShardId,
        seen_before_millis: i64,
        limit: usize,
    ) -> StoreResult<usize> {
        self.gc(shard, seen_before_millis, limit).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keyspace_names_are_plain_identifiers() {
        assert!(valid_keyspace("qim_mailbox_1"));
        assert!(!valid_keyspace("Qim"));
        assert!(!valid_keyspace("1qim"));
        assert!(!valid_keyspace("qim; DROP"));
        assert!(!valid_keyspace(""));
    }
}
