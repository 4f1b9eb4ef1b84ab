//! Who is calling: the bearer token of a request, checked before any byte of its body is read.
//!
//! Three kinds of token are accepted, each optional (docs/security.md):
//!
//! - static tokens of `[auth.tokens]`, each standing for one principal with every scope;
//! - OAuth 2.1 access tokens as JWTs ([`jwt`]), signed by a key of their issuer's JWKS and
//!   issued for this resource (`aud` is `auth.resource`, RFC 8707);
//! - opaque access tokens, asked about at their issuer's introspection endpoint (RFC 7662,
//!   [`introspect`]).
//!
//! What an access token grants is kept in a bounded cache ([`TokenCache`]) by a digest of the
//! token, until its `exp` and for `auth.token_cache_ms` at most, so that a client polling with
//! one token has its signature checked (or its issuer asked) once, not on every poll.
//!
//! The result is an [`Identity`]: the principal (the claim `auth.principal_claim`, optionally
//! prefixed with the issuer) and the scopes the token grants. Each MCP method belongs to an
//! [`Operation`] class whose required scopes (`[auth.scopes]`) the identity must hold, else
//! HTTP 403 `insufficient_scope`. With `auth.resource` set, the Protected Resource Metadata
//! of RFC 9728 is served ([`AuthConfig::metadata_path`]) and every 401 and 403 names it.

pub mod config;
mod introspect;
mod jwt;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::http::HeaderValue;
use parking_lot::Mutex;
use sha2::{Digest, Sha256};

pub use config::{AuthConfig, IssuerConfig, ScopeConfig};

/// The prefix `Authorization` values of bearer tokens start with (case-insensitive scheme).
const BEARER: &str = "bearer ";

/// What a request is allowed to do, as a class of MCP methods with its own required scopes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// Starts or feeds work: `tools/call`, `tasks/update`, a response to a server request.
    Create,
    /// Reads tasks and their streams: `tasks/get`, `tasks/result`, `subscriptions/listen`,
    /// the session's `GET` stream.
    Read,
    /// `tasks/cancel`.
    Cancel,
    /// `tasks/list`.
    List,
}

impl Operation {
    /// The class of a JSON-RPC method, `None` for methods any authenticated caller may use
    /// (`initialize`, `ping`, `tools/list`, `server/discover`, notifications, ...).
    pub fn of_method(method: &str) -> Option<Operation> {
        match method {
            "tools/call" | "tasks/update" => Some(Operation::Create),
            "tasks/get" | "tasks/result" | "subscriptions/listen" => Some(Operation::Read),
            "tasks/cancel" => Some(Operation::Cancel),
            "tasks/list" => Some(Operation::List),
            _ => None,
        }
    }
}

/// An authenticated caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The authorization context every task of the caller is bound to.
    pub principal: String,
    /// The issuer of the caller's access token; `None` for static tokens and open mode.
    pub issuer: Option<String>,
    /// The scopes the token grants; `None`: every scope (static tokens, open mode).
    scopes: Option<Arc<HashSet<String>>>,
}

impl Identity {
    /// A caller with every scope (a static token, or open mode's `anonymous`).
    pub fn unrestricted(principal: impl Into<String>) -> Identity {
        Identity {
            principal: principal.into(),
            issuer: None,
            scopes: None,
        }
    }

    fn has(&self, scope: &str) -> bool {
        self.scopes.as_ref().is_none_or(|s| s.contains(scope))
    }

    /// Whether the caller's access token grants `scope` by name (a static token, which holds
    /// every scope implicitly, does not).
    pub fn grants(&self, scope: &str) -> bool {
        self.scopes.as_ref().is_some_and(|s| s.contains(scope))
    }
}

/// The token of an `Authorization: Bearer` value (the scheme case-insensitive), if any.
pub fn bearer_token(header: Option<&HeaderValue>) -> Option<&str> {
    header
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let scheme = v.get(..BEARER.len())?;
            scheme
                .eq_ignore_ascii_case(BEARER)
                .then(|| v[BEARER.len()..].trim())
        })
        .filter(|t| !t.is_empty())
}

