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
//! The high-level [`Client`](crate::Client) is built on it; so are the test client and the
//! load generator, which send what they want (malformed bodies, missing or extra headers)
//! and look at the raw answers.

use std::collections::VecDeque;

use futures::stream::BoxStream;
use futures::StreamExt;
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
    http: reqwest::Client,
    url: String,
    headers: HeaderMap,
    session: RwLock<SessionHeaders>,
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
            http,
            url: url.to_string(),
            headers,
            session: RwLock::new(SessionHeaders::default()),
        }
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

    /// Send `version` as `Mcp-Protocol-Version` from now on (nothing when it is no valid
    /// header value).
    pub fn set_protocol_version(&self, version: &str) {
        self.session.write().version = HeaderValue::try_from(version).ok();
    }

    /// A request of `method` to the endpoint with the headers every request carries and the
    /// session's, to which more can be added.
    pub fn request(&self, method: Method) -> reqwest::RequestBuilder {
        let mut rb = self
            .http
            .request(method, &self.url)
            .headers(self.headers.clone());
        let session = self.session.read();
        if let Some(s) = &session.id {
            rb = rb.header(SESSION_ID, s.clone());
        }
        if let Some(v) = &session.version {
            rb = rb.header(PROTOCOL_VERSION, v.clone());
        }
        rb
    }

    /// POST `body` as `application/json`, accepting JSON or SSE, with `extra` headers added
    /// after the others. The first `Mcp-Session-Id` an answer carries becomes the session's.
    pub async fn post(
        &self,
        body: impl Into<reqwest::Body>,
        extra: &[(HeaderName, HeaderValue)],
    ) -> Result<Response, WireError> {
        let rb = self
            .request(Method::POST)
            .header(CONTENT_TYPE, "application/json")
            .header(ACCEPT, ACCEPT_JSON_OR_SSE)
            .body(body);
        let r = Response::of(with(rb, extra).send().await)?;
        if let Some(id) = r.headers.get(SESSION_ID) {
            let mut session = self.session.write();
            if session.id.is_none() {
                let mut id = id.clone();
                id.set_sensitive(true);
                session.id = Some(id);
            }
        }
        Ok(r)
    }

    /// GET the session's stream, with `extra` headers ([`LAST_EVENT_ID`] to resume one).
    pub async fn get(&self, extra: &[(HeaderName, HeaderValue)]) -> Result<Response, WireError> {
        let rb = self.request(Method::GET).header(ACCEPT, EVENT_STREAM);
        Response::of(with(rb, extra).send().await)
    }

    /// DELETE: end the session.
    pub async fn delete(&self) -> Result<Response, WireError> {
        Response::of(self.request(Method::DELETE).send().await)
    }
}

fn with(
    mut rb: reqwest::RequestBuilder,
    extra: &[(HeaderName, HeaderValue)],
) -> reqwest::RequestBuilder {
    for (k, v) in extra {
        rb = rb.header(k.clone(), v.clone());
    }
    rb
}

/// An answer: its status and headers, then its body.
pub struct Response {
    /// The HTTP status.
    pub status: StatusCode,
    /// The response headers.
    pub headers: HeaderMap,
    body: reqwest::Response,
}

impl Response {
    fn of(sent: reqwest::Result<reqwest::Response>) -> Result<Self, WireError> {
        let r = sent.map_err(|e| WireError::Send(e.without_url().to_string()))?;
        Ok(Self {
            status: r.status(),
            headers: r.headers().clone(),
            body: r,
        })
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

    /// The whole body, refused when it grows past `max` bytes.
    pub async fn bytes(self, max: usize) -> Result<Vec<u8>, WireError> {
        let mut body = self.body.bytes_stream();
        let mut all = Vec::new();
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(|e| WireError::Broken(e.without_url().to_string()))?;
            all.extend_from_slice(&chunk);
            if all.len() > max {
                return Err(WireError::TooLarge(max));
            }
        }
        Ok(all)
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
        Events {
            stream: self.body.bytes_stream().boxed(),
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
    Json(Vec<u8>),
    /// The SSE stream.
    Events(Events),
}

/// The events of an SSE body, as they arrive.
pub struct Events {
    stream: BoxStream<'static, reqwest::Result<bytes::Bytes>>,
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
                    return Some(Err(WireError::Broken(e.without_url().to_string())));
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
