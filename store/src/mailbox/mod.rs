//! The mailbox side of the domain: mailbox seqs, entries and event groups, dispatch manifests,
//! lanes and chunks.
//!
//! Users map to a mailbox shard (`hash(tenant, user) mod S`); each shard is one partition of the
//! dispatch topic, so each user's entries come from one ordered log. A dispatch record's first
//! observed offset in that log becomes its canonical [`MailboxSeq`]; within a shard the work is
//! split over [`LANES`] lanes by user hash, each lane into chunks of at most
//! [`CHUNK_MAX_RECIPIENTS`] users. Dispatches, their manifests, receipts and progress are in
//! `dispatch` (re-exported here).

use std::fmt;

use crate::ids::{ConversationId, ConversationSeq, EventId, MessageId, TenantId, UnixMillis, UserId, MILLIS_PER_DAY};
use crate::message::MessageKind;

mod dispatch;
pub use dispatch::{ChunkId, DispatchId, DispatchManifest, DispatchProgress, DispatchReceipt};

/// Lanes per shard (fixed).
pub const LANES: u8 = 64;
/// Most recipients written by one chunk.
pub const CHUNK_MAX_RECIPIENTS: usize = 256;
/// Most recipients in one dispatch manifest.
pub const MAX_DISPATCH_RECIPIENTS: usize = 100_000;
/// Most events in one event group.
pub const MAX_GROUP_EVENTS: usize = 256;

/// A mailbox shard: one partition of the dispatch topic.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct ShardId(pub u16);

/// A dispatcher's claim on one shard's bookkeeping in one incarnation of the store: what
/// [`MailboxStore::shard_incarnation`](crate::MailboxStore::shard_incarnation) answered when it
/// took the shard over. The store refuses a fenced write with
/// [`StoreError::StateLost`](crate::StoreError::StateLost), writing nothing, once its incarnation
/// of the shard is another (it may have lost or rolled back what the holder built on).
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct ShardFence {
    /// The shard.
    pub shard: ShardId,
    /// Its incarnation when the holder took it over (opaque).
    pub incarnation: String,
}

impl ShardFence {
    /// `InvalidInput` unless `shard` is the fenced one (a fence covers the writes of one shard).
    ///
    /// # Errors
    ///
    /// [`StoreError::InvalidInput`](crate::StoreError::InvalidInput) naming both shards.
    pub fn admits(&self, shard: ShardId) -> crate::StoreResult<()> {
        if self.shard == shard {
            Ok(())
        } else {
            Err(crate::StoreError::InvalidInput(format!(
                "a write to shard {} under the fence of shard {}",
                shard.0, self.shard.0
            )))
        }
    }

    /// [`admits`](Self::admits) for the shard of every dispatch of `chunks`.
    ///
    /// # Errors
    ///
    /// As [`admits`](Self::admits), for the first chunk of another shard.
    pub fn admits_chunks(&self, chunks: &[(DispatchId, ChunkId)]) -> crate::StoreResult<()> {
        chunks.iter().try_for_each(|(dispatch, _)| self.admits(dispatch.shard))
    }
}

/// A generation of a shard's log. Bumped when the dispatch log restarts its offsets (for
/// example a recreated topic), so seqs of a new log still sort after the old ones.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct ShardEpoch(pub u16);

/// A lane within a shard, `0..LANES`.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct LaneId(u8);

impl LaneId {
    /// A lane number; `None` when it is not below [`LANES`].
    pub const fn new(lane: u8) -> Option<Self> {
        if lane < LANES {
            Some(Self(lane))
        } else {
            None
        }
    }

    /// The lane's number.
    pub const fn get(self) -> u8 {
        self.0
    }

    /// Every lane, in order.
    pub fn all() -> impl Iterator<Item = LaneId> {
        (0..LANES).map(LaneId)
    }
}

/// A user's position in their mailbox.
///
/// One `u64`: the shard epoch in bits 47..=62, the position in bits 0..=46 (bit 63 is always
/// clear, so every seq fits a CQL `bigint`). Ordering is (epoch, position). Position 0 is "before
/// everything"; a dispatch observed at log offset `o` gets position `o + 1`.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MailboxSeq(u64);

const POSITION_BITS: u32 = 47;
const POSITION_MASK: u64 = (1 << POSITION_BITS) - 1;

impl MailboxSeq {
    /// The seq for `position` in `epoch`; `None` when the position needs more than 47 bits.
    pub const fn new(epoch: ShardEpoch, position: u64) -> Option<Self> {
        if position > POSITION_MASK {
            return None;
        }
        Some(Self(((epoch.0 as u64) << POSITION_BITS) | position))
    }

    /// The seq of a dispatch first observed at log `offset` in `epoch`.
    pub const fn from_offset(epoch: ShardEpoch, offset: u64) -> Option<Self> {
        match offset.checked_add(1) {
            Some(p) => Self::new(epoch, p),
            None => None,
        }
    }

