//! One user's mailbox: canonical groups, bucket proofs, the retention ledger (LWT only when a
//! new expiry day appears), the trim/gap floor, range reads and trimming.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use super::{
    db, first, highest_wins_timestamp, rows, ScyllaMailboxStore, ENTRY_TTL_SLACK_SECS, LEGACY_PROOF_TTL_SLACK_SECS,
    RETIRED_PROOF_TTL_SECS,
};
use crate::codec::{encode_event_group, i64_to_u64, u64_to_i64, LedgerItem, RetentionLedger};
use crate::error::{StoreError, StoreResult};
use crate::ids::{TenantId, UnixMillis, UserId};
use crate::mailbox::{EventGroup, MailboxPage, MailboxSeq};
use crate::scylla::batches::write_partition;
use crate::scylla::cql::{contention_pause, paxos_timed_out};

/// The retention meta format this backend writes (seed 000's V4 ledger semantics): every day
/// its ledger lists has its bucket proof, without TTL, in `mailbox_retention_bucket_v3`.
const FORMAT_VERSION: i32 = 5;
/// The format earlier builds wrote (read until the user's next registration rewrites the meta):
/// the same ledger, its days' proofs in `mailbox_retention_bucket_v2` with a TTL of the day's
/// expiry plus [`LEGACY_PROOF_TTL_SLACK_SECS`].
const LEGACY_FORMAT_VERSION: i32 = 4;
/// LWT attempts before a contended retention meta is reported `Unavailable`.
const MAX_ATTEMPTS: usize = 32;
/// Rows fetched per `range_scan` query.
const SCAN_BATCH: usize = 256;
/// Legacy metas only: after this long past its day's expiry (on the injected clock) a missing
/// bucket proof of a day listed by a meta in [`LEGACY_FORMAT_VERSION`] is taken as expired by
/// the TTL earlier builds gave it, not lost: their proof slack less a day for clock skew. A
/// meta in the current format never needs this (its proofs have no TTL while listed).
const LEGACY_PROOF_GONE_AFTER_MILLIS: i64 = (LEGACY_PROOF_TTL_SLACK_SECS - 86_400) * 1000;
/// Most per-user reads or commits of one batch in flight.
const MAX_IN_FLIGHT: usize = 32;
/// The longest TTL CQL accepts (20 years).
const MAX_TTL_SECS: i64 = 630_720_000;

pub(super) use crate::rules::canonical_groups;

mod read;

/// Seconds from `now` until `until`, rounded up, plus `slack`; at least 1, at most CQL's limit.
fn ttl_secs(until: UnixMillis, now: UnixMillis, slack: i64) -> i32 {
    let left = until.0.saturating_sub(now.0).max(0);
    let secs = (left / 1000 + i64::from(left % 1000 != 0)).saturating_add(slack);
    secs.clamp(1, MAX_TTL_SECS) as i32
}

fn seq_i(what: &str, seq: MailboxSeq) -> StoreResult<i64> {
    u64_to_i64(what, seq.as_u64())
}

fn seq_from(what: &str, raw: i64) -> StoreResult<MailboxSeq> {
    MailboxSeq::from_u64(i64_to_u64(what, raw)?)
        .ok_or_else(|| StoreError::CorruptEntry(format!("{what}={raw} is not a mailbox seq")))
}

