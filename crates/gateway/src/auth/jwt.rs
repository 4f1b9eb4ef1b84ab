//! JWT access tokens: an issuer's keys (a JWKS fetched from a URL or read from a file,
//! refreshed every `jwks_refresh_ms` and when a token names a key id not seen yet, at most
//! once per `auth.jwks_min_refresh_ms`), and the check of one token: a known asymmetric
//! algorithm and key, its signature, `iss`, `aud` (this resource), `exp` and `nbf` within
//! `auth.leeway_s`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use jsonwebtoken::jwk::Jwk;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use parking_lot::RwLock;

use super::config::{AuthConfig, IssuerConfig};
use super::{Claims, Refusal};

/// Where the keys come from.
enum Origin {
    Url(String),
    File(PathBuf),
}

/// One usable key of the set.
struct Key {
    key: DecodingKey,
    /// The algorithm the JWK names, when it names one: a token must use that one.
    alg: Option<Algorithm>,
}

/// The keys of the last good fetch, by key id (keys without one under "").
#[derive(Default)]
struct Keys {
    by_kid: HashMap<String, Vec<Key>>,
}

/// The key set of one issuer and how it is kept fresh.
pub(super) struct KeySource {
    issuer: String,
    origin: Origin,
    algorithms: Vec<Algorithm>,
    leeway_s: u64,
    keys: RwLock<Arc<Keys>>,
    /// When the keys were last fetched, successfully or not (`None`: never).
    fetched: RwLock<Option<Instant>>,
    /// One fetch at a time.
    fetching: tokio::sync::Mutex<()>,
    min_refresh: Duration,
    http: reqwest::Client,
}

impl KeySource {
    /// The key source of `issuer`, `None` when it has no JWKS; a URL or file is read at once
    /// in the background and then every `jwks_refresh_ms`.
    pub(super) fn new(
        issuer: &IssuerConfig,
        cfg: &AuthConfig,
        http: reqwest::Client,
    ) -> Option<KeySource> {
        let origin = match (&issuer.jwks_url, &issuer.jwks_file) {
            (Some(url), _) => Origin::Url(url.clone()),
            (None, Some(file)) => Origin::File(file.clone()),
            (None, None) => return None,
        };
        Some(KeySource {
            issuer: issuer.issuer.clone(),
            origin,
            algorithms: issuer
                .algorithms
                .iter()
                .filter_map(|a| Algorithm::from_str(a).ok())
                .collect(),
            leeway_s: cfg.leeway_s,
            keys: RwLock::default(),
            fetched: RwLock::new(None),
            fetching: tokio::sync::Mutex::new(()),
            min_refresh: Duration::from_millis(cfg.jwks_min_refresh_ms),
            http,
        })
    }

