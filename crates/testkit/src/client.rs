//! An MCP client over Streamable HTTP, as the tests use it: [`Client`] opens a session
//! (`initialize` + `notifications/initialized`), POSTs JSON-RPC requests (or any body) with the
//! session, version and bearer headers, and reads the answer whether it comes as
//! `application/json` or as an SSE stream ([`Sse`]); [`Raw`] is a whole HTTP answer for the
//! transport tests. The HTTP exchanges go through the client library's transport
//! ([`taskmesh_client::wire::HttpTransport`]); what is here is the tests' side: the fields a
//! test sets, panics that say what went wrong, the status and raw body kept.

use std::sync::Arc;
use std::time::Duration;

use reqwest::header::{HeaderName, HeaderValue, AUTHORIZATION};
use serde_json::{json, Value};
use taskmesh_client::wire::{HttpTransport, SessionHeaders, LAST_EVENT_ID};

use crate::{Sse, V};

/// A raw HTTP answer.
pub struct Raw {
    /// The HTTP status code.
    pub status: u16,
    /// The response headers.
    pub headers: reqwest::header::HeaderMap,
    /// The whole body as text (empty when it could not be read).
    pub body: String,
}

impl Raw {
    /// The body parsed as JSON; panics, showing the body, when it is not JSON.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
}

/// An MCP client over Streamable HTTP.
#[derive(Clone)]
pub struct Client {
    /// The HTTP client the requests go through.
    pub http: reqwest::Client,
    /// The MCP endpoint: requests are POSTed to it and the GET stream is opened on it.
    pub url: String,
    /// The `mcp-session-id` sent with every request; `None` until [`Client::connect`] sets it.
    pub session: Option<String>,
    /// Protocol version sent in `initialize` and, with a session, as `mcp-protocol-version`.
    pub version: String,
    /// Bearer token sent as `authorization` when set.
    pub token: Option<String>,
    next_id: Arc<std::sync::atomic::AtomicI64>,
}

/// An HTTP client whose requests time out after 60 s; panics if it cannot be built.
pub fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .expect("HTTP client builds")
}

impl Client {
    /// A client of `url` with no session and no token, speaking [`V`]; contacts nothing.
    pub fn new(url: &str) -> Client {
        Client {
            http: http(),
            url: url.to_string(),
            session: None,
            version: V.to_string(),
            token: None,
            next_id: Arc::new(std::sync::atomic::AtomicI64::new(1)),
        }
    }

    /// The same client, sending `token` as its bearer token.
    pub fn with_token(mut self, token: &str) -> Client {
        self.token = Some(token.to_string());
        self
    }

