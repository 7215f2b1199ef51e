//! The hot tier's own duties (ADR-0019): the registrations of records with the expiry index and
//! the trim window, the archived watermark, and the trim of the 7-day window.

use super::keys::{expiry_member, expiry_shard, parse_expiry_member};
use super::scripts::{answered, bytes, invoke, query, run, status, Batch, RAISE, TRIM};
use super::RedisMessageStore;
use crate::error::{StoreError, StoreResult};
use crate::ids::{ConversationId, ConversationSeq, TenantId, UnixMillis, MILLIS_PER_DAY};
use crate::message::CommitIntent;

/// What one trim pass did.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct TrimReport {
    /// Records removed from the hot tier.
    pub trimmed: usize,
    /// Records past the window that stay because the archive has not reached them.
    pub waiting_for_archive: usize,
}

pub(super) fn reply_number(what: &str, value: Option<&redis::Value>) -> StoreResult<u64> {
    value
        .and_then(|v| match v {
            redis::Value::Int(n) => u64::try_from(*n).ok(),
            other => bytes(other).and_then(|b| std::str::from_utf8(b).ok()).and_then(|t| t.parse().ok()),
        })
        .ok_or_else(|| StoreError::InvariantViolation(format!("{what}: the script did not answer a number")))
}

/// A signed number a script answered (as an integer or as decimal text): a time, which may be
/// before 1970 in tests.
pub(super) fn reply_signed(what: &str, value: Option<&redis::Value>) -> StoreResult<i64> {
    value
        .and_then(|v| match v {
            redis::Value::Int(n) => Some(*n),
            other => bytes(other).and_then(|b| std::str::from_utf8(b).ok()).and_then(|t| t.parse().ok()),
        })
        .ok_or_else(|| StoreError::InvariantViolation(format!("{what}: the script did not answer a time")))
}

impl RedisMessageStore {
    /// Makes this store the owner of the hot-tier trim with a window of `days`: records older
    /// than the window are trimmed (once archived) by [`Self::trim_hot_history`], so messages
    /// whose retention outlives the window by a day or more are not registered in the expiry
    /// index (ADR-0019, revision of 2026-09-28): the trim removes them first.
    pub fn with_trim_window(mut self, days: u32) -> Self {
        self.trim_window_millis = Some(i64::from(days) * MILLIS_PER_DAY);
        self
    }

    /// The hot-tier registrations of a record (DESIGN, ADR-0019): its expiry in
    /// `{msghistorygc}`, unless a trim-owning store will trim it first (revision of 2026-09-28),
    /// and, for trim-owning stores, the record in `{hotwindow}`. Deterministic members and
    /// scores, so registering again changes nothing. Only for a record that exists (its commit
    /// is past RECORDED): a member whose record is missing above the lower bound stops the
    /// expiry drain.
    pub(super) fn hot_tier_registrations(&self, intent: &CommitIntent, batch: &mut Batch) {
        let request = &intent.request;
        let expiry = self.policy.expires_at(request.retention, intent.created_at);
        self.registrations(request.key.tenant, request.conversation, intent.seq, intent.created_at, expiry, batch);
    }

    /// [`Self::hot_tier_registrations`] of the record at `seq`, created at `created_at`, expiring
    /// at `expiry`.
    pub(super) fn registrations(
        &self,
        tenant: TenantId,
        conversation: ConversationId,
        seq: ConversationSeq,
        created_at: UnixMillis,
        expiry: Option<UnixMillis>,
        batch: &mut Batch,
    ) {
        let member = expiry_member(tenant, conversation, seq);
        if let Some(expiry) = expiry {
            let trimmed_first = self.trim_window_millis.is_some_and(|w| expiry.0 - created_at.0 >= w + MILLIS_PER_DAY);
            if !trimmed_first {
                batch.command("ZADD").arg(self.keys.history_gc(expiry_shard(&member))).arg(expiry.0).arg(&member);
            }
        }
        if self.trim_window_millis.is_some() {
            batch.command("ZADD").arg(self.keys.hot_window(expiry_shard(&member))).arg(created_at.0).arg(&member);
        }
    }

