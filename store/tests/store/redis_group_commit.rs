//! Group commit on Redis: sends in flight at once share their round trips, and the script calls
//! of one slot in a tick become one call (the claims of a sender's keys; the seq issue and the
//! move to COMMITTED of a conversation's sends); each send is answered as if it had been alone. Each test on a private `redis-server` (it counts the server's calls).

use futures_util::future::join_all;

use crate::redis_hot_tier::{open, raw};

use qim_store::ids::{ConversationId, TenantId};
use qim_store::message::{Commit, CommitState, Publication};
use qim_store::redis::membership_cache::Cached;
use qim_store::redis::{CommitLayout, RedisConfig, RedisMembershipCache, RedisMessageStore};
use qim_store::testsuite::fixtures::{
    clock, fresh_conversation, fresh_message_id, fresh_tenant, request, user, MembershipAuthorizer,
};
use qim_store::testsuite::private_redis::PrivateRedis;
use qim_store::MessageStore;

/// Fills the member cache of `conversation` with user 1, as the writer's authorizer does.
async fn cache_member(redis: &PrivateRedis, tenant: TenantId, conversation: ConversationId) {
    let config = RedisConfig { url: redis.url(), namespace: "qim".into() };
    let cache = RedisMembershipCache::open(&config).await.unwrap();
    let Cached::Miss { generation } = cache.is_member(tenant, conversation, user(1)).await.unwrap() else {
        panic!("a fresh conversation's cache is empty");
    };
    assert!(cache.fill(tenant, conversation, &generation, &[user(1)]).await.unwrap());
}

/// `n` sends of user 1 to `conversation`, all at once, taken to COMMITTED.
async fn burst(
    store: &RedisMessageStore,
    tenant: TenantId,
    conversation: ConversationId,
    tag: &str,
    n: usize,
) -> Vec<Commit> {
    let members = MembershipAuthorizer::default();
    members.admit(tenant, conversation, user(1));
    let sends = (0..n).map(|i| {
        let (store, members) = (store, &members);
        async move {
            let req = request(tenant, user(1), &format!("{tag}-{i}"), conversation, b"x");
            let recorded = store.reserve_and_record(&req, fresh_message_id(), members).await.unwrap();
            assert_eq!(recorded.state, CommitState::Recorded);
            let publication = Publication { partition: 0, offset: i as i64 };
            let done = store.mark_outbox_published_and_committed(&req.key, recorded.intent.message_id, publication);
            let committed = done.await.unwrap();
            assert_eq!(committed.state, CommitState::Committed);
            committed
        }
    });
    join_all(sends).await
}

/// The seqs of `commits`, sorted, once each is checked to be stored as it was answered.
async fn stored_seqs(store: &RedisMessageStore, commits: &[Commit]) -> Vec<u64> {
    for commit in commits {
        let key = &commit.intent.request.key;
        assert_eq!(store.load_commit(key).await.unwrap().as_ref(), Some(commit), "stored as answered");
    }
    let mut seqs: Vec<u64> = commits.iter().map(|c| c.intent.seq.0).collect();
    seqs.sort_unstable();
    seqs
}

/// The server's calls of `command` (lowercase) so far, those scripts made included.
pub(crate) async fn command_calls(con: &mut redis::aio::MultiplexedConnection, command: &str) -> u64 {
    let stats: String = redis::cmd("INFO").arg("commandstats").query_async(con).await.unwrap();
    let prefix = format!("cmdstat_{command}:calls=");
    stats
        .lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

#[tokio::test]
async fn sends_in_flight_together_share_round_trips_and_each_conversation_one_seq_script() {
    let redis = PrivateRedis::start();
    let store = open(&redis, 30, clock()).await.with_commit_layout(CommitLayout::InConversationSlot);
    let tenant = fresh_tenant();
    let (a, b) = (fresh_conversation(), fresh_conversation());
    for (conversation, tag) in [(a, "warm-a"), (b, "warm-b")] {
        cache_member(&redis, tenant, conversation).await;
        // The lease and the scripts in place first (a lone send each).
        assert_eq!(stored_seqs(&store, &burst(&store, tenant, conversation, tag, 1).await).await, vec![1]);
    }
    let mut con = raw(&redis).await;
    let (trips, scripts) = (store.round_trips(), command_calls(&mut con, "evalsha").await);
    let (in_a, in_b) = tokio::join!(burst(&store, tenant, a, "a", 24), burst(&store, tenant, b, "b", 24));
    let trips = store.round_trips() - trips;
    // Alone, 48 sends make 3 round trips each (144).
    assert!(trips <= 6, "48 sends in flight together made {trips} round trips");
    // Alone: a claim, an append and a CAS each (144 calls). Together, per tick: one call claiming
    // every key of the sender (all sends are user 1's), and per conversation one append and one
    // compare-and-set covering its sends.
    let scripts = command_calls(&mut con, "evalsha").await - scripts;
    assert!(scripts <= 12, "{scripts} script calls for 48 sends");
    let every_seq_once = (2..=25).collect::<Vec<_>>();
    assert_eq!(stored_seqs(&store, &in_a).await, every_seq_once, "every send its own seq, none skipped");
    assert_eq!(stored_seqs(&store, &in_b).await, every_seq_once);
}

#[tokio::test]
async fn a_burst_on_a_conversation_without_a_lease_waits_for_it_and_issues_every_seq_once() {
    let redis = PrivateRedis::start();
    let store = open(&redis, 30, clock()).await.with_commit_layout(CommitLayout::InConversationSlot);
    let (tenant, conversation) = (fresh_tenant(), fresh_conversation());
    cache_member(&redis, tenant, conversation).await;
    // The first send of the call is told to set up the lease, the others to come again; the
    // lease block (64) runs out within the burst, so it is extended under it too.
    let sent = burst(&store, tenant, conversation, "cold", 150).await;
    assert_eq!(stored_seqs(&store, &sent).await, (1..=150).collect::<Vec<_>>());
}

#[tokio::test]
async fn a_conversation_clock_ahead_of_a_whole_tick_restamps_each_send_once() {
    let redis = PrivateRedis::start();
    let store = open(&redis, 30, clock()).await.with_commit_layout(CommitLayout::InConversationSlot);
    let (tenant, conversation) = (fresh_tenant(), fresh_conversation());
    cache_member(&redis, tenant, conversation).await;
    assert_eq!(stored_seqs(&store, &burst(&store, tenant, conversation, "first", 1).await).await, vec![1]);
    // Another writer's clock ran an hour ahead in this conversation.
    let clock_key = format!("qim:{{c:{}{}}}:clock", tenant.to_hex(), conversation.to_hex());
    let mut con = raw(&redis).await;
    let at: i64 = redis::cmd("GET").arg(&clock_key).query_async(&mut con).await.unwrap();
    let ahead = at + 3_600_000;
    let () = redis::cmd("SET").arg(&clock_key).arg(ahead).query_async(&mut con).await.unwrap();
    let late = burst(&store, tenant, conversation, "late", 20).await;
    assert_eq!(stored_seqs(&store, &late).await, (2..=21).collect::<Vec<_>>());
    for commit in &late {
        assert!(commit.intent.created_at.0 >= ahead, "created at or after the conversation's clock");
    }
}