/// Why a request was not authenticated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// No bearer token: HTTP 401 with a plain challenge.
    #[error("no bearer token")]
    Missing,
    /// A token that is not valid here: HTTP 401 `invalid_token`; counts as a wrong guess
    /// (`limits.failed_auth_per_minute`).
    #[error("invalid token: {0}")]
    Invalid(String),
    /// The token could not be checked now (its issuer's keys or introspection endpoint did
    /// not answer): HTTP 503, not counted as a wrong guess.
    #[error("the token could not be checked: {0}")]
    Unavailable(String),
}

/// The authenticator of one node: the settings of `[auth]` and the state they need (keys
/// fetched from issuers, the introspection cache).
pub struct Authenticator {
    tokens: HashMap<String, String>,
    issuers: Vec<Issuer>,
    resource: Option<String>,
    metadata_url: Option<String>,
    scopes: ScopeConfig,
    principal_claim: String,
    principal_with_issuer: bool,
    status_principals: HashSet<String>,
    cache: TokenCache,
}

/// What verified access tokens grant, by the SHA-256 digest of the token (the token itself is
/// not kept): at most `auth.token_cache_entries`, each until the token's `exp` and for
/// `auth.token_cache_ms` at most. When full, expired entries are dropped; if none are, a new
/// token is not kept.
struct TokenCache {
    entries: Mutex<HashMap<[u8; 32], (Identity, Instant)>>,
    capacity: usize,
    keep: Duration,
}

impl TokenCache {
    fn get(&self, digest: &[u8; 32]) -> Option<Identity> {
        let entries = self.entries.lock();
        let (identity, until) = entries.get(digest)?;
        (Instant::now() < *until).then(|| identity.clone())
    }

    fn put(&self, digest: [u8; 32], identity: &Identity, exp_s: Option<u64>) {
        let mut keep = self.keep;
        if let Some(exp) = exp_s {
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default();
            keep = keep.min(Duration::from_secs(exp).saturating_sub(now));
        }
        if self.capacity == 0 || keep.is_zero() {
            return;
        }
        let now = Instant::now();
        let mut entries = self.entries.lock();
        if entries.len() >= self.capacity {
            entries.retain(|_, (_, until)| *until > now);
        }
        if entries.len() < self.capacity {
            entries.insert(digest, (identity.clone(), now + keep));
        }
    }
}

/// One trusted issuer: where its keys come from, and how its opaque tokens are checked.
struct Issuer {
    name: String,
    keys: Option<Arc<jwt::KeySource>>,
    introspection: Option<introspect::Introspector>,
}

impl Authenticator {
    /// The authenticator for `cfg`, which [`AuthConfig::validate`] accepted. Key sources
    /// that are URLs start being fetched in the background (so this needs a tokio runtime
    /// when any is configured).
    pub fn new(cfg: &AuthConfig) -> Authenticator {
        let http = reqwest::Client::builder()
            .timeout(std::time::Duration::from_millis(cfg.http_timeout_ms))
            .connect_timeout(std::time::Duration::from_millis(cfg.http_timeout_ms))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap_or_default();
        let resource = cfg.resource.clone();
        let issuers = cfg
            .issuers
            .iter()
            .map(|i| Issuer {
                name: i.issuer.clone(),
                keys: jwt::KeySource::new(i, cfg, http.clone()).map(|k| {
                    let k = Arc::new(k);
                    k.spawn_refresh(std::time::Duration::from_millis(i.jwks_refresh_ms));
                    k
                }),
                introspection: introspect::Introspector::new(
                    i,
                    cfg,
                    resource.clone().unwrap_or_default(),
                    http.clone(),
                ),
            })
            .collect();
        Authenticator {
            tokens: cfg.tokens.clone(),
            issuers,
            metadata_url: resource.as_deref().and_then(config::metadata_url),
            resource,
            scopes: cfg.scopes.clone(),
            principal_claim: cfg.principal_claim.clone(),
            principal_with_issuer: cfg.principal_with_issuer,
            status_principals: cfg.status_principals.iter().cloned().collect(),
            cache: TokenCache {
                entries: Mutex::default(),
                capacity: cfg.token_cache_entries,
                keep: Duration::from_millis(cfg.token_cache_ms),
            },
        }
    }

