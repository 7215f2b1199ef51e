//! Seq leases: how the hot tier issues seqs that no Redis loss can make it issue again (DESIGN
//! invariant 7).
//!
//! # The rule
//!
//! Every seq Redis issues in a conversation is at or below the conversation's durable
//! high-water mark ([`SeqHighWater`], outside Redis, no TTL, only moving up), and only the
//! copy of Redis data the mark names as its holder issues above the mark's previous value.
//! Redis holds a *lease*: `<serving>:<through>:<start>`, the copy of the data it was installed
//! in (`serving_prelude.lua`: the process's run_id and replication id, so a restart, a
//! promotion or a resync from another server each make a new copy), the highest seq it may
//! issue and the counter it was installed at. The mark is moved to `through` *before* the lease
//! is installed, so the rule holds whatever Redis later loses. Allocation
//! (`message_allocate_seq.lua`) issues only within a lease that names the copy now served and
//! whose counter exists; anything else (a flush, a restart, a restore of an older snapshot, a
//! failover to a replica that missed writes, a failed-over master that resynced and was
//! promoted again, deleted keys) makes the lease invalid
//! for that conversation alone, and its next send revalidates it. Other conversations keep
//! their leases and go on.
//!
//! The mark moves only by compare-and-set of its value and holder, so two Redis processes that
//! both serve a conversation for a while (an old master that has not noticed a failover, and
//! the new one) never extend over the same seqs: one of them finds the mark moved by the other,
//! gives its lease up and revalidates above the mark.
//!
//! # Extending (the steady state)
//!
//! A lease that is running out (half a block left) is extended in the background: move the
//! mark from `{through, run}` to `{through + block, run}`, then move the lease's end
//! (`message_lease_install.lua`, mode `extend`, which refuses if the lease stopped being valid
//! meanwhile). A send that finds the lease used up does the same and waits for it: one durable
//! write per block of seqs. A mark already moved further by the same holder (two writers
//! extending at once) is installed as it is; a mark of another holder makes this process give
//! its lease up (mode `abandon`).
//!
//! # Revalidating (after a loss, or a conversation's first send)
//!
//! 1. Allocation hands out a *token* (a random value with a Redis TTL) and deletes the
//!    conversation's claims; without a valid lease nothing is issued there until step 4.
//! 2. Read the mark `D`. A conversation whose mark is 0 never had a seq issued: nothing to
//!    restore. Otherwise its recent records are written back from where they are durable
//!    ([`RecentRecords`]: the archive and the topic's unarchived tail), newest first, with their
//!    COMMITTED commits and claims (so a retry of an acknowledged send gets its first answer),
//!    never overwriting anything ([`RedisMessageStore::restore_records`]).
//! 3. Move the mark from `D` to `{max(D, counter, history) + block, run}` (reading it again and
//!    retrying if it moved meanwhile).
//! 4. Install (mode `revalidate`): only while the token is still the caller's, which proves no
//!    seq was issued here since step 1; the counter restarts at `max(counter, D, history)`.
//!    Every seq ever issued anywhere is at or below `D` (the mark this process moved from), so
//!    none is issued twice. The seqs between the last one a client saw and `D` stay holes (at
//!    most a block per loss; counted as `qim_store_seq_lease_skipped_total`).
//!
//! Steps 2–3 touch only the durable stores; when one fails (or the whole revalidation takes
//! longer than 30 s) the token is given back, and the next send starts again. The token lives
//! 6 s in Redis and is renewed while the revalidation runs, so one whose process died blocks
//! its conversation for seconds. Two revalidations of one conversation in one Redis process never
//! overlap: the second caller waits for the token (`wait`), then allocates under the new lease.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use metrics::counter;
use redis::Value;