    /// Registers the record with the hot tier (see [`Self::hot_tier_registrations`]) in one
    /// round trip.
    pub(super) async fn register_hot_tier(&self, intent: &CommitIntent) -> StoreResult<()> {
        let mut batch = Batch::default();
        self.hot_tier_registrations(intent, &mut batch);
        if batch.is_empty() {
            return Ok(());
        }
        for reply in run(&self.con, "registering a record with the hot tier", batch).await? {
            answered("registering a record with the hot tier", reply)?;
        }
        Ok(())
    }

    /// Records that the archive holds every seq of the conversation up to `through`. Monotonic:
    /// a lower value changes nothing. Returns the watermark in force.
    pub async fn record_archived_watermark(
        &self,
        tenant: TenantId,
        conversation: ConversationId,
        through: ConversationSeq,
    ) -> StoreResult<ConversationSeq> {
        let key = self.keys.archived(tenant, conversation);
        self.raise(&key, through.0, "recording an archived watermark").await.map(ConversationSeq)
    }

    async fn raise(&self, key: &str, value: u64, what: &str) -> StoreResult<u64> {
        let mut invocation = RAISE.key(key);
        invocation.arg(value);
        let reply = invoke(&self.con, what, &invocation).await?;
        let (_, rest) = status("message_raise", &key, reply)?;
        reply_number("message_raise", rest.first())
    }

    /// Removes up to `limit` records older than the trim window whose seq the archive has
    /// reached, with their expiry-index members (ADR-0019, revision of 2026-09-27); records not
    /// yet archived stay (a stalled archiver stops the trim, it never loses data). A store
    /// without a trim window trims nothing.
    ///
    /// Each record goes in three single-slot steps: record and index (raising the lower
    /// bound), then its `{msghistorygc}` member, then its `{hotwindow}` member. A crash between
    /// them leaves a member whose record is gone at or below the lower bound, which the expiry
    /// drain and the next trim both clean.
    pub async fn trim_hot_history(&self, limit: usize) -> StoreResult<TrimReport> {
        let Some(window) = self.trim_window_millis else {
            return Ok(TrimReport::default());
        };
        let cutoff = self.clock.now().0 - window;
        let mut report = TrimReport::default();
        // Look past records waiting for the archive, but not forever: the first page of every
        // shard and at most 10 more pages a pass.
        let mut extra_pages = 10;
        for shard in self.scans.hot_window.order() {
            let window = self.keys.hot_window(shard);
            let mut offset = 0usize;
            loop {
                let page = redis::cmd("ZRANGEBYSCORE")
                    .arg(&window)
                    .arg("-inf")
                    .arg(format!("({cutoff}"))
                    .arg("LIMIT")
                    .arg(offset)
                    .arg(limit.max(1))
                    .clone();
                let members: Vec<String> = query(&self.con, "reading the hot-tier trim window", &page).await?;
                for member in &members {
                    let (tenant, conversation, seq) = parse_expiry_member(member)?;
                    if self.trim_one(tenant, conversation, seq).await? {
                        for zset in [self.keys.history_gc(shard), window.clone()] {
                            let rem = redis::cmd("ZREM").arg(zset).arg(member).clone();
                            query::<i64>(&self.con, "removing a trimmed record's index members", &rem).await?;
                        }
                        report.trimmed += 1;
                        if report.trimmed >= limit {
                            return Ok(report);
                        }
                    } else {
                        report.waiting_for_archive += 1;
                        offset += 1;
                    }
                }
                if members.len() < limit.max(1) || extra_pages == 0 {
                    break;
                }
                extra_pages -= 1;
            }
        }
        Ok(report)
    }

    /// Trims one record if archived; `false` when the archive has not reached it.
    async fn trim_one(
        &self,
        tenant: TenantId,
        conversation: ConversationId,
        seq: ConversationSeq,
    ) -> StoreResult<bool> {
        let mut invocation = TRIM.key(self.keys.records(tenant, conversation));
        invocation
            .key(self.keys.index(tenant, conversation))
            .key(self.keys.lower_bound(tenant, conversation))
            .key(self.keys.archived(tenant, conversation))
            .arg(seq.0.to_string());
        let reply = invoke(&self.con, "trimming a hot-tier record", &invocation).await?;
        match status("message_trim", &format_args!("conversation {conversation} seq {seq}"), reply)?.0.as_str() {
            "trimmed" => Ok(true),
            "unarchived" => Ok(false),
            other => Err(StoreError::InvariantViolation(format!("message_trim: unexpected script status {other:?}"))),
        }
    }
}
