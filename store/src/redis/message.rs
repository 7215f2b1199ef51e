//! `MessageStore` on Redis.
//!
//! # Key layout
//!
//! `<ns>` is [`RedisConfig::namespace`]. Braces are Redis Cluster hash tags: keys with the same
//! tag live in one slot, and every script touches the keys of one slot only.
//!
//! | key | type | holds |
//! |-----|------|-------|
//! | `<ns>:{c:<tenant><conversation>}:seq` | string | highest seq issued under the current lease |
//! | `<ns>:{c:<tenant><conversation>}:lease` | string | `<serving>:<through>:<start>`: the seq lease (see [`lease`]) |
//! | `<ns>:{c:<tenant><conversation>}:leasetoken` | string | the token of a revalidation in progress (Redis TTL) |
//! | `<ns>:{c:<tenant><conversation>}:claims` | HASH | `<sender><client id>` → `<seq>:<claimed_at>`: the seq each recent request key was issued |
//! | `<ns>:{c:<tenant><conversation>}:claimtimes` | ZSET | the same claims by claimed_at ms (pruned after the auxiliary TTL) |
//! | `<ns>:{c:<tenant><conversation>}:clock` | string | the highest `created_at` issued: no later seq gets an earlier one |
//! | `<ns>:{c:<tenant><conversation>}:idx` | ZSET | history index: member = seq (decimal), score = seq |
//! | `<ns>:{c:<tenant><conversation>}:rec` | HASH | seq (decimal) → canonical record blob |
//! | `<ns>:{c:<tenant><conversation>}:lowbound` | string | hot-tier lower bound: seqs ≤ it were trimmed (absent = 0) |
//! | `<ns>:{c:<tenant><conversation>}:gcdone` | SET | seqs the expiry drain deleted whose expiry member may remain |
//! | `<ns>:{c:<tenant><conversation>}:archived` | string | archived watermark: the trim never passes it (absent = 0) |
//! | `<ns>:{k:<tenant><sender>}:commit:<client id>` | HASH | `req` = request bytes, `commit` = the commit's head: seq, message id, times, publication, state (a whole commit blob when an earlier release wrote it) |
//! | `<ns>:{recovery:<shard>}` | ZSET | unfinished commits: score = created_at ms, member = `<tenant><sender>:<created_at>:<client id>` |
//! | `<ns>:{commitgc:<shard>}` | ZSET | COMMITTED commits: score = committed_at ms, same member |
//! | `<ns>:{msghistorygc:<shard>}` | ZSET | hot-tier expiry index: score = expiry ms, member = `<tenant>\|<conversation>\|<seq>` |
//! | `<ns>:{hotwindow:<shard>}` | ZSET | records the trim must remove: score = created_at ms, same member (trim-owning stores) |
//!
//! The last four are the global indexes, each spread over 16 shards ([`super::index_shard`]): a
//! commit's entries in its sender's shard, a record's in its conversation's. Below, `{recovery}`
//! and the like name the shard of the entry at hand; scans walk every shard.
//!
//! The group-commit layout (below) adds three: `<ns>:{c:<tenant><conversation>}:commit:<sender>:<client id>`
//! (a commit, the same hash as in the sender's slot), `<ns>:{k:<tenant><sender>}:claim:<client id>`
//! (string `<conversation hex>:<xxh3-128 of the request bytes, hex>`, Redis TTL [`CLAIM_MILLIS`])
//! and the `{recovery}` / `{commitgc}` member `<tenant><sender>/<conversation>:<message id>:<client id>`.
//!
//! # Commit layouts
//!
//! A store creates the commits of new sends in one of two layouts ([`CommitLayout`]) and reads,
//! drives and collects commits of both: `load` asks the sender's slot for the commit there and
//! the key's claim in one round trip, and follows a claim to its conversation's slot; index
//! members say which layout they name.
//!
//! - **In the sender's slot** (the default): the steps below, 5 round trips and 5 scripts per
//!   send.
//! - **In the conversation's slot** (the group-commit layout): the commit lives beside the seq
//!   counter, so the script that issues the seq creates it, with the record. A send costs 3
//!   round trips and 3 scripts: (1) ⟨`message_claim.lua` ‖ ZADD `{recovery}`⟩ in the sender's
//!   slot: the claim decides which request and conversation own the key (other bytes or another
//!   conversation: `Conflict`; a commit of the other layout holds the key: that layout's
//!   `reserve` takes over); the member is named by the proposed message id, which every attempt
//!   of this reservation keeps. (2) `message_append.lua` in the conversation's slot: an existing
//!   commit is answered before any lease check (a replay; other bytes: `Conflict`); otherwise
//!   the member cache, the lease and the clock are checked as the sender-slot allocation does
//!   (a clock ahead of the proposed `created_at` writes nothing and answers the clock: the send
//!   proposes again), and the seq, the commit (RECORDED) and the record are written at once, the
//!   seq spliced into the head and the record at their fixed offsets. `reserve` alone writes a
//!   RESERVED commit and no record; `put_record` then writes the record and compares and sets
//!   the head in one script (`message_commit_record.lua`), so no record is ever written for
//!   anything but that commit. (3) after the publish, ⟨CAS RECORDED → COMMITTED ‖ ZADD
//!   `{commitgc}` ‖ PEXPIRE claim ‖ hot-tier registrations ‖ ZREM settled⟩, the PEXPIRE left
//!   out when this store took the claim less than [`CLAIM_YOUNG`] ago (its TTL still outlives
//!   the commit's, which is set now): the registrations
//!   ride with the transition because the seq is known only once the commit exists; a CAS that
//!   lands without them is registered again at once, and the auxiliary GC registers a
//!   conversation-slot commit's record before it deletes the commit.
//!
//!   | crash or loss | left behind | resolved by |
//!   |---|---|---|
//!   | after (1) | the claim, a recovery entry leading nowhere, no seq | a retry with the same bytes claims `same` and appends; other bytes get `Conflict` until the claim expires; the auxiliary GC removes the entry after the TTL |
//!   | (2) answered `extend`, `revalidate`, `wait`, `restamp`, `later` | nothing (a token on `revalidate`) | the same reservation loops, keeping its claim and member; after `revalidate`, `wait` or `later` it claims the key again first (a revalidation may have restored this send's commit) |
//!   | after (2), before the publish | RECORDED commit, record, index | the recovery scan (member → conversation → message id) or a retry (`exists`, no new seq) drives it; two drivers are decided by the CAS |
//!   | after the publish, before (3) | RECORDED, the record in Kafka | published again, same seq and id (a physical duplicate); nobody was answered |
//!   | after (3)'s CAS alone | COMMITTED, maybe no `{commitgc}` entry or registrations | the entry stays unsettled (the scan skips COMMITTED; the auxiliary GC collects it); registrations sent again, or by the GC |
//!   | the sender's slot lost | conversation-slot commits intact | same bytes: a new claim, then `exists` (a replay); another conversation is not refused any more |
//!
//!   The auxiliary GC releases a conversation-slot commit's claim (compare-and-delete) before
//!   it deletes the commit: deleted after it, the claim could be a retry's new one. A lease
//!   revalidation restores the commits of recent records in the sender's slot; a reservation
//!   that revalidated, or waited for another's revalidation, claims its key again, so a restored
//!   commit of the same send answers it (the claim script defers to a sender-slot commit) and no
//!   second seq is issued.
//!
//!   Both layouts share keys safely, in one namespace (a fleet mid-upgrade): the claim script
//!   answers `legacy` when a sender-slot commit holds the key, and `message_reserve.lua` answers
//!   `moved` when a claim holds it without one (the sender-slot reservation then takes the
//!   group-commit path, its freshly issued seq left a hole); both run in the sender's slot, so
//!   exactly one layout wins each key. Not yet the default: the writer's crash tests and the
//!   fault suite run on the sender-slot layout.
//!
//! # Group commit
//!
//! With group commit (the default; [`RedisMessageStore::with_group_commit`]) sends in flight at
//! once share their round trips, in ticks (the next starts when the previous one's replies
//! landed; no linger): the claims of (1), the appends of (2) and the transitions of (3) each go
//! out as one pipeline per tick (one per slot on a cluster). Within a tick, the calls of one slot
//! become one call: `message_append.lua` covers every send of the conversation (the member cache
//! per send, the lease, floor and clock read once), the claims of one sender and the CASes of one
//! conversation run as one call of the script's several-at-once form, and the index writes become
//! one multi-member `ZADD`/`ZREM` per key (`group`, `join`). Every send is answered as if it had
//! been alone; a send an earlier send of its call stopped (the lease needs work) is answered
//! `later` and goes again. The scripts and commands are a lone send's, so the crash table above
//! holds unchanged: a tick lost mid-way is, for each of its sends, a round trip lost mid-way.
//!
//! Ids are 32 lowercase hex digits. Blobs are the canonical encodings of [`crate::codec`],
//! stored as they are; idempotency compares them byte for byte. Seqs stay below 2^53 so that
//! ZSET scores hold them exactly. Time always comes from the injected [`Clock`] (a send's
//! `created_at` from a [`HybridClock`] over it, see `reserve` below) and reaches
//! the scripts as arguments (never Redis `TIME`); the only Redis-clocked thing is a safety-net
//! TTL on COMMITTED commit hashes ([`COMMITTED_REDIS_TTL_MILLIS`], longer than the auxiliary TTL
//! that [`MessageStore::gc_committed_auxiliary`] enforces on the injected clock).
//!
//! # Step order and crash safety
//!
//! Commit, conversation and global keys live in different slots, so no script can touch them
//! all. Each step is a short sequence of round trips; a round trip is one single-slot script or
//! command, or a pipeline of commands that do not depend on each other's results (written
//! `⟨a ‖ b⟩` below). A pipeline is not a transaction: on a cluster its commands go to different
//! nodes, and a crash mid-send or a node refusing one command can leave any subset of them
//! applied. So every pipeline below is chosen so that each subset of it is legal or
//! self-healing state, and so is a crash between two round trips, or a race.
//!
//! Round trips per step when the same store drives a send from `reserve` to `mark_committed`
//! (the writer's hot path), and when it did not drive the earlier steps (the recovery loop in
//! another process, a retry after a restart). The writer stores OUTBOXED and COMMITTED with one
//! call, `mark_outbox_published_and_committed`, so its send costs 5 round trips and 5 scripts
//! (seq allocation, reserve, record, and two compare-and-sets):
//!
//! | step | hot path | cold |
//! |------|---------:|-----:|
//! | `reserve` | 2 | 2 |
//! | `put_record` | 2 | 3 |
//! | `mark_outbox_published` | 1 | 2 |
//! | `mark_committed` | 1 | 3 |
//! | `mark_outbox_published_and_committed` | 1 | 3 |
//!
//! (`reserve` costs more when its lease must be extended or revalidated: see [`lease`]; and
//! one round trip more when the conversation's clock is ahead of this store's, below.)
//!
//! The hot path skips reading the commit because the store remembers, for each commit in flight,
//! the exact commit it last wrote or read (the *in-flight knowledge*, module `inflight`): a hint,
//! never trusted on its own. Every transition is a compare-and-set of the commit's whole head
//! (`message_commit_cas.lua`; the request beside it never changes once reserved), so a stale hint only turns into the `Conflict` (or `NotFound`) a
//! changed commit always got; the one write made on a hint before any CAS, `put_record`'s record,
//! is guarded in its script (below).
//!
//! - `reserve`: (1) `⟨message_allocate_seq.lua ‖ ZADD {recovery}⟩`. The allocation answers the
//!   request key's *claim* when it has one (the seq an earlier attempt of the same key was
//!   issued, within the auxiliary TTL), else issues the next seq within the conversation's
//!   lease of the durable high-water mark and claims it for the key. So a retry of a send in
//!   flight, or of one that crashed before its commit was written, gets the same seq, and no
//!   seq is ever given back. An allocation that issues nothing (the lease is used up, invalid
//!   after Redis lost state, or being revalidated) is followed by what its lease needs (see
//!   [`lease`]) and the step starts again. (2) `message_reserve.lua` creates the commit if the
//!   key is free; otherwise it writes nothing and returns the stored request and commit: same
//!   bytes → that commit (a replay, or a racing reserver that won), other bytes → `Conflict`; a
//!   key the group-commit layout claimed is `moved` there (see "Commit layouts").
//!   The stored commit carries the claimed seq unless the claim was lost with Redis state:
//!   then the new seq stays a hole (`qim_store_seq_abandoned_total`) and the claim is pointed
//!   at the stored seq. Our recovery entry goes unless it is the stored commit's own (same key
//!   and millisecond). The recovery entry is confirmed before the commit can exist, so a crash
//!   after (2) is always found by the recovery scan. Any subset of (1): a seq without its entry
//!   stops the step (the claim keeps the seq for the retry), an entry without a seq, or a crash
//!   before (2), leaves an entry leading nowhere, which the scan skips and
//!   [`MessageStore::gc_committed_auxiliary`] removes once older than the auxiliary TTL.
//!   Without a seq (no lease to be had, corrupt counter) a replay is still answered from the
//!   stored commit (one read).
//!
//!   `created_at` is the store's hybrid clock's stamp, proposed to the allocation, which keeps
//!   the conversation's clock (its highest `created_at` issued) and answers the send's
//!   `created_at`: the claim's, or the later of the proposal and the clock. When that differs
//!   from the proposal (another writer's clock runs ahead, or this is a retry of a claimed key),
//!   the hybrid clock observes it and (1) runs again under it, so the recovery entry names the
//!   commit's `created_at` (the claim now answers the same seq and time); the entry under the
//!   proposal goes in the same trip, or is an entry leading nowhere as above. So within a
//!   conversation `created_at` never decreases as the seq grows, whatever the writers' clocks;
//!   a revalidation's restored records raise the clock again after Redis lost it.
//! - `put_record`: write record and index (`message_put_record.lua`, same-value overwrite),
//!   then the CAS RESERVED → RECORDED from exactly the RESERVED commit of this intent. The
//!   record must only be written for the reserved intent, so a cold call reads and checks the
//!   commit first (same intent bytes, RESERVED). A hot call relies on having reserved (or read)
//!   exactly that commit moments ago, and calls the script in mode `known`: a record that does not
//!   exist yet is then written only if the seq counter issued its seq, it is above the hot-tier
//!   lower bound and the expiry drain never deleted it, so even a stale hint (the commit was
//!   finished elsewhere and its record already expired or trimmed) can not resurrect a record;
//!   on `stale` the step falls back to the cold path. A crash before the CAS leaves RESERVED,
//!   and the retried step rewrites the same bytes. The CAS goes with the *hot-tier
//!   registrations*, `⟨CAS RESERVED → RECORDED ‖ registrations⟩`: the record's expiry in
//!   `{msghistorygc}` (unless a trim-owning store will trim the record before it expires,
//!   ADR-0019 revision 2) and, for trim-owning stores, the record in `{hotwindow}`;
//!   deterministic members and scores. The record exists (just written, or found with the same
//!   bytes), so registering it is right whatever the CAS answers: it only says when the record
//!   expires and when the trim may take it (never before it is archived, so never before it is
//!   published). A CAS that lands without its registrations is covered by the later steps.
//! - `mark_outbox_published`: `⟨CAS RECORDED → OUTBOXED ‖ hot-tier registrations⟩`, the
//!   registrations only when this store did not see them succeed at RECORDED (a cold call: the
//!   recovery loop), by the same argument. A CAS that lands without them is covered by
//!   `mark_committed`, which registers again unless this store saw them succeed.
//! - `mark_outbox_published_and_committed` (the writer's path): when this store saw the
//!   registrations succeed, ⟨CAS RECORDED → COMMITTED ‖ ZADD `{commitgc}` ‖ ZREM settled⟩, then
//!   as `mark_committed` (3). The one CAS stores the publication and COMMITTED together (OUTBOXED
//!   and COMMITTED at once, atomically), so a crash or a refusal leaves RECORDED (the recovery
//!   loop publishes again: a physical duplicate with the same seq) or COMMITTED, and another
//!   driver's step first makes it a `Conflict`. Otherwise the two steps in turn.
//! - `mark_committed`: (1) only when this store did not see the registrations succeed at
//!   RECORDED or OUTBOXED: register the record, strictly before the transition, because a repeated
//!   `mark_committed` after it is a `Conflict` and could never register it; (2) ⟨CAS
//!   OUTBOXED → COMMITTED (plus the safety-net TTL) ‖ ZADD `{commitgc}` ‖ ZREM `{recovery}` of
//!   earlier settled commits⟩; (3) once both the CAS and the `{commitgc}` entry are
//!   confirmed, this commit's recovery entry is *settled*: its removal rides on the store's
//!   next `mark_committed` round trip (or the next recovery scan, auxiliary GC pass or
//!   [`RedisMessageStore::flush_settled`]). Any subset of (2): a CAS without its `{commitgc}`
//!   entry is never settled, so its recovery entry stays (the scan skips COMMITTED commits, the
//!   auxiliary GC deletes the commit and the entry once past the TTL); a `{commitgc}` entry
//!   without the CAS (the commit unfinished) is dropped by the auxiliary GC, which leaves the
//!   recovery entry of a commit that is not COMMITTED alone. A crash (or an idle store) before
//!   a settled removal leaves the recovery entry of a COMMITTED commit: the same as a crash
//!   right after the CAS, filtered by the scan and removed by the auxiliary GC.
//! - `gc_expired_history`: per due member, `message_gc_record.lua` deletes record and index and
//!   leaves a tombstone, then the member is removed, then the tombstone. A retry after a crash
//!   finds the tombstone instead of a "missing record" and does not fail.

