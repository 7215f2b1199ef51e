//! Who may call which route: every `/v1` route of the writer × every kind of credential, on both
//! backends. Each cell asserts the exact status, and a refused cell that would have changed
//! something is shown to have changed nothing: a refused send leaves no seq (the next member's
//! send gets the next seq), no record (history) and no Kafka record; a refused membership change
//! leaves the membership as it was.

use crate::support::{self, create_topic, fresh, read_topic, send_body, Kind, TestWriter};

use qim_store::ids::{ConversationId, TenantId, UserId};
use qim_testkit::tokens::{Claims, Signer};
use serde_json::{json, Value};

both!(every_route_answers_every_credential_exactly, a_public_key_deployment_verifies_rs256_and_es256);

/// The routes, in the order of [`EXPECTED`]'s columns.
const ROUTES: [&str; 6] = ["send", "history", "summaries", "members", "add", "remove"];

/// The credentials, each a row: its name and the statuses it gets on [`ROUTES`].
const EXPECTED: [(&str, [u16; 6]); 9] = [
    ("no token", [401, 401, 401, 401, 401, 401]),
    ("bad signature", [401, 401, 401, 401, 401, 401]),
    ("expired", [401, 401, 401, 401, 401, 401]),
    ("other tenant", [403, 403, 403, 403, 403, 403]),
    ("other user", [403, 403, 403, 403, 403, 403]),
    ("member", [200, 200, 200, 200, 403, 403]),
    ("non-member", [403, 403, 403, 403, 403, 403]),
    ("admin", [403, 403, 403, 200, 200, 200]),
    ("gateway", [200, 200, 200, 200, 403, 403]),
];

struct World {
    tenant: TenantId,
    conversation: ConversationId,
    /// A member with `send read`.
    alice: UserId,
    /// Not a member of the conversation, `send read`.
    bob: UserId,
}

impl World {
    fn hex(&self) -> (String, String, String, String) {
        (self.tenant.to_hex(), self.conversation.to_hex(), self.alice.to_hex(), self.bob.to_hex())
    }

    /// The `Authorization` header of a credential (`None`: no header) and the user it names.
    fn credential(&self, name: &str) -> (Option<String>, UserId) {
        let (tenant, _, alice, bob) = self.hex();
        let user = |sub: &str| Claims::new(tenant.clone(), sub, "send read");
        let token = match name {
            "no token" => return (None, self.alice),
            "bad signature" => user(&alice).sign(Signer::Hs256Forged),
            "expired" => user(&alice).expired(120).sign(Signer::Hs256),
            "other tenant" => {
                Claims::new(fresh(TenantId).to_hex(), alice, "send read admin gateway").sign(Signer::Hs256)
            }
            // Bob's valid token, naming Alice.
            "other user" => user(&bob).sign(Signer::Hs256),
            "member" => user(&alice).sign(Signer::Hs256),
            "non-member" => return (Some(user(&bob).sign(Signer::Hs256)), self.bob),
            "admin" => Claims::new(tenant, "ops-console", "admin").sign(Signer::Hs256),
            "gateway" => Claims::new(tenant, "im-gateway", "gateway").sign(Signer::Hs256),
            other => panic!("no credential {other}"),
        };
        (Some(token), self.alice)
    }
}

