//! The records of a shard waiting to be begun, taken in log order as batches for one store call
//! each: a call takes the queued records from the front, up to [`BEGIN_BATCH_RECORDS`] and
//! [`BEGIN_BATCH_BYTES`], and stops at a record whose dispatch id is being begun already (its
//! duplicate must see the first observation's receipt). At most [`BEGIN_CALLS_IN_FLIGHT`] calls
//! run at once, so under load each call begins what queued while the others ran.

use std::collections::{HashSet, VecDeque};

use super::steps::Record;

/// Most begin calls in flight per shard.
pub const BEGIN_CALLS_IN_FLIGHT: usize = 2;
/// Most records one begin call takes.
pub const BEGIN_BATCH_RECORDS: usize = 64;
/// Most record bytes one begin call takes (one larger record is still taken alone).
pub const BEGIN_BATCH_BYTES: usize = 1 << 20;

/// The records waiting to be begun, and the dispatch ids of those being begun.
#[derive(Default)]
pub struct BeginQueue {
    waiting: VecDeque<Record>,
    beginning: HashSet<Vec<u8>>,
    calls: usize,
}

/// The records of one begin call and their dispatch keys (to hand back to
/// [`BeginQueue::answered`]).
pub struct BeginBatch {
    /// The records, in log order.
    pub records: Vec<Record>,
    /// Their dispatch keys, in the same order.
    pub keys: Vec<Vec<u8>>,
}

impl BeginQueue {
    /// Queues a received record.
    pub fn push(&mut self, record: Record) {
        self.waiting.push_back(record);
    }

    /// Whether no record waits.
    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    /// The next call's records, if a call may start and a record can be taken.
    pub fn next_batch(&mut self) -> Option<BeginBatch> {
        if self.calls >= BEGIN_CALLS_IN_FLIGHT {
            return None;
        }
        let (mut records, mut keys, mut bytes) = (Vec::new(), Vec::new(), 0);
        while let Some(front) = self.waiting.front() {
            let key = front.key.clone().unwrap_or_default();
            let weight = front.value.as_ref().map_or(0, Vec::len);
            let full =
                records.len() >= BEGIN_BATCH_RECORDS || (!records.is_empty() && bytes + weight > BEGIN_BATCH_BYTES);
            if full || !self.beginning.insert(key.clone()) {
                break;
            }
            bytes += weight;
            keys.push(key);
            records.extend(self.waiting.pop_front());
        }
        if records.is_empty() {
            return None;
        }
        self.calls += 1;
        Some(BeginBatch { records, keys })
    }

    /// A call of [`Self::next_batch`] answered: its dispatch ids may be begun again.
    pub fn answered(&mut self, keys: &[Vec<u8>]) {
        self.calls -= 1;
        for key in keys {
            self.beginning.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(offset: u64, key: &str, bytes: usize) -> Record {
        Record { offset, key: Some(key.as_bytes().to_vec()), value: Some(vec![0; bytes]), headers: Vec::new() }
    }

    fn offsets(batch: &BeginBatch) -> Vec<u64> {
        batch.records.iter().map(|r| r.offset).collect()
    }

    #[test]
    fn a_call_takes_the_front_until_a_dispatch_already_taken_and_calls_are_bounded() {
        let mut q = BeginQueue::default();
        for (offset, key) in [(1, "a"), (2, "b"), (3, "a"), (4, "c"), (5, "d")] {
            q.push(record(offset, key, 10));
        }
        let first = q.next_batch().expect("a call");
        assert_eq!(offsets(&first), vec![1, 2], "a duplicate waits for its first observation");
        assert!(q.next_batch().is_none(), "the duplicate is at the front and its id is being begun");
        q.answered(&first.keys);
        let second = q.next_batch().expect("a call");
        assert_eq!(offsets(&second), vec![3, 4, 5]);
        q.push(record(6, "e", 10));
        let third = q.next_batch().expect("a second call in flight");
        q.push(record(7, "f", 10));
        assert!(q.next_batch().is_none(), "at most two calls in flight");
        q.answered(&second.keys);
        q.answered(&third.keys);
        assert_eq!(offsets(&q.next_batch().expect("a call")), vec![7]);
        assert!(q.is_empty());
    }

    #[test]
    fn a_call_is_bounded_in_records_and_bytes() {
        let mut q = BeginQueue::default();
        for offset in 0..100 {
            q.push(record(offset, &offset.to_string(), 10));
        }
        let batch = q.next_batch().expect("a call");
        assert_eq!(batch.records.len(), BEGIN_BATCH_RECORDS);
        q.answered(&batch.keys);
        let mut q = BeginQueue::default();
        q.push(record(1, "big", BEGIN_BATCH_BYTES + 1));
        q.push(record(2, "small", 10));
        assert_eq!(offsets(&q.next_batch().expect("a call")), vec![1], "a larger record goes alone");
        assert_eq!(offsets(&q.next_batch().expect("a call")), vec![2]);
    }
}