use super::hot_tier::{reply_number, reply_signed};
use super::keys::claim;
use super::scripts::{answered, bytes, invoke, status, Batch, Reply, ALLOCATE_SEQ, LEASE_CHECK, LEASE_INSTALL};
use super::{RedisMessageStore, MAX_SEQ};
use crate::error::{StoreError, StoreResult};
use crate::ids::{ConversationId, ConversationSeq, TenantId, UnixMillis};
use crate::message::CommitKey;
use crate::message::PublishedRecord;
use crate::message_store::COMMIT_AUX_TTL_MILLIS;
use crate::metrics::{SEQ_LEASES, SEQ_LEASE_SKIPPED};
use crate::seq_high_water::{HighWater, SeqHighWater};

mod revalidate;

/// Seqs a lease covers unless configured otherwise: after a Redis loss a conversation skips at
/// most this many; in the steady state it costs one durable write per this many sends.
pub const DEFAULT_LEASE_BLOCK: u64 = 64;

/// How long a revalidation token holds (Redis's clock) unless its holder renews it: a crashed
/// revalidation blocks its conversation at most this long.
pub(super) const TOKEN_MILLIS: u64 = 6_000;

/// How often a revalidation under way renews its token (well within [`TOKEN_MILLIS`]).
const TOKEN_KEEP_EVERY: Duration = Duration::from_secs(2);

/// The longest one revalidation may hold its token (a hung read of the archive or the topic
/// gives the conversation back instead of blocking it; the next send starts again).
const REVALIDATION_DEADLINE: Duration = Duration::from_secs(30);

/// How many times one reserve waits for another caller's revalidation (20 ms, doubling up to
/// 500 ms: about a minute; a long restore renews its token meanwhile) before it answers
/// `Unavailable`.
const MAX_WAITS: u32 = 130;

/// How many extensions or revalidations one reserve makes before it answers `Unavailable`
/// (each one lets the next allocation issue, unless another process raced it).
const MAX_PREPARES: u32 = 8;

/// How often one reservation found its lease unusable: it waits at most [`MAX_WAITS`] times and
/// prepares its lease at most [`MAX_PREPARES`] times.
#[derive(Debug, Default)]
pub(super) struct LeaseAttempts {
    waits: u32,
    prepares: u32,
}

/// How many times a revalidation moves the mark again after finding it moved by another
/// process, before it gives up (the next send starts again).
const MARK_RACES: u32 = 4;

/// Where a conversation's recent records are durable outside Redis, for rebuilding its hot tier
/// when a revalidation finds Redis lost state.
#[async_trait]
pub trait RecentRecords: Send + Sync {
    /// Records of the conversation that were published to `qim.messages.v1`: every one created
    /// at or after `since`, and every one with a seq above the oldest of those, each with the
    /// partition and offset it was published at. Any order; a record may appear twice.
    async fn recent_records(
        &self,
        tenant: TenantId,
        conversation: ConversationId,
        since: UnixMillis,
    ) -> StoreResult<Vec<PublishedRecord>>;
}

/// What a store issuing seqs needs: the durable mark, the block size, and (in a deployment)
/// where recent records can be restored from.
#[derive(Clone)]
pub struct SeqLeases {
    high_water: Arc<dyn SeqHighWater>,
    recent: Option<Arc<dyn RecentRecords>>,
    block: u64,
}

impl SeqLeases {
    /// Leases of [`DEFAULT_LEASE_BLOCK`] seqs from `high_water`, restoring nothing after a loss.
    pub fn new(high_water: Arc<dyn SeqHighWater>) -> Self {
        Self { high_water, recent: None, block: DEFAULT_LEASE_BLOCK }
    }

    /// Leases of `block` seqs (at least 2, so half a block is left to extend early).
    pub fn with_block(mut self, block: u64) -> Self {
        self.block = block.max(2);
        self
    }

    /// Restores a conversation's recent records from `recent` when a revalidation finds that
    /// the conversation had seqs issued before.
    pub fn with_recent_records(mut self, recent: Arc<dyn RecentRecords>) -> Self {
        self.recent = Some(recent);
        self
    }
}

/// A lease as an allocation saw it: its end, and the copy of the data it is valid in (`run`:
/// what `serving()` answered, see `serving_prelude.lua`).
#[derive(Clone, Debug)]
pub(super) struct Held {
    pub through: u64,
    pub run: String,
}

