//! The `MembershipStore` contract suite. Each function is one test; see
//! [`crate::membership_store_contract_suite`].
//!
//! Every test works in fresh tenants (and fresh conversations), so backends that share one
//! server between tests and test processes do not collide.

use std::sync::Arc;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::fixtures::*;
use super::MembershipHarness;
use crate::ids::{ConversationId, TenantId, UserId};
use crate::{
    all_members, ErrorKind, HistoryAuthorizer, MembershipAuthorizer, MembershipStore, MAX_MEMBERS_PAGE,
    MAX_MEMBERS_PER_CALL,
};

/// `n` distinct users whose byte order differs from `0..n` (random bytes from `seed` fill the
/// first eight bytes, the index the last eight), so a backend that returns insertion order
/// instead of byte order fails.
fn scattered_users(seed: u64, n: usize) -> Vec<UserId> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..n as u64)
        .map(|i| {
            let z: u64 = rng.random();
            let mut b = [0u8; 16];
            b[..8].copy_from_slice(&z.to_be_bytes());
            b[8..].copy_from_slice(&i.to_be_bytes());
            UserId(b)
        })
        .collect()
}

fn sorted(mut users: Vec<UserId>) -> Vec<UserId> {
    users.sort();
    users.dedup();
    users
}

async fn members(store: &dyn MembershipStore, t: TenantId, c: ConversationId) -> Vec<UserId> {
    all_members(store, t, c).await.expect("all_members")
}

/// Adding counts only users that were not members; removing counts only users that were;
/// repeating either changes nothing and counts zero; a conversation emptied by removals can be
/// filled again.
pub async fn add_and_remove_are_idempotent_and_counted(h: &dyn MembershipHarness) {
    let store = h.open().await;
    let (t, c) = (fresh_tenant(), fresh_conversation());
    assert_eq!(store.add_members(t, c, &[user(1), user(2), user(3)]).await.unwrap(), 3);
    assert_eq!(store.add_members(t, c, &[user(1), user(2), user(3)]).await.unwrap(), 0, "a repeated add");
    assert_eq!(store.add_members(t, c, &[user(2), user(3), user(4)]).await.unwrap(), 1, "only user 4 is new");
    assert_eq!(members(&*store, t, c).await, vec![user(1), user(2), user(3), user(4)]);
    assert_eq!(store.remove_members(t, c, &[user(3), user(5)]).await.unwrap(), 1, "user 5 never was a member");
    assert_eq!(store.remove_members(t, c, &[user(3)]).await.unwrap(), 0, "a repeated remove");
    assert_eq!(members(&*store, t, c).await, vec![user(1), user(2), user(4)]);
    assert_eq!(store.remove_members(t, c, &[user(4), user(1), user(2)]).await.unwrap(), 3);
    assert_eq!(members(&*store, t, c).await, Vec::<UserId>::new(), "every member was removed");
    assert_eq!(store.remove_members(t, c, &[user(1)]).await.unwrap(), 0, "removing from an empty conversation");
    assert_eq!(store.add_members(t, c, &[user(2)]).await.unwrap(), 1, "a removed user can be added again");
    assert_eq!(members(&*store, t, c).await, vec![user(2)]);
    assert_eq!(
        store.remove_members(fresh_tenant(), fresh_conversation(), &[user(1)]).await.unwrap(),
        0,
        "removing from a conversation that never had members"
    );
}

/// A user listed several times in one call is added (or removed) once and counted once.
pub async fn duplicates_within_one_call_count_once(h: &dyn MembershipHarness) {
    let store = h.open().await;
    let (t, c) = (fresh_tenant(), fresh_conversation());
    assert_eq!(store.add_members(t, c, &[user(7), user(7), user(8), user(7)]).await.unwrap(), 2);
    assert_eq!(members(&*store, t, c).await, vec![user(7), user(8)]);
    assert_eq!(store.add_members(t, c, &[user(8), user(9), user(9)]).await.unwrap(), 1);
    assert_eq!(store.remove_members(t, c, &[user(7), user(7), user(10), user(10)]).await.unwrap(), 1);
    assert_eq!(members(&*store, t, c).await, vec![user(8), user(9)]);
    let full = vec![user(11); MAX_MEMBERS_PER_CALL];
    assert_eq!(store.add_members(t, c, &full).await.unwrap(), 1, "a full call of one repeated user");
    assert_eq!(store.remove_members(t, c, &full).await.unwrap(), 1);
}