mod append;
mod gc;
mod group;
mod history;
mod hot_tier;
mod inflight;
mod inspect;
mod join;
mod keys;
mod lease;
mod reserve;
mod restore;
mod scripts;
mod transitions;

pub use self::hot_tier::TrimReport;
pub use self::lease::{RecentRecords, SeqLeases, DEFAULT_LEASE_BLOCK};
pub use self::restore::RestoreReport;

use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use self::group::GroupCommit;
use self::inflight::InFlight;
use self::keys::Keys;
use self::lease::Renewals;
use self::scripts::{expect_ok, from_reply, invoke, query, run, Batch, Link, Reply};
use super::index_shard::ShardCursor;
use super::{connect_checked, RedisConfig};
use crate::clock::{Clock, HybridClock};
use crate::codec::{decode_commit_parts, encode_request};
use crate::error::{StoreError, StoreResult};
use crate::ids::{ConversationId, MessageId, TenantId, UnixMillis, UserId};
use crate::message::{
    Commit, CommitIntent, CommitKey, CommitRequest, CommitState, ConversationSummary, HistoryPage, HistoryQuery,
    Publication, ReadPosition,
};
use crate::message_store::{GcReport, HistoryAuthorizer, MessageStore, COMMIT_AUX_TTL_MILLIS};
use crate::retention::RetentionPolicy;
use crate::rules::{conflict, describe as context};

