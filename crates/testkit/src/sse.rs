//! Server-sent events as the tests read them: [`Sse`] reads the JSON-RPC messages of a
//! `text/event-stream` answer (a POST's stream, `tasks/result`, the session's GET stream) one
//! at a time, skipping keep-alive comments and events without data (a priming event), and
//! remembering the last event id and `retry` it saw; an `application/json` answer read
//! through it is one message. The events come from the client library's SSE parser
//! ([`taskmesh_client::wire::Events`]).

use std::time::Duration;

use serde_json::Value;
use taskmesh_client::wire::{Events, Response};

/// How long a stream may stay silent before the test gives up on it.
const IDLE: Duration = Duration::from_secs(60);

/// A reader of JSON messages on an SSE response.
pub struct Sse {
    body: Body,
    /// The answer's `content-type` (empty when absent); an `application/json` answer is read
    /// as a single message.
    pub content_type: String,
    /// The id of the last event read (what a reconnection sends as `Last-Event-ID`).
    pub last_event_id: Option<String>,
    /// The last `retry` field read, in ms.
    pub retry_ms: Option<u64>,
    /// The ids of the message events read, in order (`None` for one without an id).
    pub message_ids: Vec<Option<String>>,
}

enum Body {
    Events(Events),
    /// An `application/json` answer, read at the first message.
    Json(Option<Response>),
}

impl Sse {
    /// A reader of the body of `r`.
    pub fn new(r: Response) -> Sse {
        let content_type = r.content_type().to_string();
        let body = if content_type.starts_with("application/json") {
            Body::Json(Some(r))
        } else {
            Body::Events(r.events(usize::MAX))
        };
        Sse {
            body,
            content_type,
            last_event_id: None,
            retry_ms: None,
            message_ids: Vec::new(),
        }
    }

    /// The next JSON message, `Ok(None)` when the stream ends, or why it broke (bounded by
    /// 60 s of silence). An `application/json` answer is one message: the whole body.
    pub async fn try_next(&mut self) -> Result<Option<Value>, String> {
        let events = match &mut self.body {
            Body::Events(events) => events,
            Body::Json(r) => {
                let Some(r) = r.take() else { return Ok(None) };
                let body = match tokio::time::timeout(IDLE, r.bytes(usize::MAX)).await {
                    Ok(Ok(b)) => b,
                    Ok(Err(e)) => return Err(format!("stream: {e}")),
                    Err(_) => return Err("SSE stream idle for 60 s".into()),
                };
                if String::from_utf8_lossy(&body).trim().is_empty() {
                    return Ok(None);
                }
                return serde_json::from_slice(&body)
                    .map(Some)
                    .map_err(|e| format!("body is not JSON: {e}"));
            }
        };
        loop {
            let event = match tokio::time::timeout(IDLE, events.next()).await {
                Ok(Some(Ok(e))) => e,
                Ok(Some(Err(e))) => return Err(format!("stream: {e}")),
                Ok(None) => return Ok(None),
                Err(_) => return Err("SSE stream idle for 60 s".into()),
            };
            if let Some(id) = &event.id {
                self.last_event_id = Some(id.clone());
            }
            if let Some(retry) = event.retry {
                self.retry_ms = Some(retry);
            }
            if event.data.is_empty() {
                continue; // a priming event
            }
            self.message_ids.push(event.id);
            return serde_json::from_slice(&event.data)
                .map(Some)
                .map_err(|e| format!("SSE data is not JSON: {e}"));
        }
    }

    /// End the connection as a dropped network would, keeping what was read (its ids).
    pub fn close(&mut self) {
        match &mut self.body {
            Body::Events(events) => events.close(),
            Body::Json(r) => *r = None,
        }
    }

    /// The next JSON message, or `None` when the stream ends or breaks. Panics after 60 s of
    /// silence.
    pub async fn next(&mut self) -> Option<Value> {
        match self.try_next().await {
            Ok(m) => m,
            Err(e) if e.starts_with("stream: ") => None,
            Err(e) => panic!("{e}"),
        }
    }
}
