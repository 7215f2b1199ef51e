//! The recovery scan over `commit_recovery`: finds every unfinished commit however long it has
//! been stuck, and passes finished entries for good.
//!
//! # Layout
//!
//! Entries are partitioned by the hour of their position and clustered by
//! `(position, tenant_id, sender_id, client_message_id)` (the column is named `created_at`: an
//! entry is placed at its reservation's `created_at`; see `entries.rs` for moves). An entry has no
//! TTL while its reservation may still be unfinished, so a commit stuck for a night (every writer
//! down) is still found; it is retired (given a TTL) once its reservation finished.
//!
//! `commit_recovery_cursor.swept` (written with a value-derived timestamp, so it only rises)
//! says: every entry positioned below it is finished or was moved above it.
//!
//! # One pass
//!
//! 1. Read `swept` (a first pass starts [`FIRST_LOOKBACK_MILLIS`] before its cutoff).
//! 2. Read entries from `swept` up to the cutoff in ascending position, one minute of positions
//!    per query ([`SLICE_MILLIS`], inside one hour partition), at most the per-pass entry budget
//!    ([`MAX_ENTRIES_PER_PASS`], finishing the millisecond it ends in).
//! 3. Resolve each entry against its commit row (`entries.rs`): unfinished commits are returned
//!    (oldest `created_at` first, each key once); finished entries are retired when they still
//!    lack a TTL; an unfinished entry more than [`MOVE_STEP_MILLIS`] below the cursor's limit is
//!    moved [`MOVE_STEP_MILLIS`] up (placed there, then retired here).
//! 4. Advance `swept` over the leading run of finished (or moved) entries, never past the first
//!    unfinished or pending one, and never past `now -` [`SWEEP_LAG_MILLIS`].
//!
//! # Why it holds
//!
//! - *No unfinished commit is lost*: its entry has no TTL, and `swept` never passes an entry
//!   whose reservation may still be unfinished (moving places the new entry before retiring the
//!   old, at a position the same pass still reads).
//! - *No entry lands below `swept`*: a reserve writes its entry before its LWT and gives up when
//!   [`super::commit_row::RESERVE_DEADLINE_MILLIS`] passed, so an entry that can name a commit is
//!   durable by `created_at + 30 s`; `swept` stays [`SWEEP_LAG_MILLIS`] (2 min) behind the
//!   scanner's clock. This assumes writer clocks within 90 s of each other.
//! - *In-flight reserves are not skipped*: an entry without its commit is pending (blocks `swept`)
//!   until it is old enough to be fenced, after which its reserve can no longer apply.
//! - *Progress past finished entries*: `swept` moves over them durably, so a later pass never
//!   reads them again; and an entry that stays unfinished is moved up, so it blocks `swept` for at
//!   most [`MOVE_STEP_MILLIS`] (a busy history behind a stuck commit is not read pass after pass).
//! - *Bounded tombstones per read*: retired entries keep a 3 h TTL, and a query covers one minute
//!   of positions, so a query meets at most a minute of expired entries (the scan keeps up while
//!   one minute of reservations stays below the server's `tombstone_failure_threshold`).

use std::ops::ControlFlow;
use std::sync::atomic::Ordering;

use scylla::response::PagingState;

use super::entries::Verdict;
use super::ScyllaMessageStore;
use crate::error::StoreResult;
use crate::ids::{ClientMessageId, TenantId, UnixMillis, UserId};
use crate::message::{Commit, CommitKey};
use crate::message_store::COMMIT_AUX_TTL_MILLIS;
use crate::scylla::cql::{corrupt, unavailable};
use crate::scylla::mailbox::highest_wins_timestamp;
use crate::scylla::schema::{hour_bucket, HOUR_MILLIS};

