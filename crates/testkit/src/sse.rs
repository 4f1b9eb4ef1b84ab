//! Server-sent events: [`Sse`] reads the JSON-RPC messages of a `text/event-stream` answer
//! (a POST's stream, `tasks/result`, the session's GET stream) one at a time, skipping
//! keep-alive comments and events without data (a priming event), and remembering the last
//! event id and `retry` it saw; an `application/json` answer read through it is one message.

use std::time::Duration;

use futures::StreamExt;
use serde_json::Value;

/// A reader of JSON messages on an SSE response.
pub struct Sse {
    stream: futures::stream::BoxStream<'static, reqwest::Result<bytes::Bytes>>,
    buf: String,
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

/// The `content-type` of `r` (empty when it has none); panics if it is not visible ASCII.
pub(crate) fn content_type(r: &reqwest::Response) -> String {
    r.headers()
        .get("content-type")
        .map(|v| {
            v.to_str()
                .expect("content-type header is visible ASCII")
                .to_string()
        })
        .unwrap_or_default()
}

impl Sse {
    /// A reader of the body of `r`; panics if its `content-type` is not visible ASCII.
    pub fn new(r: reqwest::Response) -> Sse {
        let content_type = content_type(&r);
        Sse {
            stream: r.bytes_stream().boxed(),
            buf: String::new(),
            content_type,
            last_event_id: None,
            retry_ms: None,
            message_ids: Vec::new(),
        }
    }

    /// The next JSON message, `Ok(None)` when the stream ends, or why it broke (bounded by
    /// 60 s of silence). An `application/json` answer is one message: the whole body.
    pub async fn try_next(&mut self) -> Result<Option<Value>, String> {
        loop {
            if let Some(i) = self.buf.find("\n\n") {
                let event: String = self.buf.drain(..i + 2).collect();
                let field = |name: &str| {
                    event
                        .lines()
                        .filter_map(|l| l.strip_prefix(name))
                        .map(|v| v.strip_prefix(' ').unwrap_or(v).to_string())
                        .collect::<Vec<String>>()
                };
                let id = field("id:").pop();
                if let Some(id) = &id {
                    self.last_event_id = Some(id.clone());
                }
                if let Some(retry) = field("retry:").pop().and_then(|r| r.parse().ok()) {
                    self.retry_ms = Some(retry);
                }
                let data = field("data:");
                if data.concat().is_empty() {
                    continue; // a keep-alive comment or a priming event
                }
                self.message_ids.push(id);
                return serde_json::from_str(&data.join("\n"))
                    .map(Some)
                    .map_err(|e| format!("SSE data is not JSON: {e}"));
            }
            match tokio::time::timeout(Duration::from_secs(60), self.stream.next()).await {
                Ok(Some(Ok(chunk))) => self.buf.push_str(&String::from_utf8_lossy(&chunk)),
                Ok(end) => {
                    if self.content_type.starts_with("application/json")
                        && !self.buf.trim().is_empty()
                    {
                        let body = std::mem::take(&mut self.buf);
                        return serde_json::from_str(&body)
                            .map(Some)
                            .map_err(|e| format!("body is not JSON: {e}"));
                    }
                    return match end {
                        Some(Err(e)) => Err(format!("stream: {e}")),
                        _ => Ok(None),
                    };
                }
                Err(_) => return Err("SSE stream idle for 60 s".into()),
            }
        }
    }

    /// End the connection as a dropped network would, keeping what was read (its ids).
    pub fn close(&mut self) {
        self.stream = futures::stream::empty().boxed();
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
