//! An MCP client, for taskmesh's calls to the MCP servers it stands in front of (upstreams),
//! and for its command line (`taskmesh call`, `tools`, `tasks`).
//!
//! [`Client::connect`] starts a stdio server process ([`StdioSpec`]) or opens a Streamable
//! HTTP session ([`HttpSpec`]), and runs the `initialize` handshake at the newest protocol
//! version both sides know (or the one asked for). Then:
//!
//! - [`Client::list_tools`] reads every page of `tools/list`;
//! - [`Client::call_tool`] sends a plain `tools/call` and returns a [`ToolCall`]: what the
//!   server sends about that call while it runs (progress, its `elicitation/create` and
//!   `sampling/createMessage` requests, which the caller answers, its log messages) comes out
//!   of [`ToolCall::next`] before the result, and [`ToolCall::cancel`] sends
//!   `notifications/cancelled`;
//! - [`Client::call_tool_as_task`] sends a task-augmented `tools/call` and follows the task
//!   the server creates to its result ([`TaskCall`]; [`Client::follow_task`] follows one made
//!   earlier), polling at the server's `pollInterval` within [`Polling`]'s bounds (an
//!   exponential backoff when it suggests none); a `notifications/tasks/status` of the task on
//!   the session's GET stream makes it poll at once, but is never waited for;
//! - [`Client::get_task`], [`Client::list_tasks`] (every page), [`Client::task_result`] and
//!   [`Client::cancel_task`] are the task methods one by one, for tasks made by any
//!   connection of the same principal; [`Client::offers_tasks`] and [`task_support`] say
//!   whether a call may be made as a task; [`Client::start_task`] creates a task without
//!   following it, and [`TaskCall::detach`] stops following one;
//! - with [`Options::run_requests_as_tasks`], the client runs the server's `elicitation/create`
//!   and `sampling/createMessage` as its own tasks when the server sends them task-augmented
//!   (2025-11-25): it answers at once with a task, hands the request to the caller as any other
//!   [`CallEvent::Request`], and serves the server's `tasks/get`, `tasks/result`, `tasks/list`
//!   and `tasks/cancel` about it until the caller's answer is the task's result (`receiver.rs`);
//! - [`Client::tools_changed`] tells when the server sent `notifications/tools/list_changed`;
//! - [`Client::closed`] tells when the connection ended (the process exited, the session was
//!   ended by the server), and why.
//!
//! [`HttpSpec::with_bearer`] sends a bearer token with every request; [`HttpSpec::with_oauth`]
//! gets OAuth access tokens by client credentials (the token endpoint found from the server's
//! metadata) and renews them while the client lives ([`oauth`]); [`TaskCall`] shows a task call
//! followed to its end. Errors are [`ClientError`]s: the server's JSON-RPC error, a transport,
//! protocol or authorization failure, a time-out, a task cancelled or lost.
//!
//! # Protocol 2026-07-28
//!
//! [`StatelessClient`] is the requestor of the stateless generation with the tasks extension
//! (no session: [`StatelessClient::discover`] instead of a handshake). The server decides
//! whether a call becomes a task; [`StatelessCall`] follows either, polling `tasks/get`,
//! turning `inputRequests` into [`CallEvent::Request`]s answered with `tasks/update`, and
//! yielding the result inlined once the task is terminal (an example is on
//! [`StatelessClient`]).
//!
//! What belongs to a call: progress by its progress token (one per call, set by the client);
//! over HTTP, requests and log messages by the response stream of the call they came on; over
//! stdio, where nothing ties them to a call, they belong to the call in flight when exactly
//! one is (callers that relay them run one call at a time per process). A request that belongs
//! to no call is answered with an error; `ping` is answered at once.
//!
//! # Layers
//!
//! The client has two layers. The low one is public, for callers that speak the protocol
//! themselves (the test client, the load generator):
//!
//! - [`sse`]: [`SseParser`](sse::SseParser), the reader of `text/event-stream` bodies;
//! - [`wire`]: [`HttpTransport`](wire::HttpTransport), one Streamable HTTP endpoint: a POST of
//!   a message with the headers asked for, answered with the status, the headers and a body
//!   read whole or as SSE events; the session's headers (`Mcp-Session-Id`,
//!   `Mcp-Protocol-Version`) kept and sent; the GET stream and the session's end.
//!
//! The high one is [`Client`]: its shared state and requests are here; what the server sends
//! is routed in `incoming.rs`, a plain call's events and result in `call.rs`, a followed task
//! in `task.rs`, and the two transports in `stdio.rs` and `http.rs` (on [`wire`]).
//! [`StatelessClient`] (`stateless.rs`) is on [`wire`] too.

