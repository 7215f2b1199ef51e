//! `MessageStore` on Redis.
//!
//! # Key layout
//!
//! `<ns>` is [`RedisConfig::namespace`]. Braces are Redis Cluster hash tags: keys with the same
//! tag live in one slot, and every script touches the keys of one slot only.
//!
//! | key | type | holds |
//! |-----|------|-------|
//! | `<ns>:{c:<tenant><conversation>}:seq` | string | highest seq ever issued (`INCR`) |
//! | `<ns>:{c:<tenant><conversation>}:idx` | ZSET | history index: member = seq (decimal), score = seq |
//! | `<ns>:{c:<tenant><conversation>}:rec` | HASH | seq (decimal) → canonical record blob |
//! | `<ns>:{c:<tenant><conversation>}:lowbound` | string | hot-tier lower bound: seqs ≤ it were trimmed (absent = 0) |
//! | `<ns>:{c:<tenant><conversation>}:gcdone` | SET | seqs the expiry drain deleted whose expiry member may remain |
//! | `<ns>:{c:<tenant><conversation>}:archived` | string | archived watermark: the trim never passes it (absent = 0) |
//! | `<ns>:seeded:{<slot tag>}` | string | seed marker of one cluster slot (see [`crate::redis::seeding`]) |
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
//! Commit, conversation and global keys live in different slots, so each step is a short
//! sequence of single-slot scripts/commands, ordered so that a crash (or a race) between any two
//! of them leaves only legal or self-healing state:
//!
//! - `reserve`: (a) read the commit: same request bytes → the stored commit, other bytes →
//!   `Conflict` (no seq consumed); (b) `message_allocate_seq.lua` increments the conversation
//!   counter, but only while its slot's seed marker exists and the counter was not lost under
//!   surviving history (else `InvariantViolation`: see [`crate::redis::seeding`]); a seq lost
//!   to a crash or a race stays a hole, which is legal, and is never reissued; (c) add the recovery entry, so
//!   a crash after (d) is always found by the recovery scan; (d) `message_reserve.lua` creates
//!   the commit if the key is free; a reserver that lost the race gets the winner's commit for
//!   equal bytes, `Conflict` otherwise. A recovery entry without its commit (crash between (c)
//!   and (d), or a lost race) is skipped by the scan and removed by
//!   [`MessageStore::gc_committed_auxiliary`] once older than the auxiliary TTL.
//! - `put_record`: read and check the commit (same intent bytes, RESERVED), write record and
//!   index (`message_put_record.lua`, same-value overwrite), then `message_commit_cas.lua`
//!   moves RESERVED → RECORDED only if the commit is still the blob that was read. A crash
//!   before the CAS leaves RESERVED, and the retried step rewrites the same bytes.
//! - `mark_outbox_published`: check, then the CAS to OUTBOXED with the publication.
//! - `mark_committed`: (1) register the expiry in `{msghistorygc}` (unless a trim-owning store
//!   will trim the record before it expires, ADR-0019 revision 2) and the record in
//!   `{hotwindow}` first (deterministic member
//!   and score; the record exists since the commit is past RECORDED), because a repeated
//!   `mark_committed` after the CAS is a `Conflict` and could never register it; (2) the CAS to
//!   COMMITTED (plus the safety-net TTL); (3) add to `{commitgc}`; (4) remove the recovery
//!   entry. A crash after (2) leaves a recovery entry of a COMMITTED commit: the scan filters
//!   it, the auxiliary GC removes it.
//! - `gc_expired_history`: per due member, `message_gc_record.lua` deletes record and index and
//!   leaves a tombstone, then the member is removed, then the tombstone. A retry after a crash
//!   finds the tombstone instead of a "missing record" and does not fail.

mod gc;
mod history;
mod hot_tier;
mod keys;
mod scripts;

pub use self::hot_tier::{SeqEvidence, TrimReport};

use std::sync::Arc;

use async_trait::async_trait;
use redis::aio::ConnectionManager;

