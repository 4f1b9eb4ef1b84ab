//! The low layer of the client: HTTP exchanges with an MCP Streamable HTTP endpoint, with no
//! idea of what the messages mean.
//!
//! An [`HttpTransport`] is one endpoint: the HTTP client the requests go through, the URL, the
//! headers every request carries (an `Authorization` header, say) and the session's headers
//! ([`SessionHeaders`]: `Mcp-Session-Id` once the server gave one, `Mcp-Protocol-Version`
//! once a version is agreed). [`HttpTransport::post`] sends one body (a JSON-RPC message, or
//! anything else: the transport does not look at it) with the headers asked for on top, and
//! returns the [`Response`]: its status and headers, and a body read either whole
//! ([`Response::bytes`], [`Response::text`]) or as the SSE events it carries
//! ([`Response::events`], parsed by [`SseParser`]).
//! [`HttpTransport::get`] opens the session's GET stream (or resumes one with
//! [`LAST_EVENT_ID`]), [`HttpTransport::delete`] ends the session.
//!
//! A transport reaches its endpoint through a general HTTP client ([`HttpTransport::new`]:
//! any `reqwest::Client`, with its TLS, timeouts and pool) or through lean connections of its
//! own ([`HttpTransport::lean`], in `lean.rs`: HTTP/1.1 kept alive, nothing else), for callers
//! whose own cost per request counts.
//!
//! The high-level [`Client`](crate::Client) is built on it; so are the test client and the
//! load generator, which send what they want (malformed bodies, missing or extra headers)
//! and look at the raw answers.

mod lean;

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::Bytes;
use futures::stream::BoxStream;
use futures::StreamExt;
use http_body_util::BodyExt;
use parking_lot::RwLock;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, ACCEPT, CONTENT_TYPE};
use reqwest::{Method, StatusCode};

use crate::sse::{SseEvent, SseParser};

/// `Mcp-Session-Id`: the session a request belongs to.
pub const SESSION_ID: HeaderName = HeaderName::from_static("mcp-session-id");
/// `Mcp-Protocol-Version`: the protocol version a request speaks.
pub const PROTOCOL_VERSION: HeaderName = HeaderName::from_static("mcp-protocol-version");
/// `Mcp-Method`: the method of a request (protocol 2026-07-28).
pub const MCP_METHOD: HeaderName = HeaderName::from_static("mcp-method");
/// `Mcp-Name`: the tool or task a request names (protocol 2026-07-28).
pub const MCP_NAME: HeaderName = HeaderName::from_static("mcp-name");
/// `Last-Event-ID`: where a resumed stream goes on from.
pub const LAST_EVENT_ID: HeaderName = HeaderName::from_static("last-event-id");
/// The `Accept` of a POST: the answer may be JSON or an SSE stream.
pub const ACCEPT_JSON_OR_SSE: &str = "application/json, text/event-stream";
/// The content type of an SSE stream.
pub const EVENT_STREAM: &str = "text/event-stream";

/// Why an exchange failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The URL is not one the transport reaches.
    #[error("not a URL this transport reaches: {0}")]
    Url(String),
    /// The request could not be sent or got no answer (no connection, a timeout).
    #[error("{0}")]
    Send(String),
    /// The body of the answer broke off.
    #[error("the stream broke off: {0}")]
    Broken(String),
    /// A message (a JSON body, an SSE event) larger than allowed.
    #[error("a message over {0} bytes")]
    TooLarge(usize),
}

/// The headers that tie a request to a session.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionHeaders {
    /// `Mcp-Session-Id`, once the server gave one.
    pub id: Option<HeaderValue>,
    /// `Mcp-Protocol-Version`, once a version is agreed.
    pub version: Option<HeaderValue>,
}

/// One Streamable HTTP endpoint.
pub struct HttpTransport {
    backend: Backend,
    url: String,
    headers: HeaderMap,
    session: RwLock<SessionHeaders>,
    /// `Authorization`, when it changes during the transport's life (an OAuth token renewed).
    authorization: RwLock<Option<HeaderValue>>,
}

/// How the requests reach the endpoint.
enum Backend {
    /// Through a general HTTP client, and `url` parsed once when it parses (else every request
    /// fails as it is sent).
    General(reqwest::Client, Option<reqwest::Url>),
    /// Through connections of the transport's own.
    Lean(lean::Lean),
}

/// An HTTP client as the transport wants one by default: no delay on its sockets.
pub fn default_http() -> reqwest::Client {
    reqwest::Client::builder()
        .tcp_nodelay(true)
        .build()
        .unwrap_or_default()
}

