//! The load generator's MCP session, on the client library's transport over its lean
//! connections ([`taskmesh_client::wire::HttpTransport::lean`]): `initialize` (the transport keeps the session id
//! it yields), `notifications/initialized`, then JSON-RPC requests carrying the session and
//! protocol-version headers over keep-alive connections. Answers come back as JSON or as a
//! short SSE stream (read with the library's SSE parser); either way the final JSON-RPC
//! response is returned. What is the generator's own: the bodies written without building a
//! JSON value, the answers checked through borrowed fields, failures counted by kind.

use std::borrow::Cow;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, AUTHORIZATION};
use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::{json, Value};
use taskmesh_client::sse::SseParser;
use taskmesh_client::wire::{
    HttpTransport, WireError, MCP_METHOD, MCP_NAME, PROTOCOL_VERSION as VERSION,
};

/// The protocol version the generator speaks.
pub const PROTOCOL_VERSION: &str = "2025-11-25";
/// The protocol version of a stateless client ([`Session::open_stateless`]).
pub const STATELESS_VERSION: &str = "2026-07-28";
/// The `_meta` of every request of a stateless client: its version and capabilities (the tasks
/// extension declared).
const STATELESS_META: &str = r#"{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}"#;

/// Why a request failed, as counted in reports.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Failure {
    /// The connection failed or timed out.
    Transport,
    /// An HTTP status other than 200.
    Http(u16),
    /// A JSON-RPC error answer, by code.
    Rpc(i64),
    /// The answer was not what the request must produce (the text says what).
    BadBody(&'static str),
    /// The target URL is not `http://host:port/path` (or `https://` with `--ca`).
    BadUrl,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Transport => f.write_str("transport"),
            Failure::Http(c) => write!(f, "http_{c}"),
            Failure::Rpc(c) => write!(f, "rpc_{c}"),
            Failure::BadBody(what) => write!(f, "bad_body_{what}"),
            Failure::BadUrl => f.write_str("bad_url"),
        }
    }
}

/// How long one request may take before it counts as a transport failure.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The authorities an `https://` target's certificate is checked against: set once per
/// process with [`trust_authority`] before any session on such a target opens.
static TLS_CLIENT: std::sync::OnceLock<std::sync::Arc<rustls::ClientConfig>> =
    std::sync::OnceLock::new();

/// Trust the certificate authority in the PEM file `ca` for `https://` targets (`loadgen --ca`).
pub fn trust_authority(ca: &std::path::Path) -> anyhow::Result<()> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in taskmesh_tls::read_certs(ca)? {
        roots.add(cert)?;
    }
    let mut config = rustls::ClientConfig::builder_with_provider(taskmesh_tls::provider())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    TLS_CLIENT
        .set(std::sync::Arc::new(config))
        .map_err(|_| anyhow::anyhow!("the TLS authority is set once"))
}

/// One MCP session on one server. Its requests go over the keep-alive HTTP/1.1 connections
/// its transport keeps (one per request in flight, reused after each answer): the generator
/// spends as little as it can per request, so that what it measures is the server.
pub struct Session {
    wire: HttpTransport,
    /// Protocol 2026-07-28: no session; every request carries its `_meta` and routing
    /// headers.
    stateless: bool,
    next_id: AtomicI64,
}