/// The highest seq of the ledger day `item` of `user`, checked against its bucket proof
/// (`proof`: the highest seq of the day's proof rows, `None` when there is none) at `now`.
/// Seed 000: a day the ledger lists needs its proof, at least as high as the ledger's
/// `max_seq`:
///
/// - a proof at least as high as the ledger: the proof's seq (the ledger's is a lower bound,
///   folded at the user's last registration);
/// - a proof below the ledger (regressed): `CorruptEntry`, never hidden by taking the higher;
/// - no proof: `CorruptEntry` (a listed day's proof always exists: it is written before its
///   registration and has no TTL until a registration drops the day). Only for a meta `legacy`
///   format ([`LEGACY_FORMAT_VERSION`], whose proofs earlier builds wrote with a TTL), once
///   [`LEGACY_PROOF_GONE_AFTER_MILLIS`] passed since the day's expiry, is the proof taken as
///   gone by that TTL and the ledger's `max_seq` (folded at the user's last registration) used.
fn proven_max(
    user: &UserId,
    item: &LedgerItem,
    proof: Option<MailboxSeq>,
    now: UnixMillis,
    legacy: bool,
) -> StoreResult<MailboxSeq> {
    let listed = MailboxSeq::from_u64(item.max_seq).ok_or_else(|| {
        StoreError::CorruptEntry(format!("ledger of {user} day {}: max_seq has bit 63 set", item.day))
    })?;
    match proof {
        Some(proof) if proof >= listed => Ok(proof),
        Some(proof) => Err(StoreError::CorruptEntry(format!(
            "ledger of {user} lists expiry day {} up to seq {listed} but its bucket proof regressed to {proof}",
            item.day
        ))),
        None if legacy && item.expiry.0.saturating_add(LEGACY_PROOF_GONE_AFTER_MILLIS) <= now.0 => Ok(listed),
        None => Err(StoreError::CorruptEntry(format!(
            "ledger of {user} lists expiry day {} but its bucket proof is missing",
            item.day
        ))),
    }
}

/// Most users [`ListedDays`] remembers (it forgets everything when full).
const LISTED_CAP: usize = 100_000;

/// The expiry days each user's durable ledger is known to list, so a write into such a day
/// needs neither the meta read nor an LWT. Sound because a ledger never drops a day before that
/// day's expiry (registration LWTs drop only expired days), and only groups that are still
/// live are planned from it.
#[derive(Default)]
pub(super) struct ListedDays {
    days: std::sync::Mutex<std::collections::HashMap<(TenantId, UserId), Vec<u32>>>,
}

impl ListedDays {
    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<(TenantId, UserId), Vec<u32>>> {
        self.days.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether every day of `days` is known to be listed for the user.
    fn all_listed(&self, key: &(TenantId, UserId), days: &[u32]) -> bool {
        !days.is_empty() && self.lock().get(key).is_some_and(|known| days.iter().all(|d| known.contains(d)))
    }

    /// Remembers that `days` are listed (after a successful commit).
    fn remember(&self, key: (TenantId, UserId), days: impl Iterator<Item = u32>, now: UnixMillis) {
        let mut map = self.lock();
        if map.len() >= LISTED_CAP {
            map.clear();
        }
        let known = map.entry(key).or_default();
        let today = u32::try_from(now.day()).unwrap_or(0);
        known.retain(|d| *d >= today);
        for d in days {
            if !known.contains(&d) {
                known.push(d);
            }
        }
    }
}

/// One bucket proof row as read.
#[derive(Clone, Copy, Debug)]
struct ProofRow {
    day: u32,
    epoch: i32,
    max_seq: MailboxSeq,
    expires_at: UnixMillis,
    /// Read from the legacy table.
    legacy: bool,
}

/// A snapshot of one user's retention meta.
#[derive(Clone, Debug, Default)]
struct Meta {
    exists: bool,
    generation: i64,
    ledger: RetentionLedger,
    /// In [`LEGACY_FORMAT_VERSION`]: its days' proofs may be in the legacy table, with a TTL.
    legacy: bool,
}

/// One user's share of a batch: what to write and whether the ledger must change.
struct Plan {
    tenant: TenantId,
    user: UserId,
    /// Highest seq of a group that had already expired (not written; raises the gap).
    expired_gap: Option<MailboxSeq>,
    /// Highest seq and expiry per (expiry day, epoch) among live groups: the bucket proofs.
    proofs: BTreeMap<(u32, u16), (MailboxSeq, UnixMillis)>,
    /// Live groups' days the ledger does not list: day → (a seq, expiry).
    new_days: BTreeMap<u32, (MailboxSeq, UnixMillis)>,
    meta: Meta,
    /// Live groups, with their bytes.
    writes: Vec<(MailboxSeq, UnixMillis, Vec<u8>)>,
}

fn day_of(expiry: UnixMillis) -> StoreResult<u32> {
    u32::try_from(expiry.day())
        .map_err(|_| StoreError::InvalidInput(format!("expiry {} is outside the ledger's day range", expiry.0)))
}

/// A finished task's result; a panic resumes, a cancellation is `Unavailable`.
fn joined<T>(done: Option<Result<StoreResult<T>, tokio::task::JoinError>>) -> StoreResult<StoreResult<T>> {
    match done {
        Some(Ok(result)) => Ok(result),
        Some(Err(join)) if join.is_panic() => std::panic::resume_unwind(join.into_panic()),
        Some(Err(join)) => Err(StoreError::Unavailable {
            message: "a mailbox write task was cancelled".into(),
            source: Some(Box::new(join)),
        }),
        None => Err(StoreError::Unavailable { message: "a mailbox write task vanished".into(), source: None }),
    }
}

fn keep_first_error(first: &mut Option<StoreError>, done: StoreResult<StoreResult<()>>) {
    if let Err(e) | Ok(Err(e)) = done {
        first.get_or_insert(e);
    }
}

impl ScyllaMailboxStore {
    async fn read_meta(&self, tenant: &TenantId, user: &UserId) -> StoreResult<Meta> {
        let result = self
            .session()
            .execute_unpaged(&self.st().meta_select, (&tenant.0[..], &user.0[..]))
            .await
            .map_err(db("reading mailbox retention meta"))?;
        let Some((version, generation, ledger)) =
            first::<(Option<i32>, Option<i64>, Option<Vec<u8>>)>(result, "mailbox retention meta")?
        else {
            return Ok(Meta::default());
        };
        let corrupt = |why: String| StoreError::CorruptEntry(format!("mailbox retention meta of {user}: {why}"));
        let legacy = match version {
            Some(FORMAT_VERSION) => false,
            Some(LEGACY_FORMAT_VERSION) => true,
            other => {
                return Err(corrupt(format!(
                    "format version {other:?} is neither {FORMAT_VERSION} nor {LEGACY_FORMAT_VERSION}"
                )))
            }
        };
        let generation = generation.ok_or_else(|| corrupt("no ledger generation".into()))?;
        let ledger = RetentionLedger::decode(&ledger.ok_or_else(|| corrupt("no ledger".into()))?)?;
        Ok(Meta { exists: true, generation, ledger, legacy })
    }

