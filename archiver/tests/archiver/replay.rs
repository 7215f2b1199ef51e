//! `replay` re-applies the topic and leaves the archive as it was: the same rows, TTLs still
//! ending at the original expiry, the expired record still gone; it starts from the earliest
//! offsets, a timestamp, or explicit partition offsets, and reports what it did.

use crate::support;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use qim_archiver::replay::{replay, Summary};
use qim_runtime::kafka::replay::Start;
use qim_store::ids::{ConversationId, TenantId, UnixMillis};
use qim_store::message::MessageRecord;
use qim_store::retention::{RetentionClass, RetentionPolicy};
use rdkafka::consumer::{BaseConsumer, Consumer};
use scylla::client::session::Session;
use support::*;
use tokio_util::sync::CancellationToken;

/// Each record's rows, with TTLs turned into the moment they end (seconds since the epoch).
async fn snapshot(
    session: &Session,
    ks: &str,
    records: &[MessageRecord],
) -> Vec<Option<(Vec<u8>, Option<i64>, Option<i64>)>> {
    let mut out = Vec::new();
    for r in records {
        let now = UnixMillis::now().0 / 1000;
        out.push(
            stored(session, ks, r)
                .await
                .map(|s| (s.blob, s.record_ttl.map(|t| now + i64::from(t)), s.index_ttl.map(|t| now + i64::from(t)))),
        );
    }
    out
}

/// Waits until the rows of every expired record are gone: the archive writes them with a 1 s
/// TTL, the smallest it has.
async fn wait_expired_gone(session: &Session, ks: &str, records: &[MessageRecord]) {
    let expired: Vec<_> = records.iter().filter(|r| r.is_expired(UnixMillis::now())).collect();
    // Record and index rows are written by separate statements, each with a TTL counted from
    // the second it executed: under load the index row may outlive the record row by a second.
    wait_for("the expired records' rows to expire", Duration::from_secs(30), || async {
        for r in &expired {
            if stored(session, ks, r).await.is_some() || indexed(session, ks, r).await {
                return false;
            }
        }
        true
    })
    .await;
}

fn end_offset(topic: &str, partition: i32) -> i64 {
    let consumer: BaseConsumer = rdkafka::ClientConfig::new().set("bootstrap.servers", brokers()).create().unwrap();
    consumer.fetch_watermarks(topic, partition, Duration::from_secs(10)).unwrap().1
}

