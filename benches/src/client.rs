//! A minimal MCP Streamable HTTP client, as a load generator needs it: `initialize` (which
//! yields the session id), `notifications/initialized`, then JSON-RPC requests carrying the
//! session and protocol-version headers over pooled keep-alive connections. Answers come back as
//! JSON or as a short SSE stream; either way the final JSON-RPC response is returned.

use std::sync::atomic::{AtomicI64, Ordering};

use serde_json::{json, Value};

/// The protocol version the generator speaks.
pub const PROTOCOL_VERSION: &str = "2025-11-25";

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
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Transport => f.write_str("transport"),
            Failure::Http(c) => write!(f, "http_{c}"),
            Failure::Rpc(c) => write!(f, "rpc_{c}"),
            Failure::BadBody(what) => write!(f, "bad_body_{what}"),
        }
    }
}

/// One MCP session on one server.
pub struct Session {
    http: reqwest::Client,
    url: String,
    session_id: Option<String>,
    token: Option<String>,
    next_id: AtomicI64,
}

impl Session {
    /// Open a session: `initialize` and `notifications/initialized`.
    pub async fn open(
        http: reqwest::Client,
        url: &str,
        token: Option<&str>,
    ) -> Result<Self, Failure> {
        let mut s = Session {
            http,
            url: url.to_string(),
            session_id: None,
            token: token.map(str::to_string),
            next_id: AtomicI64::new(1),
        };
        let body = json!({
            "jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {
                "protocolVersion": PROTOCOL_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "taskmesh-loadgen", "version": "0.1.0"}
            }
        });
        let resp = s.post(&body).await?;
        s.session_id = resp
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let answer = read_answer(resp).await?;
        if answer["result"]["protocolVersion"].as_str().is_none() {
            return Err(Failure::BadBody("initialize"));
        }
        let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let r = s.post(&note).await?;
        if r.status().as_u16() != 202 {
            return Err(Failure::Http(r.status().as_u16()));
        }
        Ok(s)
    }

    async fn post(&self, body: &Value) -> Result<reqwest::Response, Failure> {
        let mut req = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", PROTOCOL_VERSION)
            .body(body.to_string());
        if let Some(sid) = &self.session_id {
            req = req.header("mcp-session-id", sid);
        }
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        req.send().await.map_err(|_| Failure::Transport)
    }

    /// Send a request; returns its `result`.
    pub async fn call(&self, method: &str, params: Value) -> Result<Value, Failure> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let resp = self.post(&body).await?;
        let mut answer = read_answer(resp).await?;
        if let Some(code) = answer.get("error").map(|e| e["code"].as_i64().unwrap_or(0)) {
            return Err(Failure::Rpc(code));
        }
        match answer.get_mut("result") {
            Some(r) => Ok(r.take()),
            None => Err(Failure::BadBody("no_result")),
        }
    }
}

/// The JSON-RPC response in an answer: a JSON body, or the last JSON-RPC response of an SSE
/// stream (requests and notifications before it are skipped).
async fn read_answer(resp: reqwest::Response) -> Result<Value, Failure> {
    let status = resp.status().as_u16();
    if status != 200 {
        return Err(Failure::Http(status));
    }
    let sse = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|c| c.starts_with("text/event-stream"));
    let bytes = resp.bytes().await.map_err(|_| Failure::Transport)?;
    if !sse {
        return serde_json::from_slice(&bytes).map_err(|_| Failure::BadBody("json"));
    }
    let text = std::str::from_utf8(&bytes).map_err(|_| Failure::BadBody("utf8"))?;
    text.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
        .rfind(|v| v.get("result").is_some() || v.get("error").is_some())
        .ok_or(Failure::BadBody("sse"))
}