    /// `(trim, gap)`, or `None` when the user has no floor row.
    async fn read_floor(
        &self,
        tenant: &TenantId,
        user: &UserId,
    ) -> StoreResult<Option<(Option<MailboxSeq>, Option<MailboxSeq>)>> {
        let result = self
            .session()
            .execute_unpaged(&self.st().floor_select, (&tenant.0[..], &user.0[..]))
            .await
            .map_err(db("reading a mailbox floor"))?;
        let Some((trim, gap)) = first::<(Option<i64>, Option<i64>)>(result, "mailbox floor")? else {
            return Ok(None);
        };
        let trim = trim.map(|t| seq_from("trim", t)).transpose()?;
        let gap = gap.map(|g| seq_from("gap", g)).transpose()?;
        Ok(Some((trim, gap)))
    }

    /// Raises the expired-gap boundary to `seq` (no-op if it is higher already): the seq is the
    /// write timestamp, so the highest write wins.
    async fn raise_gap(&self, tenant: &TenantId, user: &UserId, seq: MailboxSeq) -> StoreResult<()> {
        let s = seq_i("gap", seq)?;
        self.session()
            .execute_unpaged(&self.st().floor_gap, (highest_wins_timestamp(s), s, &tenant.0[..], &user.0[..]))
            .await
            .map_err(db("raising a mailbox gap"))?;
        Ok(())
    }

    /// Every bucket proof row of `day`; with `legacy` (a meta in the legacy format), the legacy
    /// table's rows too.
    async fn proof_rows(&self, tenant: &TenantId, user: &UserId, day: u32, legacy: bool) -> StoreResult<Vec<ProofRow>> {
        let key = (&tenant.0[..], &user.0[..], i64::from(day));
        let mut tables = vec![(&self.st().bucket_select_day, false)];
        if legacy {
            tables.push((&self.st().legacy_bucket_select_day, true));
        }
        let mut out = Vec::new();
        for (statement, legacy) in tables {
            let result = self.session().execute_unpaged(statement, key).await.map_err(db("reading a bucket proof"))?;
            for (epoch, max_seq, expires_at) in rows::<(i32, Option<i64>, Option<i64>)>(result, "bucket proof")? {
                let missing = || StoreError::CorruptEntry(format!("bucket proof of {user} day {day} lacks a column"));
                let max_seq = seq_from("bucket max_seq", max_seq.ok_or_else(missing)?)?;
                out.push(ProofRow {
                    day,
                    epoch,
                    max_seq,
                    expires_at: UnixMillis(expires_at.ok_or_else(missing)?),
                    legacy,
                });
            }
        }
        Ok(out)
    }

