//! Opaque access tokens, asked about at their issuer's introspection endpoint (RFC 7662):
//! the node authenticates as `introspection_client_id` (HTTP Basic) and accepts an answer that
//! is `active`, names this resource in `aud`, this issuer in `iss` (when present) and has not
//! expired. Active answers are kept in a bounded cache, by a SHA-256 digest of the token (the
//! token itself is not kept), for `auth.introspection_cache_ms` at most and never past `exp`.

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use sha2::{Digest, Sha256};

use super::config::{AuthConfig, IssuerConfig};
use super::{audience_matches, Claims, Refusal};

/// The introspection client of one issuer.
pub(super) struct Introspector {
    issuer: String,
    url: String,
    client_id: String,
    client_secret: String,
    resource: String,
    leeway_s: u64,
    http: reqwest::Client,
    cache: Mutex<HashMap<[u8; 32], (Claims, Instant)>>,
    cache_entries: usize,
    cache_for: Duration,
}

impl Introspector {
    /// The introspector of `issuer`, `None` when it has no introspection endpoint.
    pub(super) fn new(
        issuer: &IssuerConfig,
        cfg: &AuthConfig,
        resource: String,
        http: reqwest::Client,
    ) -> Option<Introspector> {
        Some(Introspector {
            issuer: issuer.issuer.clone(),
            url: issuer.introspection_url.clone()?,
            client_id: issuer.introspection_client_id.clone()?,
            client_secret: issuer.introspection_client_secret.clone()?,
            resource,
            leeway_s: cfg.leeway_s,
            http,
            cache: Mutex::default(),
            cache_entries: cfg.introspection_cache_entries,
            cache_for: Duration::from_millis(cfg.introspection_cache_ms),
        })
    }

    /// The claims of `token` if its issuer says it is active and it is meant for this resource.
    pub(super) async fn check(&self, token: &str) -> Result<Claims, Refusal> {
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if let Some((claims, until)) = self.cache.lock().get(&digest) {
            if Instant::now() < *until {
                return Ok(claims.clone());
            }
        }
        let response = self
            .http
            .post(&self.url)
            .basic_auth(&self.client_id, Some(&self.client_secret))
            .form(&[("token", token), ("token_type_hint", "access_token")])
            .send()
            .await
            .map_err(|e| Refusal::Unavailable(format!("introspection: {e}")))?;
        let status = response.status();
        if !status.is_success() {
            return Err(Refusal::Unavailable(format!(
                "the introspection endpoint answered {status}"
            )));
        }
        let claims: Claims = response
            .json()
            .await
            .map_err(|e| Refusal::Unavailable(format!("introspection answer: {e}")))?;
        let now_s = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        let exp = self.accept(&claims, now_s)?;
        let mut keep = self.cache_for;
        if let Some(exp) = exp {
            keep = keep.min(Duration::from_secs(exp.saturating_sub(now_s)));
        }
        self.remember(digest, &claims, keep);
        Ok(claims)
    }

    /// Whether an introspection answer grants access here; its `exp`, if any.
    fn accept(&self, claims: &Claims, now_s: u64) -> Result<Option<u64>, Refusal> {
        if claims.get("active") != Some(&serde_json::Value::Bool(true)) {
            return Err(Refusal::Invalid(
                "the issuer says the token is not active".into(),
            ));
        }
        if !audience_matches(claims, &self.resource) {
            return Err(Refusal::Invalid(
                "the token is not for this resource (aud)".into(),
            ));
        }
        if claims
            .get("iss")
            .is_some_and(|i| i.as_str() != Some(self.issuer.as_str()))
        {
            return Err(Refusal::Invalid("the token names another issuer".into()));
        }
        let exp = claims.get("exp").and_then(|e| e.as_u64());
        if exp.is_some_and(|exp| exp + self.leeway_s <= now_s) {
            return Err(Refusal::Invalid("the token has expired".into()));
        }
        if claims
            .get("nbf")
            .and_then(|n| n.as_u64())
            .is_some_and(|nbf| nbf > now_s + self.leeway_s)
        {
            return Err(Refusal::Invalid("the token is not valid yet".into()));
        }
        Ok(exp)
    }

    fn remember(&self, digest: [u8; 32], claims: &Claims, keep: Duration) {
        if self.cache_entries == 0 || keep.is_zero() {
            return;
        }
        let now = Instant::now();
        let mut cache = self.cache.lock();
        if cache.len() >= self.cache_entries {
            cache.retain(|_, (_, until)| *until > now);
        }
        if cache.len() < self.cache_entries {
            cache.insert(digest, (claims.clone(), now + keep));
        }
    }
}
