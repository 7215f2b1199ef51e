//! A send's membership check on Redis rides along with its seq allocation: with the member cache
//! valid, `reserve_from_member` answers a member and refuses a non-member without asking the
//! durable membership; with the cache gone (a wipe, another copy of the data) it asks once, and
//! the cache that answer filled serves the next sends.
//!
//! Needs Redis and the Scylla test cluster, like [`super::tiered_message_store`].

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use qim_store::ids::{ConversationId, ConversationSeq, TenantId, UserId};
use qim_store::redis::{CommitLayout, RedisConfig, RedisMembershipCache, RedisMessageStore, SeqLeases};
use qim_store::retention::RetentionPolicy;
use qim_store::scylla::ScyllaMembershipStore;
use qim_store::testsuite::fixtures::{clock, fresh_conversation, fresh_message_id, fresh_tenant, request, user};
use qim_store::tiered::TieredMembershipStore;
use qim_store::{ErrorKind, HistoryAuthorizer, MembershipAuthorizer, MembershipStore, MessageStore, StoreResult};

use crate::scylla_support::{self, Keyspace};
use crate::shared_redis::{self, unique_namespace, unreachable, url as redis_url, Cleanup};

/// This file's keyspace (see [`Keyspace`]).
static KEYSPACE: Keyspace = Keyspace::new("tiered_send_membership");

/// The writer's authorizer over the tiered membership, counting how often it is asked.
struct Counting {
    inner: MembershipAuthorizer<TieredMembershipStore>,
    asked: AtomicUsize,
}

#[async_trait]
impl HistoryAuthorizer for Counting {
    async fn authorize_history(&self, t: TenantId, c: ConversationId, u: UserId) -> StoreResult<()> {
        self.asked.fetch_add(1, Ordering::SeqCst);
        self.inner.authorize_history(t, c, u).await
    }
}

impl Counting {
    fn asked(&self) -> usize {
        self.asked.load(Ordering::SeqCst)
    }
}

#[tokio::test]
async fn the_member_cache_answers_within_the_allocation_and_the_durable_table_when_it_is_gone() {
    the_member_cache_decides_sends(CommitLayout::InSenderSlot).await;
}

/// The same when the script that issues the seq creates the commit (the group-commit layout).
#[tokio::test]
async fn the_member_cache_answers_within_the_append_in_the_group_commit_layout() {
    the_member_cache_decides_sends(CommitLayout::InConversationSlot).await;
}

async fn the_member_cache_decides_sends(layout: CommitLayout) {
    let cleanup = Cleanup::default();
    let redis = RedisConfig { url: redis_url(), namespace: unique_namespace() };
    cleanup.register(&redis.namespace);
    let policy = RetentionPolicy::with_default_days(30).unwrap();
    let store = RedisMessageStore::open(&redis, policy, clock())
        .await
        .unwrap_or_else(|e| panic!("{}", unreachable(&redis.url, &e)))
        .with_seq_leases(SeqLeases::new(Arc::new(qim_store::memory::MemorySeqHighWater::default())))
        .with_commit_layout(layout);
    let config = KEYSPACE.config();
    let session = scylla_support::connect(config).await;
    KEYSPACE.migrated(&session).await;
    let durable = ScyllaMembershipStore::with_session(session, config).await.expect("membership statements");
    let cache = RedisMembershipCache::open(&redis).await.expect("the member cache");
    let members = Arc::new(TieredMembershipStore::new(durable, cache));
    let auth = Counting { inner: MembershipAuthorizer::new(members.clone()), asked: AtomicUsize::new(0) };
    let (t, c) = (fresh_tenant(), fresh_conversation());
    members.add_members(t, c, &[user(1)]).await.unwrap();
    let send = |sender: u32, id: &str| request(t, user(sender), id, c, b"x");
    let forbidden = |r: StoreResult<_>| r.map(|_| ()).map_err(|e| e.kind()).err() == Some(ErrorKind::Forbidden);

    // The cache is empty: the first send asks the durable table, which fills it.
    let first = store.reserve_from_member(&send(1, "m1"), fresh_message_id(), &auth).await.unwrap();
    assert_eq!((first.intent.seq, auth.asked()), (ConversationSeq(1), 1));
    // Filled: members and non-members are answered within the allocation.
    let second = store.reserve_from_member(&send(1, "m2"), fresh_message_id(), &auth).await.unwrap();
    assert!(forbidden(store.reserve_from_member(&send(2, "o1"), fresh_message_id(), &auth).await));
    assert_eq!((second.intent.seq, auth.asked()), (ConversationSeq(2), 1), "the cache answered both");
    // A change reaches the cache: the new member sends, the removed one is refused, unasked.
    members.add_members(t, c, &[user(2)]).await.unwrap();
    members.remove_members(t, c, &[user(1)]).await.unwrap();
    let third = store.reserve_from_member(&send(2, "o2"), fresh_message_id(), &auth).await.unwrap();
    assert!(forbidden(store.reserve_from_member(&send(1, "m3"), fresh_message_id(), &auth).await));
    assert_eq!((third.intent.seq, auth.asked()), (ConversationSeq(3), 1), "no seq for the refused send");

    // Redis lost everything: the durable table answers (once) and the cache serves again.
    assert!(shared_redis::wipe(&redis.namespace) > 0);
    assert!(forbidden(store.reserve_from_member(&send(1, "m4"), fresh_message_id(), &auth).await));
    assert_eq!(auth.asked(), 2, "the durable table refused");
    store.reserve_from_member(&send(2, "o3"), fresh_message_id(), &auth).await.unwrap();
    store.reserve_from_member(&send(2, "o4"), fresh_message_id(), &auth).await.unwrap();
    assert_eq!(auth.asked(), 2, "the refusal's read filled the cache again");
}
