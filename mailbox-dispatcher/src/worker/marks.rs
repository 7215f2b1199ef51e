//! Chunk completions of a shard, marked together: a lane batch whose entries are written queues
//! its chunks here, and one fenced `mark_chunks_completed` call at a time takes everything queued
//! (up to [`MARK_BATCH_CHUNKS`]), the next one starting when it lands. So the chunks of every
//! lane share the shard's bookkeeping round trip, while their writes stay one batch per lane (a
//! lane whose writes are held never holds up the others: only written chunks are queued).

use std::sync::Arc;
use std::time::Instant;

use qim_runtime::events::emit;
use qim_store::mailbox::{ChunkId, DispatchId, ShardFence};
use qim_store::{ErrorKind, MailboxStore};
use tokio_util::sync::CancellationToken;

use crate::events::ChunksMarked;
use crate::retry::retry_store;

/// Most chunks one mark call takes.
pub const MARK_BATCH_CHUNKS: usize = 512;

/// A written chunk waiting for its completion mark: `(record offset, dispatch, chunk)`.
pub type Written = (u64, DispatchId, ChunkId);

/// The written chunks of a shard waiting to be marked, and whether a mark call is running.
#[derive(Default)]
pub struct MarkQueue {
    waiting: Vec<Written>,
    running: bool,
}

impl MarkQueue {
    /// Queues chunks whose entries are written.
    pub fn push(&mut self, chunks: impl IntoIterator<Item = Written>) {
        self.waiting.extend(chunks);
    }

    /// Whether no chunk waits.
    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    /// The next call's chunks, when no call is running and some wait.
    pub fn next_batch(&mut self) -> Option<Vec<Written>> {
        if self.running || self.waiting.is_empty() {
            return None;
        }
        self.running = true;
        let rest = self.waiting.split_off(self.waiting.len().min(MARK_BATCH_CHUNKS));
        Some(std::mem::replace(&mut self.waiting, rest))
    }

    /// The running call ended.
    pub fn answered(&mut self) {
        self.running = false;
    }
}

/// A mark call's end.
pub struct MarksDone {
    /// The chunks of the call.
    pub chunks: Vec<Written>,
    /// `true` when all are durably marked complete; `false` when abandoned.
    pub completed: bool,
    /// The store refused the marks (`StateLost`: the fence broke) or no longer knows a dispatch
    /// (`NotFound`): it lost its state.
    pub lost_state: bool,
}

/// Marks `chunks` of the fenced shard complete in one store call (a store that lost state since
/// the fence was taken marks nothing).
pub async fn mark_chunks(
    store: Arc<dyn MailboxStore>,
    fence: Arc<ShardFence>,
    chunks: Vec<Written>,
    cancel: CancellationToken,
) -> MarksDone {
    let started = Instant::now();
    let marks: Vec<(DispatchId, ChunkId)> = chunks.iter().map(|(_, dispatch, chunk)| (*dispatch, *chunk)).collect();
    let lost = |k: ErrorKind| matches!(k, ErrorKind::NotFound | ErrorKind::StateLost);
    let marked =
        retry_store("mark_chunks_completed", &cancel, lost, || store.mark_chunks_completed_fenced(&fence, &marks))
            .await;
    match marked {
        Some(Ok(())) => {
            crate::failpoint::crash_point("dispatcher::worker_after_chunk_complete");
            emit(ChunksMarked { chunks: chunks.len(), elapsed: started.elapsed() });
            MarksDone { chunks, completed: true, lost_state: false }
        }
        Some(Err(e)) => MarksDone { chunks, completed: false, lost_state: lost(e.kind()) },
        None => MarksDone { chunks, completed: false, lost_state: false },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use qim_store::ids::MessageId;
    use qim_store::mailbox::{LaneId, ShardId};

    fn written(offset: u64) -> Written {
        let chunk = ChunkId { lane: LaneId::new((offset % 64) as u8).expect("a lane"), index: 0 };
        (offset, DispatchId { message_id: MessageId([offset as u8; 16]), shard: ShardId(0) }, chunk)
    }

    #[test]
    fn one_call_at_a_time_takes_everything_queued_up_to_the_bound() {
        let mut q = MarkQueue::default();
        assert!(q.next_batch().is_none(), "nothing to mark");
        q.push((0..3).map(written));
        let first = q.next_batch().expect("a call");
        assert_eq!(first.len(), 3);
        q.push((3..(4 + MARK_BATCH_CHUNKS as u64)).map(written));
        assert!(q.next_batch().is_none(), "one call at a time");
        q.answered();
        let second = q.next_batch().expect("a call");
        assert_eq!(second.len(), MARK_BATCH_CHUNKS);
        assert_eq!(second.first().map(|w| w.0), Some(3), "in the order written");
        q.answered();
        assert_eq!(q.next_batch().expect("the rest").len(), 1);
        assert!(q.is_empty());
    }
}
