//! `MailboxStore` on Redis.
//!
//! # Key layout
//!
//! `ns` is [`RedisConfig::namespace`]. Every key of one user's mailbox shares the hash tag
//! `{u:<tenant hex><user hex>}`, every key of one shard's dispatch bookkeeping the hash tag
//! `{d:<shard>}`, so each script touches one slot and runs unchanged on Redis Cluster.
//!
//! Per user (`ns:{u:<tenant><user>}:…`):
//! - `…:meta` HASH: `gen` (a fresh random generation written by every meta change; the optimistic
//!   check-and-set token, which names one content even after Redis rolled back), `trim` and `gap`
//!   (decimal `u64` mailbox seqs: the trim and the expired-gap boundary), `ledger` (the [`RetentionLedger`](crate::codec::RetentionLedger) blob, format `QRL\x01`). Absent for a clean user.
//! - `…:groups` HASH: seq (8 big-endian bytes) → event group blob (as encoded, stored as-is).
//! - `…:seqs` ZSET: the same 8-byte seqs with score 0, read in order by lex range (exact for every
//!   `u64`, unlike scores).
//! - `…:exp` ZSET: 8-byte seq → expiry ms. Groups whose expiry has passed are removed by the next
//!   commit at the same `now` whose ledger already merged their bucket into the gap.
//!
//! The three group keys carry a Redis TTL, only ever extended: until the latest live bucket of the
//! ledger expires (measured on the injected clock) plus one day of slack, so an idle user's
//! groups leave Redis once all of them expired. The meta never expires: its trim and gap keep
//! answering `CursorExpired` to old cursors.
//!
//! Per shard (`ns:{d:<shard>}:…`):
//! - `…:disp:<message id hex>` HASH: `manifest` (blob), `canonical` (first offset), `seq`
//!   (canonical mailbox seq, decimal `u64`), `max` (highest observed offset) and `n:<lane>` (chunk
//!   count of each lane with work, from [`DispatchManifest::chunk_counts`]).
//! - `…:disp:<message id hex>:done` SET of completed chunks `<lane>:<index>`;
//!   `…:disp:<message id hex>:obs` SET of the offsets it was observed at.
//! - `…:sources` ZSET (member = score = observed offset) and `…:src` HASH (offset → dispatch id
//!   hex): every observation of the shard log.
//! - `…:seen` ZSET: dispatch id hex → last observation ms (GC order and cut-off).
//! - `…:wm` HASH: lane → watermark offset.
//! - `…:incarnation` string: `<serving>:<nonce>`, made anew when missing or of another copy of
//!   the data (`serving_prelude.lua`; `shard_incarnation`: what tells a dispatcher the shard's
//!   state may be lost). A [`ShardFence`] is one such marker: the fenced begin, mark and advance
//!   scripts write nothing (`StateLost`) unless the marker is still the fence and still of the
//!   copy serving now (`mailbox_fence_prelude.lua`), so a dispatcher that took the shard over
//!   before Redis lost state can not build on the rolled-back state (move a watermark over
//!   observations Redis forgot, fix a dispatch's receipt at a later duplicate) before it notices.
//! - `…:work` HASH: `<message id hex>` → highest observed offset (as the row's `max`) and
//!   `<message id hex>:<lane>` → chunks of the lane not yet complete (for lanes with work), and
//!   `<message id hex>:lanes` → those lanes, comma-separated (so an advance reads the counts of
//!   those lanes only; a dispatch an earlier release began lacks it and has every lane read). What
//!   watermarks and GC need of every dispatch lives in this one shard key, so their scripts read
//!   only keys they declare (no script builds a key name).
//!
//! Offsets are below 2^47 (they must fit a mailbox seq), so Lua compares them exactly as numbers;
//! mailbox seqs are never turned into Lua numbers.
//!
//! # Atomicity
//!
//! Time always comes from the injected [`Clock`] and is passed to scripts as an argument. The
//! retention ledger is computed in Rust and applied by `mailbox_commit.lua` only if the user's
//! meta generation did not move (else re-read and retry): no per-record lock, one script per user
//! and batch. A batch spanning users is validated whole, and every user's ledger planned, before
//! the first user is written; users are then committed one script each (not atomically together).
//! Dispatch bookkeeping is one script per step on the shard's slot; `append_chunks` checks the
//! stored manifest of every chunk (one pipeline) and then writes the per-user groups of all of
//! them like `append_batch`; `mark_chunks_completed` is one script per shard. Every script declares
//! every key it touches in `KEYS`. `advance_watermarks` moves all its lanes in one script, which
//! reads each source's dispatch once for all of them. Two steps are split to bound a script's run
//! time: an advance inspects at most `ADVANCE_SOURCES` (256) sources per script, moving each lane
//! over a fully complete batch and calling again until its `through` (so after a `Conflict`
//! beyond the first batch the watermark may have moved up to a batch boundary below the
//! incomplete offset, itself a legal advance); GC selects collectable ids with one script and
//! forgets each with another that checks again.
//!
//! Stored values that are not what the layout says (a non-numeric count or offset, a key of the
//! wrong type) are `CorruptEntry`.