/// What one allocation answered.
pub(super) enum Allocation {
    /// A seq: new, or the claim's again; `renew`: extend the lease soon; `created_at`: the
    /// send's, as the conversation's clock (or the claim) fixed it.
    Issued { seq: ConversationSeq, lease: Held, renew: bool, created_at: UnixMillis },
    /// The lease is used up.
    Extend(Held),
    /// The lease is invalid; the caller holds `token` (valid in the copy of the data `run`).
    Revalidate { counter: u64, floor: u64, token: String, run: String },
    /// Another caller revalidates.
    Wait,
    /// The member cache can not say whether the sender is a member.
    MembersUnknown,
    /// The member cache says the sender is not a member.
    NotMember,
}

/// Conversations whose lease an early extension is under way for (one at a time each).
#[derive(Default)]
pub(super) struct Renewals(Mutex<HashSet<(TenantId, ConversationId)>>);

impl Renewals {
    fn begin(&self, conversation: (TenantId, ConversationId)) -> bool {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).insert(conversation)
    }

    fn end(&self, conversation: (TenantId, ConversationId)) {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).remove(&conversation);
    }
}

fn text(value: Option<&Value>) -> Option<String> {
    value.and_then(bytes).and_then(|b| std::str::from_utf8(b).ok()).map(str::to_owned)
}

impl RedisMessageStore {
    /// Lets this store lease seqs from `leases` (see the module docs). Without leases it can not
    /// install or extend a lease, so `reserve` refuses (`InvariantViolation`) wherever no valid
    /// lease is left, though it still answers replays.
    pub fn with_seq_leases(mut self, leases: SeqLeases) -> Self {
        self.leases = Some(Arc::new(leases));
        self
    }

    fn leases(&self) -> StoreResult<&Arc<SeqLeases>> {
        self.leases.as_ref().ok_or_else(|| {
            StoreError::InvariantViolation(
                "this Redis store has no durable seq high-water mark configured, so it issues no seqs".to_owned(),
            )
        })
    }

    /// The conversation keys the lease scripts take, in their order.
    pub(super) fn lease_keys(&self, tenant: TenantId, conversation: ConversationId) -> [String; 6] {
        [
            self.keys.seq(tenant, conversation),
            self.keys.lease(tenant, conversation),
            self.keys.lease_token(tenant, conversation),
            self.keys.index(tenant, conversation),
            self.keys.lower_bound(tenant, conversation),
            self.keys.archived(tenant, conversation),
        ]
    }

    /// Adds to `batch` the allocation of a seq for `key` in `conversation` at `now`
    /// (`message_allocate_seq.lua`); [`Self::allocation`] reads its reply. With `check_sender`,
    /// the allocation first asks the member cache whether the key's sender is a member.
    pub(super) fn allocate_seq(
        &self,
        batch: &mut Batch,
        key: &CommitKey,
        conversation: ConversationId,
        now: UnixMillis,
        check_sender: bool,
    ) {
        let tenant = key.tenant;
        let [seq, lease, token, index, low, archived] = self.lease_keys(tenant, conversation);
        let claims = self.keys.claims(tenant, conversation);
        let times = self.keys.claim_times(tenant, conversation);
        let block = self.lease_block();
        let [members, cached] = self.keys.member_cache(tenant, conversation);
        let clock = self.keys.clock(tenant, conversation);
        let sender: &[u8] = if check_sender { &key.sender.0 } else { &[] };
        batch
            .script(
                &ALLOCATE_SEQ,
                &[&seq, &lease, &token, &index, &low, &archived, &claims, &times, &members, &cached, &clock],
            )
            .arg(claim(key))
            .arg(now.0)
            .arg(COMMIT_AUX_TTL_MILLIS)
            .arg(fresh_token())
            .arg(TOKEN_MILLIS)
            .arg(block / 2)
            .arg(sender);
    }

    /// Seqs per lease block (what an allocation compares the lease's rest with).
    pub(super) fn lease_block(&self) -> u64 {
        self.leases.as_ref().map_or(DEFAULT_LEASE_BLOCK, |l| l.block)
    }