#![allow(clippy::module_name_repetitions)]

mod call;
mod http;
mod incoming;
pub mod oauth;
mod receiver;
mod spec;
pub mod sse;
mod stateless;
mod stdio;
mod task;
pub mod wire;
pub mod worker;

use call::Steps;
pub use call::{Step, ToolCall};
pub use spec::{CallEvent, ClientError, Endpoint, HttpSpec, Options, ServerInfo, StdioSpec};
pub use stateless::{StatelessCall, StatelessClient, TASKS_EXTENSION, V2026_07_28};
pub use task::{task_support, Polling, TaskCall, TaskStart, MAX_TASK_PAGES};

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
pub use reqwest::header::{HeaderName, HeaderValue};
use serde_json::{json, Map, Value};
use taskmesh_mcp::jsonrpc::RequestId;
pub use taskmesh_mcp::jsonrpc::{self, ErrorObject};
use tokio::sync::{mpsc, oneshot, watch};

/// The events a call may queue before its caller takes them; progress and log messages past
/// it are dropped, requests past it are answered with an error.
pub(crate) const CALL_EVENTS: usize = 256;

/// The most pages of `tools/list` read before the list is taken as endless.
const MAX_TOOL_PAGES: usize = 1000;

struct Pending {
    reply: oneshot::Sender<Result<Value, ClientError>>,
    /// Where the call's events go (tools/call only).
    events: Option<mpsc::Sender<CallEvent>>,
    /// The call's progress token.
    token: Option<String>,
}

enum Link {
    Stdio(Box<stdio::Stdio>),
    Http(http::Http),
}

struct Inner {
    name: String,
    link: Link,
    next_id: AtomicI64,
    pending: Mutex<HashMap<i64, Pending>>,
    /// Why the connection ended, once it has.
    closed: watch::Sender<Option<String>>,
    /// Bumped on every `notifications/tools/list_changed`.
    tools_changed: watch::Sender<u64>,
    max_message_bytes: usize,
    /// The tasks followed on this connection.
    follows: Mutex<task::Follows>,
    /// The tasks this client runs for the server ([`Options::run_requests_as_tasks`]).
    receiver: Option<Arc<receiver::Receiver>>,
    /// What answers the server's requests, when set ([`Client::on_request`]).
    handler: Mutex<Option<RequestHandler>>,
}

/// Get a new access token before the last one (good for `expires_in`) expires, for as long as
/// the client lives; a failed try is logged and made again after 200 ms.
fn renew_tokens(
    inner: &Arc<Inner>,
    http: reqwest::Client,
    credentials: oauth::ClientCredentials,
    resource: String,
    expires_in: Duration,
) {
    let weak = Arc::downgrade(inner);
    let mut closed = inner.closed.subscribe();
    tokio::spawn(async move {
        let mut wait = oauth::renew_after(expires_in);
        loop {
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                _ = closed.wait_for(Option::is_some) => return,
            }
            let Some(inner) = weak.upgrade() else { return };
            match credentials.fetch(&http, &resource).await {
                Ok(token) => {
                    if let Link::Http(h) = &inner.link {
                        h.set_bearer(&token.token);
                    }
                    match token.expires_in {
                        Some(e) => wait = oauth::renew_after(e),
                        None => return,
                    }
                }
                Err(e) => {
                    tracing::warn!(server = %inner.name, error = %e, "the access token could not be renewed; trying again");
                    wait = Duration::from_millis(200);
                }
            }
        }
    });
}