mod chunks;
mod dispatch;
mod keys;
mod reply;
mod user;
mod watermarks;

use std::sync::{Arc, LazyLock};

use crate::redis::RedisConnection;
use async_trait::async_trait;
use redis::{Script, Value};

use self::keys::{seq8, ShardKeys, UserKeys};
use self::reply::number;
use super::{connect, redis_error, RedisConfig};
use crate::clock::Clock;
use crate::error::{StoreError, StoreResult};
use crate::ids::{TenantId, UserId};
use crate::mailbox::{
    ChunkId, DispatchId, DispatchManifest, DispatchProgress, DispatchReceipt, LaneId, LaneWatermark, MailboxEntry,
    MailboxPage, MailboxRetention, MailboxSeq, ShardEpoch, ShardFence, ShardId,
};
use crate::mailbox_store::{ChunkWrite, DispatchBegin, MailboxStore};
use crate::rules::{canonical_groups, range_preamble};

static COMMIT: LazyLock<Script> = LazyLock::new(|| crate::redis::script(include_str!("scripts/mailbox_commit.lua")));
static SCAN: LazyLock<Script> = LazyLock::new(|| crate::redis::script(include_str!("scripts/mailbox_scan.lua")));
static TRIM: LazyLock<Script> = LazyLock::new(|| crate::redis::script(include_str!("scripts/mailbox_trim.lua")));
static BEGIN: LazyLock<Script> = LazyLock::new(|| fenced_script(include_str!("scripts/mailbox_begin.lua")));
static MARK_CHUNKS: LazyLock<Script> = LazyLock::new(|| fenced_script(include_str!("scripts/mailbox_mark_chunks.lua")));
static PROGRESS: LazyLock<Script> =
    LazyLock::new(|| crate::redis::script(include_str!("scripts/mailbox_progress.lua")));
static ADVANCE: LazyLock<Script> = LazyLock::new(|| fenced_script(include_str!("scripts/mailbox_advance.lua")));
static GC: LazyLock<Script> = LazyLock::new(|| crate::redis::script(include_str!("scripts/mailbox_gc.lua")));
static GC_DISPATCH: LazyLock<Script> =
    LazyLock::new(|| crate::redis::script(include_str!("scripts/mailbox_gc_dispatch.lua")));

/// A script that may be fenced: `fence_holds(marker key, fence)` checks a [`ShardFence`].
fn fenced_script(body: &str) -> Script {
    super::serving_script(&[include_str!("scripts/mailbox_fence_prelude.lua"), body].concat())
}

/// Check-and-set attempts before a contended user meta is reported `Unavailable`.
const MAX_ATTEMPTS: usize = 64;
/// Most GC candidates one `gc_completed_dispatches` call inspects (bounds the script's run time).
const GC_SCAN_CAP: usize = 10_000;
/// Dispatches one pipeline of `gc_completed_dispatches` forgets (each a script of a few dozen
/// µs: a pipeline holds the server a few ms at most).
const GC_PIPELINE: usize = 64;
/// Most sources one `mailbox_advance.lua` call inspects (bounds the script's run time: each
/// costs a lookup per lane still moving).
const ADVANCE_SOURCES: usize = 256;

