//! Verifying a bearer JWT: signature, expiry, issuer and audience, then the qim claims.

use std::collections::HashSet;
use std::fmt;

use jsonwebtoken::errors::ErrorKind as JwtErrorKind;
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{decode, decode_header, Algorithm, DecodingKey, Validation};
use serde::Deserialize;

use qim_store::ids::{TenantId, UserId};

use super::caller::{Identity, Scopes};

/// Shortest HS256 secret accepted: 256 bits, the hash's own size (RFC 7518 §3.2).
pub const MIN_HS256_SECRET_BYTES: usize = 32;

/// Where a deployment's verification keys come from.
#[derive(Clone)]
pub enum KeySource {
    /// HS256 with a shared secret.
    Hs256 { secret: Vec<u8> },
    /// One public key in PEM: RS256 (RSA) or ES256 (P-256).
    PublicKey { algorithm: Algorithm, pem: Vec<u8> },
    /// A JWK set: RSA and P-256 keys, chosen by the token header's `kid` (or the set's only key).
    Jwks(JwkSet),
}

impl fmt::Debug for KeySource {
    // Never prints the secret.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeySource::Hs256 { .. } => f.write_str("Hs256 { secret: (redacted) }"),
            KeySource::PublicKey { algorithm, .. } => write!(f, "PublicKey {{ algorithm: {algorithm:?} }}"),
            KeySource::Jwks(set) => write!(f, "Jwks {{ keys: {} }}", set.keys.len()),
        }
    }
}

/// What a token must say besides its signature.
#[derive(Clone, Debug, Default)]
pub struct Expectations {
    /// Claim `iss` must equal this, when set.
    pub issuer: Option<String>,
    /// Claim `aud` must contain this, when set.
    pub audience: Option<String>,
    /// Seconds of clock skew allowed on `exp` and `nbf`.
    pub leeway_secs: u64,
}

/// Why a token was refused; each is a 401 and a `reason` label of the rejection counter.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Rejection {
    /// No `Authorization: Bearer` header.
    #[error("a bearer token is required")]
    Missing,
    /// Not a JWT, or its signature does not verify with the configured keys.
    #[error("the token is malformed or its signature does not verify")]
    BadSignature,
    /// `exp` has passed (or `nbf` is ahead).
    #[error("the token has expired or is not valid yet")]
    Expired,
    /// `iss` or `aud` is not what this deployment expects.
    #[error("the token was issued by or for someone else")]
    WrongIssuer,
    /// The signature verifies but the qim claims (`tenant`, `sub`, `scope`) do not parse.
    #[error("the token's claims are invalid: {0}")]
    BadClaims(String),
}

impl Rejection {
    /// Every value [`Self::reason`] gives.
    pub const REASONS: [&'static str; 5] = ["missing", "bad_signature", "expired", "wrong_issuer", "bad_claims"];

    /// The `reason` label.
    pub const fn reason(&self) -> &'static str {
        match self {
            Rejection::Missing => "missing",
            Rejection::BadSignature => "bad_signature",
            Rejection::Expired => "expired",
            Rejection::WrongIssuer => "wrong_issuer",
            Rejection::BadClaims(_) => "bad_claims",
        }
    }
}

/// A key set that can not verify anything.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct KeyError(String);

/// The claims qim reads; `exp` (required), `nbf`, `iss` and `aud` are checked by the library.
#[derive(Deserialize)]
struct Claims {
    tenant: String,
    sub: String,
    #[serde(default)]
    scope: String,
}

/// Verifies bearer tokens against a deployment's keys.
pub struct TokenVerifier {
    /// `(kid, key, its validation)`; a token without `kid` needs a single key.
    keys: Vec<(Option<String>, DecodingKey, Validation)>,
}

impl TokenVerifier {
    /// A verifier for `source`, checking `expect`.
    ///
    /// # Errors
    ///
    /// A secret that is too short, a PEM that is not a key of its algorithm, a JWK set without
    /// a usable RSA or P-256 key.
    pub fn new(source: &KeySource, expect: &Expectations) -> Result<Self, KeyError> {
        let validation = |alg: Algorithm| {
            let mut v = Validation::new(alg);
            v.leeway = expect.leeway_secs;
            v.validate_nbf = true;
            v.required_spec_claims = HashSet::from(["exp".to_owned()]);
            if let Some(iss) = &expect.issuer {
                v.set_issuer(&[iss]);
                v.required_spec_claims.insert("iss".to_owned());
            }
            match &expect.audience {
                Some(aud) => {
                    v.set_audience(&[aud]);
                    v.required_spec_claims.insert("aud".to_owned());
                }
                None => v.validate_aud = false,
            }
            v
        };
        let keys = match source {
            KeySource::Hs256 { secret } => {
                if secret.len() < MIN_HS256_SECRET_BYTES {
                    return Err(KeyError(format!(
                        "the HS256 secret has {} bytes; at least {MIN_HS256_SECRET_BYTES} are required",
                        secret.len()
                    )));
                }
                vec![(None, DecodingKey::from_secret(secret), validation(Algorithm::HS256))]
            }
            KeySource::PublicKey { algorithm, pem } => {
                let key = match algorithm {
                    Algorithm::RS256 => DecodingKey::from_rsa_pem(pem),
                    Algorithm::ES256 => DecodingKey::from_ec_pem(pem),
                    other => return Err(KeyError(format!("{other:?} is not RS256 or ES256"))),
                }
                .map_err(|e| KeyError(format!("the public key is not a {algorithm:?} key in PEM: {e}")))?;
                vec![(None, key, validation(*algorithm))]
            }
            KeySource::Jwks(set) => {
                let mut keys = Vec::new();
                for jwk in &set.keys {
                    let Some(algorithm) = jwk_algorithm(jwk) else { continue };
                    let key = DecodingKey::from_jwk(jwk)
                        .map_err(|e| KeyError(format!("JWK {:?} is not a usable key: {e}", jwk.common.key_id)))?;
                    keys.push((jwk.common.key_id.clone(), key, validation(algorithm)));
                }
                if keys.is_empty() {
                    return Err(KeyError("the JWK set has no RS256 or ES256 key".to_owned()));
                }
                keys
            }
        };
        Ok(Self { keys })
    }

