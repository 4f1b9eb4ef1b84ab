//! A minimal MCP Streamable HTTP client, as a load generator needs it: `initialize` (which
//! yields the session id), `notifications/initialized`, then JSON-RPC requests carrying the
//! session and protocol-version headers over keep-alive connections. Answers come back as
//! JSON or as a short SSE stream; either way the final JSON-RPC response is returned.

use std::borrow::Cow;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper::header::{HeaderMap, HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_TYPE, HOST};
use hyper::{Request, Uri};
use hyper_util::rt::TokioIo;
use serde::Deserialize;
use serde_json::{json, Value};

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

type Sender = SendRequest<Full<Bytes>>;

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

/// Where a session's requests go: the endpoint, resolved once, and the fixed request headers.
struct Endpoint {
    addr: SocketAddr,
    /// For `https://`: the TLS configuration and the name the certificate must carry.
    tls: Option<(
        std::sync::Arc<rustls::ClientConfig>,
        rustls::pki_types::ServerName<'static>,
    )>,
    authority: HeaderValue,
    path: String,
}

/// One MCP session on one server. Its requests go over keep-alive HTTP/1.1 connections that
/// the session keeps (one per request in flight, reused after each answer), with the request
/// line and headers prepared once: the generator spends as little as it can per request, so
/// that what it measures is the server.
pub struct Session {
    endpoint: Endpoint,
    /// Protocol 2026-07-28: no session; every request carries its `_meta` and routing
    /// headers.
    stateless: bool,
    session_id: Option<HeaderValue>,
    bearer: Option<HeaderValue>,
    next_id: AtomicI64,
    idle: Mutex<Vec<Sender>>,
}

