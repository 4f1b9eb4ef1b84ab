//! SSE answers open at once on this node: at most `http.max_sse_streams` in all and
//! `http.max_sse_streams_per_principal` of one principal (every kind: `GET /mcp`, a held
//! `tasks/result`, a plain call that reports progress or asks, `subscriptions/listen`).
//!
//! A request that may be answered with a stream takes a [`Slot`] before anything runs; one
//! past either limit gets HTTP 429 and changes nothing. An answer that turns out to be plain
//! JSON gives its slot back at once; a stream keeps it until its body is dropped (the stream
//! ended, or its connection closed).

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use parking_lot::Mutex;

/// The streams open on a node, by principal.
pub(crate) struct Slots {
    max: usize,
    max_per_principal: usize,
    open: Mutex<(usize, HashMap<String, usize>)>,
}

/// One open stream's place; dropping it frees the place.
pub(crate) struct Slot {
    slots: Arc<Slots>,
    principal: String,
}

impl Slots {
    pub(crate) fn new(max: usize, max_per_principal: usize) -> Arc<Self> {
        Arc::new(Slots {
            max,
            max_per_principal,
            open: Mutex::new((0, HashMap::new())),
        })
    }

    /// A place for one more stream of `principal`, or the 429 that names the limit reached.
    #[allow(clippy::result_large_err)]
    pub(crate) fn take(self: &Arc<Self>, principal: &str) -> Result<Slot, Response> {
        let mut open = self.open.lock();
        let mine = open.1.get(principal).copied().unwrap_or(0);
        let refused = if open.0 >= self.max {
            Some("Too Many Requests: this node holds http.max_sse_streams streams already")
        } else if mine >= self.max_per_principal {
            Some("Too Many Requests: this principal holds http.max_sse_streams_per_principal streams on this node already")
        } else {
            None
        };
        if let Some(why) = refused {
            crate::metrics::refused(429, "sse_streams");
            let mut r = (
                StatusCode::TOO_MANY_REQUESTS,
                [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
                why,
            )
                .into_response();
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            return Err(r);
        }
        open.0 += 1;
        *open.1.entry(principal.to_string()).or_insert(0) += 1;
        Ok(Slot {
            slots: self.clone(),
            principal: principal.to_string(),
        })
    }

    /// Streams open now (all principals).
    pub(crate) fn open(&self) -> usize {
        self.open.lock().0
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self.slots.open.lock();
        open.0 = open.0.saturating_sub(1);
        if let Some(n) = open.1.get_mut(&self.principal) {
            *n -= 1;
            if *n == 0 {
                open.1.remove(&self.principal);
            }
        }
    }
}

/// `response` holding `slot` for as long as its body lives when it is an SSE stream; else
/// the slot is given back now.
pub(crate) fn hold(response: Response, slot: Slot) -> Response {
    let streams = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
    if !streams {
        return response;
    }
    let (parts, body) = response.into_parts();
    let body = futures::StreamExt::map(body.into_data_stream(), move |chunk| {
        let _held = &slot;
        chunk
    });
    Response::from_parts(parts, Body::from_stream(body))
}
