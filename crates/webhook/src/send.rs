//! One delivery attempt: a signed POST of one message to one URL, through the checked egress,
//! and what came of it in the categories a subscription's status may show.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::egress::{CheckedResolver, EgressError, EgressPolicy};
use crate::sign::{signature_header, Secret};

/// What one attempt came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt {
    /// The receiver answered 2xx: delivered.
    Acked(u16),
    /// The receiver answered 410 (gone) or 413 (too large): never retried.
    Refused(u16),
    /// Worth another attempt later.
    Failed(Failure),
}

/// Why an attempt failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// No connection: refused, reset, unreachable, or the URL's host not allowed or not
    /// resolved (the egress check: nothing was sent).
    Connection,
    /// The egress check refused the URL or its addresses: nothing was sent.
    Egress(EgressError),
    /// No answer within the timeout.
    Timeout,
    /// The TLS handshake failed (certificate, protocol).
    Tls,
    /// An answer that is neither 2xx nor 5xx (3xx included: redirects are never followed),
    /// other than 410 and 413.
    Http4xx(u16),
    /// A 5xx answer.
    Http5xx(u16),
}

impl Failure {
    /// The category named `name`, if it is one ([`Failure::category`], or `challenge_failed`).
    pub fn category_named(name: &str) -> Option<&'static str> {
        [
            "connection_refused",
            "timeout",
            "tls_error",
            "http_4xx",
            "http_5xx",
            "challenge_failed",
        ]
        .into_iter()
        .find(|c| *c == name)
    }

    /// The category a subscription's `lastError` shows: never anything the receiver said.
    pub fn category(&self) -> &'static str {
        match self {
            Failure::Connection | Failure::Egress(_) => "connection_refused",
            Failure::Timeout => "timeout",
            Failure::Tls => "tls_error",
            Failure::Http4xx(_) => "http_4xx",
            Failure::Http5xx(_) => "http_5xx",
        }
    }
}

/// A message to deliver.
#[derive(Debug, Clone, Copy)]
pub struct Message<'a> {
    /// The receiver's URL.
    pub url: &'a str,
    /// The message id (`webhook-id`): the same on every attempt.
    pub id: &'a str,
    /// The subscription's id (`X-MCP-Subscription-Id`).
    pub subscription: &'a str,
    /// The raw JSON body, signed byte for byte.
    pub body: &'a [u8],
    /// The secrets to sign with: the current one first, then any a rotation still honours.
    pub secrets: &'a [&'a Secret],
}

/// Sends messages: one HTTP client whose every connection goes through the egress check, that
/// follows no redirect and uses no proxy (a proxy would resolve names past the check).
#[derive(Debug, Clone)]
pub struct Sender {
    client: reqwest::Client,
    policy: Arc<EgressPolicy>,
}

