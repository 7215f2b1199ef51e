//! The mailbox read API on the real stack: pages after a cursor with the covered cursor,
//! retention (an expired entry leaves a boundary: older cursors get 410 with the earliest valid
//! cursor, never a silent gap), trimming, and the 4xx discipline.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use qim_store::ids::{ConversationId, MessageId, TenantId, UnixMillis, UserId, MILLIS_PER_DAY};
use qim_store::mailbox::{lane_of, shard_of, DispatchId, DispatchManifest};
use serde_json::{json, Value};
use support::{fresh, message, token_for, wait_for, Fixture, Kind, SHARDS};

/// A dispatch of one message to `user` alone, created at `created_at`.
pub(crate) fn manifest(tenant: TenantId, user: UserId, created_at: UnixMillis) -> DispatchManifest {
    let mut record = message(tenant, fresh(ConversationId), 1, user);
    record.created_at = created_at;
    let id = DispatchId { message_id: record.message_id, shard: shard_of(&tenant, &user, SHARDS) };
    DispatchManifest::new(id, qim_mailbox_dispatcher::router::route::message_ref(&record), vec![user])
}

/// The seqs of a mailbox page's entries.
pub(crate) fn seqs(page: &Value) -> Vec<String> {
    page["entries"].as_array().unwrap().iter().map(|e| e["seq"].as_str().unwrap().to_owned()).collect()
}

async fn reads_trims_and_expiry_over_http(kind: Kind) {
    let f = Fixture::new(kind).await;
    let d = f.start().await;
    let (tenant, user) = (fresh(TenantId), fresh(UserId));
    let path = format!("/v1/tenants/{tenant}/users/{user}/mailbox");

    // Offset 0: a message created 40 days ago (its entry expired before it was written);
    // offsets 1..=3: fresh messages.
    let old = UnixMillis(UnixMillis::now().0 - 40 * MILLIS_PER_DAY);
    assert_eq!(f.produce_dispatch(&manifest(tenant, user, old)).await, 0);
    let mut fresh_ids: Vec<MessageId> = Vec::new();
    for expected in 1..=3 {
        let m = manifest(tenant, user, UnixMillis::now());
        assert_eq!(f.produce_dispatch(&m).await, expected);
        fresh_ids.push(m.id.message_id);
    }
    let store = f.mailbox().await;
    let (shard, lane) = (shard_of(&tenant, &user, SHARDS), lane_of(&tenant, &user));
    wait_for("the user's lane to pass offset 3", Duration::from_secs(60), || {
        let store = Arc::clone(&store);
        async move { store.lane_watermark(shard, lane).await.unwrap().through == Some(3) }
    })
    .await;

    // No cursor: from the earliest still available.
    let (status, page) = d.get(&path).await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(seqs(&page), ["0:2", "0:3", "0:4"]);
    assert_eq!((page["covered"].as_str(), page["has_more"].as_bool()), (Some("0:4"), Some(false)));
    let first = &page["entries"][0]["events"][0];
    assert_eq!(first["message"]["message_id"], fresh_ids[0].to_hex());
    assert_eq!(first["message"]["sender"], user.to_hex());

    // A cursor in the expired region: 410 with the earliest valid cursor.
    let (status, body) = d.get(&format!("{path}?after=0:0")).await;
    assert_eq!(status, 410, "{body}");
    assert_eq!(
        (body["error"]["code"].as_str(), body["error"]["earliest"].as_str()),
        (Some("cursor_expired"), Some("0:1"))
    );

    // Paging: one event per page, resume after `covered`.
    let (status, page) = d.get(&format!("{path}?after=0:1&limit=1")).await;
    assert_eq!(status, 200);
    assert_eq!(
        (seqs(&page), page["covered"].as_str(), page["has_more"].as_bool()),
        (vec!["0:2".to_owned()], Some("0:2"), Some(true))
    );

    // The client acknowledged through 0:3: older cursors expire, the trim never moves back.
    let (status, body) = d.post(&format!("{path}/truncate"), &json!({ "through": "0:3" })).await;
    assert_eq!((status, body["trim"].as_str()), (200, Some("0:3")), "{body}");
    let (status, body) = d.post(&format!("{path}/truncate"), &json!({ "through": "0:1" })).await;
    assert_eq!((status, body["trim"].as_str()), (200, Some("0:3")), "{body}");
    let (status, body) = d.get(&format!("{path}?after=0:2")).await;
    assert_eq!((status, body["error"]["earliest"].as_str()), (410, Some("0:3")), "{body}");
    let (status, page) = d.get(&format!("{path}?after=0:3")).await;
    assert_eq!((status, seqs(&page)), (200, vec!["0:4".to_owned()]));
    let (status, page) = d.get(&path).await;
    assert_eq!((status, seqs(&page)), (200, vec!["0:4".to_owned()]), "no cursor starts at the trim");

    // Bad input is 4xx, naming the problem.
    let bad = [
        (format!("{path}?after=zz"), 400, "invalid_request"),
        (format!("{path}?limit=0"), 400, "invalid_request"),
        (format!("{path}?after=7:1"), 400, "invalid_request"),
        (format!("{path}?colour=red"), 400, "invalid_query"),
        (format!("/v1/tenants/xyz/users/{user}/mailbox"), 400, "invalid_request"),
    ];
    for (p, want, code) in bad {
        let (status, body) = d.get(&p).await;
        assert_eq!((status, body["error"]["code"].as_str()), (want, Some(code)), "{p}: {body}");
    }
    let (status, body) = d.post(&format!("{path}/truncate"), &json!({ "through": "0:9" })).await;
    assert_eq!((status, body["error"]["code"].as_str()), (400, Some("invalid_request")), "beyond delivered: {body}");
    let (status, body) = d.post(&format!("{path}/truncate"), &json!({ "thru": "0:1" })).await;
    assert_eq!((status, body["error"]["code"].as_str()), (400, Some("invalid_json")), "{body}");

    let http = reqwest::Client::new();
    let r = http.get(format!("{}{path}", d.base)).send().await.unwrap();
    assert_eq!(r.status(), 401, "no token");
    let r = http.get(format!("{}{path}", d.base)).bearer_auth(format!("{}x", token_for(&path))).send().await.unwrap();
    assert_eq!(r.status(), 401, "wrong token");
    for probe in ["/healthz", "/readyz", "/metrics"] {
        let r = http.get(format!("{}{probe}", d.base)).send().await.unwrap();
        assert_eq!(r.status(), 200, "{probe} needs no token");
    }
    d.stop().await;
}

both_backends!(reads_trims_and_expiry_over_http);