    /// Fetch the keys now and then every `every`, for as long as the source is in use.
    pub(super) fn spawn_refresh(self: &Arc<Self>, every: Duration) {
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                let Some(source) = weak.upgrade() else { break };
                source.refresh(None).await;
                drop(source);
                tokio::time::sleep(every).await;
            }
        });
    }

    /// Fetch the keys again, unless another fetch finished after `since` (then its keys are
    /// as fresh as this one's would be).
    async fn refresh(&self, since: Option<Instant>) {
        let _one = self.fetching.lock().await;
        if let (Some(since), Some(last)) = (since, *self.fetched.read()) {
            if last > since {
                return;
            }
        }
        match self.fetch().await {
            Ok(keys) => {
                tracing::debug!(issuer = %self.issuer, kids = keys.by_kid.len(), "issuer keys loaded");
                *self.keys.write() = Arc::new(keys);
            }
            Err(e) => {
                tracing::warn!(issuer = %self.issuer, error = %e, "issuer keys could not be loaded; the last good ones stay in use");
            }
        }
        *self.fetched.write() = Some(Instant::now());
    }

    async fn fetch(&self) -> Result<Keys, String> {
        let text = match &self.origin {
            Origin::File(path) => tokio::fs::read_to_string(path)
                .await
                .map_err(|e| format!("reading {}: {e}", path.display()))?,
            Origin::Url(url) => {
                let response = self
                    .http
                    .get(url)
                    .send()
                    .await
                    .map_err(|e| format!("fetching the JWKS: {e}"))?;
                if !response.status().is_success() {
                    return Err(format!("the JWKS URL answered {}", response.status()));
                }
                response
                    .text()
                    .await
                    .map_err(|e| format!("reading the JWKS: {e}"))?
            }
        };
        parse_key_set(&text)
    }

    /// Verify `token` (which names this issuer) as an access token for `resource`.
    pub(super) async fn verify(&self, token: &str, resource: &str) -> Result<Claims, Refusal> {
        let header = jsonwebtoken::decode_header(token)
            .map_err(|e| Refusal::Invalid(format!("JWT header: {e}")))?;
        if !self.algorithms.contains(&header.alg) {
            return Err(Refusal::Invalid(format!(
                "algorithm {:?} is not accepted for this issuer",
                header.alg
            )));
        }
        let kid = header.kid.clone().unwrap_or_default();
        let mut keys = self.keys.read().clone();
        if !keys.by_kid.contains_key(&kid) {
            // A key not seen yet: the issuer may have rotated. Fetch again, not too often.
            let last = *self.fetched.read();
            let due = last.is_none_or(|t| t.elapsed() >= self.min_refresh);
            if due {
                self.refresh(last).await;
                keys = self.keys.read().clone();
            }
            if self.fetched.read().is_none() {
                return Err(Refusal::Unavailable(
                    "the issuer's keys are not loaded yet".into(),
                ));
            }
        }
        let candidates = keys.by_kid.get(&kid).ok_or_else(|| {
            Refusal::Invalid("signed by a key the issuer does not publish".into())
        })?;
        let mut validation = Validation::new(header.alg);
        validation.algorithms = vec![header.alg];
        validation.leeway = self.leeway_s;
        validation.validate_nbf = true;
        validation.validate_aud = true;
        validation.set_audience(&[resource]);
        validation.set_issuer(&[&self.issuer]);
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        let mut last = Refusal::Invalid("no key of the issuer fits the token's algorithm".into());
        for k in candidates {
            if k.alg.is_some_and(|a| a != header.alg) || k.key.family() != header.alg.family() {
                continue;
            }
            match jsonwebtoken::decode::<Claims>(token, &k.key, &validation) {
                Ok(data) => return Ok(data.claims),
                Err(e) => last = Refusal::Invalid(format!("JWT: {e}")),
            }
        }
        Err(last)
    }
}

/// The keys of a JWKS document that can verify signatures: asymmetric, for signing (`use`
/// absent or `sig`), parsed one by one (a key of an unknown type is left out, not fatal).
fn parse_key_set(text: &str) -> Result<Keys, String> {
    let doc: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("the JWKS is not JSON: {e}"))?;
    let list = doc
        .get("keys")
        .and_then(|k| k.as_array())
        .ok_or("the JWKS has no keys list")?;
    let mut keys = Keys::default();
    for value in list {
        let Ok(jwk) = serde_json::from_value::<Jwk>(value.clone()) else {
            continue;
        };
        if value.get("use").is_some_and(|u| u != "sig") {
            continue;
        }
        // An Ed25519 key is 32 bytes; the verifier relies on it.
        if value.get("kty").and_then(|k| k.as_str()) == Some("OKP") {
            let x = value.get("x").and_then(|x| x.as_str()).unwrap_or_default();
            let len = base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(x)
                .map_or(0, |b| b.len());
            if len != 32 || value.get("crv").and_then(|c| c.as_str()) != Some("Ed25519") {
                continue;
            }
        }
        let Ok(key) = DecodingKey::from_jwk(&jwk) else {
            continue;
        };
        if key.family() == jsonwebtoken::AlgorithmFamily::Hmac {
            continue; // never a shared secret
        }
        let alg = value
            .get("alg")
            .and_then(|a| a.as_str())
            .and_then(|a| Algorithm::from_str(a).ok());
        let kid = jwk.common.key_id.clone().unwrap_or_default();
        keys.by_kid.entry(kid).or_default().push(Key { key, alg });
    }
    Ok(keys)
}

/// Whether `token` has the form of a JWS in compact serialisation (three base64url parts).
pub(super) fn looks_like_jwt(token: &str) -> bool {
    let mut parts = token.split('.');
    let three = parts.clone().count() == 3;
    three
        && parts.all(|p| {
            p.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

/// The `iss` of a JWT's payload, read without verifying anything: only to pick which
/// issuer's keys verify it.
pub(super) fn unverified_issuer(token: &str) -> Option<String> {
    let payload = token.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload)
        .ok()?;
    let claims: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    claims.get("iss")?.as_str().map(str::to_owned)
}
