//! The Redis commit hash's layout: the request (with the payload) written once at `reserve`,
//! beside a small head that every transition compares and sets; and commits an earlier release
//! stored whole, which still read and advance. Each test on a private `redis-server` (the keys
//! are read and rewritten one by one).

use redis::AsyncCommands;

use crate::redis_hot_tier::{open, raw};

use qim_store::codec::{decode_commit_parts, encode_commit, encode_request};
use qim_store::message::{CommitKey, CommitState, Publication};
use qim_store::testsuite::fixtures::{clock, fresh_conversation, fresh_message_id, fresh_tenant, request, user};
use qim_store::testsuite::private_redis::PrivateRedis;
use qim_store::MessageStore;

/// The commit hash of `key` in the namespace `open` uses.
fn commit_hash(key: &CommitKey) -> String {
    format!("qim:{{k:{}{}}}:commit:{}", key.tenant.to_hex(), key.sender.to_hex(), key.client_message_id.as_str())
}

#[tokio::test]
async fn the_payload_is_written_once_and_each_transition_rewrites_only_the_head() {
    let redis = PrivateRedis::start();
    let store = open(&redis, 30, clock()).await;
    let mut con = raw(&redis).await;
    let payload = vec![b'p'; 4000];
    let req = request(fresh_tenant(), user(1), "big", fresh_conversation(), &payload);
    let hash = commit_hash(&req.key);
    let reserved = store.reserve(&req, fresh_message_id()).await.unwrap();
    let (stored_req, head): (Vec<u8>, Vec<u8>) =
        redis::cmd("HMGET").arg(&hash).arg("req").arg("commit").query_async(&mut con).await.unwrap();
    assert_eq!(stored_req, encode_request(&req), "the request as sent");
    assert!(head.len() < 64, "the head holds no payload: {} bytes", head.len());
    assert_eq!(decode_commit_parts(&stored_req, &head).unwrap(), reserved);

    store.put_record(&reserved.intent).await.unwrap();
    let publication = Publication { partition: 3, offset: 9 };
    let committed =
        store.mark_outbox_published_and_committed(&req.key, reserved.intent.message_id, publication).await.unwrap();
    let (after_req, head): (Vec<u8>, Vec<u8>) =
        redis::cmd("HMGET").arg(&hash).arg("req").arg("commit").query_async(&mut con).await.unwrap();
    assert_eq!(after_req, stored_req, "the request is never rewritten");
    assert!(head.len() < 64, "{} bytes", head.len());
    let read = decode_commit_parts(&after_req, &head).unwrap();
    assert_eq!((read.state, read.intent.publication), (CommitState::Committed, Some(publication)));
    assert_eq!(read, committed);
    assert_eq!(store.load_commit(&req.key).await.unwrap(), Some(committed));
}

#[tokio::test]
async fn a_whole_commit_an_earlier_release_stored_is_read_replayed_and_advanced() {
    let redis = PrivateRedis::start();
    let store = open(&redis, 30, clock()).await;
    let mut con = raw(&redis).await;
    let req = request(fresh_tenant(), user(1), "old", fresh_conversation(), b"from before the upgrade");
    let hash = commit_hash(&req.key);
    let reserved = store.reserve(&req, fresh_message_id()).await.unwrap();
    // What an earlier release wrote: the whole commit blob in `commit`.
    let () = con.hset(&hash, "commit", encode_commit(&reserved)).await.unwrap();

    let upgraded = open(&redis, 30, clock()).await;
    assert_eq!(upgraded.load_commit(&req.key).await.unwrap().as_ref(), Some(&reserved));
    let replayed = upgraded.reserve(&req, fresh_message_id()).await.unwrap();
    assert_eq!(replayed, reserved, "an identical retry gets the stored commit back");
    let other = request(req.key.tenant, user(1), "old", req.conversation, b"other bytes");
    assert_eq!(upgraded.reserve(&other, fresh_message_id()).await.unwrap_err().kind(), qim_store::ErrorKind::Conflict);

    let recorded = upgraded.put_record(&reserved.intent).await.unwrap();
    assert_eq!(recorded.state, CommitState::Recorded);
    let head: Vec<u8> = con.hget(&hash, "commit").await.unwrap();
    assert!(head.len() < 64, "the first transition stores the new layout: {} bytes", head.len());
    let publication = Publication { partition: 0, offset: 1 };
    let committed =
        upgraded.mark_outbox_published_and_committed(&req.key, reserved.intent.message_id, publication).await.unwrap();
    assert_eq!(committed.state, CommitState::Committed);
    assert_eq!(upgraded.load_commit(&req.key).await.unwrap(), Some(committed));
}

