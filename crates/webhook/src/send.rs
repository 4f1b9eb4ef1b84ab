//! One delivery attempt: a signed POST of one message to one URL, through the checked egress,
//! and what came of it in the categories a subscription's status may show.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;

use crate::client::{system_tls, tls_with, Answer, Client, Keep};
use crate::egress::{EgressError, EgressPolicy, Endpoint};
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
    /// The receiver: a URL the egress policy passed ([`EgressPolicy::check_url`]).
    pub to: &'a Endpoint,
    /// The message id (`webhook-id`): the same on every attempt.
    pub id: &'a str,
    /// The subscription's id (`X-MCP-Subscription-Id`).
    pub subscription: &'a str,
    /// The raw JSON body, signed byte for byte.
    pub body: &'a [u8],
    /// The secrets to sign with: the current one first, then any a rotation still honours.
    pub secrets: &'a [&'a Secret],
}

/// Sends messages over HTTP/1.1: every connection opened to an address the egress policy
/// checked as it resolved the host, no proxy (a proxy would resolve names past the check), no
/// redirect followed, connections kept alive per destination.
#[derive(Clone)]
pub struct Sender {
    client: Arc<Client>,
    timeout: Duration,
}

impl std::fmt::Debug for Sender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sender")
            .field("policy", self.client.policy())
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// How long a connection to a receiver is kept idle for the next attempt.
const KEEP_IDLE: Duration = Duration::from_secs(60);

impl Sender {
    /// A sender with this policy, trusting the system's roots for https, giving up on an
    /// attempt after `timeout`, and keeping at most `idle_per_destination` idle connections to
    /// a destination.
    pub fn new(
        policy: EgressPolicy,
        timeout: Duration,
        idle_per_destination: usize,
    ) -> Result<Self, String> {
        Self::with_tls(policy, timeout, idle_per_destination, system_tls()?)
    }

    /// A sender that trusts `roots` for https instead of the system's.
    pub fn with_roots(
        policy: EgressPolicy,
        timeout: Duration,
        idle_per_destination: usize,
        roots: rustls::RootCertStore,
    ) -> Result<Self, String> {
        Self::with_tls(policy, timeout, idle_per_destination, tls_with(roots)?)
    }

    fn with_tls(
        policy: EgressPolicy,
        timeout: Duration,
        idle_per_destination: usize,
        tls: Arc<rustls::ClientConfig>,
    ) -> Result<Self, String> {
        let keep = Keep {
            idle_for: KEEP_IDLE,
            per_destination: idle_per_destination.max(1),
        };
        Ok(Self {
            client: Arc::new(Client::new(Arc::new(policy), tls, keep)),
            timeout,
        })
    }

    /// The policy this sender checks against.
    pub fn policy(&self) -> &EgressPolicy {
        self.client.policy()
    }

    /// One attempt, signed now: a fresh `webhook-timestamp` and signature every time.
    pub async fn send(&self, m: Message<'_>) -> Attempt {
        let body = Bytes::copy_from_slice(m.body);
        match self
            .post_signed(m.to, m.id, m.subscription, m.secrets, body, 0)
            .await
        {
            Err(f) => Attempt::Failed(f),
            Ok(answer) => match answer.status {
                code @ 200..=299 => Attempt::Acked(code),
                code @ (410 | 413) => Attempt::Refused(code),
                code @ 500..=599 => Attempt::Failed(Failure::Http5xx(code)),
                code => Attempt::Failed(Failure::Http4xx(code)),
            },
        }
    }

    /// POST `body` to `to` with the profile's headers, signed now with `secrets`, within the
    /// attempt's timeout; of the answer's body at most `limit` bytes are kept.
    async fn post_signed(
        &self,
        to: &Endpoint,
        id: &str,
        subscription: &str,
        secrets: &[&Secret],
        body: Bytes,
        limit: usize,
    ) -> Result<Answer, Failure> {
        let timestamp = unix_now();
        let signature = signature_header(secrets, id, timestamp, &body);
        let timestamp = timestamp.to_string();
        let headers = [
            ("content-type", "application/json"),
            ("webhook-id", id),
            ("webhook-timestamp", timestamp.as_str()),
            ("webhook-signature", signature.as_str()),
            ("x-mcp-subscription-id", subscription),
        ];
        let sent = self.client.post(to, &headers, body, limit);
        tokio::time::timeout(self.timeout, sent)
            .await
            .unwrap_or(Err(Failure::Timeout))
    }
}

/// A verification handshake to send.
#[derive(Debug, Clone, Copy)]
pub struct Challenge<'a> {
    /// Its `webhook-id` (`msg_verification_...`).
    pub message_id: &'a str,
    /// The subscription's id (`X-MCP-Subscription-Id`).
    pub subscription: &'a str,
    /// The secret it is signed with.
    pub secret: &'a Secret,
    /// The nonce the endpoint must echo.
    pub challenge: &'a str,
}

/// The most of a verification answer read.
const MAX_VERIFICATION_ANSWER: usize = 4_096;

impl Sender {
    /// Endpoint verification (the events extension's handshake): a signed POST of
    /// `{"type":"verification","challenge":...}` that the endpoint must answer 2xx with
    /// `{"challenge":...}`, the same nonce. `Err` is the category of what went wrong: the
    /// connection's (`connection_refused`, `timeout`, `tls_error`, refused addresses included),
    /// or `challenge_failed` for any answer that is not the echo.
    pub async fn verify(&self, to: &Endpoint, c: &Challenge<'_>) -> Result<(), &'static str> {
        let Challenge {
            message_id,
            subscription,
            secret,
            challenge,
        } = *c;
        let body = serde_json::json!({"type": "verification", "challenge": challenge}).to_string();
        let answer = self
            .post_signed(
                to,
                message_id,
                subscription,
                &[secret],
                Bytes::from(body),
                MAX_VERIFICATION_ANSWER,
            )
            .await
            .map_err(|f| f.category())?;
        if !(200..=299).contains(&answer.status) {
            return Err("challenge_failed");
        }
        let echoed = answer
            .body
            .as_deref()
            .and_then(echoed_challenge)
            .unwrap_or_default();
        if constant_time_eq(echoed.as_bytes(), challenge.as_bytes()) {
            Ok(())
        } else {
            Err("challenge_failed")
        }
    }
}

/// Now in Unix seconds.
fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
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
