//! History pages in the contract suite: anchors, byte budgets, authorization, refusals and
//! expiry.

use super::*;

async fn five_messages(
    store: &dyn MessageStore,
    payload_len: usize,
) -> (crate::ids::TenantId, ConversationId, MembershipAuthorizer) {
    let (t, conv) = (fresh_tenant(), fresh_conversation());
    for i in 1..=5 {
        commit_fully(store, &request(t, user(1), &format!("m{i}"), conv, &vec![b'a'; payload_len])).await;
    }
    let auth = MembershipAuthorizer::default();
    auth.admit(t, conv, user(1));
    (t, conv, auth)
}

/// OLDER reads below the anchor newest-first, NEWER above it oldest-first, within max_items.
pub async fn history_pages_older_and_newer_from_an_anchor(h: &dyn MessageHarness) {
    let store = h.open(policy(), clock()).await;
    let (t, conv, auth) = five_messages(store.as_ref(), 3).await;
    let v = user(1);
    let page = store.history_page(&query(t, conv, v, Direction::Older, None, 2, 1 << 20), &auth).await.unwrap();
    assert_eq!((seqs(&page), page.has_more), (vec![5, 4], true));
    let page = store.history_page(&query(t, conv, v, Direction::Older, Some(4), 10, 1 << 20), &auth).await.unwrap();
    assert_eq!((seqs(&page), page.has_more), (vec![3, 2, 1], false));
    let page = store.history_page(&query(t, conv, v, Direction::Newer, None, 2, 1 << 20), &auth).await.unwrap();
    assert_eq!((seqs(&page), page.has_more), (vec![1, 2], true));
    let page = store.history_page(&query(t, conv, v, Direction::Newer, Some(3), 10, 1 << 20), &auth).await.unwrap();
    assert_eq!((seqs(&page), page.has_more), (vec![4, 5], false));
    let page = store.history_page(&query(t, conv, v, Direction::Newer, Some(5), 10, 1 << 20), &auth).await.unwrap();
    assert_eq!((seqs(&page), page.has_more), (vec![], false));
    assert_eq!(page.earliest_available, Some(ConversationSeq(1)));
}

/// The first record may exceed max_bytes; later ones never push the page over it.
pub async fn history_page_byte_budget_admits_only_the_first_oversized(h: &dyn MessageHarness) {
    let store = h.open(policy(), clock()).await;
    let (t, conv, auth) = five_messages(store.as_ref(), 10).await;
    let v = user(1);
    let page = store.history_page(&query(t, conv, v, Direction::Older, None, 10, 3), &auth).await.unwrap();
    assert_eq!((seqs(&page), page.has_more), (vec![5], true), "first record exceeds the budget alone");
    let page = store.history_page(&query(t, conv, v, Direction::Older, None, 10, 25), &auth).await.unwrap();
    assert_eq!(seqs(&page), vec![5, 4], "a third record would need 30 bytes");
    let page = store.history_page(&query(t, conv, v, Direction::Newer, None, 10, 30), &auth).await.unwrap();
    assert_eq!(seqs(&page), vec![1, 2, 3]);
}

/// A refused viewer gets Forbidden before any byte is read (even a corrupt record is not
/// reached).
pub async fn history_page_consults_the_authorizer_before_reading(h: &dyn MessageHarness) {
    let store = h.open(policy(), clock()).await;
    let (t, conv, auth) = five_messages(store.as_ref(), 3).await;
    h.overwrite_record(&store, t, conv, ConversationSeq(5), b"garbage".to_vec()).await;
    let stranger = query(t, conv, user(9), Direction::Older, None, 10, 1 << 20);
    assert_kind(store.history_page(&stranger, &auth).await, ErrorKind::Forbidden, "non-member");
    assert_eq!(auth.calls(), 1);
    let member = query(t, conv, user(1), Direction::Older, None, 10, 1 << 20);
    assert_kind(store.history_page(&member, &auth).await, ErrorKind::CorruptEntry, "member reaches the corrupt record");
    assert_eq!(auth.calls(), 2);
}