/// Default budget of entries one pass resolves (each costs one commit read); see
/// [`ScyllaMessageStore::set_recovery_entries_per_pass`].
pub(super) const MAX_ENTRIES_PER_PASS: usize = 10_000;
/// Positions read per query.
pub(super) const SLICE_MILLIS: i64 = 60_000;
/// At most this many slices (a day of positions) per pass.
const MAX_SLICES_PER_PASS: i64 = 24 * 60;
/// `swept` stays this far behind the scanner's clock.
pub(super) const SWEEP_LAG_MILLIS: i64 = 2 * 60_000;
/// How far an unfinished entry is moved up at a time.
pub(super) const MOVE_STEP_MILLIS: i64 = 10 * 60_000;
/// Where a first pass (no cursor yet) starts, before its cutoff: entries written before this
/// scheme carried a 2 h TTL.
const FIRST_LOOKBACK_MILLIS: i64 = COMMIT_AUX_TTL_MILLIS + HOUR_MILLIS;
/// The cursor row's key.
const SCOPE: i32 = 0;

pub(super) type EntryRow = (i64, Vec<u8>, Vec<u8>, String);

/// The commit key an entry row names.
pub(super) fn entry_key(row: &EntryRow) -> StoreResult<CommitKey> {
    let what = "commit_recovery entry";
    let id16 = |b: &[u8]| -> StoreResult<[u8; 16]> {
        b.try_into().map_err(|_| corrupt(what, format!("id of {} bytes, want 16", b.len())))
    };
    Ok(CommitKey {
        tenant: TenantId(id16(&row.1)?),
        sender: UserId(id16(&row.2)?),
        client_message_id: ClientMessageId::new(row.3.clone()).map_err(|e| corrupt(what, e))?,
    })
}

/// Where one pass reads: positions in `[from, to)`, and how far `swept` may move.
struct Pass {
    from: i64,
    to: i64,
    limit: i64,
    budget: usize,
}

/// What one pass saw.
#[derive(Default)]
struct Outcome {
    found: Vec<Commit>,
    /// The first position `swept` may not pass (an unfinished or pending entry).
    blocked: Option<i64>,
    /// Everything below this position was read.
    read_to: i64,
}

impl ScyllaMessageStore {
    /// Sets how many recovery entries one `scan_recoverable_commits` pass resolves (default
    /// 10 000; at least 1; each costs one commit read). The scan keeps up while this exceeds the
    /// reservations made between two passes.
    pub fn set_recovery_entries_per_pass(&self, entries: usize) {
        self.inner.recovery_budget.store(entries.max(1), Ordering::Relaxed);
    }

    /// Visits entries positioned in `[from, to)` of one hour partition, ascending, until `visit`
    /// breaks.
    pub(super) async fn walk_entries(
        &self,
        bucket: i64,
        (from, to): (i64, i64),
        mut visit: impl FnMut(i64, CommitKey) -> ControlFlow<()>,
    ) -> StoreResult<ControlFlow<()>> {
        let mut paging = PagingState::start();
        loop {
            let what = format!("scanning commit_recovery hour {bucket}");
            let (result, next) = self
                .inner
                .session
                .execute_single_page(&self.inner.st.scan_recovery, (bucket, from, to), paging)
                .await
                .map_err(|e| unavailable(what.clone(), e))?;
            let rows = result.into_rows_result().map_err(|e| corrupt(&what, e))?;
            for row in rows.rows::<EntryRow>().map_err(|e| corrupt(&what, e))? {
                let row = row.map_err(|e| corrupt(&what, e))?;
                if visit(row.0, entry_key(&row)?).is_break() {
                    return Ok(ControlFlow::Break(()));
                }
            }
            match next.into_paging_control_flow() {
                ControlFlow::Continue(state) => paging = state,
                ControlFlow::Break(()) => return Ok(ControlFlow::Continue(())),
            }
        }
    }

    async fn read_swept(&self) -> StoreResult<Option<i64>> {
        let what = "reading the recovery cursor";
        let rows = self
            .inner
            .session
            .execute_unpaged(&self.inner.st.select_recovery_cursor, (SCOPE,))
            .await
            .map_err(|e| unavailable(what, e))?
            .into_rows_result()
            .map_err(|e| corrupt(what, e))?;
        Ok(rows.maybe_first_row::<(Option<i64>,)>().map_err(|e| corrupt(what, e))?.and_then(|(s,)| s))
    }