#[tokio::test]
async fn a_corrupt_head_is_refused_as_corrupt() {
    let redis = PrivateRedis::start();
    let store = open(&redis, 30, clock()).await;
    let mut con = raw(&redis).await;
    let req = request(fresh_tenant(), user(1), "bad", fresh_conversation(), b"x");
    store.reserve(&req, fresh_message_id()).await.unwrap();
    let () = con.hset(commit_hash(&req.key), "commit", b"\x55\x01 not a head".as_slice()).await.unwrap();
    let err = store.load_commit(&req.key).await.unwrap_err();
    assert_eq!(err.kind(), qim_store::ErrorKind::CorruptEntry, "{err}");
}

/// A send of the group-commit layout: its commit in its conversation's slot (request and head,
/// no sender-slot commit), its key claimed in its sender's; driven to COMMITTED by a store that
/// did not create it (found through the claim); found by the recovery scan beside the other
/// layout's commits while unfinished; collected by the auxiliary GC, claim and commit, with its
/// record registered for expiry.
#[tokio::test]
async fn a_group_commit_layout_send_is_found_driven_and_collected_by_any_store() {
    use qim_store::ids::UnixMillis;
    use qim_store::redis::CommitLayout;
    use qim_store::testsuite::fixtures::MembershipAuthorizer;

    let redis = PrivateRedis::start();
    let clock = clock();
    let v2 = open(&redis, 30, clock.clone()).await.with_commit_layout(CommitLayout::InConversationSlot);
    let v1 = open(&redis, 30, clock.clone()).await;
    let mut con = raw(&redis).await;
    let tenant = fresh_tenant();
    let members = MembershipAuthorizer::default();
    let theirs = request(tenant, user(1), "theirs", fresh_conversation(), b"in the conversation's slot");
    members.admit(tenant, theirs.conversation, user(1));
    let recorded = v2.reserve_and_record(&theirs, fresh_message_id(), &members).await.unwrap();
    assert_eq!(recorded.state, CommitState::Recorded);
    let [commit_key, claim_key] = v2.group_commit_keys(&theirs.key, theirs.conversation);
    let (req, head, claim, legacy): (Vec<u8>, Vec<u8>, String, bool) = redis::pipe()
        .hget(&commit_key, "req")
        .hget(&commit_key, "commit")
        .get(&claim_key)
        .exists(commit_hash(&theirs.key))
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(decode_commit_parts(&req, &head).unwrap(), recorded, "request and head in the conversation's slot");
    assert!(claim.starts_with(&format!("{}:", theirs.conversation.to_hex())), "the claim names it: {claim}");
    assert!(!legacy, "nothing in the sender's slot but the claim");

    let mine = request(tenant, user(1), "mine", fresh_conversation(), b"in the sender's slot");
    let reserved = v1.reserve(&mine, fresh_message_id()).await.unwrap();
    let mut found = v1.scan_recoverable_commits(UnixMillis(i64::MAX), 10).await.unwrap();
    found.sort_by_key(|c| c.intent.request.key.client_message_id.as_str().to_owned());
    assert_eq!(found, vec![reserved, recorded.clone()], "both layouts' unfinished commits");

    let publication = Publication { partition: 0, offset: 4 };
    let id = recorded.intent.message_id;
    let committed = v1.mark_outbox_published_and_committed(&theirs.key, id, publication).await.unwrap();
    assert_eq!(committed.state, CommitState::Committed, "driven by a store that found it through its claim");
    assert_eq!(v2.reserve(&theirs, fresh_message_id()).await.unwrap(), committed, "a replay");
    let other = request(tenant, user(1), "theirs", fresh_conversation(), b"in the conversation's slot");
    let refused = v2.reserve(&other, fresh_message_id()).await.unwrap_err();
    assert_eq!(refused.kind(), qim_store::ErrorKind::Conflict, "the key is claimed for another conversation");

    clock.advance(qim_store::COMMIT_AUX_TTL_MILLIS + 1);
    let report = v1.gc_committed_auxiliary(100).await.unwrap();
    assert_eq!(report.removed, 1, "{report:?}");
    let (commit, claim): (bool, bool) =
        redis::pipe().exists(&commit_key).exists(&claim_key).query_async(&mut con).await.unwrap();
    assert!(!commit && !claim, "the commit and its claim are collected");
    let mut expiries = 0;
    for key in v1.history_gc_keys() {
        let n: usize = con.zcard(&key).await.unwrap();
        expiries += n;
    }
    assert_eq!(expiries, 1, "its record is registered for expiry");
    let again = v2.reserve(&other, fresh_message_id()).await.unwrap();
    assert_eq!(again.state, CommitState::Reserved, "after the auxiliary TTL the key may name a new message");
}

