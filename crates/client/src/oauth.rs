//! OAuth 2.1 access tokens by client credentials, for a Streamable HTTP server that is an OAuth
//! resource server (as taskmesh is with `[auth.oauth]`).
//!
//! [`ClientCredentials`] names the client (`client_id`, `client_secret`, sent with HTTP basic
//! authentication) and the scope it asks for. The token endpoint is the one given, or found from
//! the server: its Protected Resource Metadata (RFC 9728,
//! `/.well-known/oauth-protected-resource` plus the endpoint's path) names its authorization
//! server, whose metadata (RFC 8414 `/.well-known/oauth-authorization-server`, else OpenID
//! `/.well-known/openid-configuration`) names the token endpoint. The token is asked for the
//! MCP endpoint as its resource (RFC 8707). [`crate::Client::connect`] gets one before the
//! handshake and a new one before the last one expires, for as long as the client lives.

use std::time::Duration;

use serde_json::Value;

use crate::ClientError;

/// A client of an OAuth authorization server that gets its tokens by client credentials.
#[derive(Clone, PartialEq, Eq)]
pub struct ClientCredentials {
    /// The client's id at the authorization server.
    pub client_id: String,
    /// The client's secret.
    pub client_secret: String,
    /// The scopes asked for, space-separated (`None`: the server's default).
    pub scope: Option<String>,
    /// The token endpoint; `None`: found from the MCP server's metadata (see the module doc).
    pub token_endpoint: Option<String>,
}

impl std::fmt::Debug for ClientCredentials {
    /// The secret is not shown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientCredentials")
            .field("client_id", &self.client_id)
            .field("scope", &self.scope)
            .field("token_endpoint", &self.token_endpoint)
            .finish_non_exhaustive()
    }
}

/// An access token, and for how long it is good.
#[derive(Clone, PartialEq, Eq)]
pub struct AccessToken {
    /// The token, sent as `Authorization: Bearer {token}`.
    pub token: String,
    /// Its lifetime from when it was issued, when the server said (`expires_in`).
    pub expires_in: Option<Duration>,
}

impl std::fmt::Debug for AccessToken {
    /// The token is not shown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AccessToken")
            .field("expires_in", &self.expires_in)
            .finish_non_exhaustive()
    }
}

fn auth_error(what: impl std::fmt::Display) -> ClientError {
    ClientError::Auth(what.to_string())
}

/// GET `url` as JSON.
async fn get_json(http: &reqwest::Client, url: &str) -> Result<Value, ClientError> {
    let r = http
        .get(url)
        .header("accept", "application/json")
        .send()
        .await
        .map_err(|e| auth_error(format!("{url}: {e}")))?;
    if !r.status().is_success() {
        return Err(auth_error(format!("{url}: HTTP {}", r.status().as_u16())));
    }
    r.json()
        .await
        .map_err(|e| auth_error(format!("{url}: not JSON: {e}")))
}

/// `url` with `/.well-known/{name}` put between its origin and its path (RFC 8615 as RFC 9728
/// and RFC 8414 place it).
fn well_known(url: &str, name: &str) -> Result<String, ClientError> {
    let parsed = reqwest::Url::parse(url).map_err(|e| auth_error(format!("{url}: {e}")))?;
    let path = parsed.path().trim_end_matches('/');
    let mut origin = format!("{}://{}", parsed.scheme(), parsed.host_str().unwrap_or(""));
    if let Some(port) = parsed.port() {
        origin.push_str(&format!(":{port}"));
    }
    Ok(format!("{origin}/.well-known/{name}{path}"))
}

impl ClientCredentials {
    /// The token endpoint: the one given, or found from the MCP endpoint `resource`.
    pub async fn token_endpoint(
        &self,
        http: &reqwest::Client,
        resource: &str,
    ) -> Result<String, ClientError> {
        if let Some(t) = &self.token_endpoint {
            return Ok(t.clone());
        }
        let metadata = get_json(http, &well_known(resource, "oauth-protected-resource")?).await?;
        let issuer = metadata["authorization_servers"][0]
            .as_str()
            .ok_or_else(|| {
                auth_error("the server's resource metadata names no authorization server")
            })?;
        let mut last = None;
        for name in ["oauth-authorization-server", "openid-configuration"] {
            match get_json(http, &well_known(issuer, name)?).await {
                Ok(m) => {
                    if let Some(t) = m["token_endpoint"].as_str() {
                        return Ok(t.to_string());
                    }
                    last = Some(auth_error(format!(
                        "the metadata of {issuer} names no token endpoint"
                    )));
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| auth_error("no authorization server metadata")))
    }

    /// A new access token for the MCP endpoint `resource`.
    pub async fn fetch(
        &self,
        http: &reqwest::Client,
        resource: &str,
    ) -> Result<AccessToken, ClientError> {
        let endpoint = self.token_endpoint(http, resource).await?;
        let mut form = vec![
            ("grant_type", "client_credentials".to_string()),
            ("resource", resource.to_string()),
        ];
        if let Some(scope) = &self.scope {
            form.push(("scope", scope.clone()));
        }
        let r = http
            .post(&endpoint)
            .basic_auth(&self.client_id, Some(&self.client_secret))
            .form(&form)
            .send()
            .await
            .map_err(|e| auth_error(format!("{endpoint}: {e}")))?;
        let status = r.status();
        let body: Value = r
            .json()
            .await
            .map_err(|e| auth_error(format!("{endpoint}: not JSON: {e}")))?;
        if !status.is_success() {
            let why = body["error_description"]
                .as_str()
                .or_else(|| body["error"].as_str())
                .unwrap_or("no reason given");
            return Err(auth_error(format!(
                "the token endpoint refused the client ({}): {why}",
                status.as_u16()
            )));
        }
        let token = body["access_token"]
            .as_str()
            .ok_or_else(|| auth_error("the token endpoint's answer has no access_token"))?;
        Ok(AccessToken {
            token: token.to_string(),
            expires_in: body["expires_in"].as_u64().map(Duration::from_secs),
        })
    }
}

/// When to get the next token: at three quarters of the lifetime, at least 200 ms from now.
pub(crate) fn renew_after(expires_in: Duration) -> Duration {
    (expires_in * 3 / 4).max(Duration::from_millis(200))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn well_known_goes_between_origin_and_path() {
        assert_eq!(
            well_known("http://127.0.0.1:9000/mcp", "oauth-protected-resource").unwrap(),
            "http://127.0.0.1:9000/.well-known/oauth-protected-resource/mcp"
        );
        assert_eq!(
            well_known("https://as.example/", "oauth-authorization-server").unwrap(),
            "https://as.example/.well-known/oauth-authorization-server"
        );
        assert!(well_known("not a url", "x").is_err());
    }

    #[test]
    fn secrets_stay_out_of_debug_output() {
        let c = ClientCredentials {
            client_id: "id".into(),
            client_secret: "s3cret".into(),
            scope: None,
            token_endpoint: None,
        };
        assert!(!format!("{c:?}").contains("s3cret"));
        let t = AccessToken {
            token: "t0ken".into(),
            expires_in: None,
        };
        assert!(!format!("{t:?}").contains("t0ken"));
        assert_eq!(
            renew_after(Duration::from_secs(100)),
            Duration::from_secs(75)
        );
        assert_eq!(renew_after(Duration::ZERO), Duration::from_millis(200));
    }
}