/// Redis TTL put on a COMMITTED commit hash: a safety net against leaks (a crash before the
/// commit reached `{commitgc}`), twice the auxiliary TTL the GC enforces on the injected clock.
pub const COMMITTED_REDIS_TTL_MILLIS: i64 = 2 * COMMIT_AUX_TTL_MILLIS;

/// Redis TTL of a request key's claim (group-commit layout), set when it is taken and again at
/// COMMITTED unless the claim is young (see [`CLAIM_YOUNG`]): it outlives the commit's
/// safety-net TTL, so the claim goes only after its commit (or with the auxiliary GC, claim
/// first).
pub(crate) const CLAIM_MILLIS: i64 = COMMITTED_REDIS_TTL_MILLIS + CLAIM_MARGIN_MILLIS;

/// How much longer a fresh claim lives than a commit's safety-net TTL.
const CLAIM_MARGIN_MILLIS: i64 = 60 * 60 * 1000;

/// How long after this store took a claim (its `SET PX`, [`CLAIM_MILLIS`]) the claim's
/// remaining life still exceeds a commit's safety-net TTL set now, with half the margin spare
/// (for the Redis clock against this process's, and the round trips): the COMMITTED step of
/// such a send leaves the claim's TTL as it is, one write fewer per send.
pub(crate) const CLAIM_YOUNG: std::time::Duration = std::time::Duration::from_millis(CLAIM_MARGIN_MILLIS as u64 / 2);