/// An index entry without its record, a record of another seq, or undecodable bytes fail
/// closed.
pub async fn history_page_refuses_missing_or_mismatched_records(h: &dyn MessageHarness) {
    let store = h.open(policy(), clock()).await;
    let (t, conv, auth) = five_messages(store.as_ref(), 3).await;
    let all = query(t, conv, user(1), Direction::Newer, None, 10, 1 << 20);
    let good = store.history_page(&all, &auth).await.unwrap();
    let record_two = encode_record(&good.records[1]);
    h.overwrite_record(&store, t, conv, ConversationSeq(3), record_two).await;
    assert_kind(store.history_page(&all, &auth).await, ErrorKind::CorruptEntry, "record of seq 2 stored at seq 3");
    h.remove_record(&store, t, conv, ConversationSeq(3)).await;
    assert_kind(store.history_page(&all, &auth).await, ErrorKind::CorruptEntry, "index without record");
    let mut future = encode_record(&good.records[2]);
    future[1] = 99;
    h.overwrite_record(&store, t, conv, ConversationSeq(3), future).await;
    assert_kind(store.history_page(&all, &auth).await, ErrorKind::CorruptEntry, "unknown format version");
}

/// Expired records never appear in pages and `earliest_available` moves forward; compliance
/// hold never expires.
pub async fn history_never_returns_expired_records(h: &dyn MessageHarness) {
    let clock = clock();
    let store = h.open(policy(), clock.clone()).await;
    let (t, conv) = (fresh_tenant(), fresh_conversation());
    let mut eph = request(t, user(1), "e", conv, b"x");
    eph.retention = RetentionClass::Ephemeral24h;
    commit_fully(store.as_ref(), &eph).await;
    let mut hold = request(t, user(1), "h", conv, b"x");
    hold.retention = RetentionClass::ComplianceHold;
    commit_fully(store.as_ref(), &hold).await;
    commit_fully(store.as_ref(), &request(t, user(1), "d", conv, b"x")).await;
    let auth = MembershipAuthorizer::default();
    auth.admit(t, conv, user(1));
    let q = query(t, conv, user(1), Direction::Newer, None, 10, 1 << 20);
    assert_eq!(seqs(&store.history_page(&q, &auth).await.unwrap()), vec![1, 2, 3]);
    clock.advance(EPHEMERAL_MILLIS);
    let page = store.history_page(&q, &auth).await.unwrap();
    assert_eq!((seqs(&page), page.earliest_available), (vec![2, 3], Some(ConversationSeq(2))));
    clock.advance(30 * MILLIS_PER_DAY);
    let page = store.history_page(&q, &auth).await.unwrap();
    assert_eq!(
        (seqs(&page), page.earliest_available),
        (vec![2], Some(ConversationSeq(2))),
        "default expired after 30 days, hold stays"
    );
}

/// The expiry drain deletes exactly the records whose expiry passed.
pub async fn gc_expired_history_removes_only_expired_records(h: &dyn MessageHarness) {
    let clock = clock();
    let store = h.open(policy(), clock.clone()).await;
    let (t, conv) = (fresh_tenant(), fresh_conversation());
    let mut eph = request(t, user(1), "e", conv, b"x");
    eph.retention = RetentionClass::Ephemeral24h;
    commit_fully(store.as_ref(), &eph).await;
    commit_fully(store.as_ref(), &request(t, user(1), "d", conv, b"x")).await;
    clock.advance(EPHEMERAL_MILLIS + 1);
    let mut removed = 0;
    loop {
        let report = store.gc_expired_history(1000).await.unwrap();
        removed += report.removed;
        if report.removed == 0 {
            break;
        }
    }
    assert!(removed >= 1, "the ephemeral record was drained");
    let auth = MembershipAuthorizer::default();
    auth.admit(t, conv, user(1));
    let q = query(t, conv, user(1), Direction::Newer, None, 10, 1 << 20);
    let page = store.history_page(&q, &auth).await.unwrap();
    assert_eq!((seqs(&page), page.earliest_available), (vec![2], Some(ConversationSeq(2))));
}