    /// "Before everything" in `epoch`.
    pub const fn origin(epoch: ShardEpoch) -> Self {
        Self((epoch.0 as u64) << POSITION_BITS)
    }

    /// Rebuilds a seq from its `u64` form; `None` when bit 63 is set.
    pub const fn from_u64(raw: u64) -> Option<Self> {
        if raw >> 63 != 0 {
            None
        } else {
            Some(Self(raw))
        }
    }

    /// The `u64` form (bit 63 clear).
    pub const fn as_u64(self) -> u64 {
        self.0
    }

    /// The epoch part.
    pub const fn epoch(self) -> ShardEpoch {
        ShardEpoch((self.0 >> POSITION_BITS) as u16)
    }

    /// The position part.
    pub const fn position(self) -> u64 {
        self.0 & POSITION_MASK
    }
}

impl fmt::Debug for MailboxSeq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MailboxSeq({}:{})", self.epoch().0, self.position())
    }
}

impl fmt::Display for MailboxSeq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.epoch().0, self.position())
    }
}

impl std::str::FromStr for MailboxSeq {
    type Err = String;

    /// Parses `epoch:position`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || format!("mailbox cursor {s:?} is not `epoch:position`");
        let (e, p) = s.split_once(':').ok_or_else(bad)?;
        let epoch: u16 = e.parse().map_err(|_| bad())?;
        let position: u64 = p.parse().map_err(|_| bad())?;
        Self::new(ShardEpoch(epoch), position).ok_or_else(bad)
    }
}

/// Stable 64-bit hash of a tenant and user, the same on every process and release: FNV-1a
/// over the 32 bytes, then the MurmurHash3 64-bit finaliser so every input bit reaches every
/// output bit (plain FNV leaves the high bits nearly constant for ids that differ only at the
/// end, which would put sequential users in one lane).
fn user_hash(tenant: &TenantId, user: &UserId) -> u64 {
    TenantHash::new(tenant).user_hash(user)
}

/// [`user_hash`] with the tenant's half of the FNV pass done once, for the many users of one
/// tenant (a manifest's recipients): half the work per user, the same values.
#[derive(Clone, Copy)]
pub(crate) struct TenantHash(u64);

impl TenantHash {
    pub(crate) fn new(tenant: &TenantId) -> Self {
        Self(fnv1a(0xcbf2_9ce4_8422_2325, &tenant.0))
    }

    fn user_hash(self, user: &UserId) -> u64 {
        let mut h = fnv1a(self.0, &user.0);
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^ (h >> 33)
    }

    /// [`lane_of`] for a user of this tenant.
    pub(crate) fn lane_of(self, user: &UserId) -> LaneId {
        LaneId(((self.user_hash(user) >> 32) % u64::from(LANES)) as u8)
    }
}

fn fnv1a(mut h: u64, bytes: &[u8]) -> u64 {
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The mailbox shard of a user among `shards` shards (`shards` ≥ 1).
pub fn shard_of(tenant: &TenantId, user: &UserId, shards: u16) -> ShardId {
    let s = u64::from(shards.max(1));
    ShardId(((user_hash(tenant, user) & 0xffff_ffff) % s) as u16)
}

/// The lane of a user within their shard.
pub fn lane_of(tenant: &TenantId, user: &UserId) -> LaneId {
    TenantHash::new(tenant).lane_of(user)
}

/// The end of the UTC day containing `at` (the first millisecond of the next day).
pub const fn end_of_day(at: UnixMillis) -> UnixMillis {
    UnixMillis((at.day() + 1) * MILLIS_PER_DAY)
}

/// What a mailbox event points at: one committed message.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct MessageRef {
    /// The conversation's tenant (also the recipients').
    pub tenant: TenantId,
    /// The conversation.
    pub conversation: ConversationId,
    /// The message's seq in its conversation.
    pub seq: ConversationSeq,
    /// The message id.
    pub message_id: MessageId,
    /// Who sent it.
    pub sender: UserId,
    /// Its kind.
    pub kind: MessageKind,
    /// When it was created.
    pub created_at: UnixMillis,
}

/// One event of an event group.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct MailboxEvent {
    /// Position within the group; unique per group.
    pub ordinal: u16,
    /// The event's id.
    pub event_id: EventId,
    /// The message it announces.
    pub message: MessageRef,
}

/// One event bound for one user's mailbox at one seq; the unit `append_batch` takes.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct MailboxEntry {
    /// The user's tenant.
    pub tenant: TenantId,
    /// Whose mailbox.
    pub user: UserId,
    /// The group's seq.
    pub seq: MailboxSeq,
    /// When the entry vanishes (absolute; see [`MailboxRetention`]).
    pub expires_at: UnixMillis,
    /// The event.
    pub event: MailboxEvent,
}