/// Highest seq this backend issues: ZSET scores are doubles, exact up to 2^53.
const MAX_SEQ: u64 = 1 << 53;

/// `MessageStore` on Redis. Clones share one multiplexed connection.
#[derive(Clone)]
pub struct RedisMessageStore {
    con: Link,
    keys: Keys,
    policy: RetentionPolicy,
    clock: Arc<dyn Clock>,
    /// Where sends' `created_at` comes from: [`Self::clock`] as a hybrid logical clock, which
    /// observes each conversation's clock as an allocation answers it (see `reserve.rs`).
    stamps: Arc<HybridClock>,
    /// `Some(window)` when this store owns the hot-tier trim (see [`Self::with_trim_window`]).
    trim_window_millis: Option<i64>,
    /// What this store last saw of the commits it is driving (a hint; see [`inflight`]).
    inflight: Arc<InFlight>,
    /// `{recovery}` members of commits this store moved to COMMITTED and entered in
    /// `{commitgc}` (both confirmed), whose removal rides on the next round trip that can carry
    /// it (see [`Self::flush_settled`]).
    settled: Arc<Mutex<Vec<String>>>,
    /// Where seqs are leased from (see [`lease`]); `None`: this store issues no seqs.
    leases: Option<Arc<SeqLeases>>,
    /// Conversations whose lease is being extended early.
    renewals: Arc<Renewals>,
    /// Where the next scan of each sharded global index starts.
    scans: Arc<IndexScans>,
    /// Where new sends' commits go.
    layout: CommitLayout,
    /// `Some` when sends in flight share their round trips ([`group`]).
    group: Option<GroupCommit>,
}