/// The group-commit layout's send: reserve and record in 2 round trips (claim with the recovery
/// entry, then the script that issues the seq and writes commit and record), OUTBOXED and
/// COMMITTED in 1 (with the hot-tier registrations): 3, against 5 in the sender's slot.
#[tokio::test]
async fn a_group_commit_layout_send_costs_three_round_trips() {
    use qim_store::redis::membership_cache::Cached;
    use qim_store::redis::{CommitLayout, RedisConfig, RedisMembershipCache};
    use qim_store::testsuite::fixtures::MembershipAuthorizer;

    let redis = PrivateRedis::start();
    let store = open(&redis, 30, clock()).await.with_commit_layout(CommitLayout::InConversationSlot);
    let (tenant, conversation) = (fresh_tenant(), fresh_conversation());
    let members = MembershipAuthorizer::default();
    members.admit(tenant, conversation, user(1));
    // The member cache the allocation reads, as the writer's authorizer fills it.
    let config = RedisConfig { url: redis.url(), namespace: "qim".into() };
    let cache = RedisMembershipCache::open(&config).await.unwrap();
    let Cached::Miss { generation } = cache.is_member(tenant, conversation, user(1)).await.unwrap() else {
        panic!("a fresh conversation's cache is empty");
    };
    assert!(cache.fill(tenant, conversation, &generation, &[user(1)]).await.unwrap());
    for (i, expected) in [(0, None), (1, Some(3))] {
        let req = request(tenant, user(1), &format!("m{i}"), conversation, b"x");
        let before = store.round_trips();
        let recorded = store.reserve_and_record(&req, fresh_message_id(), &members).await.unwrap();
        assert_eq!(recorded.state, CommitState::Recorded);
        let reserved_in = store.round_trips() - before;
        let publication = Publication { partition: 0, offset: i };
        let done = store.mark_outbox_published_and_committed(&req.key, recorded.intent.message_id, publication);
        assert_eq!(done.await.unwrap().state, CommitState::Committed);
        if let Some(expected) = expected {
            assert_eq!(reserved_in, 2, "reserve_and_record");
            assert_eq!(store.round_trips() - before, expected, "the whole send");
        }
    }
}

/// A group-commit layout send's claim outlives its commit. The COMMITTED step leaves the
/// claim's TTL as it is when the same store took the claim moments before (one write fewer per
/// send), and extends it when the claim was found there: a retry answered as a replay, or
/// another store driving the send.
#[tokio::test]
async fn a_claim_outlives_its_commit_and_is_extended_unless_freshly_taken() {
    use qim_store::redis::CommitLayout;
    use qim_store::testsuite::fixtures::MembershipAuthorizer;

    use crate::redis_group_commit::command_calls;

    let redis = PrivateRedis::start();
    let store = open(&redis, 30, clock()).await.with_commit_layout(CommitLayout::InConversationSlot);
    let another = open(&redis, 30, clock()).await.with_commit_layout(CommitLayout::InConversationSlot);
    let mut con = raw(&redis).await;
    let (tenant, conversation) = (fresh_tenant(), fresh_conversation());
    let members = MembershipAuthorizer::default();
    members.admit(tenant, conversation, user(1));
    // What a claim has left (ms) beyond its commit's TTL once `id` is COMMITTED, and how many
    // PEXPIREs the COMMITTED step made. `age` lowers the claim's TTL first, as if it had been
    // taken long ago; `driver` commits it; `replay` reserves it again first (answered `exists`).
    let mut committed = async |id: &str, age: bool, driver: &qim_store::redis::RedisMessageStore, replay: bool| {
        let req = request(tenant, user(1), id, conversation, b"x");
        let recorded = store.reserve_and_record(&req, fresh_message_id(), &members).await.unwrap();
        let [commit_key, claim_key] = store.group_commit_keys(&req.key, conversation);
        if age {
            let _: bool = con.pexpire(&claim_key, 60_000).await.unwrap();
        }
        if replay {
            assert_eq!(store.reserve_and_record(&req, fresh_message_id(), &members).await.unwrap(), recorded);
        }
        let before = command_calls(&mut con, "pexpire").await;
        let id = recorded.intent.message_id;
        let done = driver.mark_outbox_published_and_committed(&req.key, id, Publication { partition: 0, offset: 1 });
        assert_eq!(done.await.unwrap().state, CommitState::Committed);
        let pexpires = command_calls(&mut con, "pexpire").await - before;
        let (commit_ttl, claim_ttl): (i64, i64) =
            redis::pipe().pttl(&commit_key).pttl(&claim_key).query_async(&mut con).await.unwrap();
        assert!(commit_ttl > 0, "the commit has its safety-net TTL: {commit_ttl}");
        (claim_ttl - commit_ttl, pexpires)
    };
    let half_hour = 30 * 60 * 1000;
    let (spare, pexpires) = committed("fresh", false, &store, false).await;
    assert_eq!(pexpires, 1, "the commit's TTL alone: the claim is left as it was taken");
    assert!(spare > half_hour, "a fresh claim outlives its commit by most of an hour: {spare} ms");
    for (id, driver, replay, what) in
        [("retried", &store, true, "a retry's claim"), ("driven", &another, false, "another store's send")]
    {
        let (spare, pexpires) = committed(id, true, driver, replay).await;
        assert_eq!(pexpires, 2, "{what}: the commit's TTL and the claim's");
        assert!(spare > half_hour, "{what} is extended past its commit: {spare} ms");
    }
}