/// `is_member` follows adds and removes, and the history authorizer built on the store admits
/// exactly the members.
pub async fn is_member_follows_changes(h: &dyn MembershipHarness) {
    let store = h.open().await;
    let (t, c) = (fresh_tenant(), fresh_conversation());
    assert!(!store.is_member(t, c, user(1)).await.unwrap(), "a conversation without members");
    store.add_members(t, c, &[user(1), user(2)]).await.unwrap();
    assert!(store.is_member(t, c, user(1)).await.unwrap());
    assert!(store.is_member(t, c, user(2)).await.unwrap());
    assert!(!store.is_member(t, c, user(3)).await.unwrap());
    store.remove_members(t, c, &[user(1)]).await.unwrap();
    assert!(!store.is_member(t, c, user(1)).await.unwrap(), "removed");
    assert!(store.is_member(t, c, user(2)).await.unwrap(), "untouched by the removal of another");

    let auth = MembershipAuthorizer::new(Arc::clone(&store));
    auth.authorize_history(t, c, user(2)).await.expect("a member may read history");
    assert_kind(auth.authorize_history(t, c, user(1)).await, ErrorKind::Forbidden, "a removed member");
    assert_kind(auth.authorize_history(t, c, user(3)).await, ErrorKind::Forbidden, "never a member");
}

/// Pages ascend in unsigned byte order, strictly after `after` (a member or not), never exceed
/// the limit, and end with an empty page.
pub async fn pages_ascend_in_byte_order_after_the_cursor(h: &dyn MembershipHarness) {
    let store = h.open().await;
    let (t, c) = (fresh_tenant(), fresh_conversation());
    let with_first = |b: u8| {
        let mut id = [0u8; 16];
        id[0] = b;
        UserId(id)
    };
    // Bytes at or above 0x80 sort after 0x7f (unsigned), and the first byte outranks the last.
    let given = vec![UserId([0xff; 16]), with_first(0x80), user(2), with_first(0x7f), user(1), UserId([0; 16])];
    assert_eq!(store.add_members(t, c, &given).await.unwrap(), given.len());
    let expected = vec![UserId([0; 16]), user(1), user(2), with_first(0x7f), with_first(0x80), UserId([0xff; 16])];
    assert_eq!(sorted(given.clone()), expected, "the fixture's own order");

    let page = |after: Option<UserId>, limit: usize| {
        let store = Arc::clone(&store);
        async move { store.members_page(t, c, after, limit).await.unwrap() }
    };
    assert_eq!(page(None, MAX_MEMBERS_PAGE).await, expected);
    assert_eq!(page(None, 4).await, expected[..4]);
    let mut walked = Vec::new();
    let mut after = None;
    loop {
        let p = page(after, 4).await;
        assert!(p.len() <= 4, "a page never exceeds its limit: {p:?}");
        if p.is_empty() {
            break;
        }
        after = p.last().copied();
        walked.extend(p);
    }
    assert_eq!(walked, expected, "pages of 4 cover every member once, in order");
    assert_eq!(page(Some(user(1)), 2).await, vec![user(2), with_first(0x7f)], "after a member");
    assert_eq!(page(Some(user(3)), 10).await, expected[3..], "after a user that is not a member");
    assert_eq!(page(Some(with_first(0x7f)), 1).await, vec![with_first(0x80)], "limit 1");
    assert_eq!(page(Some(UserId([0xff; 16])), 10).await, Vec::<UserId>::new(), "after the greatest id");
    assert_eq!(page(None, 1).await, vec![UserId([0; 16])]);
    assert_eq!(
        store.members_page(t, fresh_conversation(), None, 10).await.unwrap(),
        Vec::<UserId>::new(),
        "a conversation without members"
    );
}