/// The scan cursors of the sharded global indexes ([`crate::redis::index_shard`]).
#[derive(Debug, Default)]
struct IndexScans {
    recovery: ShardCursor,
    commit_gc: ShardCursor,
    history_gc: ShardCursor,
    hot_window: ShardCursor,
}

impl std::fmt::Debug for RedisMessageStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisMessageStore")
            .field("keys", &self.keys)
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

/// Where a store creates the commits of new sends (see "Commit layouts" above). Every store
/// reads, drives and collects commits of both layouts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CommitLayout {
    /// In the sender's slot, beside the request key: five round trips per send.
    #[default]
    InSenderSlot,
    /// In the conversation's slot, created by the script that issues the seq, the key claimed
    /// in the sender's slot: three round trips per send. Not yet for production: a lease
    /// revalidation restores the commits of recent records in the sender's slot, and a fleet
    /// must first run a release that reads this layout.
    InConversationSlot,
}

/// Where one commit's hash lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Loc {
    /// `{k:<tenant><sender>}:commit:<client id>`.
    Sender,
    /// `{c:<tenant><conversation>}:commit:<sender>:<client id>`, claimed by
    /// `{k:<tenant><sender>}:claim:<client id>`.
    Conversation(ConversationId),
}

/// A commit as read from its hash.
struct Stored {
    /// The `commit` field exactly as stored (what a CAS from this commit compares).
    blob: Vec<u8>,
    request_bytes: Vec<u8>,
    commit: Commit,
    /// Where it was found.
    loc: Loc,
}

