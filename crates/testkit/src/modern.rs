//! A stateless client of protocol 2026-07-28 with the tasks extension, for tests: each
//! request carries its `_meta` (protocol version, client capabilities) and the routing headers
//! (`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`) taken from its body. The requests go
//! through the client library's transport, with no session.

use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::{json, Value};
use taskmesh_client::wire::{HttpTransport, Response};

use crate::client::header_value;

/// The protocol version.
pub const V: &str = "2026-07-28";
/// The tasks extension's identifier.
pub const EXT: &str = "io.modelcontextprotocol/tasks";

/// A stateless client of 2026-07-28.
pub struct Modern {
    /// The MCP endpoint.
    pub url: String,
    /// Bearer token, if any.
    pub token: Option<String>,
    /// Whether requests declare the tasks extension.
    pub tasks: bool,
    /// Whether requests declare elicitation.
    pub elicitation: bool,
}

/// What one request got: its HTTP status and JSON-RPC answer.
pub struct Answer {
    /// HTTP status.
    pub status: u16,
    /// The JSON-RPC message.
    pub body: Value,
}

impl Answer {
    /// The result; panics on an error.
    pub fn result(&self) -> &Value {
        assert!(
            self.body.get("result").is_some(),
            "no result: {}",
            self.body
        );
        &self.body["result"]
    }
    /// The error code; panics on a result.
    pub fn code(&self) -> i64 {
        self.body["error"]["code"]
            .as_i64()
            .unwrap_or_else(|| panic!("not an error: {}", self.body))
    }
}

impl Modern {
    /// A client of `url`; `tasks`: requests declare the tasks extension.
    pub fn new(url: &str, token: Option<&str>, tasks: bool) -> Self {
        Self {
            url: url.to_string(),
            token: token.map(str::to_string),
            tasks,
            elicitation: false,
        }
    }

    /// The `_meta` every request carries.
    pub fn meta(&self) -> Value {
        let mut caps = json!({});
        if self.tasks {
            caps["extensions"] = json!({ EXT: {} });
        }
        if self.elicitation {
            caps["elicitation"] = json!({});
        }
        json!({
            "io.modelcontextprotocol/protocolVersion": V,
            "io.modelcontextprotocol/clientCapabilities": caps,
            "io.modelcontextprotocol/clientInfo": {"name": "modern-test", "version": "1"},
        })
    }

    /// The `Mcp-Name` a request of `method` carries.
    fn name_of(method: &str, params: &Value) -> Option<String> {
        let field = match method {
            "tools/call" => "name",
            "tasks/get" | "tasks/update" | "tasks/cancel" => "taskId",
            _ => return None,
        };
        params[field].as_str().map(str::to_string)
    }

    /// Send `method` with `params` (its `_meta` added), the routing headers set from the
    /// body, then `change` applied to the headers (`None` removes one); panics when it cannot
    /// be sent.
    async fn request(
        &self,
        method: &str,
        mut params: Value,
        change: &[(&str, Option<&str>)],
    ) -> Response {
        // `_meta` given in `params` is laid over the one every request carries.
        let mut meta = self.meta();
        if let Some(given) = params.get("_meta").and_then(Value::as_object) {
            for (k, v) in given {
                meta[k] = v.clone();
            }
        }
        params["_meta"] = meta;
        let mut headers: Vec<(String, String)> = vec![
            ("mcp-protocol-version".into(), V.into()),
            ("mcp-method".into(), method.into()),
        ];
        if let Some(n) = Self::name_of(method, &params) {
            headers.push(("mcp-name".into(), n));
        }
        for (k, v) in change {
            headers.retain(|(h, _)| h != k);
            if let Some(v) = v {
                headers.push(((*k).to_string(), (*v).to_string()));
            }
        }
        if let Some(t) = &self.token {
            headers.push(("authorization".into(), format!("Bearer {t}")));
        }
        let headers: Vec<(HeaderName, HeaderValue)> = headers
            .iter()
            .map(|(k, v)| {
                let k = HeaderName::try_from(k.as_str()).expect("a header name");
                (k, header_value(v).expect("send"))
            })
            .collect();
        let body = json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params});
        HttpTransport::new(crate::http(), &self.url, HeaderMap::new())
            .post(body.to_string(), &headers)
            .await
            .expect("send")
    }

    /// `method` with `params` (its `_meta` added), the routing headers set from the body,
    /// then `change` applied to the headers (`None` removes one).
    pub async fn send_with(
        &self,
        method: &str,
        params: Value,
        change: &[(&str, Option<&str>)],
    ) -> Answer {
        let resp = self.request(method, params, change).await;
        let status = resp.status().as_u16();
        assert!(
            resp.headers().get("mcp-session-id").is_none(),
            "no session on {V}"
        );
        let text = resp.text().await;
        let body = serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON: {text}"));
        Answer { status, body }
    }

    /// `method` with `params` (request id 7), its answer read as a stream: the SSE stream,
    /// or the HTTP status and JSON-RPC answer when the answer is not one.
    pub async fn open(&self, method: &str, params: Value) -> Result<crate::sse::Sse, Answer> {
        let resp = self.request(method, params, &[]).await;
        let status = resp.status().as_u16();
        if resp.is_sse() {
            return Ok(crate::sse::Sse::new(resp));
        }
        let text = resp.text().await;
        let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
        Err(Answer { status, body })
    }

    /// Open `subscriptions/listen` (request id 7) with the filter `notifications` ([`Modern::open`]).
    pub async fn listen(&self, notifications: Value) -> Result<crate::sse::Sse, Answer> {
        self.open(
            "subscriptions/listen",
            json!({ "notifications": notifications }),
        )
        .await
    }

    /// `method` with `params`, headers from the body.
    pub async fn send(&self, method: &str, params: Value) -> Answer {
        self.send_with(method, params, &[]).await
    }

    /// A request that must succeed; its result (with the server's info in `_meta`).
    pub async fn ok(&self, method: &str, params: Value) -> Value {
        let a = self.send(method, params).await;
        assert_eq!(a.status, 200, "{}", a.body);
        let r = a.result().clone();
        assert_eq!(
            r["_meta"]["io.modelcontextprotocol/serverInfo"]["name"], "taskmesh",
            "{r}"
        );
        r
    }

    /// Create a task of `tool`; its id.
    pub async fn start(&self, tool: &str, args: Value) -> String {
        let r = self
            .ok("tools/call", json!({"name": tool, "arguments": args}))
            .await;
        assert_eq!(r["resultType"], "task", "{r}");
        r["taskId"].as_str().expect("a task id").to_string()
    }

    /// Poll until the task is terminal (bounded: 30 s); its `DetailedTask`.
    pub async fn until_terminal(&self, id: &str) -> Value {
        for _ in 0..600 {
            let t = self.ok("tasks/get", json!({"taskId": id})).await;
            assert_eq!(t["resultType"], "complete", "{t}");
            if ["completed", "failed", "cancelled"]
                .contains(&t["status"].as_str().expect("a status"))
            {
                return t;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("task {id} never ended");
    }
}
