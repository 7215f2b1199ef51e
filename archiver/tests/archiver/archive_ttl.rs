//! ADR-0019 through the archiver, checked with CQL `TTL()`: a default record lives the
//! configured days from its creation (also when archived late), an ephemeral one 24 h, an
//! already expired one gets 1 s and is gone, compliance hold and tenant custom get no TTL. The
//! blob in the archive is the record as produced, and history reads never show the expired one.

use crate::support;

use std::time::Duration;

use qim_store::ids::{ConversationId, TenantId, UnixMillis, UserId};
use qim_store::message::{Direction, HistoryQuery};
use qim_store::retention::{RetentionClass, RetentionPolicy};
use qim_store::testsuite::fixtures::MembershipAuthorizer;
use qim_store::MessageStore;
use support::*;

const DAY: i64 = 86_400;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_retention_class_gets_its_remaining_ttl() {
    let policy = RetentionPolicy::with_default_days(3).unwrap();
    let (topic, dlq) = (create_topic("a_ttl", 1).await, create_topic("a_ttl_dlq", 1).await);
    let (tenant, conv) = (fresh(TenantId), fresh(ConversationId));
    let now = UnixMillis::now();
    let r = |seq, class, created: UnixMillis| record(tenant, conv, seq, class, created, &policy);
    let expired = r(1, RetentionClass::Ephemeral24h, now.plus_millis(-days(2)));
    let late_default = r(2, RetentionClass::Default, now.plus_millis(-days(2)));
    let default = r(3, RetentionClass::Default, now);
    let ephemeral = r(4, RetentionClass::Ephemeral24h, now);
    let held = r(5, RetentionClass::ComplianceHold, now);
    let custom = r(6, RetentionClass::TenantCustom, now);
    let records =
        vec![expired.clone(), late_default.clone(), default.clone(), ephemeral.clone(), held.clone(), custom.clone()];
    produce(&topic, &records).await;

    let config = config(&topic, &dlq, policy).await;
    let ks = config.scylla.keyspace.clone();
    let archiver = TestArchiver::start(config).await;
    let store = archive(policy).await;
    let session = store.session();
    wait_archived(session, &ks, &records[1..], Duration::from_secs(60)).await;

    let ttl = |s: &Stored| s.record_ttl.map(i64::from);
    // The archive counts a TTL from the whole second a statement is sent to the expiry rounded
    // up (`aligned_ttl`), so a row read in its writing second shows up to 1 s more than `want`.
    let near = |got: Option<i64>, want: i64| got.is_some_and(|t| t <= want + 1 && t >= want - 60);
    let s = stored(session, &ks, &default).await.expect("default archived");
    assert!(near(ttl(&s), 3 * DAY), "default: TTL {:?}, want about 3 days", s.record_ttl);
    assert_eq!(s.index_ttl, s.record_ttl, "index and record expire together");
    assert_eq!(s.index_expires_at, default.expires_at.map(|e| e.0));
    assert_eq!(s.blob, qim_store::codec::encode_record(&default), "the archive holds the record as produced");
    let s = stored(session, &ks, &late_default).await.expect("late default archived");
    assert!(near(ttl(&s), DAY), "a late archive ends at the original moment: TTL {:?}", s.record_ttl);
    let s = stored(session, &ks, &ephemeral).await.expect("ephemeral archived");
    assert!(near(ttl(&s), DAY), "ephemeral: TTL {:?}, want about 24 h", s.record_ttl);
    for never in [&held, &custom] {
        let s = stored(session, &ks, never).await.expect("archived");
        assert_eq!((s.record_ttl, s.index_ttl, s.index_expires_at), (None, None, None), "{:?}", never.retention);
    }
    // Written with 1 s (if still there at all), never resurrected.
    if let Some(s) = stored(session, &ks, &expired).await {
        assert!(s.record_ttl.is_some_and(|t| t <= 1), "expired record written with TTL {:?}", s.record_ttl);
    }
    wait_for("the expired record to be gone", Duration::from_secs(10), || async {
        stored(session, &ks, &expired).await.is_none()
    })
    .await;

    let viewer = UserId([9; 16]);
    let auth = MembershipAuthorizer::default();
    auth.admit(tenant, conv, viewer);
    let query = HistoryQuery {
        tenant,
        conversation: conv,
        viewer,
        direction: Direction::Newer,
        anchor: None,
        max_items: 10,
        max_bytes: 1 << 20,
    };
    let page = store.history_page(&query, &auth).await.unwrap();
    let seqs: Vec<u64> = page.records.iter().map(|r| r.seq.0).collect();
    assert_eq!(seqs, vec![2, 3, 4, 5, 6]);
    assert_eq!(page.earliest_available.map(|s| s.0), Some(2));
    archiver.stop().await.unwrap();
}