async fn run(config: &qim_archiver::config::ArchiverConfig, start: Start) -> (Summary, (u64, u64)) {
    let mut last = (0, 0);
    let summary = replay(config, start, &CancellationToken::new(), |done, total| last = (done, total)).await.unwrap();
    (summary, last)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_leaves_the_archive_identical_and_counts_what_it_did() {
    let policy = RetentionPolicy::with_default_days(30).unwrap();
    let (topic, dlq) = (create_topic("a_replay", 2).await, create_topic("a_replay_dlq", 1).await);
    // "Now" is ten seconds ago: a replay that computed a TTL from its own clock rather than from
    // the record's expiry would end it ten seconds late, well past the two seconds allowed.
    let now = UnixMillis::now().plus_millis(-10_000);
    let mut records = Vec::new();
    for _ in 0..6 {
        let (t, c) = (fresh(TenantId), fresh(ConversationId));
        let classes = [
            (RetentionClass::Default, now),
            (RetentionClass::Default, now.plus_millis(-days(2))),
            (RetentionClass::Ephemeral24h, now),
            (RetentionClass::Ephemeral24h, now.plus_millis(-days(2))),
            (RetentionClass::ComplianceHold, now),
        ];
        for (seq, (class, created)) in classes.into_iter().enumerate() {
            records.push(record(t, c, seq as u64 + 1, class, created, &policy));
        }
    }
    produce(&topic, &records).await;
    produce_raw(&topic, Some(b"not a conversation key"), Some(b"\x00"), &[]).await;
    let mut config = config(&topic, &dlq, policy).await;
    config.batch.max_records = 7;
    let ks = config.scylla.keyspace.clone();
    let archiver = TestArchiver::start(config.clone()).await;
    let store = archive(policy).await;
    let session = store.session();
    let live: Vec<_> = records.iter().filter(|r| !r.is_expired(now)).cloned().collect();
    wait_archived(session, &ks, &live, Duration::from_secs(60)).await;
    let total = end_offset(&topic, 0) + end_offset(&topic, 1);
    wait_for("everything consumed", Duration::from_secs(30), || async {
        committed(&config.group, &topic, 2).values().sum::<i64>() == total
    })
    .await;
    archiver.stop().await.unwrap();
    wait_expired_gone(session, &ks, &records).await;
    let before = snapshot(session, &ks, &records).await;

    let began = Instant::now();
    let (summary, progress) = run(&config, Start::Earliest).await;
    eprintln!("replay from earliest: {summary:?} in {:?}", began.elapsed());
    assert_eq!(summary.records, total as u64);
    assert_eq!(summary.poison, 1);
    assert_eq!(summary.archived, records.len() as u64);
    // The partitions that hold records: the conversations are random, so now and then (about
    // one run in 64) every key hashes to one of the two.
    let holding = (0..2).filter(|p| end_offset(&topic, *p) > 0).count();
    assert_eq!(summary.partitions, holding);
    assert_eq!(progress, (total as u64, total as u64), "the last progress report is complete");
    wait_expired_gone(session, &ks, &records).await;
    let after = snapshot(session, &ks, &records).await;
    for ((r, b), a) in records.iter().zip(&before).zip(&after) {
        match (b, a) {
            (None, None) => assert!(r.is_expired(UnixMillis::now()), "only expired records are absent"),
            (Some((blob_b, rec_b, idx_b)), Some((blob_a, rec_a, idx_a))) => {
                assert_eq!(blob_b, blob_a, "seq {} changed", r.seq);
                for (x, y) in [(rec_b, rec_a), (idx_b, idx_a)] {
                    match (x, y) {
                        (None, None) => {}
                        (Some(x), Some(y)) => assert!((x - y).abs() <= 2, "seq {}: TTL ended at {x}, now {y}", r.seq),
                        other => panic!("seq {}: TTL presence changed: {other:?}", r.seq),
                    }
                }
                let expiry = r.expires_at.map(|e| e.0 / 1000);
                if let (Some(end), Some(want)) = (rec_a, expiry) {
                    assert!((end - want).abs() <= 2, "seq {}: TTL ends at {end}, the record expires at {want}", r.seq);
                }
            }
            other => panic!("seq {} of {}: presence changed by the replay: {other:?}", r.seq, r.conversation),
        }
    }
    let mut per_conv: HashMap<(TenantId, ConversationId), usize> = HashMap::new();
    for r in records.iter().filter(|r| !r.is_expired(UnixMillis::now())) {
        *per_conv.entry((r.tenant, r.conversation)).or_default() += 1;
    }
    for ((t, c), n) in per_conv {
        assert_eq!(index_rows(session, &ks, t, c).await, n, "no extra index rows");
    }

    // From explicit offsets: only the named partition, from there to its end.
    let end0 = end_offset(&topic, 0);
    let (summary, _) = run(&config, Start::Offsets(vec![(0, 2)])).await;
    assert_eq!((summary.records, summary.partitions), ((end0 - 2).max(0) as u64, usize::from(end0 > 2)));

    // From a timestamp: only what was produced after it.
    let split = UnixMillis::now().0;
    let later = conversation(5, &policy);
    produce(&topic, &later).await;
    let (summary, _) = run(&config, Start::Time(split)).await;
    assert_eq!((summary.records, summary.archived), (5, 5));
    wait_archived(session, &ks, &later, Duration::from_secs(10)).await;
}
