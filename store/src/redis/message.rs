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
//! | `<ns>:{c:<tenant><conversation>}:idx` | ZSET | history index: member = seq (decimal), score = seq |
//! | `<ns>:{c:<tenant><conversation>}:rec` | HASH | seq (decimal) → canonical record blob |
//! | `<ns>:{c:<tenant><conversation>}:lowbound` | string | hot-tier lower bound: seqs ≤ it were trimmed (absent = 0) |
//! | `<ns>:{c:<tenant><conversation>}:gcdone` | SET | seqs the expiry drain deleted whose expiry member may remain |
//! | `<ns>:{c:<tenant><conversation>}:archived` | string | archived watermark: the trim never passes it (absent = 0) |
//! | `<ns>:{k:<tenant><sender>}:commit:<client id>` | HASH | `req` = request bytes, `commit` = commit blob |
//! | `<ns>:{recovery}` | ZSET | unfinished commits: score = created_at ms, member = `<tenant><sender>:<created_at>:<client id>` |
//! | `<ns>:{commitgc}` | ZSET | COMMITTED commits: score = committed_at ms, same member |
//! | `<ns>:{msghistorygc}` | ZSET | hot-tier expiry index: score = expiry ms, member = `<tenant>\|<conversation>\|<seq>` |
//! | `<ns>:{hotwindow}` | ZSET | records the trim must remove: score = created_at ms, same member (trim-owning stores) |
//!
//! Ids are 32 lowercase hex digits. Blobs are the canonical encodings of [`crate::codec`],
//! stored as they are; idempotency compares them byte for byte. Seqs stay below 2^53 so that
//! ZSET scores hold them exactly. Time always comes from the injected [`Clock`] and reaches
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
//! call, `mark_outbox_published_and_committed`, so its send costs 5 round trips:
//!
//! | step | hot path | cold |
//! |------|---------:|-----:|
//! | `reserve` | 2 | 2 |
//! | `put_record` | 2 | 3 |
//! | `mark_outbox_published` | 1 | 2 |
//! | `mark_committed` | 1 | 3 |
//! | `mark_outbox_published_and_committed` | 1 | 3 |
//!
//! (`reserve` costs more when its lease must be extended or revalidated: see [`lease`].)
//!
//! The hot path skips reading the commit because the store remembers, for each commit in flight,
//! the exact commit it last wrote or read (the *in-flight knowledge*, module `inflight`): a hint,
//! never trusted on its own. Every transition is a compare-and-set of the whole blob
//! (`message_commit_cas.lua`), so a stale hint only turns into the `Conflict` (or `NotFound`) a
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
//!   bytes → that commit (a replay, or a racing reserver that won), other bytes → `Conflict`.
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
//!   registrations succeed, ⟨CAS RECORDED → OUTBOXED ‖ CAS OUTBOXED → COMMITTED ‖ ZADD
//!   `{commitgc}` ‖ ZREM settled⟩, then as `mark_committed` (3). Both CAS address the commit's
//!   slot, so one node runs them in order, and the second compares against exactly the first
//!   one's result: COMMITTED never lands without this OUTBOXED before it, a crash or a refusal
//!   in between leaves OUTBOXED (for the recovery loop), and another driver's step in between
//!   makes the second a `Conflict`, as with two round trips. Otherwise the two steps in turn.
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

mod gc;
mod history;
mod hot_tier;
mod inflight;
mod keys;
mod lease;
mod restore;
mod scripts;

pub use self::hot_tier::TrimReport;
pub use self::lease::{RecentRecords, SeqLeases, DEFAULT_LEASE_BLOCK};
pub use self::restore::RestoreReport;

use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;

use self::inflight::InFlight;
use self::keys::{aux_member, Keys};
use self::lease::{Allocation, Renewals};
use self::scripts::{answered, bytes, expect_ok, invoke, query, run, status, Batch, Link, Reply};
use super::{connect_checked, RedisConfig};
use crate::clock::Clock;
use crate::codec::{decode_commit, encode_commit, encode_intent, encode_record, encode_request};
use crate::error::{StoreError, StoreResult};
use crate::ids::{ConversationId, ConversationSeq, MessageId, TenantId, UnixMillis, UserId};
use crate::message::{
    Commit, CommitIntent, CommitKey, CommitRequest, CommitState, ConversationSummary, HistoryPage, HistoryQuery,
    Publication, ReadPosition,
};
use crate::message_store::{GcReport, HistoryAuthorizer, MessageStore, COMMIT_AUX_TTL_MILLIS};
use crate::retention::RetentionPolicy;
use crate::rules::{check_request, conflict, describe as context, expect_message, expect_state, not_found};

