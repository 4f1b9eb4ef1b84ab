//! One request of 2026-07-28 on the wire: its `_meta` (protocol version, client
//! capabilities, client info) and routing headers (`MCP-Protocol-Version`, `Mcp-Method`,
//! `Mcp-Name`) set from its body, and its answer read from a JSON body or an SSE stream, with
//! the progress and log messages before it handed to the call.

use std::sync::atomic::Ordering;

use base64::Engine as _;
use reqwest::header::{HeaderName, HeaderValue};
use serde_json::{json, Value};
use taskmesh_mcp::jsonrpc::{self, ErrorObject, Message, RequestId};
use tokio::sync::mpsc;

use super::{
    Shared, META_CAPABILITIES, META_CLIENT_INFO, META_VERSION, TASKS_EXTENSION, V2026_07_28,
};
use crate::wire::{Body, Response, WireError};
use crate::{CallEvent, ClientError};

impl Shared {
    /// The id of the next request.
    pub(super) fn next_id(&self) -> i64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// The `_meta` every request carries.
    fn meta(&self) -> Value {
        let mut caps = json!({ "elicitation": {} });
        if self.server.capabilities["extensions"]
            .get(TASKS_EXTENSION)
            .is_some()
        {
            caps["extensions"] = json!({ TASKS_EXTENSION: {} });
        }
        json!({
            META_VERSION: V2026_07_28,
            META_CAPABILITIES: caps,
            META_CLIENT_INFO: { "name": self.name, "version": env!("CARGO_PKG_VERSION") },
        })
    }

    /// POST request `id` of `method` with `params` (`_meta` laid over with the client's).
    pub(super) async fn send(
        &self,
        id: i64,
        method: &str,
        params: &Value,
    ) -> Result<Response, ClientError> {
        let mut params = params.clone();
        let mut meta = self.meta();
        if let (Some(given), Some(m)) = (
            params.get("_meta").and_then(Value::as_object),
            meta.as_object_mut(),
        ) {
            for (k, v) in given {
                m.insert(k.clone(), v.clone());
            }
        }
        params["_meta"] = meta;
        let mut headers = vec![
            (
                HeaderName::from_static("mcp-protocol-version"),
                HeaderValue::from_static(V2026_07_28),
            ),
            (HeaderName::from_static("mcp-method"), header_value(method)),
        ];
        let named = match method {
            "tools/call" => params["name"].as_str(),
            "tasks/get" | "tasks/update" | "tasks/cancel" => params["taskId"].as_str(),
            _ => None,
        };
        if let Some(n) = named {
            headers.push((HeaderName::from_static("mcp-name"), header_value(n)));
        }
        let body = jsonrpc::request(&RequestId::Number(id), method, &params);
        self.wire
            .post(body, &headers)
            .await
            .map_err(|e| ClientError::Transport(e.to_string()))
    }

    /// Send request `method` with `params` and read its answer ([`Shared::answer`]).
    pub(super) async fn request(
        &self,
        method: &str,
        params: Value,
        events: Option<&mpsc::Sender<CallEvent>>,
    ) -> Result<Value, ClientError> {
        let id = self.next_id();
        let resp = self.send(id, method, &params).await?;
        self.answer(id, resp, events).await
    }

    /// The answer `resp` carries for request `id`; progress and log messages before it go
    /// to `events`. A JSON-RPC error with no id (about the request as a whole) is its answer
    /// too.
    pub(super) async fn answer(
        &self,
        id: i64,
        resp: Response,
        events: Option<&mpsc::Sender<CallEvent>>,
    ) -> Result<Value, ClientError> {
        let status = resp.status();
        let max = self.max_message_bytes;
        let broken = |e: WireError| match e {
            WireError::TooLarge(n) => {
                ClientError::Protocol(format!("the server sent a message over {n} bytes"))
            }
            e => ClientError::Closed(e.to_string()),
        };
        let mut messages = Vec::new();
        match resp.body(max).await.map_err(broken)? {
            Body::Json(bytes) => messages.push(bytes.to_vec()),
            Body::Events(mut stream) => {
                while let Some(event) = stream.next().await {
                    let event = event.map_err(broken)?;
                    if event.data.is_empty() {
                        continue;
                    }
                    match jsonrpc::parse_message(&event.data) {
                        Ok(Message::Notification { method, params }) => {
                            if let Some(tx) = events {
                                notify(tx, &method, params.unwrap_or(Value::Null));
                            }
                        }
                        _ => {
                            messages.push(event.data);
                            break;
                        }
                    }
                }
            }
        }
        for raw in messages {
            if let Ok(Message::Response { id: got, outcome }) = jsonrpc::parse_message(&raw) {
                if got == RequestId::Number(id) {
                    return outcome.map_err(ClientError::Rpc);
                }
            }
            // A JSON-RPC error about the request as a whole has a null id.
            if let Ok(v) = serde_json::from_slice::<Value>(&raw) {
                if let Ok(e) = serde_json::from_value::<ErrorObject>(v["error"].clone()) {
                    return Err(ClientError::Rpc(e));
                }
            }
        }
        if status.is_success() {
            Err(ClientError::Closed(
                "the answer ended without a JSON-RPC response".into(),
            ))
        } else {
            Err(ClientError::Transport(format!(
                "the server answered HTTP {status}"
            )))
        }
    }
}

/// A notification on a call's answer stream, as the call's event.
fn notify(events: &mpsc::Sender<CallEvent>, method: &str, params: Value) {
    let event = match method {
        "notifications/progress" => CallEvent::Progress {
            progress: params["progress"].as_f64().unwrap_or(0.0),
            total: params["total"].as_f64(),
            message: params["message"].as_str().map(str::to_string),
        },
        "notifications/message" => CallEvent::Log(params),
        _ => return,
    };
    let _ = events.try_send(event);
}

/// A routing header's value: as it is when it is visible ASCII, else `=?base64?…?=`.
pub(super) fn header_value(v: &str) -> HeaderValue {
    let plain = !v.is_empty() && v.bytes().all(|b| (0x21..0x7f).contains(&b));
    let text = if plain {
        v.to_string()
    } else {
        format!(
            "=?base64?{}?=",
            base64::engine::general_purpose::STANDARD.encode(v)
        )
    };
    HeaderValue::try_from(text).unwrap_or_else(|_| HeaderValue::from_static(""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routing_headers_are_plain_or_base64() {
        assert_eq!(header_value("tasks/get"), "tasks/get");
        assert_eq!(header_value("t-1:abc"), "t-1:abc");
        assert_eq!(header_value("a b"), "=?base64?YSBi?=");
        assert_eq!(header_value("é"), "=?base64?w6k=?=");
    }
}
