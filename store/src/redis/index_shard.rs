//! The global indexes (`recovery`, `commitgc`, `msghistorygc`, `hotwindow`, `archivegaps`)
//! spread over [`INDEX_SHARDS`] sub-keys, each its own hash tag (`<ns>:{recovery:7}`), so on a
//! Redis Cluster no one node takes every send's bookkeeping. An entry's shard follows from its
//! owner (the sender of a commit, the conversation of a record), so every entry of one owner
//! is in one sub-key and can be found again from the member alone. Scans walk every shard,
//! starting where the previous scan of the same index left off ([`ShardCursor`]), so a limit
//! reached early does not always favour the first shards.

use std::sync::atomic::{AtomicU16, Ordering};

/// How many sub-keys each global index is spread over: enough to spread over the masters of
/// a cluster (a slot per shard), few enough that a scan visiting every shard stays cheap on a
/// single node (one short command per shard per pass).
pub const INDEX_SHARDS: u16 = 16;

/// One sub-key of a global index.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IndexShard(u16);

impl IndexShard {
    /// Every shard, in order.
    pub fn all() -> impl Iterator<Item = IndexShard> {
        (0..INDEX_SHARDS).map(IndexShard)
    }

    /// The shard of the entries of `owner` (FNV-1a of its bytes; ids are hex, so any stable
    /// hash spreads them; no crate for ten lines).
    pub fn of(owner: &str) -> IndexShard {
        let mut hash: u32 = 0x811c_9dc5;
        for &b in owner.as_bytes() {
            hash ^= u32::from(b);
            hash = hash.wrapping_mul(0x0100_0193);
        }
        IndexShard(u16::try_from(hash % u32::from(INDEX_SHARDS)).expect("below INDEX_SHARDS"))
    }

    /// `<ns>:{<index>:<shard>}`: this shard's sub-key of `index`.
    pub fn key(self, namespace: &str, index: &str) -> String {
        format!("{namespace}:{{{index}:{}}}", self.0)
    }
}

/// Where the next scan of one index starts: each call of [`ShardCursor::order`] starts one shard
/// further.
#[derive(Debug, Default)]
pub struct ShardCursor(AtomicU16);

impl ShardCursor {
    /// Every shard once, starting one further than the previous call did.
    pub fn order(&self) -> impl Iterator<Item = IndexShard> {
        let start = self.0.fetch_add(1, Ordering::Relaxed) % INDEX_SHARDS;
        (0..INDEX_SHARDS).map(move |i| IndexShard((start + i) % INDEX_SHARDS))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_spread_over_every_shard_and_keep_theirs() {
        let mut seen = std::collections::HashSet::new();
        for i in 0..1_000u32 {
            let owner = format!("{i:032x}{:032x}", i * 7);
            assert_eq!(IndexShard::of(&owner), IndexShard::of(&owner));
            seen.insert(IndexShard::of(&owner));
        }
        assert_eq!(seen.len(), usize::from(INDEX_SHARDS));
        assert_eq!(IndexShard(3).key("qim", "recovery"), "qim:{recovery:3}");
    }

    #[test]
    fn each_scan_starts_one_shard_further() {
        let cursor = ShardCursor::default();
        let first: Vec<IndexShard> = cursor.order().collect();
        let second: Vec<IndexShard> = cursor.order().collect();
        assert_eq!(first.len(), usize::from(INDEX_SHARDS));
        assert_eq!(first[0], IndexShard(0));
        assert_eq!(second[0], IndexShard(1));
        assert_eq!(second[usize::from(INDEX_SHARDS) - 1], IndexShard(0));
    }
}