/// A callback that answers the server's requests (`elicitation/create`,
/// `sampling/createMessage`, `roots/list`): given the method and the params, the result or the
/// JSON-RPC error to answer with. Set with [`Client::on_request`].
pub type RequestHandler = Arc<
    dyn Fn(String, Value) -> futures::future::BoxFuture<'static, Result<Value, ErrorObject>>
        + Send
        + Sync,
>;

/// A connection to one MCP server. Cheap to clone; the connection ends when the last clone
/// is dropped or [`Client::close`] is called.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
    server: Arc<ServerInfo>,
}

impl Client {
    /// Connect to `endpoint` and run the handshake.
    pub async fn connect(endpoint: &Endpoint, opts: &Options) -> Result<Client, ClientError> {
        let inner = Arc::new_cyclic(|weak| Inner {
            name: opts.name.clone(),
            link: match endpoint {
                Endpoint::Stdio(_) => Link::Stdio(Box::new(stdio::Stdio::unstarted())),
                Endpoint::Http(spec) => Link::Http(http::Http::new(spec, weak.clone())),
            },
            next_id: AtomicI64::new(1),
            pending: Mutex::new(HashMap::new()),
            closed: watch::channel(None).0,
            tools_changed: watch::channel(0).0,
            max_message_bytes: opts.max_message_bytes,
            follows: Mutex::new(task::Follows::default()),
            receiver: opts
                .run_requests_as_tasks
                .then(|| Arc::new(receiver::Receiver::default())),
            handler: Mutex::new(None),
        });
        if let (Endpoint::Stdio(spec), Link::Stdio(s)) = (endpoint, &inner.link) {
            s.start(spec, &inner)?;
        }
        if let (Endpoint::Http(spec), Link::Http(h)) = (endpoint, &inner.link) {
            if let Some(credentials) = &spec.oauth {
                let http = wire::default_http();
                let token = credentials.fetch(&http, &spec.url).await?;
                h.set_bearer(&token.token);
                if let Some(expires_in) = token.expires_in {
                    renew_tokens(
                        &inner,
                        http,
                        credentials.clone(),
                        spec.url.clone(),
                        expires_in,
                    );
                }
            }
        }
        let wanted = opts
            .protocol_version
            .clone()
            .unwrap_or_else(|| taskmesh_mcp::V2025_11_25.to_string());
        // `tasks` says the client speaks tasks (as their requestor: a server that hands plain
        // calls off to clients without tasks does not do it to this one); the leaves of a
        // receiver only when it runs requests as tasks.
        let mut capabilities = json!({ "elicitation": {}, "sampling": {}, "tasks": {} });
        if opts.run_requests_as_tasks {
            capabilities["tasks"] = json!({
                "list": {},
                "cancel": {},
                "requests": {
                    "elicitation": { "create": {} },
                    "sampling": { "createMessage": {} },
                },
            });
        }
        let params = json!({
            "protocolVersion": wanted,
            "capabilities": capabilities,
            "clientInfo": { "name": opts.name, "version": env!("CARGO_PKG_VERSION") },
        });
        let handshake = inner.request("initialize", params, None);
        let result = match tokio::time::timeout(opts.connect_timeout, handshake).await {
            Ok(r) => r,
            Err(_) => {
                inner.close("no answer to initialize");
                return Err(ClientError::Timeout(opts.connect_timeout));
            }
        };
        let result = match result {
            Ok(r) => r,
            Err(e) => {
                inner.close("initialize failed");
                return Err(e);
            }
        };
        let version = result["protocolVersion"].as_str().unwrap_or_default();
        let acceptable = match &opts.protocol_version {
            Some(v) => version == v,
            None => taskmesh_mcp::is_supported_version(version),
        };
        if !acceptable {
            inner.close("unsupported protocol version");
            return Err(ClientError::Protocol(format!(
                "the server speaks protocol version {version:?}, not one asked for"
            )));
        }
        let server = ServerInfo {
            protocol_version: version.to_string(),
            capabilities: result.get("capabilities").cloned().unwrap_or(json!({})),
            server_info: result.get("serverInfo").cloned().unwrap_or(json!({})),
        };
        if let Link::Http(h) = &inner.link {
            h.set_version(version);
        }
        inner
            .notify(jsonrpc::notification(
                "notifications/initialized",
                &json!({}),
            ))
            .await?;
        if let Link::Http(h) = &inner.link {
            h.listen(&inner);
        }
        Ok(Client {
            inner,
            server: Arc::new(server),
        })
    }

