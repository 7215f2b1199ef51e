//! When a committed message becomes readable in its recipients' mailboxes: the moment every
//! lane watermark of its shard passed its dispatch record (a mailbox read never goes past its
//! lane's watermark). Each recipient's own lane may pass it earlier, so the figure is an upper
//! bound of what a recipient waits. Pure bookkeeping; the pipeline reports the latencies.

use std::collections::BTreeMap;

use qim_store::ids::UnixMillis;

/// First observations of the shard's dispatch records not yet passed by every lane, with their
/// message's creation time.
#[derive(Debug, Default)]
pub struct Readability {
    waiting: BTreeMap<u64, UnixMillis>,
}

impl Readability {
    /// The dispatch record at `offset` (a first observation) announces a message created at
    /// `created_at`. A record seen again after a rewind replaces its earlier entry.
    pub fn observed(&mut self, offset: u64, created_at: UnixMillis) {
        self.waiting.insert(offset, created_at);
    }

    /// Every lane's watermark is at least `passed`: takes out the records at or below it, giving
    /// their messages' creation times.
    pub fn passed(&mut self, passed: u64) -> Vec<UnixMillis> {
        let later = self.waiting.split_off(&passed.saturating_add(1));
        std::mem::replace(&mut self.waiting, later).into_values().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_become_readable_once_the_lowest_watermark_passes_them() {
        let mut r = Readability::default();
        r.observed(5, UnixMillis(50));
        r.observed(7, UnixMillis(70));
        r.observed(9, UnixMillis(90));
        assert_eq!(r.passed(4), Vec::<UnixMillis>::new(), "nothing at or below 4");
        assert_eq!(r.passed(7), vec![UnixMillis(50), UnixMillis(70)], "a watermark at 7 passed 7");
        assert_eq!(r.passed(7), Vec::<UnixMillis>::new(), "each is reported once");
        r.observed(9, UnixMillis(91));
        assert_eq!(r.passed(u64::MAX), vec![UnixMillis(91)], "seen again after a rewind: reported once, as last seen");
    }
}
