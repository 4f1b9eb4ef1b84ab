//! The Streamable HTTP transport: every message the client sends is a POST; the answer to a
//! request comes as JSON or on an SSE stream, with the server's messages about that request
//! before it; the session id from `initialize` goes with every later request; a GET stream,
//! when the server offers one, carries what belongs to no request (`list_changed`).

use std::sync::{Arc, Weak};
use std::time::Duration;

use futures::StreamExt;
use parking_lot::RwLock;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, ACCEPT, CONTENT_TYPE};
use reqwest::StatusCode;

use crate::sse::SseReader;
use crate::{ClientError, HttpSpec, Inner};

const SESSION: &str = "mcp-session-id";
const VERSION: &str = "mcp-protocol-version";
/// The pause before the GET stream is opened again after it ended.
const LISTEN_PAUSE: Duration = Duration::from_secs(1);

pub(crate) struct Http {
    http: reqwest::Client,
    url: String,
    headers: HeaderMap,
    session: RwLock<Option<HeaderValue>>,
    version: RwLock<Option<HeaderValue>>,
    inner: Weak<Inner>,
}

impl Http {
    pub(crate) fn new(spec: &HttpSpec, inner: Weak<Inner>) -> Self {
        let mut headers = HeaderMap::new();
        for (k, v) in &spec.headers {
            match (
                HeaderName::try_from(k.as_str()),
                HeaderValue::try_from(v.as_str()),
            ) {
                (Ok(k), Ok(mut v)) => {
                    v.set_sensitive(true);
                    headers.append(k, v);
                }
                _ => {
                    tracing::warn!(header = %k, "an upstream header that is not valid HTTP is left out")
                }
            }
        }
        let http = reqwest::Client::builder()
            .tcp_nodelay(true)
            .build()
            .unwrap_or_default();
        Self {
            http,
            url: spec.url.clone(),
            headers,
            session: RwLock::new(None),
            version: RwLock::new(None),
            inner,
        }
    }

    pub(crate) fn set_version(&self, v: &str) {
        *self.version.write() = HeaderValue::try_from(v).ok();
    }

    fn post(&self, json: Vec<u8>) -> reqwest::RequestBuilder {
        let mut rb = self
            .http
            .post(&self.url)
            .headers(self.headers.clone())
            .header(ACCEPT, "application/json, text/event-stream")
            .header(CONTENT_TYPE, "application/json")
            .body(json);
        if let Some(s) = self.session.read().clone() {
            rb = rb.header(SESSION, s);
        }
        if let Some(v) = self.version.read().clone() {
            rb = rb.header(VERSION, v);
        }
        rb
    }

    /// A notification or a response: the server accepts it with 202.
    pub(crate) async fn post_message(&self, json: Vec<u8>) -> Result<(), ClientError> {
        let r = self
            .post(json)
            .send()
            .await
            .map_err(|e| ClientError::Transport(e.without_url().to_string()))?;
        if r.status().is_success() {
            return Ok(());
        }
        let status = r.status();
        if status == StatusCode::NOT_FOUND && self.session.read().is_some() {
            if let Some(inner) = self.inner.upgrade() {
                inner.close("the upstream ended the session");
            }
        }
        Err(ClientError::Transport(format!(
            "the upstream answered HTTP {status}"
        )))
    }

    /// Send request `id` and feed what its response carries to `inner`; the request fails
    /// when the response ends without its answer.
    pub(crate) fn post_request(
        &self,
        inner: &Arc<Inner>,
        id: i64,
        json: Vec<u8>,
        headers: &[(HeaderName, HeaderValue)],
    ) {
        let mut rb = self.post(json);
        for (k, v) in headers {
            rb = rb.header(k.clone(), v.clone());
        }
        let inner = inner.clone();
        tokio::spawn(async move {
            if let Err(e) = read_response(&inner, rb, id).await {
                inner.fail(id, e);
            } else {
                inner.fail(
                    id,
                    ClientError::Closed("the upstream's response ended without the answer".into()),
                );
            }
        });
    }