async fn call(w: &TestWriter, auth: &Option<String>, get: bool, path: &str, body: &Value) -> (u16, Value) {
    let url = format!("{}{path}", w.base);
    let mut request = if get { w.http.get(url) } else { w.http.post(url).json(body) };
    if let Some(token) = auth {
        request = request.bearer_auth(token);
    }
    let r = request.send().await.unwrap();
    (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
}

async fn is_member(w: &TestWriter, tenant: TenantId, conversation: ConversationId, user: UserId) -> bool {
    let (status, page) = w.get(&format!("/v1/tenants/{tenant}/conversations/{conversation}/members?limit=1000")).await;
    assert_eq!(status, 200, "{page}");
    page["members"].as_array().unwrap().iter().any(|m| m.as_str() == Some(&user.to_hex()))
}

async fn every_route_answers_every_credential_exactly(kind: Kind) {
    let topic = create_topic().await;
    let w = TestWriter::start(support::config(kind, &topic).await).await;
    let world = World {
        tenant: fresh(TenantId),
        conversation: fresh(ConversationId),
        alice: fresh(UserId),
        bob: fresh(UserId),
    };
    let (tenant, conversation) = (world.tenant, world.conversation);
    w.add_members(tenant, conversation, &[world.alice]).await;
    let mut accepted_sends = Vec::new();
    let mut next_seq = 1;

    for (row, (name, statuses)) in EXPECTED.iter().enumerate() {
        let (auth, named) = world.credential(name);
        // Per cell: a user the add names (not a member) and one the remove names (a member).
        let (joiner, leaver) = (fresh(UserId), fresh(UserId));
        w.add_members(tenant, conversation, &[leaver]).await;
        let client_id = format!("cell-{row}");
        let base = format!("/v1/tenants/{tenant}/conversations/{conversation}");
        let calls: [(bool, String, Value); 6] = [
            (false, "/v1/messages".into(), send_body(tenant, conversation, named, &client_id, "hi")),
            (true, format!("{base}/messages?viewer={named}"), Value::Null),
            (
                false,
                format!("/v1/tenants/{tenant}/summaries"),
                json!({ "viewer": named.to_hex(), "positions": [{ "conversation": conversation.to_hex() }] }),
            ),
            (true, format!("{base}/members"), Value::Null),
            (false, format!("{base}/members/add"), json!({ "users": [joiner.to_hex()] })),
            (false, format!("{base}/members/remove"), json!({ "users": [leaver.to_hex()] })),
        ];
        for (column, (get, path, body)) in calls.iter().enumerate() {
            let (status, answer) = call(&w, &auth, *get, path, body).await;
            let cell = format!("{name} × {}", ROUTES[column]);
            assert_eq!(status, statuses[column], "{cell}: {answer}");
            if status != 200 {
                let code = answer["error"]["code"].as_str();
                let want = if status == 401 { "unauthorized" } else { "forbidden" };
                assert_eq!(code, Some(want), "{cell}: {answer}");
            }
        }
        if statuses[0] == 200 {
            accepted_sends.push(client_id);
            next_seq += 1;
        }
        assert_eq!(is_member(&w, tenant, conversation, joiner).await, statuses[4] == 200, "{name}: the add");
        assert_eq!(is_member(&w, tenant, conversation, leaver).await, statuses[5] != 200, "{name}: the remove");
    }

    // No refused send took a seq or left a record: the next send gets the next seq, the
    // history and the topic hold exactly the accepted sends.
    let (status, answer) = w.post("/v1/messages", &send_body(tenant, conversation, world.alice, "last", "x")).await;
    assert_eq!((status, answer["conversation_seq"].as_u64()), (200, Some(next_seq)), "{answer}");
    accepted_sends.push("last".to_owned());
    let (status, page) =
        w.get(&format!("/v1/tenants/{tenant}/conversations/{conversation}/messages?viewer={}", world.alice)).await;
    assert_eq!(status, 200, "{page}");
    let mut in_history: Vec<String> = page["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["client_message_id"].as_str().unwrap().to_owned())
        .collect();
    let mut in_topic: Vec<String> =
        read_topic(&topic).iter().map(|r| r.client_message_id.as_str().to_owned()).collect();
    in_history.sort();
    in_topic.sort();
    in_topic.dedup(); // publication is at least once
    accepted_sends.sort();
    assert_eq!(in_history, accepted_sends, "the history holds the accepted sends only");
    assert_eq!(in_topic, accepted_sends, "the topic holds the accepted sends only");
    w.stop().await.unwrap();
}

/// RS256 and ES256 tokens verified with public keys from a JWK set; an HS256 token (whatever
/// its secret) is refused there.
async fn a_public_key_deployment_verifies_rs256_and_es256(kind: Kind) {
    let topic = create_topic().await;
    let mut config = support::config(kind, &topic).await;
    let jwks = std::fs::read(qim_testkit::tokens::keys_dir().join("jwks.json")).unwrap();
    config.auth.keys = Some(qim_runtime::auth::KeySource::Jwks(serde_json::from_slice(&jwks).unwrap()));
    let w = TestWriter::start(config).await;
    let (tenant, conversation, alice) = (fresh(TenantId), fresh(ConversationId), fresh(UserId));
    let admin = Claims::new(tenant.to_hex(), "ops", "admin").sign(Signer::Rs256);
    let add = format!("/v1/tenants/{tenant}/conversations/{conversation}/members/add");
    let (status, answer) = call(&w, &Some(admin), false, &add, &json!({ "users": [alice.to_hex()] })).await;
    assert_eq!(status, 200, "{answer}");
    let alice_token = Claims::new(tenant.to_hex(), alice.to_hex(), "send").sign(Signer::Es256);
    let body = send_body(tenant, conversation, alice, "pk-1", "signed with P-256");
    let (status, answer) = call(&w, &Some(alice_token), false, "/v1/messages", &body).await;
    assert_eq!((status, answer["conversation_seq"].as_u64()), (200, Some(1)), "{answer}");
    let hs256 = Claims::new(tenant.to_hex(), alice.to_hex(), "send").sign(Signer::Hs256);
    let (status, _) = call(&w, &Some(hs256), false, "/v1/messages", &body).await;
    assert_eq!(status, 401, "no HS256 where public keys verify");
    w.stop().await.unwrap();
}

/// A user over its rate gets 429 with `Retry-After`, counted by limit; another user of the
/// tenant is not held back, and the user passes again once the wait is over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_over_the_rate_limit_is_told_when_to_retry() {
    let topic = create_topic().await;
    let mut config = support::config(Kind::Redis, &topic).await;
    config.auth.limits.per_user = std::num::NonZeroU32::new(2);
    let w = TestWriter::start(config).await;
    let (tenant, conversation, alice, bob) = (fresh(TenantId), fresh(ConversationId), fresh(UserId), fresh(UserId));
    w.add_members(tenant, conversation, &[alice, bob]).await;
    let token = |u: UserId| Some(Claims::new(tenant.to_hex(), u.to_hex(), "read").sign(Signer::Hs256));
    let history = |u: UserId| format!("/v1/tenants/{tenant}/conversations/{conversation}/messages?viewer={u}");
    let url = format!("{}{}", w.base, history(alice));
    let mut refused = None;
    for _ in 0..3 {
        let r = w.http.get(&url).bearer_auth(token(alice).unwrap()).send().await.unwrap();
        if r.status() == 429 {
            refused = Some(r);
            break;
        }
        assert_eq!(r.status(), 200);
    }
    let r = refused.expect("the third request within a second is over a rate of 2/s");
    let retry_after: u64 = r.headers()["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=2).contains(&retry_after), "Retry-After {retry_after}");
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "rate_limited", "{body}");
    let (status, _) = call(&w, &token(bob), true, &history(bob), &Value::Null).await;
    assert_eq!(status, 200, "bob has a budget of his own");
    let metrics = reqwest::get(format!("{}/metrics", w.base)).await.unwrap().text().await.unwrap();
    let limited =
        qim_testkit::metrics::Exposition::parse(&metrics).sum("qim_api_rate_limited_total", &[("limit", "user")]);
    assert!(limited >= 1.0, "{metrics}");
    tokio::time::sleep(std::time::Duration::from_secs(retry_after)).await;
    let (status, _) = call(&w, &token(alice), true, &history(alice), &Value::Null).await;
    assert_eq!(status, 200, "after Retry-After the request passes");
    w.stop().await.unwrap();
}