    /// The identity `token` proves.
    ///
    /// # Errors
    ///
    /// Why it proves none.
    pub fn verify(&self, token: &str) -> Result<Identity, Rejection> {
        let header = decode_header(token).map_err(|_| Rejection::BadSignature)?;
        let candidates = self.keys.iter().filter(|(kid, _, _)| match (&header.kid, kid) {
            (Some(wanted), Some(kid)) => wanted == kid,
            (Some(_), None) => self.keys.len() == 1,
            (None, _) => self.keys.len() == 1,
        });
        let mut refusal = Rejection::BadSignature;
        for (_, key, validation) in candidates {
            match decode::<Claims>(token, key, validation) {
                Ok(data) => return identity(data.claims),
                Err(e) => refusal = rejection(e.kind()),
            }
        }
        Err(refusal)
    }
}

/// The algorithm a JWK verifies: its `alg`, else its key type (RSA → RS256, P-256 → ES256);
/// `None` for keys qim does not use (symmetric, other curves).
fn jwk_algorithm(jwk: &jsonwebtoken::jwk::Jwk) -> Option<Algorithm> {
    use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, KeyAlgorithm};
    match (&jwk.common.key_algorithm, &jwk.algorithm) {
        (Some(KeyAlgorithm::RS256), AlgorithmParameters::RSA(_)) => Some(Algorithm::RS256),
        (Some(KeyAlgorithm::ES256), AlgorithmParameters::EllipticCurve(p)) if p.curve == EllipticCurve::P256 => {
            Some(Algorithm::ES256)
        }
        (None, AlgorithmParameters::RSA(_)) => Some(Algorithm::RS256),
        (None, AlgorithmParameters::EllipticCurve(p)) if p.curve == EllipticCurve::P256 => Some(Algorithm::ES256),
        _ => None,
    }
}

fn rejection(kind: &JwtErrorKind) -> Rejection {
    match kind {
        JwtErrorKind::ExpiredSignature | JwtErrorKind::ImmatureSignature => Rejection::Expired,
        JwtErrorKind::InvalidIssuer | JwtErrorKind::InvalidAudience => Rejection::WrongIssuer,
        JwtErrorKind::MissingRequiredClaim(c) if c == "iss" || c == "aud" => Rejection::WrongIssuer,
        JwtErrorKind::MissingRequiredClaim(c) | JwtErrorKind::InvalidClaimFormat(c) => {
            Rejection::BadClaims(format!("claim {c:?} is missing or malformed"))
        }
        JwtErrorKind::Json(e) => Rejection::BadClaims(e.to_string()),
        _ => Rejection::BadSignature,
    }
}

fn identity(claims: Claims) -> Result<Identity, Rejection> {
    let tenant = TenantId::from_hex(&claims.tenant)
        .map_err(|_| Rejection::BadClaims("`tenant` is not 32 hex digits".to_owned()))?;
    Ok(Identity { tenant, user: UserId::from_hex(&claims.sub).ok(), scopes: Scopes::parse(&claims.scope) })
}

#[cfg(test)]
mod tests {
    use qim_testkit::tokens::{keys_dir, Claims, Signer, TEST_HS256_SECRET};

    use super::*;
    use crate::auth::Scope;

    #[test]
    fn every_rejection_reason_is_listed() {
        let all = [
            Rejection::Missing,
            Rejection::BadSignature,
            Rejection::Expired,
            Rejection::WrongIssuer,
            Rejection::BadClaims(String::new()),
        ];
        assert_eq!(all.map(|r| r.reason()), Rejection::REASONS);
    }

    const TENANT: &str = "000000000000000000000000000000aa";
    const USER: &str = "000000000000000000000000000000bb";

    fn verifier(source: KeySource) -> TokenVerifier {
        TokenVerifier::new(&source, &Expectations { leeway_secs: 5, ..Expectations::default() }).unwrap()
    }
    fn hs256() -> TokenVerifier {
        verifier(KeySource::Hs256 { secret: TEST_HS256_SECRET.as_bytes().to_vec() })
    }
    fn pem(name: &str) -> Vec<u8> {
        std::fs::read(keys_dir().join(name)).unwrap()
    }
    fn jwks() -> TokenVerifier {
        verifier(KeySource::Jwks(serde_json::from_slice(&pem("jwks.json")).unwrap()))
    }