use self::keys::{aux_member, Keys};
use self::scripts::{bytes, expect_ok, invoke, query, status};
use super::{connect, RedisConfig};
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
    con: ConnectionManager,
    keys: Keys,
    policy: RetentionPolicy,
    clock: Arc<dyn Clock>,
    /// `Some(window)` when this store owns the hot-tier trim (see [`Self::with_trim_window`]).
    trim_window_millis: Option<i64>,
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
        let con = connect(config).await?;
        let store = Self { con, keys: Keys::new(&config.namespace), policy, clock, trim_window_millis: None };
        let _: String = query(&store.con, &format!("pinging redis at {}", config.url), &redis::cmd("PING")).await?;
        Ok(store)
    }

    /// The retention policy this store applies.
    pub fn policy(&self) -> RetentionPolicy {
        self.policy
    }

    /// The counter of the highest seq issued in a conversation (what a re-seed after lost Redis
    /// state must raise to the durable maximum before writes resume).
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

    /// Replaces the commit `read` (as read) with `next`, if it is still unchanged.
    async fn swap(&self, key: &CommitKey, read: &[u8], next: &Commit, redis_ttl_millis: i64) -> StoreResult<()> {
        let mut invocation = scripts::COMMIT_CAS.key(self.keys.commit(key));
        invocation.arg(read).arg(encode_commit(next)).arg(redis_ttl_millis);
        let reply = invoke(&self.con, "advancing a commit", &invocation).await?;
        expect_ok("message_commit_cas", &context(key), reply)
    }

    /// Deletes the commit `read` if it is still unchanged; `false` when it was already gone
    /// or changed (a reuse of the key).
    async fn delete_commit(&self, key: &CommitKey, read: &[u8]) -> StoreResult<bool> {
        let mut invocation = scripts::COMMIT_DELETE.key(self.keys.commit(key));
        invocation.arg(read);
        let reply = invoke(&self.con, "deleting a commit", &invocation).await?;
        match expect_ok("message_commit_delete", &context(key), reply) {
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

#[async_trait]
impl MessageStore for RedisMessageStore {
    async fn reserve(&self, request: &CommitRequest, proposed_id: MessageId) -> StoreResult<Commit> {
        check_request(request)?;
        let key = &request.key;
        let request_bytes = encode_request(request);
        // (a) A replay answers from the stored commit and consumes no seq.
        if let Some(existing) = self.load(key).await? {
            if existing.request_bytes != request_bytes {
                return Err(conflict(key, "the same key was reserved for different content"));
            }
            return Ok(existing.commit);
        }
        // (b) The seq: once issued it is never issued again, even if what follows fails.
        let seq = self.allocate_seq(key.tenant, request.conversation).await?;
        let created_at = self.clock.now();
        let intent =
            CommitIntent { request: request.clone(), seq, message_id: proposed_id, created_at, publication: None };
        let commit = Commit { intent, state: CommitState::Reserved, committed_at: None };
        // (c) The recovery entry before the commit: a crash after (d) is always recoverable.
        let member = aux_member(key, created_at);
        let add = redis::cmd("ZADD").arg(self.keys.recovery()).arg(created_at.0).arg(&member).clone();
        query::<i64>(&self.con, "writing the recovery index", &add).await?;
        // (d) The commit, if the key is still free.
        let mut invocation = scripts::RESERVE.key(self.keys.commit(key));
        invocation.arg(&request_bytes).arg(encode_commit(&commit));
        let reply = invoke(&self.con, "reserving a commit", &invocation).await?;
        let (outcome, rest) = status("message_reserve", &context(key), reply)?;
        match outcome.as_str() {
            "ok" => Ok(commit),
            "exists" => {
                // Another reserver of the same bytes won: its commit is the answer, our seq a
                // hole. Our recovery entry is an orphan unless it coincides with the winner's.
                let blob = rest.first().and_then(bytes).ok_or_else(|| {
                    StoreError::InvariantViolation("message_reserve: 'exists' without a commit".to_owned())
                })?;
                let winner = decode_stored(key, request_bytes, blob.to_vec())?.commit;
                if winner.intent.created_at != created_at {
                    self.zrem(&self.keys.recovery(), &member).await?;
                }
                Ok(winner)
            }
            other => {
                Err(StoreError::InvariantViolation(format!("message_reserve: unexpected script status {other:?}")))
            }
        }
    }

    async fn put_record(&self, intent: &CommitIntent) -> StoreResult<Commit> {
        let key = &intent.request.key;
        let stored = self.load(key).await?.ok_or_else(|| not_found(key))?;
        if encode_intent(&stored.commit.intent) != encode_intent(intent) {
            return Err(conflict(key, "the intent differs from the reserved one"));
        }
        expect_state(key, &stored.commit, CommitState::Reserved)?;
        let (tenant, conversation) = (key.tenant, intent.request.conversation);
        let expires_at = self.policy.expires_at(intent.request.retention, intent.created_at);
        let mut invocation = scripts::PUT_RECORD.key(self.keys.index(tenant, conversation));
        invocation.key(self.keys.records(tenant, conversation));
        invocation.arg(intent.seq.0).arg(encode_record(&intent.record(expires_at)));
        let reply = invoke(&self.con, "writing a history record", &invocation).await?;
        expect_ok("message_put_record", &context(key), reply)?;
        let mut next = stored.commit;
        next.state = CommitState::Recorded;
        self.swap(key, &stored.blob, &next, 0).await?;
        Ok(next)
    }

    async fn mark_outbox_published(
        &self,
        key: &CommitKey,
        message_id: MessageId,
        publication: Publication,
    ) -> StoreResult<Commit> {
        crate::rules::check_publication(publication)?;
        let stored = self.load(key).await?.ok_or_else(|| not_found(key))?;
        expect_message(key, &stored.commit, message_id)?;
        expect_state(key, &stored.commit, CommitState::Recorded)?;
        let mut next = stored.commit;
        next.intent.publication = Some(publication);
        next.state = CommitState::Outboxed;
        self.swap(key, &stored.blob, &next, 0).await?;
        Ok(next)
    }

    async fn mark_committed(&self, key: &CommitKey, message_id: MessageId) -> StoreResult<Commit> {
        let now = self.clock.now();
        let stored = self.load(key).await?.ok_or_else(|| not_found(key))?;
        expect_message(key, &stored.commit, message_id)?;
        expect_state(key, &stored.commit, CommitState::Outboxed)?;
        let intent = &stored.commit.intent;
        // (1) The hot-tier registrations first: after the CAS a repeated step is a Conflict and
        // could not add them.
        self.register_hot_tier(intent).await?;
        // (2) The transition, with the safety-net TTL.
        let mut next = stored.commit.clone();
        next.state = CommitState::Committed;
        next.committed_at = Some(now);
        self.swap(key, &stored.blob, &next, COMMITTED_REDIS_TTL_MILLIS).await?;
        // (3) The auxiliary GC entry, then (4) the recovery entry goes.
        let member = aux_member(key, intent.created_at);
        let add = redis::cmd("ZADD").arg(self.keys.commit_gc()).arg(now.0).arg(&member).clone();
        query::<i64>(&self.con, "registering a committed commit", &add).await?;
        self.zrem(&self.keys.recovery(), &member).await?;
        Ok(next)
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
