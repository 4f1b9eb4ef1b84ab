//! The Streamable HTTP transport: every message the client sends is a POST; the answer to a
//! request comes as JSON or on an SSE stream, with the server's messages about that request
//! before it; the session id from `initialize` goes with every later request; a GET stream,
//! when the server offers one, carries what belongs to no request (`list_changed`).

use std::sync::{Arc, Weak};
use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use reqwest::StatusCode;

use crate::wire::{self, Body, HttpTransport, WireError};
use crate::{ClientError, HttpSpec, Inner};

/// The pause before the GET stream is opened again after it ended.
const LISTEN_PAUSE: Duration = Duration::from_secs(1);

pub(crate) struct Http {
    wire: Arc<HttpTransport>,
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
        Self {
            wire: Arc::new(HttpTransport::new(wire::default_http(), &spec.url, headers)),
            inner,
        }
    }

    pub(crate) fn set_bearer(&self, token: &str) {
        self.wire.set_bearer(token);
    }

    pub(crate) fn set_version(&self, v: &str) {
        self.wire.set_protocol_version(v);
    }

    /// A notification or a response: the server accepts it with 202.
    pub(crate) async fn post_message(&self, json: Vec<u8>) -> Result<(), ClientError> {
        let r = self.wire.post(json, &[]).await.map_err(transport)?;
        if r.status().is_success() {
            return Ok(());
        }
        let status = r.status();
        if status == StatusCode::NOT_FOUND && self.wire.session().id.is_some() {
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
        let inner = inner.clone();
        let headers = headers.to_vec();
        tokio::spawn(async move {
            if let Err(e) = read_response(&inner, json, &headers, id).await {
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
                let mut closed = inner.closed.subscribe();
                let max = inner.max_message_bytes;
                let crate::Link::Http(h) = &inner.link else {
                    return;
                };
                let wire = h.wire.clone();
                drop(inner);
                let resp = tokio::select! {
                    r = wire.get(&[]) => r,
                    _ = closed.wait_for(Option::is_some) => return,
                };
                match resp {
                    Ok(r) if r.status() == StatusCode::METHOD_NOT_ALLOWED => return,
                    Ok(r) if r.status().is_success() => {
                        let mut events = r.events(max);
                        loop {
                            let event = tokio::select! {
                                e = events.next() => e,
                                _ = closed.wait_for(Option::is_some) => return,
                            };
                            let Some(Ok(event)) = event else { break };
                            let Some(inner) = weak.upgrade() else { return };
                            if !event.data.is_empty() {
                                inner.handle(&event.data, None);
                            }
                        }
                    }
                    Ok(r) => {
                        tracing::debug!(status = %r.status(), "the upstream's GET stream was refused");
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, "the upstream's GET stream failed")
                    }
                }
                tokio::time::sleep(LISTEN_PAUSE).await;
            }
        });
    }

    /// End the session (`DELETE`), best effort.
    pub(crate) async fn end_session(&self) {
        if self.wire.session().id.is_some() {
            let _ = self.wire.delete().await;
        }
    }
}

fn transport(e: WireError) -> ClientError {
    ClientError::Transport(e.to_string())
}

/// Send a request and hand every message of its response to `inner`. `Ok` when the response
/// ended (with or without the answer: the caller fails the request if it is still pending).
async fn read_response(
    inner: &Arc<Inner>,
    json: Vec<u8>,
    headers: &[(HeaderName, HeaderValue)],
    id: i64,
) -> Result<(), ClientError> {
    let crate::Link::Http(h) = &inner.link else {
        return Ok(());
    };
    let r = h.wire.post(json, headers).await.map_err(transport)?;
    let status = r.status();
    if status == StatusCode::NOT_FOUND && h.wire.session().id.is_some() {
        inner.close("the upstream ended the session");
        return Err(ClientError::Closed("the upstream ended the session".into()));
    }
    if !status.is_success() {
        let body = r.text().await;
        // A JSON-RPC error in the body is the server's answer.
        if !body.is_empty() {
            inner.handle(body.as_bytes(), Some(id));
        }
        return Err(ClientError::Transport(format!(
            "the upstream answered HTTP {status}"
        )));
    }
    let max = inner.max_message_bytes;
    let too_large =
        || ClientError::Protocol(format!("the upstream sent a message over {max} bytes"));
    match r.body(max).await {
        Ok(Body::Events(mut events)) => {
            while let Some(event) = events.next().await {
                let event = event.map_err(|e| match e {
                    WireError::TooLarge(_) => too_large(),
                    e => ClientError::Closed(format!("{e}")),
                })?;
                if !event.data.is_empty() {
                    inner.handle(&event.data, Some(id));
                }
            }
            Ok(())
        }
        Ok(Body::Json(json)) => {
            if !json.is_empty() {
                inner.handle(&json, Some(id));
            }
            Ok(())
        }
        Err(WireError::TooLarge(_)) => Err(too_large()),
        Err(e) => Err(ClientError::Closed(e.to_string())),
    }
}
