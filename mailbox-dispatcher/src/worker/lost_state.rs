//! What a pipeline does once it finds its store behind (the signs, and why reading the log
//! again repairs it, are in [`super::resync`]): it stops its steps, reads the store's
//! watermarks, and ends, for the next pipeline to read the shard's log again from them.

use std::sync::Arc;

use qim_runtime::events::emit;
use qim_store::StoreResult;

use super::pipeline::{Done, Pipeline};
use super::resync::STALE_RECORDS;
use super::steps::read_watermarks;

use crate::events::ShardResync;

/// How a pipeline notices that its store lost state, and ends to read the log again.
impl Pipeline {
    /// The store is behind: stop, and read the log again from `to`.
    pub(super) fn rewind(&mut self, to: u64) {
        if self.rewind_to.is_none() {
            emit(ShardResync { shard: self.shard, from: to, received_up_to: self.window.highest() });
            self.rewind_to = Some(to);
            self.steps.cancel();
        }
    }

    /// The offset the last rewind sought to did not arrive: end, and seek there again.
    pub(super) fn seek_again(&mut self, at: u64) {
        tracing::warn!(
            shard = self.shard.0,
            at,
            dropped = STALE_RECORDS,
            "the offset the shard's log was sought back to did not arrive (retention removed it?); seeking again"
        );
        self.rewind_to = Some(at);
        self.steps.cancel();
    }

    /// Reads the store's incarnation of the shard (one read at a time).
    pub(super) fn check_incarnation(&mut self) {
        if self.checking_incarnation {
            return;
        }
        self.checking_incarnation = true;
        let (store, shard) = (Arc::clone(&self.ctx.store), self.shard);
        self.tasks.spawn(async move { Done::Incarnation(store.shard_incarnation(shard).await) });
    }

    /// The store lost state this pipeline wrote: find where its watermarks are now, which is
    /// where to read the log again from (then [`Self::rewind`]); `why` is logged the first time.
    pub(super) fn store_lost_state(&mut self, why: &'static str) {
        if !self.resync.lost && self.rewind_to.is_none() {
            tracing::warn!(shard = self.shard.0, why, "the store lost state this pipeline built on");
        }
        self.resync.lost = true;
        if self.rewind_reading || self.rewind_to.is_some() {
            return;
        }
        self.rewind_reading = true;
        let (store, shard) = (Arc::clone(&self.ctx.store), self.shard);
        self.tasks.spawn(async move { Done::RewindWatermarks(read_watermarks(store, shard).await) });
    }

    /// What an incarnation read answered: another one than the pipeline's fence means the store
    /// may have lost the shard's state.
    pub(super) fn incarnation_read(&mut self, result: StoreResult<String>) {
        self.checking_incarnation = false;
        match result {
            Ok(now) if now != self.fence.incarnation => {
                let was = &self.fence.incarnation;
                tracing::debug!(shard = self.shard.0, %was, %now, "the store's incarnation of this shard changed");
                self.store_lost_state("the incarnation changed");
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(shard = self.shard.0, error = %e, "reading the shard's incarnation failed"),
        }
    }
}
