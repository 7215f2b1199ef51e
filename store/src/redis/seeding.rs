//! Detecting lost Redis state before a conversation seq could be reissued.
//!
//! Seq counters live only in Redis. If Redis loses or rolls them back (a flush, a restore from
//! a snapshot, a replica promoted without the latest writes, the last second of an
//! `appendfsync everysec` AOF), a plain `INCR` would reissue seqs that clients already hold. So
//! seq allocation requires a *seed marker*: one key per Redis Cluster hash slot, naming the
//! Redis process (`run_id`) that was seeded, written by `reseed` after every counter has been
//! raised to the durable evidence (highest seq in the archive and in `qim.messages.v1`). The
//! allocation script checks its own slot's marker in the same atomic step, so it refuses
//! (`InvariantViolation`) as soon as the node holding that slot restarted, failed over or was
//! restored: a restart that lost nothing costs one re-seed, one that rolled counters back can
//! not reissue a seq. The scripts stay single-slot: each marker's key name carries a hash tag
//! chosen to land in its slot.
//!
//! A fresh deployment is "unseeded" too: the writer's startup re-seeds with whatever evidence
//! exists (none at first), which is what makes a wiped Redis safe by construction.

use std::sync::LazyLock;

use redis::aio::ConnectionManager;

use super::redis_error;
use crate::error::StoreResult;

/// Hash slots of Redis Cluster.
pub const SLOTS: usize = 16_384;

/// CRC16/XMODEM, the checksum Redis Cluster uses for key slots.
pub fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for byte in data {
        crc ^= u16::from(*byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 { (crc << 1) ^ 0x1021 } else { crc << 1 };
        }
    }
    crc
}

/// The cluster slot of `key`: the CRC of its hash tag (the first non-empty `{...}`) or of the
/// whole key.
pub fn key_slot(key: &[u8]) -> usize {
    let tagged = key.iter().position(|b| *b == b'{').and_then(|open| {
        let rest = &key[open + 1..];
        rest.iter().position(|b| *b == b'}').filter(|close| *close > 0).map(|close| &rest[..close])
    });
    usize::from(crc16(tagged.unwrap_or(key))) % SLOTS
}

/// For every slot, a short hash tag that lands in it (found once by enumeration).
static SLOT_TAGS: LazyLock<Vec<String>> = LazyLock::new(|| {
    let mut tags = vec![String::new(); SLOTS];
    let mut missing = SLOTS;
    let mut n: u64 = 0;
    while missing > 0 {
        let tag = format!("s{n:x}");
        let slot = usize::from(crc16(tag.as_bytes())) % SLOTS;
        if tags[slot].is_empty() {
            tags[slot] = tag;
            missing -= 1;
        }
        n += 1;
    }
    tags
});

/// The seed marker key of the slot that `key` lives in.
pub fn marker_for(namespace: &str, key: &str) -> String {
    marker_key(namespace, key_slot(key.as_bytes()))
}

/// The seed marker key of `slot`.
pub fn marker_key(namespace: &str, slot: usize) -> String {
    format!("{namespace}:seeded:{{{}}}", SLOT_TAGS[slot])
}

/// The script that writes or checks one slot's marker.
const MARKER_SCRIPT: &str = include_str!("scripts/seed_marker.lua");

/// Runs the marker script over every slot (loaded, then pipelined `EVALSHA`s of 1024 slots),
/// returning one reply per slot. A `SCRIPT FLUSH` racing the pipeline (NOSCRIPT) reloads the
/// script and repeats that chunk; the script is idempotent per slot.
async fn over_every_slot(conn: &mut ConnectionManager, namespace: &str, args: &[&str]) -> StoreResult<Vec<i64>> {
    const ATTEMPTS: usize = 3;
    let mut replies = Vec::with_capacity(SLOTS);
    for chunk in (0..SLOTS).collect::<Vec<_>>().chunks(1024) {
        let mut attempt = 1;
        let part = loop {
            let sha: String = redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(MARKER_SCRIPT)
                .query_async(conn)
                .await
                .map_err(|e| redis_error("loading the seed marker script", e))?;
            let mut pipe = redis::pipe();
            for slot in chunk {
                pipe.cmd("EVALSHA").arg(&sha).arg(1).arg(marker_key(namespace, *slot)).arg(args);
            }
            match pipe.query_async::<Vec<i64>>(conn).await {
                Ok(part) => break part,
                Err(e)
                    if attempt < ATTEMPTS && e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) =>
                {
                    attempt += 1;
                }
                Err(e) => return Err(redis_error("seed markers", e)),
            }
        };
        replies.extend(part);
    }
    Ok(replies)
}

/// Writes every slot's seed marker for the Redis process now serving it (after the counters
/// were raised).
pub async fn write_markers(conn: &mut ConnectionManager, namespace: &str, seeded_at_millis: i64) -> StoreResult<()> {
    over_every_slot(conn, namespace, &["write", &seeded_at_millis.to_string()]).await.map(|_| ())
}

/// How many slots lack a marker of the Redis process now serving them (0: sends may proceed).
pub async fn missing_markers(conn: &mut ConnectionManager, namespace: &str) -> StoreResult<usize> {
    let valid = over_every_slot(conn, namespace, &["check"]).await?;
    Ok(valid.iter().filter(|v| **v != 1).count())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc16_matches_the_redis_cluster_specification() {
        // The specification's test vector, and slots Redis itself reports.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"{user1000}.followers"));
        assert_eq!(key_slot(b"foo{}{bar}"), key_slot(b"foo{}{bar}"), "empty tag: the whole key");
        assert_eq!(key_slot(b"foo{{bar}}zap"), usize::from(crc16(b"{bar")) % SLOTS);
    }

    #[test]
    fn every_slot_has_a_marker_in_that_slot() {
        for slot in [0, 1, 777, 12182, SLOTS - 1] {
            assert_eq!(key_slot(marker_key("qim", slot).as_bytes()), slot);
        }
        let key = "qim:{c:0011}:seq";
        assert_eq!(key_slot(marker_for("qim", key).as_bytes()), key_slot(key.as_bytes()));
    }
}