    /// The outcome of an allocation added by [`Self::allocate_seq`].
    pub(super) fn allocation(&self, conversation: ConversationId, reply: Reply) -> StoreResult<Allocation> {
        let reply = answered("allocating a conversation seq", reply)?;
        let (outcome, rest) = status("message_allocate_seq", &format_args!("conversation {conversation}"), reply)?;
        let number = |i: usize| reply_number("message_allocate_seq", rest.get(i));
        let text = |i: usize, what: &str| {
            text(rest.get(i)).ok_or_else(|| {
                StoreError::InvariantViolation(format!("message_allocate_seq: {outcome:?} without {what}"))
            })
        };
        match outcome.as_str() {
            "ok" => {
                let seq = number(0)?;
                if !(1..=MAX_SEQ).contains(&seq) {
                    return Err(StoreError::InvariantViolation(format!(
                        "conversation {conversation} issued seq {seq}, outside 1..={MAX_SEQ}"
                    )));
                }
                let lease = Held { through: number(2)?, run: text(3, "a run id")? };
                let created_at = UnixMillis(reply_signed("message_allocate_seq", rest.get(4))?);
                Ok(Allocation::Issued { seq: ConversationSeq(seq), lease, renew: number(1)? == 1, created_at })
            }
            "extend" => Ok(Allocation::Extend(Held { through: number(0)?, run: text(2, "a run id")? })),
            "revalidate" => Ok(Allocation::Revalidate {
                counter: number(0)?,
                floor: number(1)?,
                token: text(2, "a token")?,
                run: text(3, "a run id")?,
            }),
            "wait" => Ok(Allocation::Wait),
            "members_unknown" => Ok(Allocation::MembersUnknown),
            "not_member" => Ok(Allocation::NotMember),
            other => {
                Err(StoreError::InvariantViolation(format!("message_allocate_seq: unexpected script status {other:?}")))
            }
        }
    }

    /// [`Self::prepare_lease`], counted in `attempts`: `Unavailable`, preparing nothing, once
    /// the reservation waited or prepared too often.
    pub(super) async fn prepare_counted(
        &self,
        attempts: &mut LeaseAttempts,
        tenant: TenantId,
        conversation: ConversationId,
        allocation: Allocation,
    ) -> StoreResult<()> {
        let exhausted = if matches!(allocation, Allocation::Wait) {
            attempts.waits += 1;
            (attempts.waits > MAX_WAITS).then_some("another caller is still revalidating its seq lease")
        } else {
            attempts.prepares += 1;
            (attempts.prepares > MAX_PREPARES).then_some("its seq lease kept changing under this send")
        };
        if let Some(why) = exhausted {
            let message = format!("conversation {conversation}: {why}");
            return Err(StoreError::Unavailable { message, source: None });
        }
        self.prepare_lease(tenant, conversation, allocation, attempts.waits).await
    }

    /// Does what an allocation that issued nothing asked for, so the next one can issue (`waits`:
    /// how many times this reserve waited already).
    pub(super) async fn prepare_lease(
        &self,
        tenant: TenantId,
        conversation: ConversationId,
        allocation: Allocation,
        waits: u32,
    ) -> StoreResult<()> {
        match allocation {
            // Nothing to prepare: the caller answers these itself.
            Allocation::Issued { .. } | Allocation::MembersUnknown | Allocation::NotMember => Ok(()),
            Allocation::Extend(lease) => {
                counter!(SEQ_LEASES, "step" => "extend_blocking").increment(1);
                self.extend(tenant, conversation, &lease).await
            }
            Allocation::Revalidate { counter, floor, token, run } => {
                let revalidation = self.revalidate(tenant, conversation, counter.max(floor), &token, &run);
                let result = match tokio::time::timeout(
                    REVALIDATION_DEADLINE,
                    self.keeping_token(tenant, conversation, &token, revalidation),
                )
                .await
                {
                    Ok(result) => result,
                    Err(_) => Err(StoreError::Unavailable {
                        message: format!(
                            "conversation {conversation}: revalidating its seq lease took longer than {REVALIDATION_DEADLINE:?}"
                        ),
                        source: None,
                    }),
                };
                if result.is_err() {
                    self.release_token(tenant, conversation, &token).await;
                }
                result
            }
            Allocation::Wait => {
                let pause = Duration::from_millis(20).saturating_mul(1 << waits.min(5)).min(Duration::from_millis(500));
                tokio::time::sleep(pause).await;
                Ok(())
            }
        }
    }

