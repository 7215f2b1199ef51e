//! The per-user mailbox retention ledger (seed 000, retention format V4).
//!
//! The ledger lists the expiry-day buckets of a user's mailbox that still hold live entries:
//! `(day, max_seq, expiry)` with `day` the UTC day of the bucket's expiry, `max_seq` the highest
//! mailbox seq written into it and `expiry` the moment every entry of the bucket is gone. When a
//! bucket expires its `max_seq` is merged into the user's expired-gap boundary, so a reader whose
//! cursor lies below it gets `CursorExpired` instead of a silent gap.
//!
//! Layout: `b"QRL\x01"`, a big-endian `u16` count, then `count` triples of
//! `u32 day, u64 max_seq, i64 expiry_ms` (20 bytes each), strictly ascending by day, at most
//! [`LEDGER_MAX_ITEMS`]. Anything else is refused.

use super::CodecError;
use crate::ids::UnixMillis;

/// Most buckets a ledger holds (mailbox retention is at most 30 days).
pub const LEDGER_MAX_ITEMS: usize = 32;
const MAGIC: &[u8; 4] = b"QRL\x01";
const ITEM_BYTES: usize = 20;
const WHAT: &str = "retention ledger";

/// One live bucket.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct LedgerItem {
    /// UTC day of the bucket's expiry.
    pub day: u32,
    /// Highest mailbox seq (its `u64` form) written into the bucket.
    pub max_seq: u64,
    /// When every entry of the bucket is gone.
    pub expiry: UnixMillis,
}

/// The live buckets of one user's mailbox, ascending by day.
#[derive(Clone, PartialEq, Eq, Hash, Debug, Default)]
pub struct RetentionLedger {
    items: Vec<LedgerItem>,
}

impl RetentionLedger {
    /// The buckets, ascending by day.
    pub fn items(&self) -> &[LedgerItem] {
        &self.items
    }

    /// Whether no bucket is live.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Removes every bucket expired at `now` and returns the highest `max_seq` among them
    /// (the amount the expired-gap boundary must reach), if any expired.
    pub fn take_expired(&mut self, now: UnixMillis) -> Option<u64> {
        let mut gap = None;
        self.items.retain(|item| {
            if item.expiry <= now {
                gap = gap.max(Some(item.max_seq));
                false
            } else {
                true
            }
        });
        gap
    }

    /// Registers an entry of `seq` expiring at `expiry` (already known to be in the future):
    /// raises its bucket's `max_seq` and `expiry`, or adds the bucket. Refuses to grow past
    /// [`LEDGER_MAX_ITEMS`]; callers drop expired buckets first.
    pub fn register(&mut self, seq: u64, expiry: UnixMillis) -> Result<(), String> {
        let day = u32::try_from(expiry.day())
            .map_err(|_| format!("expiry {} is outside the ledger's day range", expiry.0))?;
        match self.items.binary_search_by_key(&day, |i| i.day) {
            Ok(at) => {
                let item = &mut self.items[at];
                item.max_seq = item.max_seq.max(seq);
                item.expiry = item.expiry.max(expiry);
            }
            Err(at) => {
                if self.items.len() >= LEDGER_MAX_ITEMS {
                    return Err(format!("retention ledger would exceed {LEDGER_MAX_ITEMS} live days"));
                }
                self.items.insert(at, LedgerItem { day, max_seq: seq, expiry });
            }
        }
        Ok(())
    }

