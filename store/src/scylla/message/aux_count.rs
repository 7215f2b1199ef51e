//! `gc_committed_auxiliary`: counts the commits whose auxiliary TTL ended since the last pass
//! (by the injected clock). Nothing is deleted: commit rows and recovery entries carry their TTL
//! from COMMITTED on.
//!
//! A commit whose auxiliary TTL ended in `(since, now]` was created at or before
//! `now - 2 h`; the pass reads the recovery entries placed in the window that can hold such
//! commits (entries of commits that COMMITTED are never moved), at most
//! [`super::recovery::MAX_ENTRIES_PER_PASS`] of them and 72 hour partitions, and counts those
//! whose commit is COMMITTED at that very position with its TTL end inside the window.

use std::ops::ControlFlow;
use std::sync::atomic::Ordering;

use super::commit_row::{classify, key_values, Found};
use super::recovery::MAX_ENTRIES_PER_PASS;
use super::ScyllaMessageStore;
use crate::error::StoreResult;
use crate::ids::UnixMillis;
use crate::message::CommitState;
use crate::message_store::{GcReport, COMMIT_AUX_TTL_MILLIS};
use crate::scylla::cql::{corrupt, unavailable};
use crate::scylla::schema::{hour_bucket, HOUR_MILLIS};

/// At most this many hour partitions are read by one pass.
const MAX_BUCKETS_PER_PASS: i64 = 72;

impl ScyllaMessageStore {
    pub(super) async fn gc_committed_auxiliary_impl(&self, limit: usize) -> StoreResult<GcReport> {
        let now = self.now();
        let since = self.inner.aux_counted_through.load(Ordering::SeqCst);
        if now.0 <= since || limit == 0 {
            return Ok(GcReport::default());
        }
        let to = now.0 - COMMIT_AUX_TTL_MILLIS + 1;
        let from = since.saturating_sub(2 * COMMIT_AUX_TTL_MILLIS + HOUR_MILLIS);
        let mut entries = Vec::new();
        if to > from {
            let last = hour_bucket(to - 1);
            for bucket in hour_bucket(from).max(last - MAX_BUCKETS_PER_PASS + 1)..=last {
                let flow = self
                    .walk_entries(bucket, (from, to), |position, key| {
                        entries.push((position, key));
                        if entries.len() >= MAX_ENTRIES_PER_PASS {
                            ControlFlow::Break(())
                        } else {
                            ControlFlow::Continue(())
                        }
                    })
                    .await?;
                if flow.is_break() {
                    break;
                }
            }
        }
        let mut ended = Vec::new();
        for (position, key) in entries {
            let what = "reading a commit for the auxiliary count";
            let rows = self
                .inner
                .session
                .execute_unpaged(&self.inner.st.select_commit, key_values(&key))
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
                if commit.state == CommitState::Committed && commit.intent.created_at.0 == position {
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