impl HttpTransport {
    /// The endpoint `url`, reached through `http`, with `headers` on every request and no
    /// session yet.
    pub fn new(http: reqwest::Client, url: &str, headers: HeaderMap) -> Self {
        Self {
            backend: Backend::General(http, reqwest::Url::parse(url).ok()),
            url: url.to_string(),
            headers,
            session: RwLock::new(SessionHeaders::default()),
            authorization: RwLock::new(None),
        }
    }

    /// The endpoint `url` (`http://`, or `https://` checked with `tls`), its host resolved
    /// now, reached over HTTP/1.1 connections of the transport's own, kept alive and reused
    /// (one per request in flight): the least a request can cost, for callers that send many.
    /// Nothing but the answer's body comes between the request and its connection: no
    /// timeout (the caller bounds what it awaits), no redirect, no proxy. A connection is
    /// reused once the body of its answer was read whole ([`Response::bytes`]).
    pub async fn lean(
        url: &str,
        headers: HeaderMap,
        tls: Option<Arc<rustls::ClientConfig>>,
    ) -> Result<Self, WireError> {
        Ok(Self {
            backend: Backend::Lean(lean::Lean::new(url, tls).await?),
            url: url.to_string(),
            headers,
            session: RwLock::new(SessionHeaders::default()),
            authorization: RwLock::new(None),
        })
    }

    /// The endpoint's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The session's headers as they are now.
    pub fn session(&self) -> SessionHeaders {
        self.session.read().clone()
    }

    /// Send `session` with the requests from now on.
    pub fn set_session(&self, session: SessionHeaders) {
        *self.session.write() = session;
    }

    /// Send `Authorization: Bearer {token}` from now on, in place of any `Authorization` of the
    /// transport's headers (nothing changes when it is no valid header value).
    pub fn set_bearer(&self, token: &str) {
        if let Ok(mut v) = HeaderValue::try_from(format!("Bearer {token}")) {
            v.set_sensitive(true);
            *self.authorization.write() = Some(v);
        }
    }

    /// Send `version` as `Mcp-Protocol-Version` from now on (nothing when it is no valid
    /// header value).
    pub fn set_protocol_version(&self, version: &str) {
        self.session.write().version = HeaderValue::try_from(version).ok();
    }

    /// The headers of a request: those of every request, the session's, `accept`, the
    /// content type when there is a body, then `extra` added after the others.
    fn headers(
        &self,
        accept: &'static str,
        json: bool,
        extra: &[(HeaderName, HeaderValue)],
    ) -> HeaderMap {
        let mut h = HeaderMap::new();
        let authorization = self.authorization.read().clone();
        for (k, v) in &self.headers {
            if authorization.is_none() || k != reqwest::header::AUTHORIZATION {
                h.append(k, v.clone());
            }
        }
        if let Some(a) = authorization {
            h.append(reqwest::header::AUTHORIZATION, a);
        }
        let session = self.session.read();
        if let Some(s) = &session.id {
            h.append(SESSION_ID, s.clone());
        }
        if let Some(v) = &session.version {
            h.append(PROTOCOL_VERSION, v.clone());
        }
        drop(session);
        if json {
            h.append(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        }
        h.append(ACCEPT, HeaderValue::from_static(accept));
        for (k, v) in extra {
            h.append(k.clone(), v.clone());
        }
        h
    }

    async fn send(
        &self,
        method: Method,
        headers: HeaderMap,
        body: reqwest::Body,
    ) -> Result<Response, WireError> {
        match &self.backend {
            Backend::General(http, parsed) => {
                let rb = match parsed {
                    Some(url) => http.request(method, url.clone()),
                    None => http.request(method, &self.url),
                };
                let mut r = rb
                    .headers(headers)
                    .body(body)
                    .send()
                    .await
                    .map_err(|e| WireError::Send(e.without_url().to_string()))?;
                Ok(Response {
                    status: r.status(),
                    headers: std::mem::take(r.headers_mut()),
                    body: Incoming::General(r),
                })
            }
            Backend::Lean(l) => {
                let (resp, sender) = l.send(method, headers, body).await?;
                let (parts, body) = resp.into_parts();
                Ok(Response {
                    status: parts.status,
                    headers: parts.headers,
                    body: Incoming::Lean(body, Some((sender, l.idle.clone()))),
                })
            }
        }
    }

    /// POST `body` as `application/json`, accepting JSON or SSE, with `extra` headers added
    /// after the others. The first `Mcp-Session-Id` an answer carries becomes the session's.
    pub async fn post(
        &self,
        body: impl Into<reqwest::Body>,
        extra: &[(HeaderName, HeaderValue)],
    ) -> Result<Response, WireError> {
        let headers = self.headers(ACCEPT_JSON_OR_SSE, true, extra);
        let r = self.send(Method::POST, headers, body.into()).await?;
        if self.session.read().id.is_none() {
            if let Some(id) = r.headers().get(SESSION_ID) {
                let mut session = self.session.write();
                if session.id.is_none() {
                    let mut id = id.clone();
                    id.set_sensitive(true);
                    session.id = Some(id);
                }
            }
        }
        Ok(r)
    }

    /// GET the session's stream, with `extra` headers ([`LAST_EVENT_ID`] to resume one).
    pub async fn get(&self, extra: &[(HeaderName, HeaderValue)]) -> Result<Response, WireError> {
        let headers = self.headers(EVENT_STREAM, false, extra);
        self.send(Method::GET, headers, reqwest::Body::from(Bytes::new()))
            .await
    }

    /// DELETE: end the session.
    pub async fn delete(&self) -> Result<Response, WireError> {
        let mut headers = self.headers("*/*", false, &[]);
        headers.remove(ACCEPT);
        self.send(Method::DELETE, headers, reqwest::Body::from(Bytes::new()))
            .await
    }
}

/// An answer: its status and headers, then its body.
pub struct Response {
    status: StatusCode,
    headers: HeaderMap,
    body: Incoming,
}

/// The body of an answer, as the backend gives it.
enum Incoming {
    General(reqwest::Response),
    /// With the connection, put back among the idle ones once the body is read whole.
    Lean(hyper::body::Incoming, Option<(lean::Sender, lean::Idle)>),
}

impl Response {
    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The response headers.
    pub fn headers(&self) -> &HeaderMap {
        &self.headers
    }