/// The one answer of a call that began one observation.
fn only(mut answers: Vec<StoreResult<DispatchReceipt>>) -> StoreResult<DispatchReceipt> {
    match (answers.pop(), answers.is_empty()) {
        (Some(answer), true) => answer,
        _ => Err(StoreError::InvariantViolation("a begin of one observation did not answer once".into())),
    }
}

/// A transport or server error: a key of the wrong type is corrupt data, the rest `Unavailable`.
fn redis_err(what: &str, err: redis::RedisError) -> StoreError {
    if err.code() == Some("WRONGTYPE") {
        return StoreError::CorruptEntry(format!("{what}: {err}"));
    }
    redis_error(what, err)
}

/// `MailboxStore` on Redis. Cheap to clone; clones share one multiplexed connection.
#[derive(Clone)]
pub struct RedisMailboxStore {
    conn: RedisConnection,
    ns: String,
    /// The users' metas this store wrote last (see `user`'s module docs).
    metas: Arc<user::MetaCache>,
    retention: MailboxRetention,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for RedisMailboxStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisMailboxStore")
            .field("namespace", &self.ns)
            .field("retention", &self.retention)
            .finish_non_exhaustive()
    }
}

impl RedisMailboxStore {
    /// Connects to `config`; dispatched entries live per `retention`; time comes from `clock`.
    pub async fn open(
        config: &RedisConfig,
        retention: MailboxRetention,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, StoreError> {
        let conn = connect(config).await?;
        Ok(Self { conn, ns: config.namespace.clone(), metas: Arc::default(), retention, clock })
    }

    /// Test sabotage: replaces a stored event group's bytes (indexing the seq if it was not).
    #[doc(hidden)]
    pub async fn sabotage_overwrite_group(
        &self,
        tenant: TenantId,
        user: UserId,
        seq: MailboxSeq,
        bytes: Vec<u8>,
    ) -> StoreResult<()> {
        let keys = UserKeys::new(&self.ns, &tenant, &user);
        let s = seq8(seq);
        let mut conn = self.conn.clone();
        redis::pipe()
            .atomic()
            .cmd("HSET")
            .arg(&keys.groups)
            .arg(&s[..])
            .arg(bytes)
            .ignore()
            .cmd("ZADD")
            .arg(&keys.seqs)
            .arg(0)
            .arg(&s[..])
            .ignore()
            .query_async::<()>(&mut conn)
            .await
            .map_err(|e| redis_err("overwriting a mailbox group", e))
    }

    fn shard_keys(&self, shard: ShardId) -> ShardKeys {
        ShardKeys::new(&self.ns, shard)
    }
}

#[async_trait]
impl MailboxStore for RedisMailboxStore {
    async fn append_batch(&self, entries: &[MailboxEntry]) -> StoreResult<()> {
        let groups = canonical_groups(entries)?;
        let now = self.clock.now();
        user::write_groups(&mut self.conn.clone(), &self.ns, &self.metas, groups, now).await
    }

    async fn begin_dispatch(
        &self,
        epoch: ShardEpoch,
        manifest: &DispatchManifest,
        observed_offset: u64,
    ) -> StoreResult<DispatchReceipt> {
        only(self.begin(epoch, &[DispatchBegin { manifest, observed_offset }], None).await?)
    }

    async fn begin_dispatch_fenced(
        &self,
        fence: &ShardFence,
        epoch: ShardEpoch,
        manifest: &DispatchManifest,
        observed_offset: u64,
    ) -> StoreResult<DispatchReceipt> {
        only(self.begin(epoch, &[DispatchBegin { manifest, observed_offset }], Some(fence)).await?)
    }

