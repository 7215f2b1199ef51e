//! The authentication and rate-limit variables of the services that serve a `/v1` API.

use std::num::NonZeroU32;
use std::path::PathBuf;

use clap::{ArgAction, Args, ValueEnum};
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::Algorithm;

use super::whole::{whole, Whole};
use crate::auth::{AuthConfig, Expectations, KeySource, RateLimitConfig, TokenVerifier};

/// The algorithm of `QIM_AUTH_PUBLIC_KEY_FILE`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum PublicKeyAlgorithm {
    /// RSA PKCS#1 v1.5 with SHA-256.
    #[value(name = "RS256")]
    Rs256,
    /// ECDSA on P-256 with SHA-256.
    #[value(name = "ES256")]
    Es256,
}

/// Who may call `/v1`: exactly one key source, or authentication disabled explicitly.
#[derive(Args, Clone, Debug)]
pub struct AuthArgs {
    /// HS256 secret (at least 32 bytes) that signs the API's JWTs; every holder can mint any user's token, so only the token issuer and the services hold it.
    #[arg(long, verbatim_doc_comment, env = "QIM_AUTH_HS256_SECRET", hide_env_values = true)]
    pub auth_hs256_secret: Option<String>,
    /// PEM file of the public key that verifies the API's JWTs (RS256 or ES256, see QIM_AUTH_PUBLIC_KEY_ALGORITHM); the issuer keeps the private key.
    #[arg(long, verbatim_doc_comment, env = "QIM_AUTH_PUBLIC_KEY_FILE")]
    pub auth_public_key_file: Option<PathBuf>,
    /// `RS256` or `ES256`: the algorithm of QIM_AUTH_PUBLIC_KEY_FILE.
    #[arg(
        long,
        verbatim_doc_comment,
        env = "QIM_AUTH_PUBLIC_KEY_ALGORITHM",
        default_value = "RS256",
        hide_possible_values = true
    )]
    pub auth_public_key_algorithm: PublicKeyAlgorithm,
    /// JWK set file (`{"keys": [...]}`) of the issuer's RS256 and ES256 public keys, chosen by each token's `kid`; read at start-up.
    #[arg(long, verbatim_doc_comment, env = "QIM_AUTH_JWKS_FILE")]
    pub auth_jwks_file: Option<PathBuf>,
    /// When set, a token's `iss` must equal it.
    #[arg(long, verbatim_doc_comment, env = "QIM_AUTH_ISSUER")]
    pub auth_issuer: Option<String>,
    /// When set, a token's `aud` must contain it.
    #[arg(long, verbatim_doc_comment, env = "QIM_AUTH_AUDIENCE")]
    pub auth_audience: Option<String>,
    /// Seconds of clock skew allowed on a token's `exp` and `nbf`.
    #[arg(long, verbatim_doc_comment, env = "QIM_AUTH_LEEWAY_SECS", default_value = "30", value_parser = whole(0, 600))]
    pub auth_leeway_secs: Whole,
    /// `true` serves /v1 without tokens or rate limits: any caller acts as anyone. Development stacks only.
    #[arg(long, verbatim_doc_comment, env = "QIM_AUTH_DISABLED", default_value = "false", action = ArgAction::Set)]
    pub auth_disabled: bool,
    /// Requests per second of one tenant's tokens together (0: unlimited); the burst is one second's worth.
    #[arg(long, verbatim_doc_comment, env = "QIM_RATE_LIMIT_TENANT_PER_SEC", default_value = "5000", value_parser = whole(0, 10_000_000))]
    pub rate_limit_tenant_per_sec: Whole,
    /// Requests per second of one user's token (0: unlimited); a gateway's calls count for its tenant only.
    #[arg(long, verbatim_doc_comment, env = "QIM_RATE_LIMIT_USER_PER_SEC", default_value = "50", value_parser = whole(0, 10_000_000))]
    pub rate_limit_user_per_sec: Whole,
}

impl AuthArgs {
    /// The settings, key files read and keys checked.
    ///
    /// # Errors
    ///
    /// No key source and authentication not disabled, more than one source, an unreadable or
    /// unusable key.
    pub fn config(&self) -> Result<AuthConfig, String> {
        let secret = self.auth_hs256_secret.as_deref().filter(|s| !s.is_empty());
        let sources = [secret.is_some(), self.auth_public_key_file.is_some(), self.auth_jwks_file.is_some()];
        let keys = match (sources.iter().filter(|s| **s).count(), self.auth_disabled) {
            (0, true) => None,
            (0, false) => {
                return Err("set one of QIM_AUTH_HS256_SECRET, QIM_AUTH_PUBLIC_KEY_FILE, QIM_AUTH_JWKS_FILE \
                            (or QIM_AUTH_DISABLED=true on a development stack)"
                    .to_owned())
            }
            (1, false) => Some(self.key_source(secret)?),
            (1, true) => return Err("QIM_AUTH_DISABLED=true and a key are both set: choose one".to_owned()),
            _ => {
                return Err(
                    "more than one of QIM_AUTH_HS256_SECRET, QIM_AUTH_PUBLIC_KEY_FILE, QIM_AUTH_JWKS_FILE is set"
                        .to_owned(),
                )
            }
        };
        let blank = |v: &Option<String>| v.clone().filter(|s| !s.trim().is_empty());
        let expect = Expectations {
            issuer: blank(&self.auth_issuer),
            audience: blank(&self.auth_audience),
            leeway_secs: self.auth_leeway_secs.get(),
        };
        if let Some(keys) = &keys {
            TokenVerifier::new(keys, &expect).map_err(|e| e.to_string())?;
        }
        let rate = |w: Whole| u32::try_from(w.get()).ok().and_then(NonZeroU32::new);
        let limits = RateLimitConfig {
            per_tenant: rate(self.rate_limit_tenant_per_sec),
            per_user: rate(self.rate_limit_user_per_sec),
        };
        Ok(AuthConfig { keys, expect, limits })
    }

    fn key_source(&self, secret: Option<&str>) -> Result<KeySource, String> {
        if let Some(secret) = secret {
            return Ok(KeySource::Hs256 { secret: secret.as_bytes().to_vec() });
        }
        let read = |path: &PathBuf, var: &str| {
            std::fs::read(path).map_err(|e| format!("{var}: reading {}: {e}", path.display()))
        };
        if let Some(path) = &self.auth_public_key_file {
            let algorithm = match self.auth_public_key_algorithm {
                PublicKeyAlgorithm::Rs256 => Algorithm::RS256,
                PublicKeyAlgorithm::Es256 => Algorithm::ES256,
            };
            return Ok(KeySource::PublicKey { algorithm, pem: read(path, "QIM_AUTH_PUBLIC_KEY_FILE")? });
        }
        let path = self.auth_jwks_file.as_ref().expect("one source is set");
        let set: JwkSet = serde_json::from_slice(&read(path, "QIM_AUTH_JWKS_FILE")?)
            .map_err(|e| format!("QIM_AUTH_JWKS_FILE: {} is not a JWK set: {e}", path.display()))?;
        Ok(KeySource::Jwks(set))
    }
}