/// Redis loses everything after a group-commit layout send was published and answered: its
/// retry is answered from the topic (the revalidation restores its commit, which then holds the
/// key), with the first seq and message id, never a second seq; the next send gets a seq above.
#[tokio::test]
async fn a_send_published_before_redis_lost_it_is_answered_from_the_topic_not_reissued() {
    let lost = Published::open().await;
    let (store, members, (tenant, conversation)) = (&lost.store, &lost.members, (lost.tenant, lost.conversation));
    let sent = [lost.publish("a").await, lost.publish("b").await];
    lost.lose_redis();

    let (req, committed) = &sent[1];
    let again = store.reserve_and_record(req, fresh_message_id(), members).await.unwrap();
    assert_eq!(again.state, CommitState::Committed, "answered as the send it was");
    assert_eq!((again.intent.seq, again.intent.message_id), (committed.intent.seq, committed.intent.message_id));
    let next = request(tenant, user(1), "c", conversation, b"after the loss");
    let next = store.reserve_and_record(&next, fresh_message_id(), members).await.unwrap();
    assert!(next.intent.seq > committed.intent.seq, "seq {} is above every published one", next.intent.seq.0);
}

/// Stores of both layouts on one namespace (a fleet mid-upgrade): whichever reserves a key
/// first decides its layout, and the other store's reservation of that key is a replay (same
/// seq and message id) or, with other bytes, a `Conflict`; each drives the other's commits.
#[tokio::test]
async fn stores_of_both_layouts_share_keys_whichever_reserves_first() {
    use qim_store::redis::CommitLayout;

    let redis = PrivateRedis::start();
    let v1 = open(&redis, 30, clock()).await;
    let v2 = open(&redis, 30, clock()).await.with_commit_layout(CommitLayout::InConversationSlot);
    let (tenant, conversation) = (fresh_tenant(), fresh_conversation());
    for (first, second, id) in [(&v2, &v1, "v2-first"), (&v1, &v2, "v1-first")] {
        let req = request(tenant, user(1), id, conversation, b"one message");
        let reserved = first.reserve(&req, fresh_message_id()).await.unwrap();
        let again = second.reserve(&req, fresh_message_id()).await.unwrap();
        assert_eq!(again, reserved, "{id}: the other layout's store replays it");
        let other = request(tenant, user(1), id, conversation, b"other bytes");
        let refused = second.reserve(&other, fresh_message_id()).await.unwrap_err();
        assert_eq!(refused.kind(), qim_store::ErrorKind::Conflict, "{id}");
        let recorded = second.put_record(&reserved.intent).await.unwrap();
        assert_eq!(recorded.state, CommitState::Recorded, "{id}: driven by the other store");
        let publication = Publication { partition: 0, offset: 1 };
        let id_ = reserved.intent.message_id;
        let committed = second.mark_outbox_published_and_committed(&req.key, id_, publication).await.unwrap();
        assert_eq!(first.load_commit(&req.key).await.unwrap(), Some(committed), "{id}");
    }
}

