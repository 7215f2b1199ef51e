//! The archiver's hot-tier duties end to end: a writer-side store commits into Redis (owning the
//! trim window), the records reach the topic (one pair out of order), the archiver archives
//! them, raises each conversation's archived watermark over old holes but not over a young one
//! until the grace has passed, trims the hot window up to the watermark, and the tiered store
//! then reads the trimmed history from the archive.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use qim_store::clock::{ManualClock, SystemClock};
use qim_store::ids::{ConversationId, ConversationSeq, TenantId, UnixMillis, MILLIS_PER_DAY};
use qim_store::message::{Direction, HistoryQuery, MessageRecord};
use qim_store::redis::{ArchiveGaps, RedisMessageStore};
use qim_store::retention::{RetentionClass, RetentionPolicy};
use qim_store::testsuite::fixtures::{fresh_message_id, request, user, MembershipAuthorizer};
use qim_store::testsuite::message::commit_fully;
use qim_store::tiered::TieredMessageStore;
use qim_store::MessageStore;
use support::*;

/// Commits `n` messages a minute apart from `start`, leaving `hole` reserved but never
/// recorded; returns the committed records.
async fn commit_conversation(
    store: &RedisMessageStore,
    clock: &ManualClock,
    policy: &RetentionPolicy,
    (tenant, conversation): (TenantId, ConversationId),
    start: UnixMillis,
    n: u64,
    hole: u64,
) -> Vec<MessageRecord> {
    let mut out = Vec::new();
    for seq in 1..=n {
        clock.set(start.plus_millis(seq as i64 * 60_000));
        let req = request(tenant, user(1), &format!("m{seq}"), conversation, format!("body {seq}").as_bytes());
        if seq == hole {
            assert_eq!(store.reserve(&req, fresh_message_id()).await.unwrap().intent.seq.0, seq);
            continue;
        }
        let commit = commit_fully(store, &req).await;
        out.push(commit.intent.record(policy.expires_at(RetentionClass::Default, commit.intent.created_at)));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watermarks_pass_old_holes_wait_for_young_ones_and_the_trim_follows() {
    let policy = RetentionPolicy::with_default_days(30).unwrap();
    let (topic, dlq) = (create_topic("a_hot", 1).await, create_topic("a_hot_dlq", 1).await);
    let mut config = config(&topic, &dlq, policy).await;
    config.hole_grace = Duration::from_secs(3);
    let redis = config.hot_tier.clone().unwrap();
    let clock = Arc::new(ManualClock::new(UnixMillis::now()));
    let marks = Arc::new(qim_store::memory::MemorySeqHighWater::new());
    let writer = RedisMessageStore::open(&redis, policy, clock.clone()).await.unwrap().with_trim_window(7);
    let writer = writer.with_seq_leases(qim_store::redis::SeqLeases::new(marks));

    let old = (fresh(TenantId), fresh(ConversationId));
    let young = (fresh(TenantId), fresh(ConversationId));
    let old_records =
        commit_conversation(&writer, &clock, &policy, old, UnixMillis::now().plus_millis(-9 * MILLIS_PER_DAY), 12, 6)
            .await;
    let mut published = old_records.clone();
    published.swap(6, 7); // seq 9 before seq 8, as concurrent commits may publish
    produce(&topic, &published).await;

    let gaps = ArchiveGaps::open(&redis).await.unwrap();
    let archiver = TestArchiver::start(config).await;
    let watermark = |(t, c): (TenantId, ConversationId)| {
        let writer = writer.clone();
        async move { writer.record_archived_watermark(t, c, ConversationSeq(0)).await.unwrap().0 }
    };
    wait_for("the old conversation's watermark past its old hole", Duration::from_secs(60), || async {
        watermark(old).await == 12
    })
    .await;
    // The young conversation only now, its record after the hole created 30 s in the future: the
    // hole stays young (younger than the grace) for that long, however slow the start was.
    let young_start = UnixMillis::now().plus_millis(30_000 - 4 * 60_000);
    let young_records = commit_conversation(&writer, &clock, &policy, young, young_start, 5, 3).await;
    produce(&topic, &young_records).await;
    wait_for("the young conversation archived up to its hole", Duration::from_secs(30), || async {
        watermark(young).await == 2
    })
    .await;
    // Scheduled once the records above the hole are archived too (they may come in a later batch).
    wait_for("the young hole scheduled for a recheck", Duration::from_secs(30), || async {
        gaps.scheduled_at(young.0, young.1).await.unwrap().is_some()
    })
    .await;
    assert_eq!(watermark(young).await, 2, "a young hole holds the watermark");
    wait_for("the young hole judged a hole after the grace", Duration::from_secs(60), || async {
        watermark(young).await == 5
    })
    .await;
    wait_for("the gap schedule cleared", Duration::from_secs(10), || async {
        gaps.scheduled_at(young.0, young.1).await.unwrap().is_none()
    })
    .await;

    // The trim (every second) removes the old conversation from the hot tier, nothing young.
    let reader = RedisMessageStore::open(&redis, policy, Arc::new(SystemClock)).await.unwrap();
    let viewer = user(9);
    let auth = MembershipAuthorizer::default();
    auth.admit(old.0, old.1, viewer);
    auth.admit(young.0, young.1, viewer);
    let query = |(tenant, conversation): (TenantId, ConversationId), anchor: Option<u64>| HistoryQuery {
        tenant,
        conversation,
        viewer,
        direction: Direction::Older,
        anchor: anchor.map(ConversationSeq),
        max_items: 5,
        max_bytes: usize::MAX,
    };
    wait_for("the old conversation trimmed from the hot tier", Duration::from_secs(30), || async {
        reader.history_page(&query(old, None), &auth).await.unwrap().records.is_empty()
    })
    .await;
    assert_eq!(reader.history_page(&query(young, None), &auth).await.unwrap().records.len(), 4);

    let tiered = TieredMessageStore::new(reader, archive(policy).await, 7, Arc::new(SystemClock)).unwrap();
    let mut anchor = None;
    let mut seen = Vec::new();
    loop {
        let page = tiered.history_page(&query(old, anchor), &auth).await.unwrap();
        assert_eq!(page.earliest_available, Some(ConversationSeq(1)));
        seen.extend(page.records.iter().cloned());
        anchor = page.records.last().map(|r| r.seq.0);
        if !page.has_more {
            break;
        }
    }
    let want: Vec<MessageRecord> = old_records.iter().rev().cloned().collect();
    assert_eq!(seen, want, "the trimmed history reads back from the archive, newest first");
    let metrics = archiver.metrics().await;
    let trimmed = metrics.sum("qim_archiver_trimmed_total", &[]);
    assert!(trimmed >= 11.0, "trimmed {trimmed}: {metrics:?}");
    archiver.stop().await.unwrap();
}