/// All events of one `(user, seq)`, stored and returned whole, sorted by (ordinal, event id).
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct EventGroup {
    /// The user's tenant.
    pub tenant: TenantId,
    /// Whose mailbox.
    pub user: UserId,
    /// The group's seq.
    pub seq: MailboxSeq,
    /// When the group vanishes.
    pub expires_at: UnixMillis,
    /// The events, canonical order, unique ordinals, 1..=[`MAX_GROUP_EVENTS`].
    pub events: Vec<MailboxEvent>,
}

/// How long mailbox entries live.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct MailboxRetention {
    days: u32,
}

/// The variable that configures mailbox retention.
pub const MAILBOX_RETENTION_VAR: &str = "QIM_MAILBOX_RETENTION_DAYS";
/// Longest mailbox retention: the per-user retention ledger holds at most 32 days.
pub const MAX_MAILBOX_RETENTION_DAYS: u32 = 30;

impl MailboxRetention {
    /// `days` in 1..=30.
    pub fn days(days: u32) -> Result<Self, String> {
        if (1..=MAX_MAILBOX_RETENTION_DAYS).contains(&days) {
            Ok(Self { days })
        } else {
            Err(format!("{MAILBOX_RETENTION_VAR}={days} is out of range (legal: 1..={MAX_MAILBOX_RETENTION_DAYS})"))
        }
    }

    /// The fixed, absolute expiry of entries announcing a message created at `created_at`:
    /// `created_at + days`, rounded up to the end of that UTC day, so every entry of one day
    /// bucket expires at the same moment (no entry can vanish before its bucket's proof).
    pub fn expires_at(&self, created_at: UnixMillis) -> UnixMillis {
        end_of_day(created_at.plus_millis(i64::from(self.days) * MILLIS_PER_DAY))
    }
}

impl Default for MailboxRetention {
    /// 30 days.
    fn default() -> Self {
        Self { days: 30 }
    }
}

/// Where one (shard, lane) stands: every dispatch observed at or below `through` has its lane
/// work durable. Never moves backwards, never passes incomplete work.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct LaneWatermark {
    /// The shard.
    pub shard: ShardId,
    /// The lane.
    pub lane: LaneId,
    /// Highest complete log offset; `None` before the first advance.
    pub through: Option<u64>,
}

/// One page of a user's mailbox.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct MailboxPage {
    /// Whole event groups, ascending by seq.
    pub groups: Vec<EventGroup>,
    /// The reader has everything up to and including this seq; resume after it.
    pub covered: MailboxSeq,
}

#[cfg(test)]
mod tests {
    use super::*;

    const PINNED: (ShardId, LaneId) = (ShardId(1), LaneId(31));

    #[test]
    fn mailbox_seq_packs_epoch_above_position() {
        let a = MailboxSeq::new(ShardEpoch(1), POSITION_MASK).unwrap();
        let b = MailboxSeq::new(ShardEpoch(2), 0).unwrap();
        assert!(a < b);
        assert_eq!(b.epoch(), ShardEpoch(2));
        assert_eq!(a.position(), POSITION_MASK);
        assert!(MailboxSeq::new(ShardEpoch(u16::MAX), POSITION_MASK).unwrap().as_u64() >> 63 == 0);
        assert!(MailboxSeq::new(ShardEpoch(0), POSITION_MASK + 1).is_none());
        assert!(MailboxSeq::from_u64(1 << 63).is_none());
        assert_eq!("3:17".parse::<MailboxSeq>(), Ok(MailboxSeq::new(ShardEpoch(3), 17).unwrap()));
        assert!("3-17".parse::<MailboxSeq>().is_err());
    }

    #[test]
    fn sequential_users_spread_over_every_lane_and_shard() {
        let t = TenantId([7; 16]);
        let mut lanes = [0u32; LANES as usize];
        let mut shards = [0u32; 8];
        for i in 0..6400u32 {
            let mut u = [0u8; 16];
            u[12..].copy_from_slice(&i.to_be_bytes());
            let u = UserId(u);
            lanes[lane_of(&t, &u).get() as usize] += 1;
            shards[shard_of(&t, &u, 8).0 as usize] += 1;
        }
        // 100 expected per lane and 800 per shard: a broken hash piles them up.
        assert!(lanes.iter().all(|n| (50..=150).contains(n)), "lanes: {lanes:?}");
        assert!(shards.iter().all(|n| (650..=950).contains(n)), "shards: {shards:?}");
    }

    #[test]
    fn the_hash_is_pinned() {
        // Changing the hash moves users to other shards and lanes: a data migration, not a
        // refactor. These values must never change.
        let (t, u) = (TenantId([1; 16]), UserId([2; 16]));
        assert_eq!((shard_of(&t, &u, 8), lane_of(&t, &u)), PINNED);
    }

    #[test]
    fn mailbox_expiry_is_end_of_day() {
        let r = MailboxRetention::days(30).unwrap();
        let created = UnixMillis(10 * MILLIS_PER_DAY + 5);
        assert_eq!(r.expires_at(created), UnixMillis(41 * MILLIS_PER_DAY));
        assert!(MailboxRetention::days(0).is_err());
        assert!(MailboxRetention::days(31).is_err());
    }
}