    #[test]
    fn a_valid_token_names_its_tenant_user_and_scopes() {
        let id = hs256().verify(&Claims::new(TENANT, USER, "send read").sign(Signer::Hs256)).unwrap();
        assert_eq!(id.tenant.to_hex(), TENANT);
        assert_eq!(id.user.map(|u| u.to_hex()).as_deref(), Some(USER));
        assert!(id.scopes.has(Scope::Send) && id.scopes.has(Scope::Read) && !id.scopes.has(Scope::Admin));
        let gateway = hs256().verify(&Claims::new(TENANT, "im-gateway", "gateway").sign(Signer::Hs256)).unwrap();
        assert_eq!(gateway.user, None, "a service's sub is no user");
    }

    #[test]
    fn forged_expired_and_malformed_tokens_are_refused_by_reason() {
        let v = hs256();
        let claims = Claims::new(TENANT, USER, "send");
        assert_eq!(v.verify(&claims.sign(Signer::Hs256Forged)), Err(Rejection::BadSignature));
        assert_eq!(v.verify(&claims.clone().expired(60).sign(Signer::Hs256)), Err(Rejection::Expired));
        assert!(v.verify(&claims.clone().expired(2).sign(Signer::Hs256)).is_ok(), "within the leeway");
        assert_eq!(v.verify("not.a.jwt"), Err(Rejection::BadSignature));
        assert_eq!(v.verify(""), Err(Rejection::BadSignature));
        let bad_tenant = Claims::new("tenant-one", USER, "send").sign(Signer::Hs256);
        assert!(matches!(v.verify(&bad_tenant), Err(Rejection::BadClaims(_))));
        // An RS256 token against an HS256 deployment: the algorithm is not accepted.
        assert_eq!(v.verify(&claims.sign(Signer::Rs256)), Err(Rejection::BadSignature));
    }

    #[test]
    fn public_keys_verify_their_algorithm_only() {
        let rsa = verifier(KeySource::PublicKey { algorithm: Algorithm::RS256, pem: pem("rsa-public.pem") });
        let ec = verifier(KeySource::PublicKey { algorithm: Algorithm::ES256, pem: pem("ec-public.pem") });
        let claims = Claims::new(TENANT, USER, "read");
        assert!(rsa.verify(&claims.sign(Signer::Rs256)).is_ok());
        assert!(ec.verify(&claims.sign(Signer::Es256)).is_ok());
        assert_eq!(rsa.verify(&claims.sign(Signer::Es256)), Err(Rejection::BadSignature));
        assert_eq!(ec.verify(&claims.sign(Signer::Hs256)), Err(Rejection::BadSignature), "no HS256 downgrade");
    }

    #[test]
    fn a_jwk_set_picks_the_key_by_kid() {
        let v = jwks();
        let claims = Claims::new(TENANT, USER, "read");
        assert!(v.verify(&claims.sign(Signer::Rs256)).is_ok());
        assert!(v.verify(&claims.sign(Signer::Es256)).is_ok());
        assert_eq!(v.verify(&claims.sign(Signer::Hs256)), Err(Rejection::BadSignature));
    }

    #[test]
    fn issuer_and_audience_are_checked_when_configured() {
        let expect = Expectations { issuer: Some("idp".into()), audience: Some("qim".into()), leeway_secs: 0 };
        let v =
            TokenVerifier::new(&KeySource::Hs256 { secret: TEST_HS256_SECRET.as_bytes().to_vec() }, &expect).unwrap();
        let mut claims = Claims::new(TENANT, USER, "read");
        assert_eq!(v.verify(&claims.sign(Signer::Hs256)), Err(Rejection::WrongIssuer), "iss and aud required");
        claims.issuer = Some("idp".into());
        claims.audience = Some("qim".into());
        assert!(v.verify(&claims.sign(Signer::Hs256)).is_ok());
        claims.audience = Some("other".into());
        assert_eq!(v.verify(&claims.sign(Signer::Hs256)), Err(Rejection::WrongIssuer));
    }

    #[test]
    fn unusable_keys_are_refused_at_start() {
        let none = Expectations::default();
        assert!(TokenVerifier::new(&KeySource::Hs256 { secret: b"short".to_vec() }, &none).is_err());
        let garbage = KeySource::PublicKey { algorithm: Algorithm::RS256, pem: b"-----BEGIN nothing".to_vec() };
        assert!(TokenVerifier::new(&garbage, &none).is_err());
        let empty: JwkSet = serde_json::from_str(r#"{"keys": []}"#).unwrap();
        assert!(TokenVerifier::new(&KeySource::Jwks(empty), &none).is_err());
        let debug = format!("{:?}", KeySource::Hs256 { secret: TEST_HS256_SECRET.as_bytes().to_vec() });
        assert!(!debug.contains(TEST_HS256_SECRET), "{debug}");
    }
}