    /// The `Content-Type` (empty when absent or not visible ASCII).
    pub fn content_type(&self) -> &str {
        self.headers
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    }

    /// Whether the body is an SSE stream.
    pub fn is_sse(&self) -> bool {
        self.content_type().starts_with(EVENT_STREAM)
    }

    /// The next piece of the body, `None` at its end.
    async fn chunk(&mut self) -> Result<Option<Bytes>, WireError> {
        match &mut self.body {
            Incoming::General(r) => r
                .chunk()
                .await
                .map_err(|e| WireError::Broken(e.without_url().to_string())),
            Incoming::Lean(body, conn) => loop {
                let Some(frame) = body.frame().await else {
                    if let Some((sender, idle)) = conn.take() {
                        idle.lock().push(sender);
                    }
                    return Ok(None);
                };
                let frame = frame.map_err(|e| WireError::Broken(e.to_string()))?;
                if let Ok(data) = frame.into_data() {
                    return Ok(Some(data));
                }
            },
        }
    }

    /// The whole body, refused when it grows past `max` bytes.
    pub async fn bytes(mut self, max: usize) -> Result<Bytes, WireError> {
        let Some(first) = self.chunk().await? else {
            return Ok(Bytes::new());
        };
        if first.len() > max {
            return Err(WireError::TooLarge(max));
        }
        let Some(second) = self.chunk().await? else {
            return Ok(first);
        };
        let mut all = Vec::with_capacity(first.len() + second.len());
        all.extend_from_slice(&first);
        let mut next = Some(second);
        while let Some(chunk) = next {
            all.extend_from_slice(&chunk);
            if all.len() > max {
                return Err(WireError::TooLarge(max));
            }
            next = self.chunk().await?;
        }
        Ok(all.into())
    }

    /// The whole body as text (invalid UTF-8 replaced), empty when it could not be read.
    pub async fn text(self) -> String {
        match self.bytes(usize::MAX).await {
            Ok(b) => String::from_utf8_lossy(&b).into_owned(),
            Err(_) => String::new(),
        }
    }

    /// The body read as SSE events, none of more than `max` bytes.
    pub fn events(self, max: usize) -> Events {
        let stream = futures::stream::unfold(self, |mut r| async move {
            match r.chunk().await {
                Ok(Some(c)) => Some((Ok(c), r)),
                Ok(None) => None,
                Err(e) => Some((Err(e), r)),
            }
        });
        Events {
            stream: stream.boxed(),
            parser: SseParser::new(max),
            ready: VecDeque::new(),
            max,
        }
    }