    pub(super) async fn scan_recoverable_commits_impl(
        &self,
        cutoff: UnixMillis,
        limit: usize,
    ) -> StoreResult<Vec<Commit>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let now = self.now();
        let to = cutoff.0.min(now.0);
        let swept = self.read_swept().await?;
        let from = swept.unwrap_or(to.saturating_sub(FIRST_LOOKBACK_MILLIS));
        let pass = Pass {
            from,
            to,
            limit: to.min(now.0.saturating_sub(SWEEP_LAG_MILLIS)),
            budget: self.inner.recovery_budget.load(Ordering::Relaxed),
        };
        let outcome = self.sweep(&pass, now).await?;
        let advance = outcome.blocked.unwrap_or(outcome.read_to).min(outcome.read_to).min(pass.limit);
        if advance > from {
            let values = (highest_wins_timestamp(advance.max(0)), advance, SCOPE);
            self.inner
                .session
                .execute_unpaged(&self.inner.st.advance_recovery_cursor, values)
                .await
                .map_err(|e| unavailable("advancing the recovery cursor", e))?;
        }
        let mut found = outcome.found;
        found.sort_by(|a, b| {
            (a.intent.created_at, &a.intent.request.key).cmp(&(b.intent.created_at, &b.intent.request.key))
        });
        found.dedup_by(|a, b| a.intent.request.key == b.intent.request.key);
        found.retain(|c| c.intent.created_at < cutoff);
        found.truncate(limit);
        Ok(found)
    }

    /// Reads and resolves the entries of one pass (see the module docs).
    async fn sweep(&self, pass: &Pass, now: UnixMillis) -> StoreResult<Outcome> {
        let mut out = Outcome { read_to: pass.from, ..Outcome::default() };
        let mut examined = 0usize;
        let mut slice_from = pass.from;
        let mut slices = 0;
        while slice_from < pass.to && slices < MAX_SLICES_PER_PASS {
            let bucket = hour_bucket(slice_from);
            let slice_to = (slice_from + SLICE_MILLIS).min(pass.to).min((bucket + 1) * HOUR_MILLIS);
            let mut entries = Vec::new();
            let mut last = None;
            let flow = self
                .walk_entries(bucket, (slice_from, slice_to), |position, key| {
                    // Past the budget, finish the millisecond so the cursor never splits one.
                    if examined >= pass.budget && last != Some(position) {
                        return ControlFlow::Break(());
                    }
                    examined += 1;
                    last = Some(position);
                    entries.push((position, key));
                    ControlFlow::Continue(())
                })
                .await?;
            let capped = flow.is_break() || (examined >= pass.budget && last.is_some());
            for (position, key) in entries {
                self.settle(position, &key, pass, now, &mut out).await?;
            }
            if capped {
                out.read_to = last.map_or(slice_to, |p| p + 1).min(slice_to);
                return Ok(out);
            }
            out.read_to = slice_to;
            slice_from = slice_to;
            slices += 1;
        }
        Ok(out)
    }

    /// Resolves one entry and acts on the verdict.
    async fn settle(
        &self,
        position: i64,
        key: &CommitKey,
        pass: &Pass,
        now: UnixMillis,
        out: &mut Outcome,
    ) -> StoreResult<()> {
        match self.resolve(position, key, now).await? {
            Verdict::Finished { retire } => {
                if retire {
                    self.put_entry(position, key, true).await?;
                }
            }
            Verdict::Pending => {
                out.blocked.get_or_insert(position);
            }
            Verdict::Unfinished(commit) => {
                out.found.push(commit);
                let moved = position.saturating_add(MOVE_STEP_MILLIS);
                if moved < pass.limit {
                    // Placed first, then retired: the entry is never absent, and the new position
                    // lies ahead in this very pass.
                    self.put_entry(moved, key, false).await?;
                    self.put_entry(position, key, true).await?;
                } else {
                    out.blocked.get_or_insert(position);
                }
            }
        }
        Ok(())
    }
}