impl Session {
    /// Open a session on `url` (`http://host:port/path`): `initialize` and
    /// `notifications/initialized`.
    pub async fn open(url: &str, token: Option<&str>) -> Result<Self, Failure> {
        let s = Self::at(url, token, false).await?;
        let body = json!({
            "jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {
                "protocolVersion": PROTOCOL_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "taskmesh-loadgen", "version": "0.1.0"}
            }
        });
        let answer: Value = parse_json(&s.post(body.to_string(), &[]).await?)?;
        if answer["id"] != 0 || answer["result"]["protocolVersion"].as_str().is_none() {
            return Err(Failure::BadBody("initialize"));
        }
        let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        match s.post(note.to_string(), &[]).await {
            Err(Failure::Http(202)) => Ok(s),
            Err(f) => Err(f),
            Ok(_) => Err(Failure::Http(200)),
        }
    }

    /// A client of protocol 2026-07-28 on `url`, declaring the tasks extension: no session,
    /// so nothing is sent until the first request.
    pub async fn open_stateless(url: &str, token: Option<&str>) -> Result<Self, Failure> {
        Self::at(url, token, true).await
    }

    /// A client of `url` (`http://host:port/path`) that has sent nothing yet.
    async fn at(url: &str, token: Option<&str>, stateless: bool) -> Result<Self, Failure> {
        let tls = if url.starts_with("https://") {
            Some(TLS_CLIENT.get().ok_or(Failure::BadUrl)?.clone())
        } else {
            None
        };
        let mut headers = HeaderMap::new();
        if let Some(t) = token {
            let bearer =
                HeaderValue::from_str(&format!("Bearer {t}")).map_err(|_| Failure::BadUrl)?;
            headers.insert(AUTHORIZATION, bearer);
        }
        let wire = HttpTransport::lean(url, headers, tls)
            .await
            .map_err(|e| match e {
                WireError::Url(_) => Failure::BadUrl,
                _ => Failure::Transport,
            })?;
        if !stateless {
            wire.set_protocol_version(PROTOCOL_VERSION);
        }
        Ok(Session {
            wire,
            stateless,
            next_id: AtomicI64::new(1),
        })
    }

    /// POST one JSON-RPC message with `extra` headers; the JSON-RPC response its answer
    /// carries when the status is 200, else `Failure::Http(status)` (the body read all the
    /// same, so that the connection is reused).
    async fn post(
        &self,
        body: String,
        extra: &[(HeaderName, HeaderValue)],
    ) -> Result<Bytes, Failure> {
        let exchange = async {
            let r = self.wire.post(body, extra).await?;
            let status = r.status().as_u16();
            let sse = r.is_sse();
            Ok::<_, WireError>((status, sse, r.bytes(usize::MAX).await?))
        };
        let (status, sse, bytes) = tokio::time::timeout(REQUEST_TIMEOUT, exchange)
            .await
            .map_err(|_| Failure::Transport)?
            .map_err(|_| Failure::Transport)?;
        if status != 200 {
            return Err(Failure::Http(status));
        }
        answer_message(sse, bytes)
    }

    /// Send a request; its answer's JSON-RPC message (checked to carry this request's id and
    /// no error), as bytes for the caller to decode.
    async fn exchange(&self, method: &str, params: &Value) -> Result<Bytes, Failure> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let msg = if self.stateless {
            // The `_meta` every request of 2026-07-28 carries, spliced in front of the params.
            let p = params.to_string();
            let rest = p.strip_prefix('{').unwrap_or("}");
            let sep = if rest.starts_with('}') { "" } else { "," };
            let body = format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{{"_meta":{STATELESS_META}{sep}{rest}}}"#
            );
            let mut route = vec![
                (VERSION, HeaderValue::from_static(STATELESS_VERSION)),
                (
                    MCP_METHOD,
                    HeaderValue::from_str(method).map_err(|_| Failure::BadUrl)?,
                ),
            ];
            let name = params
                .get("taskId")
                .or_else(|| params.get("name"))
                .and_then(Value::as_str);
            if let Some(n) = name {
                route.push((
                    MCP_NAME,
                    HeaderValue::from_str(n).map_err(|_| Failure::BadUrl)?,
                ));
            }
            self.post(body, &route).await?
        } else {
            let body =
                format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{params}}}"#);
            self.post(body, &[]).await?
        };
        let head: Head = serde_json::from_slice(&msg).map_err(|_| Failure::BadBody("json"))?;
        if let Some(e) = head.error {
            return Err(Failure::Rpc(e.code));
        }
        if head.id != Some(id) {
            return Err(Failure::BadBody("id"));
        }
        Ok(msg)
    }

    /// Send a request; returns its `result`.
    pub async fn call(&self, method: &str, params: Value) -> Result<Value, Failure> {
        let msg = self.exchange(method, &params).await?;
        let mut answer: Value = parse_json(&msg)?;
        match answer.get_mut("result") {
            Some(r) => Ok(r.take()),
            None => Err(Failure::BadBody("no_result")),
        }
    }

    /// `tasks/get`; the task's status, after checking that the answer is a task named `id`.
    /// The answer is decoded into borrowed fields, not a `Value`, to keep the generator cheap.
    pub async fn task_status(&self, task_id: &str) -> Result<String, Failure> {
        let msg = self
            .exchange("tasks/get", &json!({ "taskId": task_id }))
            .await?;
        let a: GetAnswer = serde_json::from_slice(&msg).map_err(|_| Failure::BadBody("json"))?;
        match a.result {
            Some(t) if t.task_id == task_id && t.created_at.is_some() => Ok(t.status.into_owned()),
            Some(_) => Err(Failure::BadBody("task")),
            None => Err(Failure::BadBody("no_result")),
        }
    }
}

#[derive(Deserialize)]
struct RpcError {
    code: i64,
}

/// The parts of any JSON-RPC answer that every request checks.
#[derive(Deserialize)]
struct Head {
    id: Option<i64>,
    error: Option<RpcError>,
}

/// Whether a message is a response (has a `result` or an `error`).
#[derive(Deserialize)]
struct Outcome {
    result: Option<IgnoredAny>,
    error: Option<IgnoredAny>,
}

#[derive(Deserialize)]
struct GetAnswer<'a> {
    #[serde(borrow)]
    result: Option<TaskFields<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TaskFields<'a> {
    #[serde(borrow)]
    task_id: Cow<'a, str>,
    #[serde(borrow)]
    status: Cow<'a, str>,
    #[serde(borrow)]
    created_at: Option<Cow<'a, str>>,
}

fn parse_json(msg: &[u8]) -> Result<Value, Failure> {
    serde_json::from_slice(msg).map_err(|_| Failure::BadBody("json"))
}

/// The JSON-RPC response in an answer: the JSON body, or the last JSON-RPC response of an SSE
/// stream (requests and notifications before it are skipped).
fn answer_message(sse: bool, bytes: Bytes) -> Result<Bytes, Failure> {
    if !sse {
        return Ok(bytes);
    }
    let events = SseParser::new(usize::MAX)
        .feed(&bytes)
        .map_err(|_| Failure::BadBody("sse"))?;
    events
        .into_iter()
        .rev()
        .find(|e| {
            serde_json::from_slice::<Outcome>(&e.data)
                .is_ok_and(|o| o.result.is_some() || o.error.is_some())
        })
        .map(|e| Bytes::from(e.data))
        .ok_or(Failure::BadBody("sse"))
}