    /// The highest seq any bucket proof of `day` holds; `None` when there is none.
    async fn proof_max(
        &self,
        tenant: &TenantId,
        user: &UserId,
        day: u32,
        legacy: bool,
    ) -> StoreResult<Option<MailboxSeq>> {
        Ok(self.proof_rows(tenant, user, day, legacy).await?.into_iter().map(|r| r.max_seq).max())
    }

    /// Raises the proof of `(day, epoch)` to `seq` (no TTL: it lives while the ledger lists the
    /// day). The seq is the write timestamp, so the highest write wins.
    async fn write_proof(
        &self,
        tenant: &TenantId,
        user: &UserId,
        day: u32,
        epoch: i32,
        seq: MailboxSeq,
        expiry: UnixMillis,
    ) -> StoreResult<()> {
        let s = seq_i("bucket max_seq", seq)?;
        let values = (&tenant.0[..], &user.0[..], i64::from(day), epoch, s, expiry.0, highest_wins_timestamp(s));
        self.session().execute_unpaged(&self.st().bucket_insert, values).await.map_err(db("writing a bucket proof"))?;
        Ok(())
    }

    /// Gives the proof rows of days a registration dropped [`RETIRED_PROOF_TTL_SECS`] to live:
    /// each rewritten with that TTL one write timestamp above its own, so it wins over the row
    /// without TTL while any later proof write (a higher seq, only from a writer whose clock
    /// still sees the day live) wins over it. Legacy rows expire by their own TTL.
    async fn retire_proofs(&self, tenant: &TenantId, user: &UserId, retired: &[ProofRow]) -> StoreResult<()> {
        for row in retired.iter().filter(|r| !r.legacy) {
            let s = seq_i("bucket max_seq", row.max_seq)?;
            let values = (
                &tenant.0[..],
                &user.0[..],
                i64::from(row.day),
                row.epoch,
                s,
                row.expires_at.0,
                RETIRED_PROOF_TTL_SECS,
                highest_wins_timestamp(s) + 1,
            );
            self.session()
                .execute_unpaged(&self.st().bucket_retire, values)
                .await
                .map_err(db("retiring a bucket proof"))?;
        }
        Ok(())
    }

    /// The highest seq of every ledger day expired at `now`, each checked against its bucket
    /// proof ([`proven_max`]: a missing or regressed proof is `CorruptEntry`); `None` when no
    /// day expired.
    async fn expired_boundary(
        &self,
        tenant: &TenantId,
        user: &UserId,
        meta: &Meta,
        now: UnixMillis,
    ) -> StoreResult<Option<MailboxSeq>> {
        let mut boundary = None;
        for item in meta.ledger.items().iter().filter(|i| i.expiry <= now) {
            let proof = self.proof_max(tenant, user, item.day, meta.legacy).await?;
            boundary = boundary.max(Some(proven_max(user, item, proof, now, meta.legacy)?));
        }
        Ok(boundary)
    }

    fn plan(
        &self,
        tenant: TenantId,
        user: UserId,
        groups: Vec<EventGroup>,
        meta: Option<Meta>,
        now: UnixMillis,
    ) -> StoreResult<Plan> {
        // `None`: every live group's day is known to be listed (nothing to register).
        let known = meta.is_none();
        let meta = meta.unwrap_or_default();
        let mut plan = Plan {
            tenant,
            user,
            expired_gap: None,
            proofs: BTreeMap::new(),
            new_days: BTreeMap::new(),
            meta,
            writes: Vec::new(),
        };
        for g in groups {
            if g.expires_at <= now {
                plan.expired_gap = plan.expired_gap.max(Some(g.seq));
                continue;
            }
            let day = day_of(g.expires_at)?;
            let proof = plan.proofs.entry((day, g.seq.epoch().0)).or_insert((g.seq, g.expires_at));
            proof.0 = proof.0.max(g.seq);
            if !known && !plan.meta.ledger.items().iter().any(|i| i.day == day) {
                plan.new_days.entry(day).or_insert((g.seq, g.expires_at));
            }
            plan.writes.push((g.seq, g.expires_at, encode_event_group(&g)));
        }
        // The ledger the registration would write: refuse an overflow before anything is written.
        let mut ledger = plan.meta.ledger.clone();
        ledger.take_expired(now);
        for (seq, expiry) in plan.new_days.values() {
            ledger.register(seq.as_u64(), *expiry).map_err(StoreError::InvariantViolation)?;
        }
        Ok(plan)
    }

