//! Who may read and truncate a mailbox: both `/v1` routes of the dispatcher × every kind of
//! credential, on both backends. Each cell asserts the exact status; after every refused
//! truncate the owner's mailbox still holds every entry, and only the owner's and the gateway's
//! truncates move the trim.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use crate::api::{manifest, seqs};
use qim_store::ids::{TenantId, UnixMillis, UserId};
use qim_store::mailbox::{lane_of, shard_of};
use qim_testkit::tokens::{Claims, Signer};
use serde_json::{json, Value};
use support::{fresh, wait_for, Fixture, Kind, SHARDS};

both_backends!(both_mailbox_routes_answer_every_credential_exactly);

/// The routes, in the order of [`EXPECTED`]'s columns.
const ROUTES: [&str; 2] = ["read", "truncate"];

/// The credentials, each a row: its name and the statuses it gets on [`ROUTES`] for Alice's
/// mailbox. A "member" is Alice herself (a mailbox has one member, its owner); a "non-member"
/// is Carol, who was dispatched nothing, with every user scope.
const EXPECTED: [(&str, [u16; 2]); 9] = [
    ("no token", [401, 401]),
    ("bad signature", [401, 401]),
    ("expired", [401, 401]),
    ("other tenant", [403, 403]),
    ("other user", [403, 403]),
    ("member", [200, 200]),
    ("non-member", [403, 403]),
    ("admin", [403, 403]),
    ("gateway", [200, 200]),
];

/// The `Authorization` token of a credential (`None`: no header) against Alice's mailbox.
fn credential(name: &str, tenant: TenantId, alice: UserId) -> Option<String> {
    let (tenant, alice) = (tenant.to_hex(), alice.to_hex());
    let user = |sub: String| Claims::new(tenant.clone(), sub, "send read");
    let token = match name {
        "no token" => return None,
        "bad signature" => user(alice).sign(Signer::Hs256Forged),
        "expired" => user(alice).expired(120).sign(Signer::Hs256),
        "other tenant" => Claims::new(fresh(TenantId).to_hex(), alice, "send read admin gateway").sign(Signer::Hs256),
        "other user" => user(fresh(UserId).to_hex()).sign(Signer::Hs256),
        "member" => user(alice).sign(Signer::Hs256),
        "non-member" => Claims::new(tenant, fresh(UserId).to_hex(), "send read admin").sign(Signer::Hs256),
        "admin" => Claims::new(tenant, "ops-console", "admin").sign(Signer::Hs256),
        "gateway" => Claims::new(tenant, "im-gateway", "gateway").sign(Signer::Hs256),
        other => panic!("no credential {other}"),
    };
    Some(token)
}

async fn call(http: &reqwest::Client, url: String, auth: &Option<String>, body: Option<&Value>) -> (u16, Value) {
    let mut request = match body {
        Some(body) => http.post(url).json(body),
        None => http.get(url),
    };
    if let Some(token) = auth {
        request = request.bearer_auth(token);
    }
    let r = request.send().await.unwrap();
    (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
}

async fn both_mailbox_routes_answer_every_credential_exactly(kind: Kind) {
    let f = Fixture::new(kind).await;
    let d = f.start().await;
    let (tenant, alice) = (fresh(TenantId), fresh(UserId));
    for n in 0..3 {
        assert_eq!(f.produce_dispatch(&manifest(tenant, alice, UnixMillis::now())).await, n);
    }
    let store = f.mailbox().await;
    let (shard, lane) = (shard_of(&tenant, &alice, SHARDS), lane_of(&tenant, &alice));
    wait_for("alice's lane to pass offset 2", Duration::from_secs(60), || {
        let store = Arc::clone(&store);
        async move { store.lane_watermark(shard, lane).await.unwrap().through == Some(2) }
    })
    .await;
    let path = format!("{}/v1/tenants/{tenant}/users/{alice}/mailbox", d.base);
    let (status, page) = d.get(&format!("/v1/tenants/{tenant}/users/{alice}/mailbox")).await;
    assert_eq!(status, 200, "{page}");
    let all = seqs(&page);
    assert_eq!(all.len(), 3, "{page}");
    let through = json!({ "through": all[0] });

    let http = reqwest::Client::new();
    let mut trimmed = false;
    for (name, statuses) in EXPECTED {
        let auth = credential(name, tenant, alice);
        let cells =
            [call(&http, path.clone(), &auth, None), call(&http, format!("{path}/truncate"), &auth, Some(&through))];
        for (column, cell) in cells.into_iter().enumerate() {
            let (status, answer) = cell.await;
            let cell = format!("{name} × {}", ROUTES[column]);
            assert_eq!(status, statuses[column], "{cell}: {answer}");
            if status == 200 && column == 0 {
                let left = if trimmed { &all[1..] } else { &all[..] };
                assert_eq!(seqs(&answer), left, "{cell}: the page is alice's");
            } else if status != 200 {
                let want = if status == 401 { "unauthorized" } else { "forbidden" };
                assert_eq!(answer["error"]["code"].as_str(), Some(want), "{cell}: {answer}");
            }
        }
        trimmed |= statuses[1] == 200;
        // What alice's own client sees now: everything until an accepted truncate, then the rest.
        let alice_token = credential("member", tenant, alice);
        let (status, page) = call(&http, path.clone(), &alice_token, None).await;
        assert_eq!(status, 200, "{page}");
        let left = if trimmed { &all[1..] } else { &all[..] };
        assert_eq!(seqs(&page), left, "after the {name} row");
    }
    d.stop().await;
}