/// Redis TTL put on a COMMITTED commit hash: a safety net against leaks (a crash before the
/// commit reached `{commitgc}`), twice the auxiliary TTL the GC enforces on the injected clock.
pub const COMMITTED_REDIS_TTL_MILLIS: i64 = 2 * COMMIT_AUX_TTL_MILLIS;

/// Highest seq this backend issues: ZSET scores are doubles, exact up to 2^53.
const MAX_SEQ: u64 = 1 << 53;

/// `MessageStore` on Redis. Clones share one multiplexed connection.
#[derive(Clone)]
pub struct RedisMessageStore {
    con: Link,
    keys: Keys,
    policy: RetentionPolicy,
    clock: Arc<dyn Clock>,
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
}

impl std::fmt::Debug for RedisMessageStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisMessageStore")
            .field("keys", &self.keys)
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

/// A commit as read from its hash.
struct Stored {
    blob: Vec<u8>,
    request_bytes: Vec<u8>,
    commit: Commit,
}

/// `commit <tenant>/<sender>/<client id>` of a key, formatted only when shown (error contexts).
struct Described<'a>(&'a CommitKey);

impl std::fmt::Display for Described<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&context(self.0))
    }
}

/// Whether `commit` is COMMITTED and past the auxiliary TTL at `now`.
fn aux_due(commit: &Commit, now: UnixMillis) -> bool {
    commit.committed_at.is_some_and(|at| at.plus_millis(COMMIT_AUX_TTL_MILLIS) <= now)
}