    /// The body as the answer to a POST carries it: a JSON body read whole (at most `max`
    /// bytes), or the stream of SSE events when it is one.
    pub async fn body(self, max: usize) -> Result<Body, WireError> {
        if self.is_sse() {
            Ok(Body::Events(self.events(max)))
        } else {
            Ok(Body::Json(self.bytes(max).await?))
        }
    }
}

/// The body of an answer to a POST.
pub enum Body {
    /// The whole body, when it is not an SSE stream (a JSON-RPC message, or nothing).
    Json(Bytes),
    /// The SSE stream.
    Events(Events),
}

/// The events of an SSE body, as they arrive.
pub struct Events {
    stream: BoxStream<'static, Result<Bytes, WireError>>,
    parser: SseParser,
    ready: VecDeque<SseEvent>,
    max: usize,
}

impl Events {
    /// The next event, `None` when the stream ended, or why it broke (then it is over).
    pub async fn next(&mut self) -> Option<Result<SseEvent, WireError>> {
        loop {
            if let Some(e) = self.ready.pop_front() {
                return Some(Ok(e));
            }
            let chunk = match self.stream.next().await? {
                Ok(c) => c,
                Err(e) => {
                    self.close();
                    return Some(Err(e));
                }
            };
            let mut got = Vec::new();
            if self.parser.feed_into(&chunk, &mut got).is_err() {
                self.close();
                return Some(Err(WireError::TooLarge(self.max)));
            }
            self.ready.extend(got);
        }
    }

    /// Drop the connection, as a broken network would; the events already parsed are still
    /// returned.
    pub fn close(&mut self) {
        self.stream = futures::stream::empty().boxed();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A server that answers every request on a connection with an SSE body of two events
    /// and a session id, and sends the head of each request it read to `heads`.
    async fn server() -> (String, tokio::sync::mpsc::UnboundedReceiver<String>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}/mcp", listener.local_addr().expect("addr"));
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let tx = tx.clone();
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    loop {
                        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                            match conn.read(&mut chunk).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                            }
                            continue;
                        };
                        let head = String::from_utf8_lossy(&buf[..end]).to_lowercase();
                        let len: usize = head
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length: "))
                            .and_then(|v| v.trim().parse().ok())
                            .unwrap_or(0);
                        while buf.len() < end + 4 + len {
                            match conn.read(&mut chunk).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                            }
                        }
                        buf.drain(..end + 4 + len);
                        let _ = tx.send(head);
                        let body = "id: 1\nretry: 5\n\n: ping\n\ndata: {\"id\":1,\ndata: \"result\":{}}\n\n";
                        let answer = format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nmcp-session-id: s-1\r\ncontent-length: {}\r\n\r\n{body}",
                            body.len()
                        );
                        if conn.write_all(answer.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        (url, rx)
    }

    async fn exchange_twice(
        wire: &HttpTransport,
        heads: &mut tokio::sync::mpsc::UnboundedReceiver<String>,
    ) {
        wire.set_protocol_version("2025-11-25");
        for round in 0..2 {
            let extra = [(MCP_METHOD, HeaderValue::from_static("ping"))];
            let r = wire.post("{}", &extra).await.expect("post");
            assert_eq!(r.status(), StatusCode::OK);
            assert!(r.is_sse());
            let Body::Events(mut events) = r.body(1024).await.expect("body") else {
                panic!("not SSE");
            };
            let first = events.next().await.expect("an event").expect("parsed");
            assert_eq!((first.id.as_deref(), first.retry), (Some("1"), Some(5)));
            let second = events.next().await.expect("an event").expect("parsed");
            assert_eq!(second.data, b"{\"id\":1,\n\"result\":{}}");
            assert!(events.next().await.is_none());
            let head = heads.recv().await.expect("a request");
            assert!(head.starts_with("post /mcp http/1.1"), "{head}");
            assert!(head.contains("mcp-method: ping"), "{head}");
            assert!(head.contains("authorization: bearer t"), "{head}");
            assert!(head.contains("mcp-protocol-version: 2025-11-25"), "{head}");
            assert_eq!(head.contains("mcp-session-id: s-1"), round == 1, "{head}");
        }
        assert_eq!(
            wire.session().id,
            Some(HeaderValue::from_static("s-1")),
            "the session id of the first answer is kept"
        );
    }

    fn bearer() -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            reqwest::header::AUTHORIZATION,
            HeaderValue::from_static("Bearer t"),
        );
        h
    }

    #[tokio::test]
    async fn both_backends_send_the_session_headers_and_read_sse() {
        let (url, mut heads) = server().await;
        let general = HttpTransport::new(default_http(), &url, bearer());
        exchange_twice(&general, &mut heads).await;
        let lean = HttpTransport::lean(&url, bearer(), None)
            .await
            .expect("lean");
        exchange_twice(&lean, &mut heads).await;
    }
}