    /// Whether `token` is one of the static client tokens of `[auth.tokens]`.
    pub fn is_client_token(&self, token: &str) -> bool {
        self.tokens.contains_key(token)
    }

    /// Whether access tokens of some issuer are accepted (JWTs or introspected).
    pub fn has_issuers(&self) -> bool {
        !self.issuers.is_empty()
    }

    /// Whether requests must carry a token (any kind is configured).
    pub fn enabled(&self) -> bool {
        !self.tokens.is_empty() || !self.issuers.is_empty()
    }

    /// The caller of a request whose `Authorization` header is `header`.
    pub async fn authenticate(&self, header: Option<&HeaderValue>) -> Result<Identity, Refusal> {
        if !self.enabled() {
            return Ok(Identity::unrestricted("anonymous"));
        }
        let token = bearer_token(header).ok_or(Refusal::Missing)?;
        if let Some(principal) = self.tokens.get(token) {
            return Ok(Identity::unrestricted(principal.clone()));
        }
        if self.issuers.is_empty() {
            return Err(Refusal::Invalid("not a configured token".into()));
        }
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if let Some(identity) = self.cache.get(&digest) {
            return Ok(identity);
        }
        let claims = if jwt::looks_like_jwt(token) {
            self.verify_jwt(token).await?
        } else {
            self.introspect(token).await?
        };
        let exp_s = claims.get("exp").and_then(|e| e.as_u64());
        let identity = self.identity(claims)?;
        self.cache.put(digest, &identity, exp_s);
        Ok(identity)
    }

    async fn verify_jwt(&self, token: &str) -> Result<Claims, Refusal> {
        let issuer_name = jwt::unverified_issuer(token)
            .ok_or_else(|| Refusal::Invalid("a JWT without a readable iss".into()))?;
        let keys = self
            .issuers
            .iter()
            .find(|i| i.name == issuer_name)
            .and_then(|i| i.keys.as_ref())
            .ok_or_else(|| Refusal::Invalid("a JWT of an issuer that is not trusted".into()))?;
        let resource = self.resource.as_deref().unwrap_or_default();
        keys.verify(token, resource).await
    }