/// Decodes a stored commit and checks it against the key it was found under.
fn decode_stored(key: &CommitKey, request_bytes: Vec<u8>, blob: Vec<u8>) -> StoreResult<Stored> {
    let commit = decode_commit(&blob)?;
    if commit.intent.request.key != *key || encode_request(&commit.intent.request) != request_bytes {
        return Err(StoreError::CorruptEntry(format!(
            "{}: the stored commit does not match its key or request bytes",
            context(key)
        )));
    }
    Ok(Stored { blob, request_bytes, commit })
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
            clock,
            trim_window_millis: None,
            inflight: Arc::default(),
            settled: Arc::default(),
            leases: None,
            renewals: Arc::default(),
        };
        Ok(store)
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

    /// The counter of the highest seq issued in a conversation.
    pub fn seq_key(&self, tenant: TenantId, conversation: ConversationId) -> String {
        self.keys.seq(tenant, conversation)
    }

    /// The HASH holding a conversation's record blobs (field = seq in decimal).
    #[doc(hidden)]
    pub fn record_key(&self, tenant: TenantId, conversation: ConversationId) -> String {
        self.keys.records(tenant, conversation)
    }

    /// The ZSET history index of a conversation (member = score = seq).
    #[doc(hidden)]
    pub fn index_key(&self, tenant: TenantId, conversation: ConversationId) -> String {
        self.keys.index(tenant, conversation)
    }

    /// The hot-tier lower bound of a conversation (seqs at or below it were trimmed).
    #[doc(hidden)]
    pub fn lower_bound_key(&self, tenant: TenantId, conversation: ConversationId) -> String {
        self.keys.lower_bound(tenant, conversation)
    }

    /// The seq lease of a conversation (`<serving>:<through>:<start>`; see [`lease`]).
    #[doc(hidden)]
    pub fn lease_key(&self, tenant: TenantId, conversation: ConversationId) -> String {
        self.keys.lease(tenant, conversation)
    }

    /// The hash of one commit (`req`, `commit`).
    #[doc(hidden)]
    pub fn commit_key(&self, key: &CommitKey) -> String {
        self.keys.commit(key)
    }

    /// The recovery index (`{recovery}`).
    #[doc(hidden)]
    pub fn recovery_key(&self) -> String {
        self.keys.recovery()
    }

    /// The index of COMMITTED commits (`{commitgc}`).
    #[doc(hidden)]
    pub fn commit_gc_key(&self) -> String {
        self.keys.commit_gc()
    }

    /// The hot-tier expiry index (`{msghistorygc}`).
    #[doc(hidden)]
    pub fn history_gc_key(&self) -> String {
        self.keys.history_gc()
    }

    /// Test sabotage: removes a record blob, leaving its index entry.
    #[doc(hidden)]
    pub async fn sabotage_remove_record(
        &self,
        tenant: TenantId,
        conversation: ConversationId,
        seq: ConversationSeq,
    ) -> StoreResult<()> {
        let cmd = redis::cmd("HDEL").arg(self.keys.records(tenant, conversation)).arg(seq.0).clone();
        query::<i64>(&self.con, "sabotage: removing a record", &cmd).await.map(drop)
    }

    /// Test sabotage: replaces a record blob with `bytes`.
    #[doc(hidden)]
    pub async fn sabotage_overwrite_record(
        &self,
        tenant: TenantId,
        conversation: ConversationId,
        seq: ConversationSeq,
        bytes: Vec<u8>,
    ) -> StoreResult<()> {
        let cmd = redis::cmd("HSET").arg(self.keys.records(tenant, conversation)).arg(seq.0).arg(bytes).clone();
        query::<i64>(&self.con, "sabotage: overwriting a record", &cmd).await.map(drop)
    }

    /// Reads the commit stored under `key`.
    async fn load(&self, key: &CommitKey) -> StoreResult<Option<Stored>> {
        let hash = self.keys.commit(key);
        let cmd = redis::cmd("HMGET").arg(&hash).arg("req").arg("commit").clone();
        let (req, blob): (Option<Vec<u8>>, Option<Vec<u8>>) = query(&self.con, "reading a commit", &cmd).await?;
        match (req, blob) {
            (None, None) => Ok(None),
            (Some(req), Some(blob)) => decode_stored(key, req, blob).map(Some),
            _ => Err(StoreError::CorruptEntry(format!("commit hash {hash} lacks its request or commit field"))),
        }
    }

    /// Deletes the commit `read` if it is still unchanged; `false` when it was already gone
    /// or changed (a reuse of the key).
    async fn delete_commit(&self, key: &CommitKey, read: &[u8]) -> StoreResult<bool> {
        let mut invocation = scripts::COMMIT_DELETE.key(self.keys.commit(key));
        invocation.arg(read);
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

    /// `reserve` when no seq could be allocated (no lease could be had, a corrupt counter): a
    /// replay is still answered from the stored commit, a different request is still `Conflict`;
    /// anything else gets the allocation's error. The recovery entry written alongside (if it
    /// was) leads nowhere and is collected by the auxiliary GC, unless removed here: only when
    /// the stored commit shows it is not that commit's entry.
    async fn reserve_without_seq(
        &self,
        request: &CommitRequest,
        request_bytes: &[u8],
        member: &str,
        allocation: StoreError,
    ) -> StoreResult<Commit> {
        let key = &request.key;
        let Some(existing) = self.load(key).await? else { return Err(allocation) };
        if aux_member(key, existing.commit.intent.created_at) != member {
            self.give_up_orphan(member).await;
        }
        if existing.request_bytes != request_bytes {
            return Err(conflict(key, "the same key was reserved for different content"));
        }
        Ok(existing.commit)
    }

    /// Counts `seq` as a hole when the key's stored commit (`theirs`) holds another seq: the
    /// key's claim was lost with Redis state, so the allocation issued a new seq that nothing
    /// will carry. Then points the claim at the stored commit's seq (best effort), so later
    /// attempts of the key get that one.
    async fn abandoned(&self, seq: ConversationSeq, theirs: &CommitIntent) {
        if theirs.seq == seq {
            return;
        }
        metrics::counter!(crate::metrics::SEQ_ABANDONED).increment(1);
        let (tenant, conversation) = (theirs.request.key.tenant, theirs.request.conversation);
        let (claims, times) = (self.keys.claims(tenant, conversation), self.keys.claim_times(tenant, conversation));
        let (member, life) = (keys::claim(&theirs.request.key), 2 * COMMIT_AUX_TTL_MILLIS);
        // As message_allocate_seq.lua claims: the claim, its time, and the keys' safety-net TTL.
        let mut batch = Batch::default();
        batch.command("HSET").arg(&claims).arg(&member).arg(format!("{}:{}", theirs.seq.0, theirs.created_at.0));
        batch.command("ZADD").arg(&times).arg(theirs.created_at.0).arg(&member);
        batch.command("PEXPIRE").arg(&claims).arg(life);
        batch.command("PEXPIRE").arg(&times).arg(life);
        if let Err(e) = run(&self.con, "pointing a claim at its commit", batch).await {
            tracing::debug!(%conversation, error = %e, "pointing a claim at its commit failed");
        }
    }

    /// Best effort: removes a recovery entry that leads nowhere (else the auxiliary GC does).
    async fn give_up_orphan(&self, member: &str) {
        let _ = self.zrem(&self.keys.recovery(), member).await;
    }

    /// `put_record` from RESERVED commit `reserved`; `known` when the in-flight knowledge says
    /// Redis holds exactly that commit.
    async fn record(&self, key: &CommitKey, reserved: Commit, known: bool) -> StoreResult<Commit> {
        let known_blob = if known && self.write_record(&reserved.intent, "known").await? {
            Some(encode_commit(&reserved))
        } else {
            None
        };
        let read = match known_blob {
            Some(blob) => blob,
            None => {
                let stored = self.load(key).await?.ok_or_else(|| not_found(key))?;
                if encode_intent(&stored.commit.intent) != encode_intent(&reserved.intent) {
                    return Err(conflict(key, "the intent differs from the reserved one"));
                }
                expect_state(key, &stored.commit, CommitState::Reserved)?;
                if !self.write_record(&reserved.intent, "read").await? {
                    return Err(StoreError::InvariantViolation(
                        "message_put_record: 'stale' for a commit just read".to_owned(),
                    ));
                }
                stored.blob
            }
        };
        let mut next = reserved;
        next.state = CommitState::Recorded;
        // The transition and the hot-tier registrations, one round trip: the record exists (just
        // written or found identical), so registering it is right whatever the CAS answers; a
        // CAS that lands without them leaves them to `mark_committed`.
        let mut batch = Batch::default();
        self.cas(&mut batch, key, &read, &next, 0);
        self.hot_tier_registrations(&next.intent, &mut batch);
        let mut replies = run(&self.con, "recording a commit", batch).await?.into_iter();
        let cas = replies.next().ok_or_else(|| missing("message_commit_cas"))?;
        self.cas_outcome(key, cas)?;
        let registered = replies.all(|r| r.is_ok());
        self.inflight.remember(next.clone(), registered);
        Ok(next)
    }

    /// Writes the record and index of `intent` (`message_put_record.lua` in `mode`); `false`
    /// when the script calls the caller's knowledge stale (mode `known` only).
    async fn write_record(&self, intent: &CommitIntent, mode: &str) -> StoreResult<bool> {
        let (tenant, conversation) = (intent.request.key.tenant, intent.request.conversation);
        let expires_at = self.policy.expires_at(intent.request.retention, intent.created_at);
        let keys = [
            self.keys.index(tenant, conversation),
            self.keys.records(tenant, conversation),
            self.keys.seq(tenant, conversation),
            self.keys.lower_bound(tenant, conversation),
            self.keys.gc_tombstones(tenant, conversation),
            self.keys.lease(tenant, conversation),
        ];
        let mut batch = Batch::default();
        batch
            .script(&scripts::PUT_RECORD, &keys.each_ref().map(String::as_str))
            .arg(intent.seq.0)
            .arg(encode_record(&intent.record(expires_at)))
            .arg(mode);
        let [reply] = one(run(&self.con, "writing a history record", batch).await?)?;
        let reply = answered("writing a history record", reply)?;
        match status("message_put_record", &Described(&intent.request.key), reply)?.0.as_str() {
            "ok" => Ok(true),
            "stale" => Ok(false),
            other => {
                Err(StoreError::InvariantViolation(format!("message_put_record: unexpected script status {other:?}")))
            }
        }
    }

    /// `mark_outbox_published` after the publication was checked.
    async fn outbox(&self, key: &CommitKey, message_id: MessageId, publication: Publication) -> StoreResult<Commit> {
        let (current, read, registered) = self.recorded(key, message_id).await?;
        let mut next = current;
        next.intent.publication = Some(publication);
        next.state = CommitState::Outboxed;
        // The transition, with the hot-tier registrations unless this store saw them succeed
        // at RECORDED: the record exists (the commit is past RECORDED), so registering it is
        // right whatever the CAS answers; a CAS that lands without them leaves them to
        // `mark_committed`.
        let mut batch = Batch::default();
        self.cas(&mut batch, key, &read, &next, 0);
        if !registered {
            self.hot_tier_registrations(&next.intent, &mut batch);
        }
        let mut replies = run(&self.con, "publishing a commit", batch).await?.into_iter();
        let cas = replies.next().ok_or_else(|| missing("message_commit_cas"))?;
        self.cas_outcome(key, cas)?;
        let registered = registered || replies.all(|r| r.is_ok());
        self.inflight.remember(next.clone(), registered);
        Ok(next)
    }

    /// The RECORDED commit under `key` for `message_id`: from the in-flight knowledge, else
    /// read (and checked). Also its exact stored bytes, and whether this store saw its hot-tier
    /// registrations succeed.
    async fn recorded(&self, key: &CommitKey, message_id: MessageId) -> StoreResult<(Commit, Vec<u8>, bool)> {
        Ok(match self.known(key, CommitState::Recorded, message_id) {
            Some(k) => (k.commit.clone(), encode_commit(&k.commit), k.registered),
            None => {
                let stored = self.load(key).await?.ok_or_else(|| not_found(key))?;
                expect_message(key, &stored.commit, message_id)?;
                expect_state(key, &stored.commit, CommitState::Recorded)?;
                (stored.commit, stored.blob, false)
            }
        })
    }

    /// `mark_outbox_published_and_committed`: when this store saw the hot-tier registrations
    /// succeed, ⟨CAS RECORDED → OUTBOXED ‖ CAS OUTBOXED → COMMITTED ‖ ZADD `{commitgc}` ‖
    /// ZREM settled⟩ in one round trip; otherwise the two steps one after the other.
    async fn outbox_and_commit(
        &self,
        key: &CommitKey,
        message_id: MessageId,
        publication: Publication,
    ) -> StoreResult<Commit> {
        let known = self.known(key, CommitState::Recorded, message_id).filter(|k| k.registered);
        let Some(known) = known else {
            self.outbox(key, message_id, publication).await?;
            return self.commit(key, message_id).await;
        };
        let read = encode_commit(&known.commit);
        let now = self.clock.now();
        let mut outboxed = known.commit.clone();
        outboxed.intent.publication = Some(publication);
        outboxed.state = CommitState::Outboxed;
        let mut committed = outboxed.clone();
        committed.state = CommitState::Committed;
        committed.committed_at = Some(now);
        // The second CAS compares against the first one's result, and both address the commit's
        // slot (one node, in order): COMMITTED lands only on top of this OUTBOXED. Another
        // driver's step between the two makes the second a Conflict, as two round trips would.
        let member = aux_member(key, committed.intent.created_at);
        let mut batch = Batch::default();
        self.cas(&mut batch, key, &read, &outboxed, 0);
        self.cas(&mut batch, key, &encode_commit(&outboxed), &committed, COMMITTED_REDIS_TTL_MILLIS);
        batch.command("ZADD").arg(self.keys.commit_gc()).arg(now.0).arg(&member);
        self.unlist_settled(&mut batch);
        let mut replies = run(&self.con, "publishing and committing a commit", batch).await?.into_iter();
        let (Some(to_outboxed), Some(to_committed), Some(listed)) = (replies.next(), replies.next(), replies.next())
        else {
            return Err(missing("message_commit_cas"));
        };
        self.cas_outcome(key, to_outboxed)?;
        self.cas_outcome(key, to_committed)?;
        // This commit's recovery entry goes on a later round trip, once both are confirmed.
        if listed.is_ok() {
            self.settled.lock().unwrap_or_else(PoisonError::into_inner).push(member);
        }
        Ok(committed)
    }

    /// What the in-flight knowledge says `key` holds, if that is `state` for `message_id`.
    fn known(&self, key: &CommitKey, state: CommitState, message_id: MessageId) -> Option<Arc<inflight::Known>> {
        self.inflight.get(key).filter(|k| k.commit.state == state && k.commit.intent.message_id == message_id)
    }

    /// `mark_committed`.
    async fn commit(&self, key: &CommitKey, message_id: MessageId) -> StoreResult<Commit> {
        let now = self.clock.now();
        let (current, read, registered) = match self.known(key, CommitState::Outboxed, message_id) {
            Some(k) => (k.commit.clone(), encode_commit(&k.commit), k.registered),
            None => {
                let stored = self.load(key).await?.ok_or_else(|| not_found(key))?;
                expect_message(key, &stored.commit, message_id)?;
                expect_state(key, &stored.commit, CommitState::Outboxed)?;
                (stored.commit, stored.blob, false)
            }
        };
        // (1) The hot-tier registrations strictly before the transition (after it a repeated
        // step is a Conflict and could never add them), unless this store saw them succeed.
        if !registered {
            self.register_hot_tier(&current.intent).await?;
        }
        // (2) The transition (with the safety-net TTL) ‖ its `{commitgc}` entry ‖ the recovery
        // entries of earlier commits whose transition and `{commitgc}` entry were confirmed.
        let mut next = current;
        next.state = CommitState::Committed;
        next.committed_at = Some(now);
        let member = aux_member(key, next.intent.created_at);
        let mut batch = Batch::default();
        self.cas(&mut batch, key, &read, &next, COMMITTED_REDIS_TTL_MILLIS);
        batch.command("ZADD").arg(self.keys.commit_gc()).arg(now.0).arg(&member);
        self.unlist_settled(&mut batch);
        let [cas, listed, ..] = at_least(run(&self.con, "committing a commit", batch).await?)?;
        self.cas_outcome(key, cas)?;
        // (3) This commit's recovery entry goes on a later round trip, once both are confirmed.
        if listed.is_ok() {
            self.settled.lock().unwrap_or_else(PoisonError::into_inner).push(member);
        }
        Ok(next)
    }

    /// Adds to `batch` the removal from `{recovery}` of every settled commit (COMMITTED and in
    /// `{commitgc}`, both confirmed). If the removal fails or never happens, the entries stay:
    /// the recovery scan skips COMMITTED commits and the auxiliary GC removes them.
    fn unlist_settled(&self, batch: &mut Batch) {
        let settled = std::mem::take(&mut *self.settled.lock().unwrap_or_else(PoisonError::into_inner));
        if !settled.is_empty() {
            batch.command("ZREM").arg(self.keys.recovery()).arg(settled);
        }
    }

    /// Removes from `{recovery}` the entries of commits this store committed whose removal is
    /// still pending (it rides on the next `mark_committed`; the recovery scan and the auxiliary
    /// GC also call this). A writer calls it before shutting down; skipping it is harmless.
    pub async fn flush_settled(&self) -> StoreResult<()> {
        let mut batch = Batch::default();
        self.unlist_settled(&mut batch);
        if batch.is_empty() {
            return Ok(());
        }
        for reply in run(&self.con, "removing settled recovery entries", batch).await? {
            answered("removing settled recovery entries", reply)?;
        }
        Ok(())
    }

    /// Adds to `batch` the CAS of `key`'s commit from `read` (exact bytes) to `next`.
    fn cas(&self, batch: &mut Batch, key: &CommitKey, read: &[u8], next: &Commit, redis_ttl_millis: i64) {
        batch
            .script(&scripts::COMMIT_CAS, &[&self.keys.commit(key)])
            .arg(read)
            .arg(encode_commit(next))
            .arg(redis_ttl_millis);
    }

    /// The outcome of a CAS added by [`Self::cas`].
    fn cas_outcome(&self, key: &CommitKey, reply: Reply) -> StoreResult<()> {
        expect_ok("message_commit_cas", &Described(key), answered("advancing a commit", reply)?)
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

fn two(replies: Vec<Reply>) -> StoreResult<[Reply; 2]> {
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
        check_request(request)?;
        let key = &request.key;
        let (tenant, conversation) = (key.tenant, request.conversation);
        let request_bytes = encode_request(request);
        // (1) A seq (the key's claim, or a new one) and the recovery entry: one round trip. An
        // allocation that issued nothing says what its lease needs first; then again, with the
        // same `created_at` (so the same recovery entry, written again, and no orphan entries).
        let created_at = self.clock.now();
        let member = aux_member(key, created_at);
        let (mut waits, mut prepares) = (0u32, 0u32);
        let seq = loop {
            let mut batch = Batch::default();
            self.allocate_seq(&mut batch, key, conversation, created_at);
            batch.command("ZADD").arg(self.keys.recovery()).arg(created_at.0).arg(&member);
            let [allocated, listed] = two(run(&self.con, "reserving a commit", batch).await?)?;
            let allocation = match self.allocation(conversation, allocated) {
                Ok(a) => a,
                Err(e) => return self.reserve_without_seq(request, &request_bytes, &member, e).await,
            };
            if let Allocation::Issued { seq, lease, renew } = allocation {
                if renew {
                    self.renew_soon(tenant, conversation, lease);
                }
                // No commit may exist without its recovery entry: stop here. The seq stays the
                // key's claim, so a retry gets it again.
                answered("writing the recovery index", listed)?;
                break seq;
            }
            let exhausted = if matches!(allocation, Allocation::Wait) {
                waits += 1;
                (waits > lease::MAX_WAITS).then_some("another caller is still revalidating its seq lease")
            } else {
                prepares += 1;
                (prepares > lease::MAX_PREPARES).then_some("its seq lease kept changing under this send")
            };
            if let Some(why) = exhausted {
                let e =
                    StoreError::Unavailable { message: format!("conversation {conversation}: {why}"), source: None };
                return self.reserve_without_seq(request, &request_bytes, &member, e).await;
            }
            if let Err(e) = self.prepare_lease(tenant, conversation, allocation, waits).await {
                return self.reserve_without_seq(request, &request_bytes, &member, e).await;
            }
        };
        let intent =
            CommitIntent { request: request.clone(), seq, message_id: proposed_id, created_at, publication: None };
        let commit = Commit { intent, state: CommitState::Reserved, committed_at: None };
        // (2) The commit, if the key is still free.
        let mut batch = Batch::default();
        batch.script(&scripts::RESERVE, &[&self.keys.commit(key)]).arg(&request_bytes).arg(encode_commit(&commit));
        let [reply] = one(run(&self.con, "reserving a commit", batch).await?)?;
        let reply = answered("reserving a commit", reply)?;
        let (outcome, rest) = status("message_reserve", &Described(key), reply)?;
        match outcome.as_str() {
            "ok" => {
                self.inflight.remember(commit.clone(), false);
                Ok(commit)
            }
            "exists" => {
                // The key was taken (a replay, a racing reserver, another request): nothing was
                // written. Our recovery entry goes unless it coincides with the stored commit's.
                let (Some(req), Some(blob)) = (rest.first().and_then(bytes), rest.get(1).and_then(bytes)) else {
                    return Err(StoreError::InvariantViolation(
                        "message_reserve: 'exists' without request and commit".to_owned(),
                    ));
                };
                if req != request_bytes.as_slice() {
                    let theirs = decode_commit(blob).ok().map(|c| c.intent);
                    if let Some(theirs) = &theirs {
                        self.abandoned(seq, theirs).await;
                        if theirs.created_at != created_at {
                            self.give_up_orphan(&member).await;
                        }
                    }
                    return Err(conflict(key, "the same key was reserved for different content"));
                }
                let first = decode_stored(key, req.to_vec(), blob.to_vec())?;
                self.abandoned(seq, &first.commit.intent).await;
                if first.commit.intent.created_at != created_at {
                    self.give_up_orphan(&member).await;
                }
                if first.commit.state != CommitState::Committed {
                    self.inflight.remember(first.commit.clone(), false);
                }
                Ok(first.commit)
            }
            other => {
                Err(StoreError::InvariantViolation(format!("message_reserve: unexpected script status {other:?}")))
            }
        }
    }

    async fn put_record(&self, intent: &CommitIntent) -> StoreResult<Commit> {
        let key = &intent.request.key;
        let reserved = Commit { intent: intent.clone(), state: CommitState::Reserved, committed_at: None };
        let known = self.inflight.get(key).is_some_and(|k| k.commit == reserved);
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
