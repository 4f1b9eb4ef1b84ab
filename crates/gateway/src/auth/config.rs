//! `[auth]`: the settings of authentication, each documented in docs/configuration.md.

use std::collections::HashMap;
use std::path::PathBuf;

use serde::Deserialize;

/// Where the Protected Resource Metadata of RFC 9728 lives.
pub const WELL_KNOWN: &str = "/.well-known/oauth-protected-resource";

/// The JWS algorithms an issuer's tokens may be signed with: asymmetric ones only (a shared
/// secret in a JWKS would let anyone who reads it sign tokens).
pub const ALGORITHMS: [&str; 9] = [
    "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA",
];

/// The most clock skew `auth.leeway_s` may allow.
pub const MAX_LEEWAY_S: u64 = 300;

/// `[auth]`: who may call. Nothing set: open mode (every caller is `anonymous`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    /// Static bearer tokens: token -> principal. Each stands for its principal with every scope.
    pub tokens: HashMap<String, String>,
    /// The canonical URI of this MCP server (RFC 8707), e.g. `https://mcp.example.com/mcp`:
    /// access tokens must name it in `aud`; the Protected Resource Metadata names it. Required
    /// with `issuers`.
    pub resource: Option<String>,
    /// `[[auth.issuers]]`: the authorization servers whose access tokens are accepted.
    pub issuers: Vec<IssuerConfig>,
    /// The claim of an access token that names its principal. Default `sub`.
    pub principal_claim: String,
    /// Prefix the principal with the token's issuer (`{iss}#{claim}`), so that two issuers
    /// cannot name the same principal. Default false.
    pub principal_with_issuer: bool,
    /// Clock skew allowed when checking `exp` and `nbf`, in seconds. Default 30, at most 300.
    pub leeway_s: u64,
    /// `[auth.scopes]`: the scopes each class of operation requires.
    pub scopes: ScopeConfig,
    /// Principals that may read `GET /status` when authentication is on. Default none.
    pub status_principals: Vec<String>,
    /// The least time between two fetches of an issuer's keys caused by a token whose `kid`
    /// is unknown, in ms (a stream of made-up key ids cannot make the node hammer its issuer).
    /// Default 10000.
    pub jwks_min_refresh_ms: u64,
    /// Verified access tokens kept (by a digest of the token), so that each is checked once,
    /// not on every request. Default 10000; 0: none kept.
    pub token_cache_entries: usize,
    /// How long a verified access token is kept, in ms (never past its `exp`). Default 60000.
    pub token_cache_ms: u64,
    /// Timeout of a request to an issuer (keys, introspection), in ms. Default 5000.
    pub http_timeout_ms: u64,
}

impl Default for AuthConfig {
    fn default() -> Self {
        AuthConfig {
            tokens: HashMap::new(),
            resource: None,
            issuers: Vec::new(),
            principal_claim: "sub".into(),
            principal_with_issuer: false,
            leeway_s: 30,
            scopes: ScopeConfig::default(),
            status_principals: Vec::new(),
            jwks_min_refresh_ms: 10_000,
            token_cache_entries: 10_000,
            token_cache_ms: 60_000,
            http_timeout_ms: 5_000,
        }
    }
}

/// `[auth.scopes]`: the scopes a token must grant for each class of MCP method
/// ([`super::Operation`]). Static tokens have every scope. Empty (the default): a valid token
/// suffices.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ScopeConfig {
    /// `tools/call`, `tasks/update`, responses to the server's requests.
    pub create: Vec<String>,
    /// `tasks/get`, `tasks/result`, `subscriptions/listen`, the session's GET stream.
    pub read: Vec<String>,
    /// `tasks/cancel`.
    pub cancel: Vec<String>,
    /// `tasks/list`.
    pub list: Vec<String>,
}

/// One `[[auth.issuers]]` entry: an authorization server whose tokens are accepted.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IssuerConfig {
    /// The issuer identifier, exactly as its tokens carry it in `iss`.
    pub issuer: String,
    /// Where its JSON Web Key Set is fetched (JWT access tokens).
    #[serde(default)]
    pub jwks_url: Option<String>,
    /// Or a file holding its JSON Web Key Set, read again at every refresh.
    #[serde(default)]
    pub jwks_file: Option<PathBuf>,
    /// How often the key set is fetched (or read) again, in ms. Default 300000.
    #[serde(default = "default_jwks_refresh_ms")]
    pub jwks_refresh_ms: u64,
    /// The JWS algorithms accepted. Default RS256, ES256 and EdDSA.
    #[serde(default = "default_algorithms")]
    pub algorithms: Vec<String>,
    /// Its token introspection endpoint (RFC 7662), for opaque access tokens.
    #[serde(default)]
    pub introspection_url: Option<String>,
    /// The client id this server authenticates with at the introspection endpoint.
    #[serde(default)]
    pub introspection_client_id: Option<String>,
    /// Its secret (HTTP Basic authentication).
    #[serde(default)]
    pub introspection_client_secret: Option<String>,
}