    async fn introspect(&self, token: &str) -> Result<Claims, Refusal> {
        let mut last = Refusal::Invalid("an opaque token and no introspection endpoint".into());
        for introspector in self.issuers.iter().filter_map(|i| i.introspection.as_ref()) {
            match introspector.check(token).await {
                Ok(claims) => return Ok(claims),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// The identity a verified token's claims stand for.
    fn identity(&self, claims: Claims) -> Result<Identity, Refusal> {
        let value = match claims.get(&self.principal_claim) {
            Some(serde_json::Value::String(s)) if !s.is_empty() => s.clone(),
            Some(serde_json::Value::Number(n)) => n.to_string(),
            _ => {
                return Err(Refusal::Invalid(format!(
                    "the token has no {} claim (auth.principal_claim)",
                    self.principal_claim
                )))
            }
        };
        let issuer = claims
            .get("iss")
            .and_then(|v| v.as_str())
            .map(str::to_owned);
        let principal = match (&issuer, self.principal_with_issuer) {
            (Some(iss), true) => format!("{iss}#{value}"),
            _ => value,
        };
        Ok(Identity {
            principal,
            issuer,
            scopes: Some(Arc::new(scopes_of(&claims))),
        })
    }

    /// The scopes `identity` lacks for `operation` (empty: allowed).
    pub fn missing_scopes(&self, identity: &Identity, operation: Operation) -> Vec<String> {
        let required = match operation {
            Operation::Create => &self.scopes.create,
            Operation::Read => &self.scopes.read,
            Operation::Cancel => &self.scopes.cancel,
            Operation::List => &self.scopes.list,
        };
        required
            .iter()
            .filter(|s| !identity.has(s))
            .cloned()
            .collect()
    }

    /// Whether `identity` may read `GET /status` (always in open mode; else when its principal
    /// is in `auth.status_principals`).
    pub fn may_read_status(&self, identity: &Identity) -> bool {
        !self.enabled() || self.status_principals.contains(&identity.principal)
    }

    /// The `WWW-Authenticate` value of a refusal: `error` is `invalid_token` or
    /// `insufficient_scope` (with the `scope` needed), and `resource_metadata` names the
    /// Protected Resource Metadata when it is served.
    pub fn challenge(&self, error: Option<&str>, scope: &[String]) -> Option<HeaderValue> {
        let mut v = String::from("Bearer realm=\"taskmesh\"");
        if let Some(e) = error {
            v.push_str(&format!(", error=\"{e}\""));
        }
        if !scope.is_empty() {
            v.push_str(&format!(", scope=\"{}\"", scope.join(" ")));
        }
        if let Some(url) = &self.metadata_url {
            v.push_str(&format!(", resource_metadata=\"{url}\""));
        }
        HeaderValue::from_str(&v).ok()
    }

    /// The Protected Resource Metadata document (RFC 9728), when `auth.resource` is set.
    pub fn metadata(&self) -> Option<serde_json::Value> {
        let resource = self.resource.as_ref()?;
        let mut scopes: Vec<&String> = [
            &self.scopes.create,
            &self.scopes.read,
            &self.scopes.cancel,
            &self.scopes.list,
        ]
        .into_iter()
        .flatten()
        .collect();
        scopes.sort();
        scopes.dedup();
        let servers: Vec<&String> = self.issuers.iter().map(|i| &i.name).collect();
        Some(serde_json::json!({
            "resource": resource,
            "authorization_servers": servers,
            "scopes_supported": scopes,
            "bearer_methods_supported": ["header"],
            "resource_name": "taskmesh",
        }))
    }

    /// The paths the metadata is served at: the well-known root and the form suffixed with
    /// the resource's path (RFC 9728 section 3.1).
    pub fn metadata_paths(&self) -> Vec<String> {
        match &self.resource {
            None => Vec::new(),
            Some(r) => {
                let mut paths = vec![config::WELL_KNOWN.to_string()];
                if let Some(p) = config::metadata_path(r).filter(|p| p != config::WELL_KNOWN) {
                    paths.push(p);
                }
                paths
            }
        }
    }
}

/// The claims of a verified token (a JWT's payload, or an introspection answer).
pub(crate) type Claims = serde_json::Map<String, serde_json::Value>;

/// The scopes of `scope` (space-separated, RFC 9068 and RFC 7662) or `scp` (a list or a
/// string, as some issuers write them).
fn scopes_of(claims: &Claims) -> HashSet<String> {
    let mut out = HashSet::new();
    for key in ["scope", "scp"] {
        match claims.get(key) {
            Some(serde_json::Value::String(s)) => {
                out.extend(s.split_whitespace().map(str::to_owned));
            }
            Some(serde_json::Value::Array(items)) => {
                out.extend(items.iter().filter_map(|v| v.as_str()).map(str::to_owned));
            }
            _ => {}
        }
    }
    out
}

/// Whether `claims` name `resource` in `aud` (a string or a list).
pub(crate) fn audience_matches(claims: &Claims, resource: &str) -> bool {
    match claims.get("aud") {
        Some(serde_json::Value::String(s)) => s == resource,
        Some(serde_json::Value::Array(items)) => items.iter().any(|v| v.as_str() == Some(resource)),
        _ => false,
    }
}

#[cfg(test)]
mod tests;