    /// The canonical bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(6 + ITEM_BYTES * self.items.len());
        out.extend_from_slice(MAGIC);
        // At most LEDGER_MAX_ITEMS items exist (register enforces it), so the count fits a u16.
        out.extend_from_slice(&(self.items.len() as u16).to_be_bytes());
        for item in &self.items {
            out.extend_from_slice(&item.day.to_be_bytes());
            out.extend_from_slice(&item.max_seq.to_be_bytes());
            out.extend_from_slice(&item.expiry.0.to_be_bytes());
        }
        out
    }

    /// Decodes [`RetentionLedger::encode`]'s output: exact length, ascending days, bounded count.
    pub fn decode(bytes: &[u8]) -> Result<Self, CodecError> {
        let invalid = |reason: String| CodecError::Invalid { what: WHAT, reason };
        if bytes.len() < 6 {
            return Err(CodecError::Truncated { what: WHAT, len: bytes.len() });
        }
        if &bytes[..3] != b"QRL" {
            return Err(invalid("bad magic".into()));
        }
        if bytes[3] != MAGIC[3] {
            return Err(CodecError::UnknownVersion { what: WHAT, version: bytes[3] });
        }
        let count = usize::from(u16::from_be_bytes([bytes[4], bytes[5]]));
        if count > LEDGER_MAX_ITEMS {
            return Err(invalid(format!("{count} items exceed {LEDGER_MAX_ITEMS}")));
        }
        let want = 6 + count * ITEM_BYTES;
        if bytes.len() != want {
            return Err(invalid(format!("{count} items need {want} bytes, got {}", bytes.len())));
        }
        let mut items = Vec::with_capacity(count);
        for raw in bytes[6..].chunks_exact(ITEM_BYTES) {
            let day = u32::from_be_bytes(raw[0..4].try_into().expect("4-byte slice"));
            let max_seq = u64::from_be_bytes(raw[4..12].try_into().expect("8-byte slice"));
            let expiry = i64::from_be_bytes(raw[12..20].try_into().expect("8-byte slice"));
            if max_seq >> 63 != 0 {
                return Err(invalid(format!("max_seq {max_seq} has bit 63 set")));
            }
            if items.last().is_some_and(|prev: &LedgerItem| prev.day >= day) {
                return Err(invalid("days are not strictly ascending".into()));
            }
            items.push(LedgerItem { day, max_seq, expiry: UnixMillis(expiry) });
        }
        Ok(Self { items })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::MILLIS_PER_DAY;

    #[test]
    fn registers_merges_and_expires() {
        let mut l = RetentionLedger::default();
        l.register(5, UnixMillis(3 * MILLIS_PER_DAY)).unwrap();
        l.register(9, UnixMillis(2 * MILLIS_PER_DAY)).unwrap();
        l.register(7, UnixMillis(3 * MILLIS_PER_DAY + 10)).unwrap();
        assert_eq!(l.items().len(), 2);
        assert_eq!(l.items()[1], LedgerItem { day: 3, max_seq: 7, expiry: UnixMillis(3 * MILLIS_PER_DAY + 10) });
        assert_eq!(l.take_expired(UnixMillis(2 * MILLIS_PER_DAY)), Some(9));
        assert_eq!(l.take_expired(UnixMillis(2 * MILLIS_PER_DAY)), None);
        assert_eq!(RetentionLedger::decode(&l.encode()).unwrap(), l);
    }

    #[test]
    fn refuses_a_33rd_day() {
        let mut l = RetentionLedger::default();
        for d in 0..32 {
            l.register(d, UnixMillis(d as i64 * MILLIS_PER_DAY)).unwrap();
        }
        assert!(l.register(99, UnixMillis(40 * MILLIS_PER_DAY)).is_err());
    }

    #[test]
    fn decode_fails_closed() {
        let mut l = RetentionLedger::default();
        l.register(1, UnixMillis(MILLIS_PER_DAY)).unwrap();
        l.register(2, UnixMillis(2 * MILLIS_PER_DAY)).unwrap();
        let good = l.encode();
        assert!(RetentionLedger::decode(&good[..good.len() - 1]).is_err());
        let mut long = good.clone();
        long.push(0);
        assert!(RetentionLedger::decode(&long).is_err());
        let mut v2 = good.clone();
        v2[3] = 2;
        assert!(matches!(RetentionLedger::decode(&v2), Err(CodecError::UnknownVersion { version: 2, .. })));
        let mut swapped = good.clone();
        swapped[6..10].copy_from_slice(&9u32.to_be_bytes());
        assert!(RetentionLedger::decode(&swapped).is_err(), "descending days");
        let mut over = b"QRL\x01".to_vec();
        over.extend_from_slice(&33u16.to_be_bytes());
        over.resize(6 + 33 * ITEM_BYTES, 0);
        assert!(RetentionLedger::decode(&over).is_err());
    }
}