    /// Extends the lease early, in the background (at most one extension per conversation at a
    /// time in this store; a failure is logged and the send that runs out waits for its own
    /// extension).
    pub(super) fn renew_soon(&self, tenant: TenantId, conversation: ConversationId, lease: Held) {
        if !self.renewals.begin((tenant, conversation)) {
            return;
        }
        let store = self.clone();
        tokio::spawn(async move {
            counter!(SEQ_LEASES, "step" => "extend_early").increment(1);
            if let Err(e) = store.extend(tenant, conversation, &lease).await {
                tracing::warn!(%conversation, error = %e, "extending a seq lease early failed");
            }
            store.renewals.end((tenant, conversation));
        });
    }

    /// Moves the mark from `lease` a block further (see "Extending"), then the lease's end.
    async fn extend(&self, tenant: TenantId, conversation: ConversationId, lease: &Held) -> StoreResult<()> {
        let leases = self.leases()?;
        let from = HighWater { through: ConversationSeq(lease.through), holder: lease.run.clone() };
        let to = HighWater {
            through: ConversationSeq(checked_end(conversation, lease.through, leases.block)?),
            holder: lease.run.clone(),
        };
        let end = match leases.high_water.advance_high_water(tenant, conversation, &from, &to).await? {
            None => to.through,
            // Extended further in this copy of the data already (another writer, or an extension
            // whose install failed): nobody else issued up to there.
            Some(now) if now.holder == lease.run && now.through > from.through => now.through,
            Some(now) => {
                counter!(SEQ_LEASES, "step" => "abandoned").increment(1);
                tracing::warn!(
                    %conversation,
                    lease_through = lease.through,
                    high_water = now.through.0,
                    holder = %now.holder,
                    "another redis process moved the seq high-water mark; giving this lease up"
                );
                self.install(tenant, conversation, &["abandon", &lease.through.to_string(), &lease.run]).await?;
                return Ok(());
            }
        };
        // 'retry': the lease stopped being valid meanwhile; the next allocation revalidates.
        self.install(tenant, conversation, &["extend", &end.0.to_string(), &lease.run]).await.map(drop)
    }

    /// Whether the conversation's hot tier holds everything Redis was given since its lease was
    /// installed (`false` after Redis lost state, until the conversation's next send
    /// revalidated it): history readers trust the hot tier alone only then.
    pub async fn hot_tier_trusted(&self, tenant: TenantId, conversation: ConversationId) -> StoreResult<bool> {
        let mut invocation = LEASE_CHECK.key(self.keys.seq(tenant, conversation));
        invocation.key(self.keys.lease(tenant, conversation));
        match invoke(&self.con, "checking a seq lease", &invocation).await? {
            Value::Int(valid) => Ok(valid == 1),
            other => {
                let (outcome, _) = status("message_lease_check", &format_args!("conversation {conversation}"), other)?;
                Err(StoreError::InvariantViolation(format!(
                    "message_lease_check: unexpected script status {outcome:?}"
                )))
            }
        }
    }
}

/// `start + block`, if it stays within the seqs this backend can issue.
fn checked_end(conversation: ConversationId, start: u64, block: u64) -> StoreResult<u64> {
    start.checked_add(block).filter(|end| *end <= MAX_SEQ).ok_or_else(|| {
        StoreError::InvariantViolation(format!("conversation {conversation} has used up its seqs (at {start})"))
    })
}

/// A random revalidation token.
pub(super) fn fresh_token() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}
