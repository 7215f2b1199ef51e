//! `gc_completed_dispatches`: marks a dispatch generation collected once every lane passed its
//! highest observation and it was last seen before the cut-off, reading the shard log from a
//! persisted cursor so each call's work is proportional to what is new.
//!
//! # The cursor
//!
//! `mailbox_gc_cursor (shard) → claimed, through`, each cell written with its offset as the write
//! timestamp (only rises):
//! - `through`: every source at or below it was examined by a GC pass, and belonged to a
//!   generation that is collected, superseded, or reachable otherwise (below);
//! - `claimed`: the highest offset a pass announced it would read up to, written *before* the
//!   pass reads the log.
//!
//! A pass reads `claimed := floor` (the lowest lane watermark; no source above it can be
//! collectable), then the sources in `(through, floor]` (at most [`GC_SCAN_CAP`]) and the pending
//! rows, collects what it can, and moves `through` to just below the first source whose dispatch
//! it could not collect yet (last seen too recently, or observed above the floor), or to where it
//! stopped reading. That dispatch is read again by the next pass; everything below is not.
//!
//! # Generations started below the cursor
//!
//! A live generation is reachable from its first (canonical) source, unless that source lies at
//! or below `through`: a replay of an old offset after its dispatch was collected or expired.
//! `begin_dispatch` therefore, after writing the source of a new generation, reads `claimed`, and
//! when the offset is at or below it also writes a `mailbox_gc_pending` row, which every pass
//! reads (rare: replays only; the rows expire with the dispatch's). The order makes the race
//! safe: a pass that read the log before the new source was written had written its claim
//! before, so `begin_dispatch` sees a claim at or above the offset.
//!
//! A lane's watermark never goes back, and GC collects nothing before all 64 lanes have one, so
//! once the cursor exists every advance reads from its lane's watermark, at or above `through`.

use std::collections::BTreeSet;

use super::dispatch::{shard_i, GC_SCAN_CAP};
use super::{db, first, highest_wins_timestamp, rows, ScyllaMailboxStore, DISPATCH_TTL_SECS};
use crate::codec::{i64_to_u64, u64_to_i64};
use crate::error::StoreResult;
use crate::mailbox::{ShardId, LANES};

/// What a pass found about one dispatch.
enum Examined {
    /// Marked collected now.
    Collected,
    /// Live, but not collectable yet.
    Waiting,
    /// Nothing live to collect (collected before, or its rows are gone).
    Nothing,
}

impl ScyllaMailboxStore {
    /// `(claimed, through)` of `shard`'s GC cursor.
    async fn gc_cursor(&self, shard: ShardId) -> StoreResult<(Option<u64>, Option<u64>)> {
        let result = self
            .session()
            .execute_unpaged(&self.st().gc_cursor_select, (shard_i(shard),))
            .await
            .map_err(db("reading the GC cursor"))?;
        let (claimed, through) = first::<(Option<i64>, Option<i64>)>(result, "GC cursor")?.unwrap_or((None, None));
        let as_u64 = |v: Option<i64>| v.map(|v| i64_to_u64("GC cursor", v)).transpose();
        Ok((as_u64(claimed)?, as_u64(through)?))
    }

    /// After `begin_dispatch` wrote the source of a new generation at `offset`: registers the
    /// generation for GC when a pass may already have read past that offset.
    pub(super) async fn register_if_below_gc(
        &self,
        shard: ShardId,
        offset: u64,
        mid: &[u8],
        generation: i32,
    ) -> StoreResult<()> {
        let (claimed, _) = self.gc_cursor(shard).await?;
        if claimed.is_some_and(|c| offset <= c) {
            let off = u64_to_i64("observed offset", offset)?;
            self.session()
                .execute_unpaged(&self.st().pending_insert, (shard_i(shard), off, mid, generation, DISPATCH_TTL_SECS))
                .await
                .map_err(db("registering a dispatch for GC"))?;
        }
        Ok(())
    }