    /// Writes canonical `groups` (any users). Every user's meta is read and planned first, so a
    /// ledger overflow anywhere writes nothing; then per user: gap, bucket proofs, ledger
    /// registration (LWT, only for new days), entries.
    pub(super) async fn write_groups(&self, groups: Vec<EventGroup>) -> StoreResult<()> {
        let now = self.inner.clock.now();
        let mut by_user: BTreeMap<(TenantId, UserId), Vec<EventGroup>> = BTreeMap::new();
        for g in groups {
            by_user.entry((g.tenant, g.user)).or_default().push(g);
        }
        // Read and plan every user first (several reads in flight), so a ledger overflow
        // anywhere writes nothing.
        let mut reads = tokio::task::JoinSet::new();
        let mut plans = Vec::with_capacity(by_user.len());
        for ((tenant, user), gs) in by_user {
            if reads.len() >= MAX_IN_FLIGHT {
                plans.push(joined(reads.join_next().await)??);
            }
            let store = self.clone();
            let live_days: Vec<u32> =
                gs.iter().filter(|g| g.expires_at > now).filter_map(|g| day_of(g.expires_at).ok()).collect();
            reads.spawn(async move {
                let meta = if store.inner.listed.all_listed(&(tenant, user), &live_days) {
                    None
                } else {
                    Some(store.read_meta(&tenant, &user).await?)
                };
                store.plan(tenant, user, gs, meta, now)
            });
        }
        while let Some(done) = reads.join_next().await {
            plans.push(joined(Some(done))??);
        }
        // Then commit every user (several in flight); the first error is returned after every
        // started commit finished.
        let mut commits = tokio::task::JoinSet::new();
        let mut first_err = None;
        for plan in plans {
            if commits.len() >= MAX_IN_FLIGHT {
                keep_first_error(&mut first_err, joined(commits.join_next().await));
            }
            let store = self.clone();
            commits.spawn(async move {
                let (key, days): ((TenantId, UserId), Vec<u32>) =
                    ((plan.tenant, plan.user), plan.proofs.keys().map(|(day, _)| *day).collect());
                store.commit_user(plan, now).await?;
                store.inner.listed.remember(key, days.into_iter(), now);
                Ok(())
            });
        }
        while let Some(done) = commits.join_next().await {
            keep_first_error(&mut first_err, joined(Some(done)));
        }
        first_err.map_or(Ok(()), Err)
    }

    async fn commit_user(&self, plan: Plan, now: UnixMillis) -> StoreResult<()> {
        let (t, u) = (&plan.tenant, &plan.user);
        if let Some(gap) = plan.expired_gap {
            self.raise_gap(t, u, gap).await?;
        }
        for ((day, epoch), (seq, expiry)) in &plan.proofs {
            self.write_proof(t, u, *day, i32::from(*epoch), *seq, *expiry).await?;
        }
        if !plan.new_days.is_empty() {
            self.register_days(t, u, plan.meta.clone(), &plan.new_days, now).await?;
        }
        // The entries last, all in the user's partition: a few batches, not a request each.
        let mut rows = Vec::with_capacity(plan.writes.len());
        for (seq, expiry, bytes) in &plan.writes {
            let ttl = ttl_secs(*expiry, now, ENTRY_TTL_SLACK_SECS);
            rows.push((&t.0[..], &u.0[..], seq_i("mailbox seq", *seq)?, bytes, ttl));
        }
        write_partition(self.session(), &self.st().entry_insert, &rows, "writing a mailbox group").await
    }