/// `commit <tenant>/<sender>/<client id>` of a key, formatted only when shown (error contexts).
struct Described<'a>(&'a CommitKey);

impl std::fmt::Display for Described<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&context(self.0))
    }
}

/// The `{recovery}` / `{commitgc}` member of `commit` stored at `loc`.
fn aux_member_at(commit: &Commit, loc: Loc) -> String {
    let key = &commit.intent.request.key;
    match loc {
        Loc::Sender => keys::aux_member(key, commit.intent.created_at),
        Loc::Conversation(conversation) => {
            keys::aux_member_in_conversation(key, conversation, commit.intent.message_id)
        }
    }
}

/// Whether `commit` is COMMITTED and past the auxiliary TTL at `now`.
fn aux_due(commit: &Commit, now: UnixMillis) -> bool {
    commit.committed_at.is_some_and(|at| at.plus_millis(COMMIT_AUX_TTL_MILLIS) <= now)
}

/// Decodes a stored commit and checks it against the key (and, in a conversation's slot, the
/// conversation) it was found under.
fn decode_stored(key: &CommitKey, loc: Loc, request_bytes: Vec<u8>, blob: Vec<u8>) -> StoreResult<Stored> {
    let commit = decode_commit_parts(&request_bytes, &blob)?;
    let elsewhere = matches!(loc, Loc::Conversation(c) if c != commit.intent.request.conversation);
    if commit.intent.request.key != *key || elsewhere {
        return Err(StoreError::CorruptEntry(format!(
            "{}: the stored commit does not match its key or request bytes",
            context(key)
        )));
    }
    Ok(Stored { blob, request_bytes, commit, loc })
}

/// The value of a request key's claim: `<conversation hex>:<xxh3-128 of the request bytes, hex>`.
fn claim_value(conversation: ConversationId, request_bytes: &[u8]) -> String {
    format!("{}:{:032x}", conversation.to_hex(), xxhash_rust::xxh3::xxh3_128(request_bytes))
}

/// The conversation a claim value names.
fn claimed_conversation(value: &str) -> StoreResult<ConversationId> {
    value
        .split_once(':')
        .and_then(|(conversation, _)| ConversationId::from_hex(conversation).ok())
        .ok_or_else(|| StoreError::CorruptEntry(format!("request key claim {value:?} is malformed")))
}