impl Sender {
    /// A sender with this policy, giving up on an attempt after `timeout`.
    pub fn new(policy: EgressPolicy, timeout: Duration) -> Result<Self, String> {
        let policy = Arc::new(policy);
        let client = reqwest::Client::builder()
            .dns_resolver(Arc::new(CheckedResolver(policy.clone())))
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .timeout(timeout)
            .connect_timeout(timeout)
            .user_agent(concat!("taskmesh/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| format!("cannot build the webhook client: {e}"))?;
        Ok(Self { client, policy })
    }

    /// The policy this sender checks against.
    pub fn policy(&self) -> &EgressPolicy {
        &self.policy
    }

    /// One attempt, signed now: a fresh `webhook-timestamp` and signature every time.
    pub async fn send(&self, m: Message<'_>) -> Attempt {
        let url = match self.policy.check_url(m.url) {
            Ok(u) => u,
            Err(e) => return Attempt::Failed(Failure::Egress(e)),
        };
        let timestamp = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let signature = signature_header(m.secrets, m.id, timestamp, m.body);
        let sent = self
            .client
            .post(url)
            .header("content-type", "application/json")
            .header("webhook-id", m.id)
            .header("webhook-timestamp", timestamp.to_string())
            .header("webhook-signature", signature)
            .header("x-mcp-subscription-id", m.subscription)
            .body(m.body.to_vec())
            .send()
            .await;
        match sent {
            Ok(r) => {
                let code = r.status().as_u16();
                match code {
                    200..=299 => Attempt::Acked(code),
                    410 | 413 => Attempt::Refused(code),
                    500..=599 => Attempt::Failed(Failure::Http5xx(code)),
                    _ => Attempt::Failed(Failure::Http4xx(code)),
                }
            }
            Err(e) => Attempt::Failed(classify(&e)),
        }
    }
}

/// The most of a verification answer read.
const MAX_VERIFICATION_ANSWER: usize = 4_096;

impl Sender {
    /// Endpoint verification (the events extension's handshake): a signed POST of
    /// `{"type":"verification","challenge":...}` that the endpoint must answer 2xx with
    /// `{"challenge":...}`, the same nonce. `Err` is the category of what went wrong: the
    /// connection's (`connection_refused`, `timeout`, `tls_error`, refused addresses included),
    /// or `challenge_failed` for any answer that is not the echo.
    pub async fn verify(
        &self,
        url: &str,
        message_id: &str,
        subscription: &str,
        secret: &Secret,
        challenge: &str,
    ) -> Result<(), &'static str> {
        let body = serde_json::json!({"type": "verification", "challenge": challenge}).to_string();
        let url = self
            .policy
            .check_url(url)
            .map_err(|e| Failure::Egress(e).category())?;
        let timestamp = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let signature = signature_header(&[secret], message_id, timestamp, body.as_bytes());
        let mut r = self
            .client
            .post(url)
            .header("content-type", "application/json")
            .header("webhook-id", message_id)
            .header("webhook-timestamp", timestamp.to_string())
            .header("webhook-signature", signature)
            .header("x-mcp-subscription-id", subscription)
            .body(body)
            .send()
            .await
            .map_err(|e| classify(&e).category())?;
        if !r.status().is_success() {
            return Err("challenge_failed");
        }
        let mut answer = Vec::new();
        while let Some(chunk) = r.chunk().await.map_err(|e| classify(&e).category())? {
            answer.extend_from_slice(&chunk);
            if answer.len() > MAX_VERIFICATION_ANSWER {
                return Err("challenge_failed");
            }
        }
        let echoed = echoed_challenge(&answer).unwrap_or_default();
        if constant_time_eq(echoed.as_bytes(), challenge.as_bytes()) {
            Ok(())
        } else {
            Err("challenge_failed")
        }
    }
}

/// The `challenge` string of a JSON object answer.
fn echoed_challenge(answer: &[u8]) -> Option<String> {
    match serde_json::from_slice::<serde_json::Value>(answer).ok()? {
        serde_json::Value::Object(mut m) => match m.remove("challenge")? {
            serde_json::Value::String(c) => Some(c),
            _ => None,
        },
        _ => None,
    }
}

/// Equality that takes the same time whatever the bytes are (for equal lengths).
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// What a transport error was, from its chain of causes.
fn classify(e: &reqwest::Error) -> Failure {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        if let Some(egress) = c.downcast_ref::<EgressError>() {
            return Failure::Egress(egress.clone());
        }
        if c.downcast_ref::<rustls::Error>().is_some() {
            return Failure::Tls;
        }
        // An I/O error hides the error it wraps from `source()`: look inside.
        if let Some(inner) = c
            .downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::get_ref)
        {
            if let Some(egress) = inner.downcast_ref::<EgressError>() {
                return Failure::Egress(egress.clone());
            }
            if inner.downcast_ref::<rustls::Error>().is_some() {
                return Failure::Tls;
            }
        }
        cause = c.source();
    }
    if e.is_timeout() {
        Failure::Timeout
    } else {
        Failure::Connection
    }
}