    /// The server's side of the handshake.
    pub fn server(&self) -> &ServerInfo {
        &self.server
    }

    /// Every tool the server lists, all pages, as it lists them.
    pub async fn list_tools(&self) -> Result<Vec<Value>, ClientError> {
        let mut tools = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..MAX_TOOL_PAGES {
            let params = match &cursor {
                Some(c) => json!({ "cursor": c }),
                None => json!({}),
            };
            let page = self.inner.request("tools/list", params, None).await?;
            match page.get("tools") {
                Some(Value::Array(list)) => tools.extend(list.iter().cloned()),
                _ => {
                    return Err(ClientError::Protocol(
                        "tools/list result has no tools array".into(),
                    ))
                }
            }
            match page.get("nextCursor") {
                Some(Value::String(c)) => cursor = Some(c.clone()),
                None | Some(Value::Null) => return Ok(tools),
                Some(_) => {
                    return Err(ClientError::Protocol(
                        "tools/list nextCursor is not a string".into(),
                    ))
                }
            }
        }
        Err(ClientError::Protocol(format!(
            "tools/list did not end within {MAX_TOOL_PAGES} pages"
        )))
    }

    /// Send a plain `tools/call` of `name` with `arguments`; `meta` is the request's `_meta`
    /// (the client adds its progress token to it).
    pub async fn call_tool(
        &self,
        name: &str,
        arguments: Map<String, Value>,
        meta: Option<Map<String, Value>>,
    ) -> Result<ToolCall, ClientError> {
        self.call_tool_with(name, arguments, meta, &[]).await
    }

    /// [`Client::call_tool`], with `headers` added to the HTTP request that carries the call
    /// (ignored over stdio, which has no headers).
    pub async fn call_tool_with(
        &self,
        name: &str,
        arguments: Map<String, Value>,
        meta: Option<Map<String, Value>>,
        headers: &[(HeaderName, HeaderValue)],
    ) -> Result<ToolCall, ClientError> {
        let (tx, rx) = mpsc::channel(CALL_EVENTS);
        let id = self.inner.next_id();
        let token = format!("taskmesh-{id}");
        let mut meta = meta.unwrap_or_default();
        meta.insert("progressToken".into(), Value::String(token.clone()));
        let params = json!({ "name": name, "arguments": arguments, "_meta": meta });
        let result = self
            .inner
            .start(id, "tools/call", params, Some((tx, Some(token))), headers)
            .await?;
        Ok(ToolCall {
            id,
            steps: Steps::new(rx, result),
            inner: self.inner.clone(),
        })
    }

    /// Send request `method` and wait for its result.
    pub async fn request(&self, method: &str, params: Value) -> Result<Value, ClientError> {
        self.inner.request(method, params, None).await
    }

    /// Answer the server's requests with `handler` from now on, instead of handing them to
    /// the calls they belong to as [`CallEvent::Request`]: each request (also one that belongs
    /// to no call) is answered with what the handler returns. A request the client runs as its
    /// task ([`Options::run_requests_as_tasks`]) is answered with the task at once and the
    /// handler's answer becomes the task's result.
    ///
    /// ```no_run
    /// # async fn example(client: taskmesh_client::Client) {
    /// use futures::FutureExt;
    /// use serde_json::json;
    ///
    /// client.on_request(std::sync::Arc::new(|method, _params| {
    ///     async move {
    ///         match method.as_str() {
    ///             "elicitation/create" => Ok(json!({"action": "accept", "content": {"confirm": true}})),
    ///             _ => Err(taskmesh_client::ErrorObject::method_not_found(&method)),
    ///         }
    ///     }
    ///     .boxed()
    /// }));
    /// # }
    /// ```
    pub fn on_request(&self, handler: RequestHandler) {
        *self.inner.handler.lock() = Some(handler);
    }

