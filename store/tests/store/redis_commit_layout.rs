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

/// The group-commit layout's entries (a commit in its conversation's slot, claimed in its
/// sender's, listed under its message id) are left alone by this release: the recovery scan and
/// the auxiliary GC skip them, in the middle of a shard, and go on with their own entries. So a
/// fleet in a rolling upgrade never fails its scans on the other release's entries.
#[tokio::test]
async fn the_scan_and_the_gc_skip_the_group_commit_layouts_entries_and_go_on() {
    use qim_store::codec::encode_commit_head;
    use qim_store::ids::UnixMillis;
    use qim_store::redis::RedisMessageStore;

    let redis = PrivateRedis::start();
    let clock = clock();
    let store = open(&redis, 30, clock.clone()).await;
    let mut con = raw(&redis).await;
    let tenant = fresh_tenant();
    // An unfinished commit of this layout, which the scan must still find.
    let mine = request(tenant, user(1), "mine", fresh_conversation(), b"reserved here");
    let reserved = store.reserve(&mine, fresh_message_id()).await.unwrap();

    // A RECORDED commit of the group-commit layout by the same sender (so its entry shares the
    // shard), listed first in both indexes, and an orphan entry of this layout after it.
    let theirs = request(tenant, user(1), "theirs", fresh_conversation(), b"reserved by a later release");
    let mut recorded = reserved.clone();
    recorded.intent.request = theirs.clone();
    recorded.intent.message_id = fresh_message_id();
    recorded.state = CommitState::Recorded;
    let [commit_key, claim_key] = store.group_commit_keys(&theirs.key, theirs.conversation);
    let () = con
        .hset_multiple(&commit_key, &[("req", encode_request(&theirs)), ("commit", encode_commit_head(&recorded))])
        .await
        .unwrap();
    let () = con.set(&claim_key, format!("{}:digest", theirs.conversation.to_hex())).await.unwrap();
    let member =
        RedisMessageStore::group_commit_aux_member(&theirs.key, theirs.conversation, recorded.intent.message_id);
    let orphan = format!("{}{}:1:gone", tenant.to_hex(), user(1).to_hex());
    let [recovery, commit_gc] = store.aux_keys_of(&member);
    assert_eq!(store.aux_keys_of(&orphan), [recovery.clone(), commit_gc.clone()], "one sender, one shard");
    for (score, entry) in [(0, &member), (1, &orphan)] {
        let () = con.zadd(&recovery, entry, score).await.unwrap();
    }
    let () = con.zadd(&commit_gc, &member, 0).await.unwrap();

    let found = store.scan_recoverable_commits(UnixMillis(i64::MAX), 10).await.unwrap();
    assert_eq!(found, vec![reserved.clone()], "the other layout's commit is not driven here");

    clock.advance(qim_store::COMMIT_AUX_TTL_MILLIS + 1);
    let report = store.gc_committed_auxiliary(100).await.unwrap();
    assert_eq!(report.removed, 1, "the orphan of this layout, nothing else: {report:?}");
    let listed: Vec<String> = con.zrange(&recovery, 0, -1).await.unwrap();
    assert!(listed.contains(&member) && !listed.contains(&orphan), "{listed:?}");
    let collected: Vec<String> = con.zrange(&commit_gc, 0, -1).await.unwrap();
    assert_eq!(collected, vec![member.clone()]);
    let (kept, claim): (Vec<u8>, Option<String>) =
        redis::pipe().hget(&commit_key, "commit").get(&claim_key).query_async(&mut con).await.unwrap();
    assert_eq!(kept, encode_commit_head(&recorded), "the other layout's commit is untouched");
    assert!(claim.is_some(), "and so is its claim");
    assert_eq!(store.scan_recoverable_commits(UnixMillis(i64::MAX), 10).await.unwrap(), vec![reserved]);
}
