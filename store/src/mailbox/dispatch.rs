//! Dispatches: one message bound for one shard ([`DispatchId`]), its frozen recipients split
//! into lanes and chunks ([`DispatchManifest`], [`ChunkId`]), the canonical receipt of its first
//! observation ([`DispatchReceipt`]) and how far its chunks are ([`DispatchProgress`]).

use super::{
    LaneId, MailboxEntry, MailboxEvent, MailboxRetention, MailboxSeq, MessageRef, ShardId, TenantHash,
    CHUNK_MAX_RECIPIENTS, LANES, MAX_DISPATCH_RECIPIENTS,
};
use crate::ids::{EventId, MessageId, UserId};

/// A dispatch: one message bound for one shard. Its id is the message id plus the shard.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct DispatchId {
    /// The message.
    pub message_id: MessageId,
    /// The shard.
    pub shard: ShardId,
}

/// The frozen content of one dispatch record: the message and every recipient in the shard.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct DispatchManifest {
    /// The dispatch's id; `id.message_id == message.message_id`.
    pub id: DispatchId,
    /// The message announced.
    pub message: MessageRef,
    /// Recipients (same tenant as the message), strictly ascending, 1..=[`MAX_DISPATCH_RECIPIENTS`].
    pub recipients: Vec<UserId>,
}

/// One chunk of a lane's recipients.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct ChunkId {
    /// The lane.
    pub lane: LaneId,
    /// Index within the lane, from 0.
    pub index: u32,
}

impl DispatchManifest {
    /// Builds a manifest with canonical (sorted, deduplicated) recipients.
    pub fn new(id: DispatchId, message: MessageRef, mut recipients: Vec<UserId>) -> Self {
        recipients.sort_unstable();
        recipients.dedup();
        Self { id, message, recipients }
    }

    /// Checks the manifest's own rules; an error names the first broken one.
    pub fn validate(&self) -> Result<(), String> {
        if self.id.message_id != self.message.message_id {
            return Err("dispatch id and message id differ".into());
        }
        if self.recipients.is_empty() || self.recipients.len() > MAX_DISPATCH_RECIPIENTS {
            return Err(format!(
                "a dispatch needs 1..={MAX_DISPATCH_RECIPIENTS} recipients, got {}",
                self.recipients.len()
            ));
        }
        if !self.recipients.windows(2).all(|w| w[0] < w[1]) {
            return Err("recipients are not strictly ascending".into());
        }
        Ok(())
    }

    /// This lane's recipients, ascending.
    pub fn lane_recipients(&self, lane: LaneId) -> Vec<UserId> {
        let hash = TenantHash::new(&self.message.tenant);
        self.recipients.iter().copied().filter(|u| hash.lane_of(u) == lane).collect()
    }

    /// How many recipients each lane has.
    pub fn lane_sizes(&self) -> [usize; LANES as usize] {
        let mut per_lane = [0usize; LANES as usize];
        let hash = TenantHash::new(&self.message.tenant);
        for u in &self.recipients {
            per_lane[hash.lane_of(u).0 as usize] += 1;
        }
        per_lane
    }

    /// How many chunks each lane has (0 for a lane without recipients).
    pub fn chunk_counts(&self) -> [u32; LANES as usize] {
        self.lane_sizes().map(|n| n.div_ceil(CHUNK_MAX_RECIPIENTS) as u32)
    }

    /// The recipients of one chunk; empty when the chunk does not exist.
    pub fn chunk_recipients(&self, chunk: ChunkId) -> Vec<UserId> {
        self.lane_recipients(chunk.lane)
            .chunks(CHUNK_MAX_RECIPIENTS)
            .nth(chunk.index as usize)
            .map(<[UserId]>::to_vec)
            .unwrap_or_default()
    }

    /// The entry this dispatch puts in `user`'s mailbox at `seq`.
    pub fn entry_for(&self, user: UserId, seq: MailboxSeq, retention: &MailboxRetention) -> MailboxEntry {
        MailboxEntry {
            tenant: self.message.tenant,
            user,
            seq,
            expires_at: retention.expires_at(self.message.created_at),
            event: MailboxEvent {
                ordinal: 0,
                event_id: EventId(self.message.message_id.0),
                message: self.message.clone(),
            },
        }
    }
}

/// The canonical outcome of observing a dispatch record in the shard log.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct DispatchReceipt {
    /// The dispatch.
    pub id: DispatchId,
    /// Its canonical mailbox seq (from the first observed offset).
    pub seq: MailboxSeq,
    /// The first offset it was observed at.
    pub canonical_offset: u64,
    /// The offset of this observation.
    pub observed_offset: u64,
    /// Whether this observation is a later duplicate of the first.
    pub duplicate: bool,
}

/// What the store knows of one dispatch.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct DispatchProgress {
    /// The first receipt.
    pub receipt: DispatchReceipt,
    /// The manifest.
    pub manifest: DispatchManifest,
    /// Highest offset this dispatch was observed at.
    pub max_observed_offset: u64,
    /// Completed chunks, ascending.
    pub completed: Vec<ChunkId>,
}

impl DispatchProgress {
    /// Whether every chunk of `lane` is complete.
    pub fn lane_complete(&self, lane: LaneId) -> bool {
        let total = self.manifest.chunk_counts()[lane.get() as usize];
        let done = self.completed.iter().filter(|c| c.lane == lane).count();
        done as u32 == total
    }

    /// Whether every chunk of every lane is complete.
    pub fn is_complete(&self) -> bool {
        LaneId::all().all(|l| self.lane_complete(l))
    }
}
