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