impl RedisMessageStore {
    /// Connects to Redis (checking it answers) and opens the store in `config`'s namespace.
    pub async fn open(
        config: &RedisConfig,
        policy: RetentionPolicy,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, StoreError> {
        let con = Link::new(connect_checked(config).await?);
        let store = Self {
            con,
            keys: Keys::new(&config.namespace),
            policy,
            stamps: Arc::new(HybridClock::new(clock.clone())),
            clock,
            trim_window_millis: None,
            inflight: Arc::default(),
            settled: Arc::default(),
            leases: None,
            renewals: Arc::default(),
            scans: Arc::default(),
            layout: CommitLayout::default(),
            group: None,
        };
        Ok(store.with_group_commit(true))
    }

    /// The store creating new sends' commits in `layout` (the default: in the sender's slot).
    /// It reads, drives and collects commits of either layout whatever this says.
    pub fn with_commit_layout(mut self, layout: CommitLayout) -> Self {
        self.layout = layout;
        self
    }

    /// With `true` (the default), sends in flight at once share their round trips (group
    /// commit: see the `group` module); with `false` each send makes its own.
    pub fn with_group_commit(mut self, enabled: bool) -> Self {
        self.group = enabled.then(|| GroupCommit::new(self.con.clone()));
        self
    }

    /// Sends `batch` as [`scripts::run`] does; with group commit, in one round trip with every
    /// batch waiting meanwhile.
    async fn shared_trip(&self, what: &str, batch: Batch) -> StoreResult<Vec<Reply>> {
        match &self.group {
            Some(group) => group.round_trip(what, batch).await,
            None => run(&self.con, what, batch).await,
        }
    }

    /// Checks that Redis answers.
    pub async fn ping(&self) -> StoreResult<()> {
        query::<String>(&self.con, "pinging redis", &redis::cmd("PING")).await.map(drop)
    }

    /// Round trips to Redis this store (and its clones) made so far: a pipeline counts once,
    /// as does a script call; a script reloaded after NOSCRIPT costs more. For tests and the
    /// benchmark, which hold the steps to their documented costs.
    #[doc(hidden)]
    pub fn round_trips(&self) -> u64 {
        self.con.trips()
    }

    /// The retention policy this store applies.
    pub fn policy(&self) -> RetentionPolicy {
        self.policy
    }

    /// Reads the commit stored under `key`, in whichever layout holds it: the sender's slot
    /// answers the commit there and the key's claim in one round trip; a claim names the
    /// conversation whose slot holds the commit (one more).
    async fn load(&self, key: &CommitKey) -> StoreResult<Option<Stored>> {
        let mut batch = Batch::default();
        batch.command("HMGET").arg(self.keys.commit(key)).arg("req").arg("commit");
        batch.command("GET").arg(self.keys.sender_claim(key));
        let [fields, claim] = exactly(run(&self.con, "reading a commit", batch).await?)?;
        let (req, blob): (Option<Vec<u8>>, Option<Vec<u8>>) = from_reply("reading a commit", fields)?;
        if req.is_some() || blob.is_some() {
            return self.stored(key, Loc::Sender, req, blob);
        }
        match from_reply::<Option<String>>("reading a request key's claim", claim)? {
            Some(value) => self.load_at(key, Loc::Conversation(claimed_conversation(&value)?)).await,
            None => Ok(None),
        }
    }

    /// Reads the commit of `key` stored at `loc`.
    async fn load_at(&self, key: &CommitKey, loc: Loc) -> StoreResult<Option<Stored>> {
        let cmd = redis::cmd("HMGET").arg(self.keys.commit_at(key, loc)).arg("req").arg("commit").clone();
        let (req, blob) = query(&self.con, "reading a commit", &cmd).await?;
        self.stored(key, loc, req, blob)
    }

    /// A commit hash's two fields, decoded.
    fn stored(
        &self,
        key: &CommitKey,
        loc: Loc,
        req: Option<Vec<u8>>,
        blob: Option<Vec<u8>>,
    ) -> StoreResult<Option<Stored>> {
        match (req, blob) {
            (None, None) => Ok(None),
            (Some(req), Some(blob)) => decode_stored(key, loc, req, blob).map(Some),
            _ => Err(StoreError::CorruptEntry(format!(
                "commit hash {} lacks its request or commit field",
                self.keys.commit_at(key, loc)
            ))),
        }
    }

    /// Deletes the commit `read` (stored at `loc`) if it is still unchanged; `false` when it
    /// was already gone or changed (a reuse of the key). In a conversation's slot the key's
    /// claim goes first, and only if it is still this commit's: a claim deleted after its
    /// commit could be a retry's new claim, whose commit would then be left unclaimed.
    async fn delete_commit(&self, key: &CommitKey, loc: Loc, stored: &Stored) -> StoreResult<bool> {
        if let Loc::Conversation(conversation) = loc {
            let mut release = scripts::CLAIM_RELEASE.key(self.keys.sender_claim(key));
            release.arg(claim_value(conversation, &stored.request_bytes));
            let reply = invoke(&self.con, "releasing a request key's claim", &release).await?;
            match expect_ok("message_claim_release", &Described(key), reply) {
                Ok(()) | Err(StoreError::Conflict(_)) => {}
                Err(e) => return Err(e),
            }
        }
        let mut invocation = scripts::COMMIT_DELETE.key(self.keys.commit_at(key, loc));
        invocation.arg(&stored.blob);
        let reply = invoke(&self.con, "deleting a commit", &invocation).await?;
        match expect_ok("message_commit_delete", &Described(key), reply) {
            Ok(()) => Ok(true),
            Err(StoreError::NotFound(_) | StoreError::Conflict(_)) => Ok(false),
            Err(e) => Err(e),
        }
    }

    async fn zrem(&self, zset: &str, member: &str) -> StoreResult<()> {
        let cmd = redis::cmd("ZREM").arg(zset).arg(member).clone();
        query::<i64>(&self.con, "removing an index member", &cmd).await.map(drop)
    }

    async fn zrange_due(&self, zset: &str, max: &str, offset: usize, count: usize) -> StoreResult<Vec<String>> {
        let cmd =
            redis::cmd("ZRANGEBYSCORE").arg(zset).arg("-inf").arg(max).arg("LIMIT").arg(offset).arg(count).clone();
        query(&self.con, "reading an index", &cmd).await
    }
}

impl RedisMessageStore {
    /// `reserve` (and with `record`, `put_record`) in this store's [`CommitLayout`].
    async fn reserve_in(
        &self,
        request: &CommitRequest,
        proposed_id: MessageId,
        members: Option<&dyn HistoryAuthorizer>,
        record: bool,
    ) -> StoreResult<Commit> {
        match self.layout {
            CommitLayout::InSenderSlot => self.reserve_in_sender_slot(request, proposed_id, members, record).await,
            CommitLayout::InConversationSlot => {
                self.reserve_in_conversation(request, proposed_id, members, record).await
            }
        }
    }
}

/// A batch's replies, for a batch of `N` commands.
fn exactly<const N: usize>(replies: Vec<Reply>) -> StoreResult<[Reply; N]> {
    let n = replies.len();
    replies.try_into().map_err(|_| StoreError::InvariantViolation(format!("{n} replies to a batch of {N}")))
}

fn one(replies: Vec<Reply>) -> StoreResult<[Reply; 1]> {
    exactly(replies)
}

/// The first two replies of a batch of at least two commands.
fn at_least(replies: Vec<Reply>) -> StoreResult<[Reply; 2]> {
    let n = replies.len();
    let mut it = replies.into_iter();
    match (it.next(), it.next()) {
        (Some(a), Some(b)) => Ok([a, b]),
        _ => Err(StoreError::InvariantViolation(format!("{n} replies to a batch of at least 2"))),
    }
}

fn missing(what: &str) -> StoreError {
    StoreError::InvariantViolation(format!("{what}: no reply"))
}

#[async_trait]
impl MessageStore for RedisMessageStore {
    async fn reserve(&self, request: &CommitRequest, proposed_id: MessageId) -> StoreResult<Commit> {
        self.reserve_in(request, proposed_id, None, false).await
    }