    /// Adds `days` to the user's ledger with one LWT on the meta row, dropping the days that
    /// expired (their proofs merged into the gap first). Re-reads and retries while another
    /// writer moves the generation; stops when every day is listed. An LWT Paxos gave up on
    /// (contention: its outcome unknown) is settled the same way, by the re-read after a
    /// random pause: the days listed, or the generation where it was and the LWT sent again.
    async fn register_days(
        &self,
        tenant: &TenantId,
        user: &UserId,
        mut meta: Meta,
        days: &BTreeMap<u32, (MailboxSeq, UnixMillis)>,
        now: UnixMillis,
    ) -> StoreResult<()> {
        // The proof rows of the days the last LWT sent would drop: retired once it landed.
        let mut dropping: Vec<ProofRow> = Vec::new();
        for attempt in 0..MAX_ATTEMPTS {
            let missing: Vec<_> =
                days.iter().filter(|(d, _)| !meta.ledger.items().iter().any(|i| i.day == **d)).collect();
            if missing.is_empty() {
                // Listed by our LWT whose answer was lost, or by another writer's: retire what
                // is no longer listed of what ours would have dropped.
                dropping.retain(|r| !meta.ledger.items().iter().any(|i| i.day == r.day));
                return self.retire_proofs(tenant, user, &dropping).await;
            }
            let mut ledger = meta.ledger.clone();
            // The expired days: their highest seq raises the gap before the LWT drops them.
            dropping.clear();
            let mut gap = None;
            for item in ledger.items().iter().filter(|i| i.expiry <= now) {
                let found = self.proof_rows(tenant, user, item.day, meta.legacy).await?;
                let proof = found.iter().map(|r| r.max_seq).max();
                gap = gap.max(Some(proven_max(user, item, proof, now, meta.legacy)?));
                dropping.extend(found);
            }
            if let Some(gap) = gap {
                self.raise_gap(tenant, user, gap).await?;
                ledger.take_expired(now);
            }
            // Fold the live days' proofs into their ledger items, so the ledger itself knows each
            // day's highest seq as of this LWT. A live day's proof must exist and not be below
            // the ledger ([`proven_max`]). A legacy meta's proofs are copied into the current
            // table first, so the meta this LWT writes in the current format finds every one.
            let live: Vec<_> = ledger.items().to_vec();
            for item in live {
                let found = self.proof_max(tenant, user, item.day, meta.legacy).await?;
                let proof = proven_max(user, &item, found, now, meta.legacy)?;
                if meta.legacy {
                    self.write_proof(tenant, user, item.day, i32::from(proof.epoch().0), proof, item.expiry).await?;
                }
                ledger.register(proof.as_u64(), item.expiry).map_err(StoreError::InvariantViolation)?;
            }
            for (_, (seq, expiry)) in missing {
                ledger.register(seq.as_u64(), *expiry).map_err(StoreError::InvariantViolation)?;
            }
            let blob = ledger.encode();
            self.inner.lwts.fetch_add(1, Ordering::Relaxed);
            let result = if meta.exists {
                self.session()
                    .execute_unpaged(
                        &self.st().meta_update_lwt,
                        (FORMAT_VERSION, meta.generation + 1, &blob, &tenant.0[..], &user.0[..], meta.generation),
                    )
                    .await
            } else {
                self.session()
                    .execute_unpaged(
                        &self.st().meta_insert_lwt,
                        (&tenant.0[..], &user.0[..], FORMAT_VERSION, 1i64, &blob),
                    )
                    .await
            };
            let result = match result {
                Err(e) if paxos_timed_out(&e) => {
                    contention_pause(attempt).await;
                    meta = self.read_meta(tenant, user).await?;
                    continue;
                }
                other => other.map_err(db("registering a retention day"))?,
            };
            if super::applied(result, "retention meta LWT")? {
                return self.retire_proofs(tenant, user, &dropping).await;
            }
            meta = self.read_meta(tenant, user).await?;
        }
        Err(StoreError::Unavailable {
            message: format!("mailbox retention meta of {user} kept changing for {MAX_ATTEMPTS} attempts"),
            source: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::MILLIS_PER_DAY;

    #[test]
    fn ttls_round_up_and_stay_in_range() {
        let now = UnixMillis(1_000);
        assert_eq!(ttl_secs(UnixMillis(1_001), now, 0), 1);
        assert_eq!(ttl_secs(UnixMillis(3_000), now, 0), 2);
        assert_eq!(ttl_secs(UnixMillis(3_001), now, 10), 13);
        assert_eq!(ttl_secs(UnixMillis(0), now, 0), 1, "never zero (zero means no TTL)");
        assert_eq!(ttl_secs(UnixMillis(i64::MAX), now, 0), MAX_TTL_SECS as i32);
    }

    /// Seed 000's proof rule, decided without a server: a missing or regressed proof of a listed
    /// day is `CorruptEntry`, however long ago the day expired. Only a meta in the legacy format
    /// (whose proofs had a TTL) takes the ledger's seq once that TTL could have run out.
    #[test]
    fn a_listed_day_needs_its_proof_at_least_as_high_as_the_ledger() {
        let user = UserId([2; 16]);
        let expiry = UnixMillis(100 * crate::ids::MILLIS_PER_DAY);
        let item = LedgerItem { day: 100, max_seq: 40, expiry };
        let seq = |n: u64| MailboxSeq::from_u64(n).unwrap();
        let after = |millis: i64| UnixMillis(expiry.0 + millis);
        let kind = |r: StoreResult<MailboxSeq>| r.map_err(|e| e.kind());
        let long_after = after(400 * MILLIS_PER_DAY);
        for legacy in [false, true] {
            for now in [UnixMillis(expiry.0 - 1), expiry, after(LEGACY_PROOF_GONE_AFTER_MILLIS + 1), long_after] {
                assert_eq!(proven_max(&user, &item, Some(seq(40)), now, legacy).unwrap(), seq(40), "equal");
                assert_eq!(proven_max(&user, &item, Some(seq(55)), now, legacy).unwrap(), seq(55), "the proof's");
                let regressed = proven_max(&user, &item, Some(seq(39)), now, legacy).unwrap_err();
                assert_eq!(regressed.kind(), crate::ErrorKind::CorruptEntry, "at {now:?}");
                assert!(regressed.to_string().contains("regressed"), "{regressed}");
            }
        }
        // Missing: always, in the current format.
        for now in [UnixMillis(expiry.0 - 1), expiry, after(LEGACY_PROOF_GONE_AFTER_MILLIS), long_after] {
            let missing = proven_max(&user, &item, None, now, false).unwrap_err();
            assert_eq!(missing.kind(), crate::ErrorKind::CorruptEntry, "at {now:?}");
            assert!(missing.to_string().contains("missing"), "{missing}");
        }
        // A legacy meta: within the old proofs' slack too; past it their TTL took them.
        for now in [expiry, after(MILLIS_PER_DAY), after(LEGACY_PROOF_GONE_AFTER_MILLIS - 1)] {
            assert_eq!(kind(proven_max(&user, &item, None, now, true)), Err(crate::ErrorKind::CorruptEntry));
        }
        assert_eq!(kind(proven_max(&user, &item, None, after(LEGACY_PROOF_GONE_AFTER_MILLIS), true)), Ok(seq(40)));
        assert_eq!(kind(proven_max(&user, &item, None, long_after, true)), Ok(seq(40)));
        let bad = LedgerItem { max_seq: 1 << 63, ..item };
        assert_eq!(kind(proven_max(&user, &bad, Some(seq(40)), expiry, false)), Err(crate::ErrorKind::CorruptEntry));
    }

    #[test]
    fn listed_days_answer_only_for_days_seen_and_not_yet_expired() {
        let listed = ListedDays::default();
        let key = (TenantId([1; 16]), UserId([2; 16]));
        let day = |d: i64| UnixMillis(d * crate::ids::MILLIS_PER_DAY);
        assert!(!listed.all_listed(&key, &[40]), "nothing known at first");
        listed.remember(key, [40, 41].into_iter(), day(10));
        assert!(listed.all_listed(&key, &[40]));
        assert!(listed.all_listed(&key, &[40, 41]));
        assert!(!listed.all_listed(&key, &[40, 42]), "one unknown day means a meta read");
        assert!(!listed.all_listed(&key, &[]), "no live group: nothing to skip");
        assert!(!listed.all_listed(&(TenantId([1; 16]), UserId([3; 16])), &[40]), "per user");
        listed.remember(key, [45].into_iter(), day(41));
        assert!(!listed.all_listed(&key, &[40]), "days before today are forgotten");
        assert!(listed.all_listed(&key, &[41, 45]));
    }
}