    /// initialize + notifications/initialized.
    pub async fn connect(url: &str, token: Option<&str>, version: &str, caps: Value) -> Client {
        let mut c = Client::new(url);
        c.token = token.map(str::to_string);
        c.version = version.to_string();
        let r = c
            .post(
                &json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
                    "protocolVersion": version, "capabilities": caps,
                    "clientInfo": {"name":"test","version":"1"}}})
                .to_string(),
                &[],
            )
            .await;
        assert_eq!(r.status, 200, "initialize: {}", r.body);
        let sid = r
            .headers
            .get("mcp-session-id")
            .expect("session id")
            .to_str()
            .expect("mcp-session-id header is visible ASCII")
            .to_string();
        c.session = Some(sid);
        let n = c
            .post(
                &json!({"jsonrpc":"2.0","method":"notifications/initialized"}).to_string(),
                &[],
            )
            .await;
        assert_eq!(n.status, 202);
        c
    }

    /// A session on `url` without a token, speaking [`V`] and declaring the elicitation,
    /// sampling and tasks capabilities (a client that speaks tasks: its plain calls are not
    /// handed off).
    pub async fn new_session(url: &str) -> Client {
        let caps = json!({"elicitation": {}, "sampling": {}, "tasks": {"list": {}, "cancel": {}}});
        Client::connect(url, None, V, caps).await
    }

    /// The transport of one request: the session id and its protocol version once a session
    /// exists, and the bearer token when there is one; `extra` headers converted.
    fn wire(
        &self,
        extra: &[(&str, &str)],
    ) -> Result<(HttpTransport, Vec<(HeaderName, HeaderValue)>), String> {
        let mut headers = reqwest::header::HeaderMap::new();
        if let Some(t) = &self.token {
            headers.insert(AUTHORIZATION, header_value(&format!("Bearer {t}"))?);
        }
        let wire = HttpTransport::new(self.http.clone(), &self.url, headers);
        if let Some(s) = &self.session {
            wire.set_session(SessionHeaders {
                id: Some(header_value(s)?),
                version: Some(header_value(&self.version)?),
            });
        }
        let extra = extra
            .iter()
            .map(|(k, v)| {
                let k = HeaderName::try_from(*k).map_err(|e| format!("header {k}: {e}"))?;
                Ok((k, header_value(v)?))
            })
            .collect::<Result<_, String>>()?;
        Ok((wire, extra))
    }

    /// POST `body` with `extra` headers; the answer, or why none came.
    async fn send(
        &self,
        body: impl Into<reqwest::Body>,
        extra: &[(&str, &str)],
    ) -> Result<taskmesh_client::wire::Response, String> {
        let (wire, extra) = self.wire(extra)?;
        wire.post(body, &extra).await.map_err(|e| e.to_string())
    }

    /// GET the session's stream with `extra` headers; panics when it cannot be sent.
    async fn get(&self, extra: &[(HeaderName, HeaderValue)]) -> taskmesh_client::wire::Response {
        let (wire, _) = self.wire(&[]).expect("get");
        wire.get(extra).await.expect("get")
    }

    /// Call a method and return the JSON-RPC response, or why no response came (the node is
    /// down, the connection broke, the answer was no JSON-RPC response).
    pub async fn try_call(&self, method: &str, params: Value) -> Result<Value, String> {
        let id = self.id();
        let body = json!({"jsonrpc":"2.0","id":id,"method":method,"params":params}).to_string();
        let r = self
            .send(body, &[])
            .await
            .map_err(|e| format!("send: {e}"))?;
        let status = r.status().as_u16();
        if status != 200 {
            return Err(format!("HTTP {status}"));
        }
        if r.content_type().starts_with("application/json") {
            let body = r
                .bytes(usize::MAX)
                .await
                .map_err(|e| format!("body: {e}"))?;
            return serde_json::from_slice(&body).map_err(|e| format!("body: {e}"));
        }
        let mut sse = Sse::new(r);
        while let Some(msg) = sse.try_next().await? {
            if msg.get("id") == Some(&json!(id))
                && (msg.get("result").is_some() || msg.get("error").is_some())
            {
                return Ok(msg);
            }
        }
        Err("the stream ended without a response".into())
    }

    /// POST a raw body; reads the whole answer.
    pub async fn post(&self, body: &str, extra: &[(&str, &str)]) -> Raw {
        self.post_bytes(body.as_bytes().to_vec(), extra).await
    }

    /// POST raw bytes as the body (not necessarily UTF-8); reads the whole answer.
    pub async fn post_bytes(&self, body: Vec<u8>, extra: &[(&str, &str)]) -> Raw {
        self.post_body(body.into(), extra).await
    }

    /// POST `body` in chunks of 1 KiB without a `Content-Length` (chunked transfer
    /// encoding); reads the whole answer.
    pub async fn post_chunked(&self, body: Vec<u8>, extra: &[(&str, &str)]) -> Raw {
        let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
            body.chunks(1024).map(|c| Ok(c.to_vec())).collect();
        let stream = futures::stream::iter(chunks);
        self.post_body(reqwest::Body::wrap_stream(stream), extra)
            .await
    }

    async fn post_body(&self, body: reqwest::Body, extra: &[(&str, &str)]) -> Raw {
        let r = self.send(body, extra).await.expect("send");
        Raw {
            status: r.status().as_u16(),
            headers: r.headers().clone(),
            body: r.text().await,
        }
    }

    /// The next JSON-RPC request id (counting from 1, shared by clones of this client).
    pub fn id(&self) -> i64 {
        self.next_id
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }

    /// Call a method; returns the JSON-RPC response object (with `result` or `error`), and every
    /// message that came before it on an SSE stream.
    pub async fn call_full(&self, method: &str, params: Value) -> (Value, Vec<Value>) {
        self.call_full_with(method, params, &[]).await
    }

    /// [`Client::call`] with `extra` headers on the request.
    pub async fn call_with(&self, method: &str, params: Value, extra: &[(&str, &str)]) -> Value {
        self.call_full_with(method, params, extra).await.0
    }

    async fn call_full_with(
        &self,
        method: &str,
        params: Value,
        extra: &[(&str, &str)],
    ) -> (Value, Vec<Value>) {
        let id = self.id();
        let body = json!({"jsonrpc":"2.0","id":id,"method":method,"params":params}).to_string();
        let r = self.send(body, extra).await.expect("send");
        assert_eq!(r.status().as_u16(), 200, "{method}: HTTP {}", r.status());
        let ct = r.content_type().to_string();
        if ct.starts_with("application/json") {
            let body = r.bytes(usize::MAX).await.expect("body");
            let msg = serde_json::from_slice(&body).expect("response is JSON");
            return (msg, vec![]);
        }
        assert!(ct.starts_with("text/event-stream"), "content-type {ct}");
        let mut sse = Sse::new(r);
        let mut before = vec![];
        while let Some(msg) = sse.next().await {
            if msg.get("id") == Some(&json!(id))
                && (msg.get("result").is_some() || msg.get("error").is_some())
            {
                return (msg, before);
            }
            before.push(msg);
        }
        panic!("{method}: stream ended without a response; got {before:?}");
    }

    /// Call a method; the JSON-RPC response object (with `result` or `error`). Panics as
    /// [`Client::call_full`] does.
    pub async fn call(&self, method: &str, params: Value) -> Value {
        self.call_full(method, params).await.0
    }

    /// `result` of a successful call (panics on a JSON-RPC error).
    pub async fn ok(&self, method: &str, params: Value) -> Value {
        let r = self.call(method, params).await;
        match r.get("result") {
            Some(v) => v.clone(),
            None => panic!("{method} failed: {r}"),
        }
    }

    /// `error.code` of a failed call (panics on success).
    pub async fn err_code(&self, method: &str, params: Value) -> i64 {
        let r = self.call(method, params).await;
        r["error"]["code"]
            .as_i64()
            .unwrap_or_else(|| panic!("{method} did not fail: {r}"))
    }

    /// Start a task-augmented tools/call; returns the task id.
    pub async fn start_task(&self, tool: &str, args: Value) -> String {
        let r = self
            .ok(
                "tools/call",
                json!({"name": tool, "arguments": args, "task": {}}),
            )
            .await;
        r["task"]["taskId"]
            .as_str()
            .expect("tools/call result has a task.taskId string")
            .to_string()
    }

    /// The `status` of task `task_id` from `tasks/get`; panics if the call fails or the
    /// answer has no status.
    pub async fn status(&self, task_id: &str) -> String {
        self.ok("tasks/get", json!({"taskId": task_id})).await["status"]
            .as_str()
            .expect("tasks/get result has a status string")
            .to_string()
    }

    /// Poll until the task has `status` (bounded: 30 s).
    pub async fn wait_status(&self, task_id: &str, want: &str) -> Value {
        for _ in 0..600 {
            let t = self.ok("tasks/get", json!({"taskId": task_id})).await;
            if t["status"] == want {
                return t;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("task {task_id} never reached {want}");
    }

    /// Open a streaming request (e.g. tasks/result) and return the raw SSE reader with its id.
    pub async fn open_stream(&self, method: &str, params: Value) -> (i64, Sse) {
        let id = self.id();
        let body = json!({"jsonrpc":"2.0","id":id,"method":method,"params":params}).to_string();
        let r = self.send(body, &[]).await.expect("send");
        assert_eq!(r.status().as_u16(), 200);
        (id, Sse::new(r))
    }

    /// Open the session's GET stream.
    pub async fn open_get(&self) -> Sse {
        match self.try_open_get().await {
            Ok(sse) => sse,
            Err(status) => panic!("GET /mcp answered {status}"),
        }
    }

    /// Open the session's GET stream, or the HTTP status it was refused with.
    pub async fn try_open_get(&self) -> Result<Sse, u16> {
        let r = self.get(&[]).await;
        match r.status().as_u16() {
            200 => Ok(Sse::new(r)),
            status => Err(status),
        }
    }

    /// Reconnect to a stream with `GET` and `Last-Event-ID: last`, or the HTTP status and body
    /// it was refused with.
    pub async fn try_resume(&self, last: &str) -> Result<Sse, (u16, String)> {
        let last = header_value(last).expect("get");
        let r = self.get(&[(LAST_EVENT_ID, last)]).await;
        match r.status().as_u16() {
            200 => Ok(Sse::new(r)),
            status => Err((status, r.text().await)),
        }
    }

    /// Reconnect to a stream with `Last-Event-ID: last`; panics if refused.
    pub async fn resume(&self, last: &str) -> Sse {
        match self.try_resume(last).await {
            Ok(sse) => sse,
            Err((status, body)) => panic!("GET /mcp with Last-Event-ID answered {status}: {body}"),
        }
    }

    /// Answer a server request.
    pub async fn answer(&self, id: &Value, result: Value) {
        let body = json!({"jsonrpc":"2.0","id":id,"result":result}).to_string();
        let r = self.post(&body, &[]).await;
        assert_eq!(r.status, 202, "{}", r.body);
    }
}

/// `v` as a header value, or why it is none.
pub(crate) fn header_value(v: &str) -> Result<HeaderValue, String> {
    HeaderValue::try_from(v).map_err(|e| format!("header value {v:?}: {e}"))
}