impl Session {
    /// Open a session on `url` (`http://host:port/path`): `initialize` and
    /// `notifications/initialized`.
    pub async fn open(url: &str, token: Option<&str>) -> Result<Self, Failure> {
        let mut s = Self::at(url, token, false).await?;
        let body = json!({
            "jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {
                "protocolVersion": PROTOCOL_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "taskmesh-loadgen", "version": "0.1.0"}
            }
        });
        let (headers, bytes) = s.post(body.to_string()).await?;
        s.session_id = headers.get("mcp-session-id").cloned();
        let answer: Value = parse_json(&answer_message(&headers, &bytes)?)?;
        if answer["id"] != 0 || answer["result"]["protocolVersion"].as_str().is_none() {
            return Err(Failure::BadBody("initialize"));
        }
        let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        match s.post(note.to_string()).await {
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
        let uri: Uri = url.parse().map_err(|_| Failure::BadUrl)?;
        let auth = uri.authority().ok_or(Failure::BadUrl)?;
        let (tls, port) = match uri.scheme_str() {
            Some("http") => (None, auth.port_u16().unwrap_or(80)),
            Some("https") => {
                let config = TLS_CLIENT.get().ok_or(Failure::BadUrl)?.clone();
                let host = auth.host().trim_start_matches('[').trim_end_matches(']');
                let name = rustls::pki_types::ServerName::try_from(host.to_string())
                    .map_err(|_| Failure::BadUrl)?;
                (Some((config, name)), auth.port_u16().unwrap_or(443))
            }
            _ => return Err(Failure::BadUrl),
        };
        let addr = tokio::net::lookup_host((auth.host(), port))
            .await
            .map_err(|_| Failure::Transport)?
            .next()
            .ok_or(Failure::Transport)?;
        Ok(Session {
            endpoint: Endpoint {
                addr,
                tls,
                authority: HeaderValue::from_str(auth.as_str()).map_err(|_| Failure::BadUrl)?,
                path: uri.path().to_string(),
            },
            stateless,
            session_id: None,
            bearer: match token {
                Some(t) => Some(
                    HeaderValue::from_str(&format!("Bearer {t}")).map_err(|_| Failure::BadUrl)?,
                ),
                None => None,
            },
            next_id: AtomicI64::new(1),
            idle: Mutex::new(Vec::new()),
        })
    }

    async fn connect(&self) -> Result<Sender, Failure> {
        let tcp = tokio::net::TcpStream::connect(self.endpoint.addr)
            .await
            .map_err(|_| Failure::Transport)?;
        let _ = tcp.set_nodelay(true);
        let Some((config, name)) = &self.endpoint.tls else {
            let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
                .await
                .map_err(|_| Failure::Transport)?;
            tokio::spawn(conn);
            return Ok(sender);
        };
        let stream = tokio_rustls::TlsConnector::from(config.clone())
            .connect(name.clone(), tcp)
            .await
            .map_err(|_| Failure::Transport)?;
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|_| Failure::Transport)?;
        tokio::spawn(conn);
        Ok(sender)
    }

    /// POST one JSON-RPC message; the answer's headers and whole body when the status is 200,
    /// else `Failure::Http(status)`.
    async fn post(&self, body: String) -> Result<(HeaderMap, Bytes), Failure> {
        self.post_with(body, None).await
    }

    /// [`Session::post`], with the 2026-07-28 routing headers `(method, name)` when given.
    async fn post_with(
        &self,
        body: String,
        route: Option<(&str, Option<&str>)>,
    ) -> Result<(HeaderMap, Bytes), Failure> {
        let reused = self.idle.lock().expect("idle connections").pop();
        let mut sender = match reused {
            Some(mut s) => match s.ready().await {
                Ok(()) => s,
                Err(_) => self.connect().await?,
            },
            None => self.connect().await?,
        };
        let mut req = Request::post(self.endpoint.path.as_str())
            .body(Full::new(Bytes::from(body)))
            .expect("request");
        let h = req.headers_mut();
        h.insert(HOST, self.endpoint.authority.clone());
        h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        h.insert(
            ACCEPT,
            HeaderValue::from_static("application/json, text/event-stream"),
        );
        match route {
            Some((method, name)) => {
                h.insert(
                    "mcp-protocol-version",
                    HeaderValue::from_static(STATELESS_VERSION),
                );
                h.insert(
                    "mcp-method",
                    HeaderValue::from_str(method).map_err(|_| Failure::BadUrl)?,
                );
                if let Some(n) = name {
                    h.insert(
                        "mcp-name",
                        HeaderValue::from_str(n).map_err(|_| Failure::BadUrl)?,
                    );
                }
            }
            None => {
                h.insert(
                    "mcp-protocol-version",
                    HeaderValue::from_static(PROTOCOL_VERSION),
                );
            }
        }
        if let Some(sid) = &self.session_id {
            h.insert("mcp-session-id", sid.clone());
        }
        if let Some(b) = &self.bearer {
            h.insert(AUTHORIZATION, b.clone());
        }
        let exchange = async {
            let resp = sender
                .send_request(req)
                .await
                .map_err(|_| Failure::Transport)?;
            let (parts, body) = resp.into_parts();
            let bytes = body
                .collect()
                .await
                .map_err(|_| Failure::Transport)?
                .to_bytes();
            Ok::<_, Failure>((parts, bytes))
        };
        let (parts, bytes) = tokio::time::timeout(REQUEST_TIMEOUT, exchange)
            .await
            .map_err(|_| Failure::Transport)??;
        self.idle.lock().expect("idle connections").push(sender);
        if parts.status != 200 {
            return Err(Failure::Http(parts.status.as_u16()));
        }
        Ok((parts.headers, bytes))
    }

    /// Send a request; its answer's JSON-RPC message (checked to carry this request's id and
    /// no error), as bytes for the caller to decode.
    async fn exchange(&self, method: &str, params: &Value) -> Result<Bytes, Failure> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (headers, bytes) = if self.stateless {
            // The `_meta` every request of 2026-07-28 carries, spliced in front of the params.
            let p = params.to_string();
            let rest = p.strip_prefix('{').unwrap_or("}");
            let sep = if rest.starts_with('}') { "" } else { "," };
            let body = format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{{"_meta":{STATELESS_META}{sep}{rest}}}"#
            );
            let name = params
                .get("taskId")
                .or_else(|| params.get("name"))
                .and_then(Value::as_str);
            self.post_with(body, Some((method, name))).await?
        } else {
            let body =
                format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{params}}}"#);
            self.post(body).await?
        };
        let msg = answer_message(&headers, &bytes)?;
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
fn answer_message(headers: &HeaderMap, bytes: &Bytes) -> Result<Bytes, Failure> {
    let sse = headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|c| c.starts_with("text/event-stream"));
    if !sse {
        return Ok(bytes.clone());
    }
    let text = std::str::from_utf8(bytes).map_err(|_| Failure::BadBody("utf8"))?;
    text.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(str::trim)
        .rfind(|d| {
            serde_json::from_str::<Value>(d)
                .is_ok_and(|v| v.get("result").is_some() || v.get("error").is_some())
        })
        .map(|d| Bytes::copy_from_slice(d.as_bytes()))
        .ok_or(Failure::BadBody("sse"))
}