fn default_jwks_refresh_ms() -> u64 {
    300_000
}

fn default_algorithms() -> Vec<String> {
    vec!["RS256".into(), "ES256".into(), "EdDSA".into()]
}

impl AuthConfig {
    /// Check every setting; the error names the one that is wrong.
    pub fn validate(&self) -> Result<(), String> {
        for (token, principal) in &self.tokens {
            if token.len() < 8 || principal.is_empty() {
                return Err(
                    "auth.tokens: every token needs at least 8 characters and a non-empty principal"
                        .into(),
                );
            }
        }
        if let Some(r) = &self.resource {
            if metadata_path(r).is_none() {
                return Err(format!(
                    "auth.resource must be an absolute http(s) URI without a query or fragment, not {r:?}"
                ));
            }
        }
        if !self.issuers.is_empty() && self.resource.is_none() {
            return Err("auth.resource is required with auth.issuers (tokens must be issued for this resource)".into());
        }
        if self.principal_claim.is_empty() {
            return Err("auth.principal_claim must not be empty".into());
        }
        if self.leeway_s > MAX_LEEWAY_S {
            return Err(format!("auth.leeway_s must be at most {MAX_LEEWAY_S}"));
        }
        if self.http_timeout_ms < 100 {
            return Err("auth.http_timeout_ms must be at least 100".into());
        }
        let mut names = std::collections::HashSet::new();
        for i in &self.issuers {
            if i.issuer.is_empty() || !names.insert(i.issuer.as_str()) {
                return Err("auth.issuers: every issuer needs a non-empty, unique issuer".into());
            }
            let who = &i.issuer;
            if i.jwks_url.is_some() && i.jwks_file.is_some() {
                return Err(format!(
                    "auth.issuers ({who}): set jwks_url or jwks_file, not both"
                ));
            }
            let has_keys = i.jwks_url.is_some() || i.jwks_file.is_some();
            if !has_keys && i.introspection_url.is_none() {
                return Err(format!(
                    "auth.issuers ({who}): needs jwks_url, jwks_file or introspection_url"
                ));
            }
            for url in i.jwks_url.iter().chain(&i.introspection_url) {
                if !(url.starts_with("https://") || url.starts_with("http://")) {
                    return Err(format!(
                        "auth.issuers ({who}): {url:?} is not an http(s) URL"
                    ));
                }
            }
            if i.introspection_url.is_some()
                && (i.introspection_client_id.is_none() || i.introspection_client_secret.is_none())
            {
                return Err(format!("auth.issuers ({who}): introspection_url needs introspection_client_id and introspection_client_secret"));
            }
            if i.jwks_refresh_ms < 1_000 {
                return Err(format!(
                    "auth.issuers ({who}): jwks_refresh_ms must be at least 1000"
                ));
            }
            if i.algorithms.is_empty() {
                return Err(format!(
                    "auth.issuers ({who}): algorithms must not be empty"
                ));
            }
            if let Some(a) = i
                .algorithms
                .iter()
                .find(|a| !ALGORITHMS.contains(&a.as_str()))
            {
                return Err(format!(
                    "auth.issuers ({who}): algorithm {a:?} is not one of {}",
                    ALGORITHMS.join(", ")
                ));
            }
        }
        Ok(())
    }
}

/// The path of the resource's Protected Resource Metadata: the well-known path with the
/// resource's own path appended (`https://h/mcp` -> `/.well-known/oauth-protected-resource/mcp`);
/// `None` when `resource` is not an absolute http(s) URI without query and fragment.
pub fn metadata_path(resource: &str) -> Option<String> {
    let rest = resource
        .strip_prefix("https://")
        .or_else(|| resource.strip_prefix("http://"))?;
    if rest.contains(['?', '#']) || rest.is_empty() {
        return None;
    }
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    if authority.is_empty() {
        return None;
    }
    let path = path.trim_end_matches('/');
    Some(format!("{WELL_KNOWN}{path}"))
}

/// The full URL of the resource's Protected Resource Metadata.
pub fn metadata_url(resource: &str) -> Option<String> {
    let path = metadata_path(resource)?;
    let scheme_end = resource.find("://")? + 3;
    let authority_end = resource[scheme_end..]
        .find('/')
        .map_or(resource.len(), |i| scheme_end + i);
    Some(format!("{}{path}", &resource[..authority_end]))
}