    /// Collects the live generation of dispatch `mid` if every lane passed its highest
    /// observation (`floor`) and it was last seen before `seen_before_millis`.
    async fn examine(&self, shard: ShardId, mid: &[u8], floor: u64, seen_before_millis: i64) -> StoreResult<Examined> {
        let id = Self::dispatch_id(shard, mid)?;
        let Some(head) = self.live_head(&id).await? else { return Ok(Examined::Nothing) };
        let (max_obs, last_seen) = self.observations(&id, head.generation).await?;
        let max_observed = max_obs.map_or(head.canonical, |m| m.max(head.canonical));
        if max_observed > floor || last_seen.is_none_or(|s| s >= seen_before_millis) {
            return Ok(Examined::Waiting);
        }
        let g = head.generation;
        self.session()
            .execute_unpaged(
                &self.st().collected_insert,
                (shard_i(shard), mid, g, DISPATCH_TTL_SECS, highest_wins_timestamp(i64::from(g))),
            )
            .await
            .map_err(db("writing a dispatch GC marker"))?;
        Ok(Examined::Collected)
    }

    /// The lowest watermark of `shard`, if every lane has one.
    async fn lane_floor(&self, shard: ShardId) -> StoreResult<Option<u64>> {
        let result = self
            .session()
            .execute_unpaged(&self.st().wm_select_all, (shard_i(shard),))
            .await
            .map_err(db("reading lane watermarks"))?;
        let mut floor: Option<u64> = None;
        let mut lanes = 0usize;
        for (lane, through) in rows::<(i32, Option<i64>)>(result, "lane watermark")? {
            let Some(through) = through else { continue };
            if !(0..i32::from(LANES)).contains(&lane) {
                continue;
            }
            let through = i64_to_u64("watermark", through)?;
            floor = Some(floor.map_or(through, |f| f.min(through)));
            lanes += 1;
        }
        Ok(floor.filter(|_| lanes == LANES as usize))
    }

    pub(super) async fn gc(&self, shard: ShardId, seen_before_millis: i64, limit: usize) -> StoreResult<usize> {
        if limit == 0 {
            return Ok(0);
        }
        let Some(floor) = self.lane_floor(shard).await? else { return Ok(0) };
        let (claimed, through) = self.gc_cursor(shard).await?;
        let sh = shard_i(shard);
        if claimed.is_none_or(|c| c < floor) {
            let f = u64_to_i64("GC claim", floor)?;
            self.session()
                .execute_unpaged(&self.st().gc_claim, (highest_wins_timestamp(f), f, sh))
                .await
                .map_err(db("claiming a GC pass"))?;
        }
        let mut seen = BTreeSet::new();
        let mut collected = 0usize;
        let cap = i32::try_from(GC_SCAN_CAP).unwrap_or(i32::MAX);
        let result = self
            .session()
            .execute_unpaged(&self.st().pending_select, (sh, cap))
            .await
            .map_err(db("reading pending GC registrations"))?;
        for (_, mid, _) in rows::<(i64, Vec<u8>, Option<i32>)>(result, "GC registration")? {
            if seen.insert(mid.clone()) {
                if let Examined::Collected = self.examine(shard, &mid, floor, seen_before_millis).await? {
                    collected += 1;
                    if collected >= limit {
                        return Ok(collected);
                    }
                }
            }
        }
        if through.is_some_and(|t| t >= floor) {
            return Ok(collected);
        }
        let sources = self.sources(shard, through, floor, GC_SCAN_CAP).await?;
        // Where `through` may move: below the first dispatch still waiting, and no further than read.
        let mut end = if sources.len() >= GC_SCAN_CAP { sources.last().map(|s| s.0) } else { Some(floor) };
        let mut waiting: Option<u64> = None;
        for (offset, mid, _) in sources {
            if !seen.insert(mid.clone()) {
                continue;
            }
            match self.examine(shard, &mid, floor, seen_before_millis).await? {
                Examined::Collected => {
                    collected += 1;
                    if collected >= limit {
                        end = Some(offset);
                        break;
                    }
                }
                Examined::Waiting => {
                    waiting.get_or_insert(offset);
                }
                Examined::Nothing => {}
            }
        }
        let next = match waiting {
            Some(0) => None,
            Some(w) => end.map(|e| e.min(w - 1)),
            None => end,
        };
        if let Some(next) = next.filter(|n| through.is_none_or(|t| *n > t)) {
            let n = u64_to_i64("GC cursor", next)?;
            self.session()
                .execute_unpaged(&self.st().gc_through, (highest_wins_timestamp(n), n, sh))
                .await
                .map_err(db("advancing the GC cursor"))?;
        }
        Ok(collected)
    }
}
