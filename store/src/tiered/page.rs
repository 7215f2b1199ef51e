//! Pure page arithmetic of the tiered store: merging a hot-tier page with an archive page read
//! for the same query into one page with the single-store semantics.
//!
//! Each input page is complete only up to its last record when its `has_more` is set (the next
//! record of that tier is unknown), so the merged candidates are cut at the first such point in
//! reading order; the page limits (`max_items`, and `max_bytes` where the first record may
//! exceed the budget and later ones never do) apply to what remains.

use std::collections::BTreeMap;

use crate::error::{StoreError, StoreResult};
use crate::ids::{ConversationSeq, UnixMillis};
use crate::message::{Direction, HistoryPage, HistoryQuery, MessageRecord};

/// The lower of two optional seqs (`None` means "nothing").
pub(super) fn min_seq(a: Option<ConversationSeq>, b: Option<ConversationSeq>) -> Option<ConversationSeq> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

/// Whether `seq` lies at or before `limit` in reading order.
fn within(direction: Direction, seq: ConversationSeq, limit: ConversationSeq) -> bool {
    match direction {
        Direction::Older => seq >= limit,
        Direction::Newer => seq <= limit,
    }
}

/// Merges `hot` and `archive`, both read for `query`, dropping records expired at `now`.
/// The same seq in both tiers must be the same record (`CorruptEntry` otherwise).
pub(super) fn merge(
    query: &HistoryQuery,
    hot: HistoryPage,
    archive: HistoryPage,
    now: UnixMillis,
) -> StoreResult<HistoryPage> {
    let direction = query.direction;
    // The first point (in reading order) beyond which a tier may hold records it did not return.
    let mut cut: Option<ConversationSeq> = None;
    for page in [&hot, &archive] {
        if let (true, Some(last)) = (page.has_more, page.records.last()) {
            cut = Some(match (cut, direction) {
                (None, _) => last.seq,
                (Some(c), Direction::Older) => c.max(last.seq),
                (Some(c), Direction::Newer) => c.min(last.seq),
            });
        }
    }
    let earliest_available = min_seq(hot.earliest_available, archive.earliest_available);
    let mut by_seq: BTreeMap<ConversationSeq, MessageRecord> = BTreeMap::new();
    for record in hot.records.into_iter().chain(archive.records) {
        match by_seq.get(&record.seq) {
            Some(existing) if *existing != record => {
                return Err(StoreError::CorruptEntry(format!(
                    "seq {} of {} differs between the hot tier and the archive",
                    record.seq, record.conversation
                )));
            }
            Some(_) => {}
            None => {
                by_seq.insert(record.seq, record);
            }
        }
    }
    let ordered: Box<dyn Iterator<Item = MessageRecord>> = match direction {
        Direction::Older => Box::new(by_seq.into_values().rev()),
        Direction::Newer => Box::new(by_seq.into_values()),
    };
    let mut records = Vec::new();
    let mut used = 0usize;
    let mut has_more = false;
    for record in ordered.filter(|r| !r.is_expired(now)) {
        if cut.is_some_and(|c| !within(direction, record.seq, c)) {
            has_more = true;
            break;
        }
        let fits =
            records.is_empty() || (records.len() < query.max_items && used + record.page_bytes() <= query.max_bytes);
        if !fits {
            has_more = true;
            break;
        }
        used += record.page_bytes();
        records.push(record);
    }
    // A tier that had more beyond the cut leaves more to read even if nothing was dropped here.
    has_more |= cut.is_some();
    Ok(HistoryPage { records, earliest_available, has_more })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{ClientMessageId, ConversationId, MessageId, TenantId, UserId};
    use crate::message::MessageKind;
    use crate::retention::RetentionClass;

    fn rec(seq: u64, bytes: usize) -> MessageRecord {
        MessageRecord {
            tenant: TenantId([1; 16]),
            conversation: ConversationId([2; 16]),
            seq: ConversationSeq(seq),
            message_id: MessageId([seq as u8; 16]),
            sender: UserId([4; 16]),
            client_message_id: ClientMessageId::new(format!("c{seq}")).unwrap(),
            kind: MessageKind::Normal,
            retention: RetentionClass::ComplianceHold,
            created_at: UnixMillis(1),
            expires_at: None,
            payload: vec![b'x'; bytes],
        }
    }

    fn page(seqs: &[u64], has_more: bool) -> HistoryPage {
        HistoryPage {
            records: seqs.iter().map(|s| rec(*s, 10)).collect(),
            earliest_available: seqs.iter().min().map(|s| ConversationSeq(*s)),
            has_more,
        }
    }

    fn query(direction: Direction, max_items: usize, max_bytes: usize) -> HistoryQuery {
        HistoryQuery {
            tenant: TenantId([1; 16]),
            conversation: ConversationId([2; 16]),
            viewer: UserId([4; 16]),
            direction,
            anchor: None,
            max_items,
            max_bytes,
        }
    }

    fn seqs(p: &HistoryPage) -> Vec<u64> {
        p.records.iter().map(|r| r.seq.0).collect()
    }

    #[test]
    fn disjoint_tiers_merge_in_reading_order() {
        let q = query(Direction::Older, 10, 1000);
        let merged = merge(&q, page(&[9, 8, 7], false), page(&[6, 5], false), UnixMillis(0)).unwrap();
        assert_eq!(seqs(&merged), vec![9, 8, 7, 6, 5]);
        assert_eq!(merged.earliest_available, Some(ConversationSeq(5)));
        assert!(!merged.has_more);
        let q = query(Direction::Newer, 10, 1000);
        let merged = merge(&q, page(&[7, 8], false), page(&[3, 5, 7], false), UnixMillis(0)).unwrap();
        assert_eq!(seqs(&merged), vec![3, 5, 7, 8]);
    }

    #[test]
    fn a_tier_with_more_cuts_the_page_at_its_last_record() {
        // The archive stopped at 4 with more to come: 2 (hot only) can not be placed yet.
        let q = query(Direction::Newer, 10, 1000);
        let merged = merge(&q, page(&[2, 6], false), page(&[3, 4], true), UnixMillis(0)).unwrap();
        assert_eq!(seqs(&merged), vec![2, 3, 4]);
        assert!(merged.has_more);
        let q = query(Direction::Older, 10, 1000);
        let merged = merge(&q, page(&[9, 8], true), page(&[8, 7, 3], false), UnixMillis(0)).unwrap();
        assert_eq!(seqs(&merged), vec![9, 8]);
        assert!(merged.has_more);
    }

    #[test]
    fn limits_apply_to_the_merged_page_with_the_first_record_exempt() {
        let q = query(Direction::Newer, 3, 1000);
        let merged = merge(&q, page(&[4, 5], false), page(&[1, 2], false), UnixMillis(0)).unwrap();
        assert_eq!(seqs(&merged), vec![1, 2, 4]);
        assert!(merged.has_more);
        let q = query(Direction::Newer, 10, 5);
        let merged = merge(&q, page(&[4], false), page(&[1, 2], false), UnixMillis(0)).unwrap();
        assert_eq!(seqs(&merged), vec![1], "only the first record may exceed the budget");
        assert!(merged.has_more);
    }

    #[test]
    fn different_records_under_one_seq_fail_closed() {
        let q = query(Direction::Newer, 10, 1000);
        let mut other = page(&[1], false);
        other.records[0].payload = b"changed".to_vec();
        let err = merge(&q, page(&[1], false), other, UnixMillis(0)).unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::CorruptEntry);
    }

    #[test]
    fn expired_records_never_appear() {
        let q = query(Direction::Newer, 10, 1000);
        let mut archive = page(&[1, 2], false);
        archive.records[0].expires_at = Some(UnixMillis(5));
        let merged = merge(&q, page(&[3], false), archive, UnixMillis(5)).unwrap();
        assert_eq!(seqs(&merged), vec![2, 3]);
    }
}