    /// Open the GET stream (again after it ends) while the connection lasts; a server that
    /// offers none (405) is not asked again.
    pub(crate) fn listen(&self, inner: &Arc<Inner>) {
        let weak = Arc::downgrade(inner);
        tokio::spawn(async move {
            loop {
                let Some(inner) = weak.upgrade() else { return };
                if inner.closed.borrow().is_some() {
                    return;
                }
                let crate::Link::Http(h) = &inner.link else {
                    return;
                };
                let mut rb = h
                    .http
                    .get(&h.url)
                    .headers(h.headers.clone())
                    .header(ACCEPT, "text/event-stream");
                if let Some(s) = h.session.read().clone() {
                    rb = rb.header(SESSION, s);
                }
                if let Some(v) = h.version.read().clone() {
                    rb = rb.header(VERSION, v);
                }
                let mut closed = inner.closed.subscribe();
                let max = inner.max_message_bytes;
                drop(inner);
                let resp = tokio::select! {
                    r = rb.send() => r,
                    _ = closed.wait_for(Option::is_some) => return,
                };
                match resp {
                    Ok(r) if r.status() == StatusCode::METHOD_NOT_ALLOWED => return,
                    Ok(r) if r.status().is_success() => {
                        let mut body = r.bytes_stream();
                        let mut sse = SseReader::new(max);
                        loop {
                            let chunk = tokio::select! {
                                c = body.next() => c,
                                _ = closed.wait_for(Option::is_some) => return,
                            };
                            let Some(Ok(chunk)) = chunk else { break };
                            let Ok(events) = sse.feed(&chunk) else { break };
                            let Some(inner) = weak.upgrade() else { return };
                            for data in events {
                                if !data.is_empty() {
                                    inner.handle(&data, None);
                                }
                            }
                        }
                    }
                    Ok(r) => {
                        tracing::debug!(status = %r.status(), "the upstream's GET stream was refused");
                    }
                    Err(e) => {
                        tracing::debug!(error = %e.without_url(), "the upstream's GET stream failed")
                    }
                }
                tokio::time::sleep(LISTEN_PAUSE).await;
            }
        });
    }

    /// End the session (`DELETE`), best effort.
    pub(crate) async fn end_session(&self) {
        let Some(s) = self.session.read().clone() else {
            return;
        };
        let _ = self
            .http
            .delete(&self.url)
            .headers(self.headers.clone())
            .header(SESSION, s)
            .send()
            .await;
    }
}

/// Send a request and hand every message of its response to `inner`. `Ok` when the response
/// ended (with or without the answer: the caller fails the request if it is still pending).
async fn read_response(
    inner: &Arc<Inner>,
    rb: reqwest::RequestBuilder,
    id: i64,
) -> Result<(), ClientError> {
    let r = rb
        .send()
        .await
        .map_err(|e| ClientError::Transport(e.without_url().to_string()))?;
    let crate::Link::Http(h) = &inner.link else {
        return Ok(());
    };
    if let Some(s) = r.headers().get(SESSION) {
        let mut session = h.session.write();
        if session.is_none() {
            let mut s = s.clone();
            s.set_sensitive(true);
            *session = Some(s);
        }
    }
    let status = r.status();
    if status == StatusCode::NOT_FOUND && h.session.read().is_some() {
        inner.close("the upstream ended the session");
        return Err(ClientError::Closed("the upstream ended the session".into()));
    }
    if !status.is_success() {
        let body = r.text().await.unwrap_or_default();
        // A JSON-RPC error in the body is the server's answer.
        if !body.is_empty() {
            inner.handle(body.as_bytes(), Some(id));
        }
        return Err(ClientError::Transport(format!(
            "the upstream answered HTTP {status}"
        )));
    }
    let max = inner.max_message_bytes;
    let is_sse = r
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    let mut body = r.bytes_stream();
    if is_sse {
        let mut sse = SseReader::new(max);
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(|e| {
                ClientError::Closed(format!(
                    "the upstream's stream broke off: {}",
                    e.without_url()
                ))
            })?;
            let events = sse.feed(&chunk).map_err(|_| {
                ClientError::Protocol(format!("the upstream sent a message over {max} bytes"))
            })?;
            for data in events {
                if !data.is_empty() {
                    inner.handle(&data, Some(id));
                }
            }
        }
        return Ok(());
    }
    let mut json = Vec::new();
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|e| ClientError::Closed(e.without_url().to_string()))?;
        json.extend_from_slice(&chunk);
        if json.len() > max {
            return Err(ClientError::Protocol(format!(
                "the upstream sent a message over {max} bytes"
            )));
        }
    }
    if !json.is_empty() {
        inner.handle(&json, Some(id));
    }
    Ok(())
}
