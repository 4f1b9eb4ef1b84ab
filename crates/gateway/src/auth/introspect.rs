//! Opaque access tokens, asked about at their issuer's introspection endpoint (RFC 7662):
//! the node authenticates as `introspection_client_id` (HTTP Basic) and accepts an answer that
//! is `active`, names this resource in `aud`, this issuer in `iss` (when present) and has not
//! expired. The authenticator keeps what an active answer grants ([`super::TokenCache`]).

use std::time::{SystemTime, UNIX_EPOCH};

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
        })
    }

    /// The claims of `token` if its issuer says it is active and it is meant for this resource.
    pub(super) async fn check(&self, token: &str) -> Result<Claims, Refusal> {
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
        self.accept(&claims, now_s)?;
        Ok(claims)
    }

    /// Whether an introspection answer grants access here.
    fn accept(&self, claims: &Claims, now_s: u64) -> Result<(), Refusal> {
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
        Ok(())
    }
}