/// Empty or oversized changes and out-of-range page limits are `InvalidInput`, and a refused
/// change writes nothing. The largest legal sizes are accepted.
pub async fn limits_are_refused_and_write_nothing(h: &dyn MembershipHarness) {
    let store = h.open().await;
    let (t, c) = (fresh_tenant(), fresh_conversation());
    assert_kind(store.add_members(t, c, &[]).await, ErrorKind::InvalidInput, "add of no users");
    assert_kind(store.remove_members(t, c, &[]).await, ErrorKind::InvalidInput, "remove of no users");
    let too_many: Vec<UserId> = (0..=MAX_MEMBERS_PER_CALL as u32).map(user).collect();
    assert_kind(store.add_members(t, c, &too_many).await, ErrorKind::InvalidInput, "add of too many users");
    assert_eq!(members(&*store, t, c).await, Vec::<UserId>::new(), "the refused add wrote nothing");
    assert!(!store.is_member(t, c, user(0)).await.unwrap());

    let most = &too_many[..MAX_MEMBERS_PER_CALL];
    assert_eq!(store.add_members(t, c, most).await.unwrap(), MAX_MEMBERS_PER_CALL, "the largest legal add");
    assert_kind(store.remove_members(t, c, &too_many).await, ErrorKind::InvalidInput, "remove of too many users");
    assert_eq!(members(&*store, t, c).await, most, "the refused remove removed nothing");

    for limit in [0, MAX_MEMBERS_PAGE + 1] {
        assert_kind(store.members_page(t, c, None, limit).await, ErrorKind::InvalidInput, &format!("limit {limit}"));
        assert_kind(
            store.members_page(t, c, Some(user(5)), limit).await,
            ErrorKind::InvalidInput,
            &format!("limit {limit} after a cursor"),
        );
    }
    assert_eq!(store.members_page(t, c, None, MAX_MEMBERS_PAGE).await.unwrap(), most, "the largest legal page");
    assert_eq!(store.remove_members(t, c, most).await.unwrap(), MAX_MEMBERS_PER_CALL, "the largest legal remove");
    assert_eq!(members(&*store, t, c).await, Vec::<UserId>::new());
}

/// The same conversation id under two tenants is two conversations.
pub async fn tenants_are_isolated(h: &dyn MembershipHarness) {
    let store = h.open().await;
    let (a, b, c) = (fresh_tenant(), fresh_tenant(), fresh_conversation());
    store.add_members(a, c, &[user(1), user(2)]).await.unwrap();
    assert_eq!(store.add_members(b, c, &[user(2), user(3)]).await.unwrap(), 2, "user 2 is new under tenant b");
    assert!(!store.is_member(b, c, user(1)).await.unwrap());
    assert!(!store.is_member(a, c, user(3)).await.unwrap());
    assert_eq!(store.remove_members(b, c, &[user(1), user(2)]).await.unwrap(), 1);
    assert_eq!(members(&*store, a, c).await, vec![user(1), user(2)], "tenant a untouched");
    assert_eq!(members(&*store, b, c).await, vec![user(3)]);
    assert_eq!(store.members_page(a, c, Some(user(1)), 10).await.unwrap(), vec![user(2)]);
}

/// Conversations of one tenant do not share members.
pub async fn conversations_are_isolated(h: &dyn MembershipHarness) {
    let store = h.open().await;
    let (t, c1, c2) = (fresh_tenant(), fresh_conversation(), fresh_conversation());
    store.add_members(t, c1, &[user(1), user(2)]).await.unwrap();
    assert_eq!(store.add_members(t, c2, &[user(1)]).await.unwrap(), 1, "user 1 is new in conversation 2");
    assert!(!store.is_member(t, c2, user(2)).await.unwrap());
    assert_eq!(store.remove_members(t, c2, &[user(1), user(2)]).await.unwrap(), 1);
    assert_eq!(members(&*store, t, c1).await, vec![user(1), user(2)], "conversation 1 untouched");
    assert_eq!(members(&*store, t, c2).await, Vec::<UserId>::new());
}

/// A conversation of 10,000 members (added 1,000 per call, in an order unrelated to byte order)
/// is read back whole and sorted by `all_members`, and exactly once by pages of a size that does
/// not divide it.
pub async fn ten_thousand_members_page_fully(h: &dyn MembershipHarness) {
    const N: usize = 10_000;
    let store = h.open().await;
    let (t, c) = (fresh_tenant(), fresh_conversation());
    let users = scattered_users(0x5EED, N);
    let mut added = 0;
    for chunk in users.chunks(MAX_MEMBERS_PER_CALL) {
        added += store.add_members(t, c, chunk).await.unwrap();
    }
    assert_eq!(added, N);
    let expected = sorted(users.clone());
    assert_eq!(expected.len(), N, "the fixture's users are distinct");
    assert_ne!(expected, users, "the fixture is not already in byte order");
    let all = members(&*store, t, c).await;
    assert_eq!(all.len(), N);
    assert!(all == expected, "all_members returns every member once, in byte order");

    let mut walked = Vec::with_capacity(N);
    let mut pages = 0;
    loop {
        let page = store.members_page(t, c, walked.last().copied(), 997).await.unwrap();
        if page.is_empty() {
            break;
        }
        pages += 1;
        walked.extend(page);
    }
    assert_eq!(pages, N.div_ceil(997));
    assert!(walked == expected, "pages of 997 cover every member once, in byte order");
    assert_eq!(store.add_members(t, c, &users[..MAX_MEMBERS_PER_CALL]).await.unwrap(), 0, "all were members");
    assert!(store.is_member(t, c, users[N - 1]).await.unwrap());
}
