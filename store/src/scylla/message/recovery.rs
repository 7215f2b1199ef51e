//! The recovery index (`commit_recovery`): the scan for unfinished commits and the auxiliary
//! expiry count.
//!
//! Entries are partitioned by the hour of `created_at` and clustered by
//! `(created_at, tenant_id, sender_id, client_message_id)`, so walking the hours in order reads
//! oldest first. An entry is written before its reserve LWT and lives as long as the auxiliary
//! facts (2 h), so a scan only has to look that far back from its cutoff. Each entry is checked
//! against the commit row it names: no commit (a lost race or a failed reserve), another
//! `created_at` (a later reservation of the key), or a finished commit are skipped.

use std::ops::ControlFlow;
use std::sync::atomic::Ordering;

use scylla::response::PagingState;

use super::commit::{classify, Found};
use super::ScyllaMessageStore;
use crate::error::StoreResult;
use crate::ids::{ClientMessageId, TenantId, UnixMillis, UserId};
use crate::message::{Commit, CommitKey, CommitState};
use crate::message_store::{GcReport, COMMIT_AUX_TTL_MILLIS};
use crate::scylla::cql::{corrupt, unavailable};
use crate::scylla::schema::{hour_bucket, HOUR_MILLIS};

/// At most this many hour partitions are read by one pass.
const MAX_BUCKETS_PER_PASS: i64 = 72;
/// At most this many recovery entries are examined by one pass (each costs one commit read).
const MAX_ENTRIES_PER_PASS: usize = 10_000;

type EntryRow = (i64, Vec<u8>, Vec<u8>, String);

fn entry_key(row: &EntryRow) -> StoreResult<CommitKey> {
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

impl ScyllaMessageStore {
    /// Visits the recovery entries with `created_at` in `[from, to)`, oldest first, until `visit`
    /// breaks.
    async fn walk_recovery(
        &self,
        from: i64,
        to: i64,
        mut visit: impl FnMut(i64, CommitKey) -> ControlFlow<()>,
    ) -> StoreResult<()> {
        if to <= from {
            return Ok(());
        }
        let last = hour_bucket(to - 1);
        let first = hour_bucket(from).max(last - MAX_BUCKETS_PER_PASS + 1);
        for bucket in first..=last {
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
                        return Ok(());
                    }
                }
                match next.into_paging_control_flow() {
                    ControlFlow::Continue(state) => paging = state,
                    ControlFlow::Break(()) => break,
                }
            }
        }
        Ok(())
    }

    /// The commit a recovery entry names, if it is still the reservation that wrote the entry.
    async fn entry_commit(&self, created_at: i64, key: &CommitKey, now: UnixMillis) -> StoreResult<Option<Commit>> {
        let found = self.find(key, now).await?;
        Ok(match found {
            Found::Live { commit, .. } if commit.intent.created_at.0 == created_at => Some(commit),
            Found::Live { .. } | Found::Absent | Found::Gone { .. } => None,
        })
    }

    pub(super) async fn scan_recoverable_commits_impl(
        &self,
        cutoff: UnixMillis,
        limit: usize,
    ) -> StoreResult<Vec<Commit>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let from = cutoff.0.saturating_sub(COMMIT_AUX_TTL_MILLIS + HOUR_MILLIS);
        // Entries first (at most MAX_ENTRIES_PER_PASS), then one read per commit. Entries are not
        // deduplicated by key: a key reserved again after its auxiliary TTL has an older entry
        // too, and only the entry whose `created_at` matches the commit names it.
        let mut entries = Vec::new();
        self.walk_recovery(from, cutoff.0, |created_at, key| {
            entries.push((created_at, key));
            if entries.len() >= MAX_ENTRIES_PER_PASS {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        })
        .await?;
        let now = self.now();
        let mut out = Vec::new();
        for (created_at, key) in entries {
            if let Some(commit) = self.entry_commit(created_at, &key, now).await? {
                if commit.state.is_recoverable() {
                    out.push(commit);
                    if out.len() == limit {
                        break;
                    }
                }
            }
        }
        Ok(out)
    }

    /// Counts commits whose auxiliary TTL ended since the last pass (by the injected clock).
    /// Nothing is deleted: the rows carry the TTL themselves.
    pub(super) async fn gc_committed_auxiliary_impl(&self, limit: usize) -> StoreResult<GcReport> {
        let now = self.now();
        let since = self.inner.aux_counted_through.load(Ordering::SeqCst);
        if now.0 <= since || limit == 0 {
            return Ok(GcReport::default());
        }
        // A commit whose TTL ended in (since, now] was created at or before now - TTL; its
        // recovery entry lives 2 h, so reservations older than that window are not visible.
        let to = now.0 - COMMIT_AUX_TTL_MILLIS + 1;
        let from = since.saturating_sub(2 * COMMIT_AUX_TTL_MILLIS + HOUR_MILLIS);
        let mut entries = Vec::new();
        self.walk_recovery(from, to, |created_at, key| {
            entries.push((created_at, key));
            if entries.len() >= MAX_ENTRIES_PER_PASS {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        })
        .await?;
        let mut ended = Vec::new();
        for (created_at, key) in entries {
            let what = "reading a commit for the auxiliary count";
            let rows = self
                .inner
                .session
                .execute_unpaged(&self.inner.st.select_commit, super::commit::key_values(&key))
                .await
                .map_err(|e| unavailable(what, e))?
                .into_rows_result()
                .map_err(|e| corrupt(what, e))?;
            let Some((request, blob)) =
                rows.maybe_first_row::<(Option<Vec<u8>>, Option<Vec<u8>>)>().map_err(|e| corrupt(what, e))?
            else {
                continue;
            };
            // Classify as of `since`: live then, and committed, so its TTL end is known.
            if let Found::Live { commit, .. } = classify(&key, request, blob, UnixMillis(since))? {
                let end = commit.committed_at.map(|at| at.0 + COMMIT_AUX_TTL_MILLIS);
                if commit.state == CommitState::Committed && commit.intent.created_at.0 == created_at {
                    if let Some(end) = end.filter(|end| *end > since && *end <= now.0) {
                        ended.push(end);
                    }
                }
            }
        }
        ended.sort_unstable();
        let through = if ended.len() > limit { ended[limit - 1] } else { now.0 };
        ended.truncate(limit);
        self.inner.aux_counted_through.fetch_max(through, Ordering::SeqCst);
        Ok(GcReport { removed: ended.len(), orphans_cleaned: 0 })
    }
}