    async fn begin_dispatches_fenced(
        &self,
        fence: &ShardFence,
        epoch: ShardEpoch,
        begins: &[DispatchBegin<'_>],
    ) -> StoreResult<Vec<StoreResult<DispatchReceipt>>> {
        self.begin(epoch, begins, Some(fence)).await
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
        self.mark_chunks(&[(dispatch, chunk)], None).await
    }

    async fn append_chunks(&self, writes: &[ChunkWrite<'_>]) -> StoreResult<usize> {
        self.write_chunks(writes).await
    }

    async fn mark_chunks_completed(&self, chunks: &[(DispatchId, ChunkId)]) -> StoreResult<()> {
        self.mark_chunks(chunks, None).await
    }

    async fn mark_chunks_completed_fenced(
        &self,
        fence: &ShardFence,
        chunks: &[(DispatchId, ChunkId)],
    ) -> StoreResult<()> {
        fence.admits_chunks(chunks)?;
        self.mark_chunks(chunks, Some(fence)).await
    }

    async fn chunk_completed(&self, dispatch: DispatchId, chunk: ChunkId) -> StoreResult<bool> {
        let keys = self.shard_keys(dispatch.shard);
        let (_, done, _) = keys.dispatch(&dispatch.message_id);
        redis::cmd("SISMEMBER")
            .arg(&done)
            .arg(format!("{}:{}", chunk.lane.get(), chunk.index))
            .query_async(&mut self.conn.clone())
            .await
            .map_err(|e| redis_err("reading chunk completion", e))
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
        if let Some(page) = range_preamble(after, up_to, max_items)? {
            return Ok(page);
        }
        let now = self.clock.now();
        let keys = UserKeys::new(&self.ns, &tenant, &user);
        user::scan(&mut self.conn.clone(), &keys, (tenant, user), after, up_to, max_items, now).await
    }

    async fn truncate_before(&self, tenant: TenantId, user: UserId, through: MailboxSeq) -> StoreResult<MailboxSeq> {
        let keys = UserKeys::new(&self.ns, &tenant, &user);
        user::truncate(&mut self.conn.clone(), &keys, through).await
    }

    async fn shard_incarnation(&self, shard: ShardId) -> StoreResult<String> {
        static SCRIPT: std::sync::LazyLock<redis::Script> =
            std::sync::LazyLock::new(|| super::serving_script(include_str!("scripts/mailbox_incarnation.lua")));
        let mut invocation = SCRIPT.key(self.shard_keys(shard).incarnation);
        invocation.arg(uuid::Uuid::new_v4().simple().to_string());
        invocation.invoke_async(&mut self.conn.clone()).await.map_err(|e| redis_err("reading a shard's incarnation", e))
    }

    async fn lane_watermark(&self, shard: ShardId, lane: LaneId) -> StoreResult<LaneWatermark> {
        let keys = self.shard_keys(shard);
        let raw: Option<String> = redis::cmd("HGET")
            .arg(&keys.watermarks)
            .arg(lane.get())
            .query_async(&mut self.conn.clone())
            .await
            .map_err(|e| redis_err("reading a lane watermark", e))?;
        let through = raw.map(|r| number(Some(Value::BulkString(r.into_bytes())), "watermark")).transpose()?;
        Ok(LaneWatermark { shard, lane, through })
    }

    async fn advance_watermark(&self, shard: ShardId, lane: LaneId, through: u64) -> StoreResult<LaneWatermark> {
        let mut answers = self.advance_lanes(shard, &[(lane, through)], None).await;
        answers.pop().unwrap_or_else(|| Err(StoreError::InvariantViolation("a lane advance got no answer".into())))
    }

    async fn advance_watermarks(&self, shard: ShardId, targets: &[(LaneId, u64)]) -> Vec<StoreResult<LaneWatermark>> {
        self.advance_lanes(shard, targets, None).await
    }

    async fn advance_watermarks_fenced(
        &self,
        fence: &ShardFence,
        targets: &[(LaneId, u64)],
    ) -> Vec<StoreResult<LaneWatermark>> {
        self.advance_lanes(fence.shard, targets, Some(fence)).await
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