    async fn reserve_from_member(
        &self,
        request: &CommitRequest,
        proposed_id: MessageId,
        members: &dyn HistoryAuthorizer,
    ) -> StoreResult<Commit> {
        self.reserve_in(request, proposed_id, Some(members), false).await
    }

    async fn reserve_and_record(
        &self,
        request: &CommitRequest,
        proposed_id: MessageId,
        members: &dyn HistoryAuthorizer,
    ) -> StoreResult<Commit> {
        let result = self.reserve_in(request, proposed_id, Some(members), true).await;
        if result.is_err() {
            self.inflight.forget(&request.key);
        }
        result
    }

    async fn put_record(&self, intent: &CommitIntent) -> StoreResult<Commit> {
        let key = &intent.request.key;
        let reserved = Commit { intent: intent.clone(), state: CommitState::Reserved, committed_at: None };
        let known = self.inflight.get(key).filter(|k| k.commit == reserved).map(|k| k.loc);
        let result = self.record(key, reserved, known).await;
        if result.is_err() {
            self.inflight.forget(key);
        }
        result
    }

    async fn mark_outbox_published(
        &self,
        key: &CommitKey,
        message_id: MessageId,
        publication: Publication,
    ) -> StoreResult<Commit> {
        crate::rules::check_publication(publication)?;
        let result = self.outbox(key, message_id, publication).await;
        if result.is_err() {
            self.inflight.forget(key);
        }
        result
    }

    async fn mark_committed(&self, key: &CommitKey, message_id: MessageId) -> StoreResult<Commit> {
        let result = self.commit(key, message_id).await;
        self.inflight.forget(key);
        result
    }

    async fn mark_outbox_published_and_committed(
        &self,
        key: &CommitKey,
        message_id: MessageId,
        publication: Publication,
    ) -> StoreResult<Commit> {
        crate::rules::check_publication(publication)?;
        let result = self.outbox_and_commit(key, message_id, publication).await;
        self.inflight.forget(key);
        result
    }

    async fn load_commit(&self, key: &CommitKey) -> StoreResult<Option<Commit>> {
        Ok(self.load(key).await?.map(|s| s.commit))
    }

    async fn load_commit_for_request(&self, request: &CommitRequest) -> StoreResult<Option<Commit>> {
        match self.load(&request.key).await? {
            None => Ok(None),
            Some(s) if s.request_bytes == encode_request(request) => Ok(Some(s.commit)),
            Some(_) => Err(conflict(&request.key, "the key belongs to a different request")),
        }
    }

    async fn scan_recoverable_commits(&self, cutoff: UnixMillis, limit: usize) -> StoreResult<Vec<Commit>> {
        self.scan_recovery(cutoff, limit).await
    }

    async fn gc_committed_auxiliary(&self, limit: usize) -> StoreResult<GcReport> {
        self.gc_auxiliary(limit).await
    }

    async fn gc_expired_history(&self, limit: usize) -> StoreResult<GcReport> {
        self.gc_history(limit).await
    }

    async fn history_page(&self, query: &HistoryQuery, authorizer: &dyn HistoryAuthorizer) -> StoreResult<HistoryPage> {
        authorizer.authorize_history(query.tenant, query.conversation, query.viewer).await?;
        self.read_page(query).await
    }

    async fn conversation_summaries(
        &self,
        tenant: TenantId,
        viewer: UserId,
        positions: &[ReadPosition],
    ) -> StoreResult<Vec<ConversationSummary>> {
        let mut out = Vec::with_capacity(positions.len());
        for position in positions {
            out.push(self.summary(tenant, viewer, position).await?);
        }
        Ok(out)
    }
}