    /// Changes when the server says its tool list changed.
    pub fn tools_changed(&self) -> watch::Receiver<u64> {
        self.inner.tools_changed.subscribe()
    }

    /// Why the connection ended, once it has (`None` while it is open).
    pub fn closed(&self) -> watch::Receiver<Option<String>> {
        self.inner.closed.subscribe()
    }

    /// Whether the connection has ended.
    pub fn is_closed(&self) -> bool {
        self.inner.closed.borrow().is_some()
    }

    /// End the connection: stop the process, or end the HTTP session. Calls in flight fail.
    pub async fn close(&self) {
        if let Link::Http(h) = &self.inner.link {
            h.end_session().await;
        }
        self.inner.close("closed by the client");
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Link::Stdio(s) = &self.link {
            s.kill();
        }
    }
}

impl Inner {
    /// The id of the next request.
    fn next_id(&self) -> i64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    fn why_closed(&self) -> ClientError {
        ClientError::Closed(
            self.closed
                .borrow()
                .clone()
                .unwrap_or_else(|| "the answer was lost".into()),
        )
    }

    /// Register request `id` and send it; the receiver gets its result.
    async fn start(
        self: &Arc<Self>,
        id: i64,
        method: &str,
        params: Value,
        call: Option<(mpsc::Sender<CallEvent>, Option<String>)>,
        headers: &[(HeaderName, HeaderValue)],
    ) -> Result<oneshot::Receiver<Result<Value, ClientError>>, ClientError> {
        if self.closed.borrow().is_some() {
            return Err(self.why_closed());
        }
        let (reply, rx) = oneshot::channel();
        let (events, token) = match call {
            Some((e, t)) => (Some(e), t),
            None => (None, None),
        };
        self.pending.lock().insert(
            id,
            Pending {
                reply,
                events,
                token,
            },
        );
        let json = jsonrpc::request(&RequestId::Number(id), method, &params);
        match &self.link {
            Link::Stdio(s) => {
                if let Err(e) = s.send(json).await {
                    self.pending.lock().remove(&id);
                    return Err(e);
                }
            }
            Link::Http(h) => h.post_request(self, id, json, headers),
        }
        Ok(rx)
    }

    async fn request(
        self: &Arc<Self>,
        method: &str,
        params: Value,
        call: Option<(mpsc::Sender<CallEvent>, Option<String>)>,
    ) -> Result<Value, ClientError> {
        let id = self.next_id();
        let rx = self.start(id, method, params, call, &[]).await?;
        rx.await.unwrap_or_else(|_| Err(self.why_closed()))
    }

    /// Send a notification or a response.
    async fn notify(&self, json: Vec<u8>) -> Result<(), ClientError> {
        match &self.link {
            Link::Stdio(s) => s.send(json).await,
            Link::Http(h) => h.post_message(json).await,
        }
    }

    /// Request `id` failed.
    fn fail(&self, id: i64, e: ClientError) {
        if let Some(p) = self.pending.lock().remove(&id) {
            let _ = p.reply.send(Err(e));
        }
    }

    /// The connection ended: every request in flight fails with `why`.
    fn close(&self, why: &str) {
        let first = self.closed.send_if_modified(|c| {
            if c.is_none() {
                *c = Some(why.to_string());
                true
            } else {
                false
            }
        });
        if first {
            tracing::info!(upstream = %self.name, why, "upstream connection ended");
        }
        let pending: Vec<Pending> = self.pending.lock().drain().map(|(_, p)| p).collect();
        for p in pending {
            let _ = p.reply.send(Err(ClientError::Closed(why.to_string())));
        }
        if let Link::Stdio(s) = &self.link {
            s.kill();
        }
    }
}