/// As above, but the retry arrives among new sends of the same conversation, so that another
/// send of its tick is told to revalidate and the retry waits (`later`, then `wait`): it claims
/// its key again after waiting, finds the commit the revalidation restored, and is answered with
/// its first seq; the new sends get seqs above every published one.
#[tokio::test]
async fn a_retry_that_waited_for_another_sends_revalidation_is_answered_from_the_topic() {
    use futures_util::future::join_all;

    let lost = Published::open().await;
    let (store, members, (tenant, conversation)) = (&lost.store, &lost.members, (lost.tenant, lost.conversation));
    let (req, committed) = lost.publish("published").await;
    lost.lose_redis();

    // The new sends stamp first, so one of them leads the tick's append call.
    let news: Vec<_> =
        (0..8).map(|i| request(tenant, user(1), &format!("new-{i}"), conversation, b"after the loss")).collect();
    let mut sends: Vec<_> = news.iter().map(|r| store.reserve_and_record(r, fresh_message_id(), members)).collect();
    sends.push(store.reserve_and_record(&req, fresh_message_id(), members));
    let mut answers = join_all(sends).await.into_iter().map(Result::unwrap).collect::<Vec<_>>();
    let again = answers.pop().expect("the retry's answer");
    assert_eq!(again.state, CommitState::Committed, "answered as the send it was");
    assert_eq!((again.intent.seq, again.intent.message_id), (committed.intent.seq, committed.intent.message_id));
    let mut seqs: Vec<u64> = answers.iter().map(|c| c.intent.seq.0).collect();
    seqs.sort_unstable();
    seqs.dedup();
    assert_eq!(seqs.len(), 8, "every new send its own seq");
    assert!(seqs[0] > committed.intent.seq.0, "seqs {seqs:?} are above every published one");
}

/// A writer's store in the group-commit layout on the shared Redis (its namespace wiped
/// afterwards), whose revalidations read `topic`; sends of user 1, a member, to `conversation`.
struct Published {
    _cleanup: crate::shared_redis::Cleanup,
    namespace: String,
    store: qim_store::redis::RedisMessageStore,
    topic: std::sync::Arc<crate::redis_created_at_clock::Topic>,
    members: qim_store::testsuite::fixtures::MembershipAuthorizer,
    tenant: qim_store::ids::TenantId,
    conversation: qim_store::ids::ConversationId,
}

impl Published {
    async fn open() -> Self {
        use std::sync::Arc;

        use qim_store::clock::ManualClock;
        use qim_store::memory::MemorySeqHighWater;
        use qim_store::redis::CommitLayout;
        use qim_store::testsuite::fixtures::{MembershipAuthorizer, T0};

        use crate::redis_created_at_clock::{writer, Topic};
        use crate::shared_redis::{unique_namespace, url, Cleanup};

        let cleanup = Cleanup::default();
        let namespace = unique_namespace();
        cleanup.register(&namespace);
        let (marks, topic) = (Arc::new(MemorySeqHighWater::default()), Arc::new(Topic::default()));
        let clock = Arc::new(ManualClock::new(T0));
        let store = writer(&url(), &namespace, clock, marks, topic.clone())
            .await
            .with_commit_layout(CommitLayout::InConversationSlot);
        let (tenant, conversation) = (fresh_tenant(), fresh_conversation());
        let members = MembershipAuthorizer::default();
        members.admit(tenant, conversation, user(1));
        Self { _cleanup: cleanup, namespace, store, topic, members, tenant, conversation }
    }

    /// Sends `id` to COMMITTED, published at its seq's offset, and puts its record on the topic.
    async fn publish(&self, id: &str) -> (qim_store::message::CommitRequest, qim_store::message::Commit) {
        use qim_store::message::PublishedRecord;
        use qim_store::retention::RetentionPolicy;

        let req = request(self.tenant, user(1), id, self.conversation, b"published");
        let recorded = self.store.reserve_and_record(&req, fresh_message_id(), &self.members).await.unwrap();
        let publication = Publication { partition: 0, offset: recorded.intent.seq.0 as i64 };
        let id = recorded.intent.message_id;
        let committed = self.store.mark_outbox_published_and_committed(&req.key, id, publication).await.unwrap();
        let expires_at = RetentionPolicy::default().expires_at(req.retention, committed.intent.created_at);
        let record = committed.intent.record(expires_at);
        self.topic.0.lock().unwrap().push(PublishedRecord { record, publication });
        (req, committed)
    }

    /// Redis loses everything of the store's namespace.
    fn lose_redis(&self) {
        assert!(crate::shared_redis::wipe(&self.namespace) > 0, "redis lost the namespace");
    }
}
