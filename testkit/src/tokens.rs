//! The APIs' bearer tokens, minted with the test keys in `testkit/keys/` (generated for the
//! tests, published with them, never trusted anywhere else): an HS256 secret, an RSA and a
//! P-256 key pair, and `jwks.json` holding both public keys (kids `test-rsa`, `test-ec`).

use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};

/// The HS256 secret the tests' services verify with (`QIM_AUTH_HS256_SECRET`).
pub const TEST_HS256_SECRET: &str = "qim-test-hs256-secret-not-for-production-use";

/// How long minted tokens are valid by default.
const LIFETIME: Duration = Duration::from_secs(3600);

/// `testkit/keys/`: the test key files.
pub fn keys_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("keys")
}

/// The variable that makes a service verify the test HS256 tokens.
pub fn hs256_env() -> (&'static str, String) {
    ("QIM_AUTH_HS256_SECRET", TEST_HS256_SECRET.to_owned())
}

/// The key that signs a token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signer {
    /// HS256 with [`TEST_HS256_SECRET`].
    Hs256,
    /// HS256 with another secret: a bad signature for a service that verifies the test one.
    Hs256Forged,
    /// RS256, kid `test-rsa`.
    Rs256,
    /// ES256, kid `test-ec`.
    Es256,
}

/// What a token says: the qim claims and its expiry.
#[derive(Clone, Debug)]
pub struct Claims {
    /// 32 hex digits.
    pub tenant: String,
    /// A user's 32 hex digits, or a service's name.
    pub sub: String,
    /// Space-separated scopes.
    pub scope: String,
    /// Seconds from now until `exp`; negative for an expired token.
    pub expires_in: i64,
    /// `iss`, when set.
    pub issuer: Option<String>,
    /// `aud`, when set.
    pub audience: Option<String>,
}

impl Claims {
    /// A token of `sub` in `tenant` with `scope`, valid for an hour.
    pub fn new(tenant: impl Into<String>, sub: impl Into<String>, scope: &str) -> Self {
        Self {
            tenant: tenant.into(),
            sub: sub.into(),
            scope: scope.to_owned(),
            expires_in: LIFETIME.as_secs() as i64,
            issuer: None,
            audience: None,
        }
    }

    /// The same claims, expired `secs` ago.
    pub fn expired(mut self, secs: i64) -> Self {
        self.expires_in = -secs;
        self
    }

    /// Signed by `signer`.
    pub fn sign(&self, signer: Signer) -> String {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).expect("after 1970").as_secs() as i64;
        let mut body = serde_json::json!({
            "tenant": self.tenant, "sub": self.sub, "scope": self.scope,
            "iat": now, "exp": now + self.expires_in,
        });
        if let Some(iss) = &self.issuer {
            body["iss"] = iss.clone().into();
        }
        if let Some(aud) = &self.audience {
            body["aud"] = aud.clone().into();
        }
        let pem = |name: &str| std::fs::read(keys_dir().join(name)).expect("the test keys are in testkit/keys");
        let (mut header, key) = match signer {
            Signer::Hs256 => (Header::new(Algorithm::HS256), EncodingKey::from_secret(TEST_HS256_SECRET.as_bytes())),
            Signer::Hs256Forged => {
                (Header::new(Algorithm::HS256), EncodingKey::from_secret(b"not-the-secret-the-services-hold!!"))
            }
            Signer::Rs256 => {
                let key = EncodingKey::from_rsa_pem(&pem("rsa-private.pem")).expect("the test RSA key parses");
                (Header::new(Algorithm::RS256), key)
            }
            Signer::Es256 => {
                let key = EncodingKey::from_ec_pem(&pem("ec-private.pem")).expect("the test EC key parses");
                (Header::new(Algorithm::ES256), key)
            }
        };
        header.kid = match signer {
            Signer::Rs256 => Some("test-rsa".to_owned()),
            Signer::Es256 => Some("test-ec".to_owned()),
            _ => None,
        };
        encode(&header, &body, &key).expect("the test claims encode")
    }
}

/// An HS256 token of `user` in `tenant` with `scope` (hex ids), valid for an hour.
pub fn user_token(tenant: &str, user: &str, scope: &str) -> String {
    Claims::new(tenant, user, scope).sign(Signer::Hs256)
}

/// An HS256 gateway token of `tenant`: it may name any user of the tenant.
pub fn gateway_token(tenant: &str) -> String {
    Claims::new(tenant, "test-gateway", "gateway").sign(Signer::Hs256)
}

/// An HS256 token of `tenant` that may act as any of its users and change memberships: what
/// tests that exercise something else use.
pub fn operator_token(tenant: &str) -> String {
    Claims::new(tenant, "test-operator", "gateway admin").sign(Signer::Hs256)
}

/// `Authorization` header value for `token`.
pub fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

/// The tenant of a `/v1/tenants/{tenant}/…` path.
pub fn tenant_in_path(path: &str) -> Option<&str> {
    let rest = path.strip_prefix("/v1/tenants/")?;
    rest.split(['/', '?']).next()
}
