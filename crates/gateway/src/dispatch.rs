//! JSON-RPC dispatch: one classified message in, one [`Reply`] out.
//!
//! Version rules live here: with 2025-11-25 the server declares `tasks` and enforces each
//! tool's `execution.taskSupport`; with 2025-06-18 and 2025-03-26 it is a plain tools server
//! (the `task` field is ignored and `tasks/*` methods do not exist).

use std::sync::Arc;

use futures::future::BoxFuture;
use futures::FutureExt;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use taskmesh_host::{now_ms, Attachment, HostError, NewTask};
use taskmesh_mcp::jsonrpc::{self, ErrorObject, RequestId, METHOD_NOT_FOUND, REQUEST_CANCELLED};
use taskmesh_mcp::{params, CreateTaskResult, ListTasksResult, TaskSupport};
use taskmesh_router::mint_task_id;
use taskmesh_task::ClientCaps;
use taskmesh_tools::{Tool, ToolContext, ToolIo, ToolResult};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::session::SessionClaims;
use crate::{wire, Gateway};

/// Who is asking, in which session.
pub struct Cx {
    pub principal: String,
    /// (session id, its claims); `None` only for `initialize`.
    pub session: Option<(String, SessionClaims)>,
}

impl Cx {
    fn version(&self) -> &str {
        self.session
            .as_ref()
            .map(|(_, c)| c.version.as_str())
            .unwrap_or(taskmesh_mcp::V2025_11_25)
    }
    fn tasks_enabled(&self) -> bool {
        taskmesh_mcp::version_has_tasks(self.version())
    }
    fn session_id(&self) -> Option<&str> {
        self.session.as_ref().map(|(id, _)| id.as_str())
    }
    fn nonce(&self) -> &str {
        self.session
            .as_ref()
            .map(|(_, c)| c.nonce.as_str())
            .unwrap_or("")
    }
}

/// What the transport sends back.
pub enum Reply {
    /// One JSON-RPC response, as `application/json`.
    Json(Vec<u8>),
    /// A JSON-RPC response to `initialize`, with the new session id for the header.
    Initialized { body: Vec<u8>, session_id: String },
    /// JSON-RPC messages as `text/event-stream`; the last one is the response. With
    /// `json_if_alone`, the transport waits for the first message and answers
    /// `application/json` when that first message is already the response.
    Stream {
        rx: mpsc::Receiver<Arc<Vec<u8>>>,
        json_if_alone: bool,
    },
    /// HTTP 202, no body (notifications and client responses).
    Accepted,
}

fn ok(id: &RequestId, v: &impl Serialize) -> Reply {
    Reply::Json(jsonrpc::response(id, v))
}

fn err(id: &RequestId, e: &ErrorObject) -> Reply {
    Reply::Json(jsonrpc::error_response(Some(id), e))
}

fn typed(id: &RequestId, r: Result<impl Serialize, ErrorObject>) -> Reply {
    match r {
        Ok(v) => ok(id, &v),
        Err(e) => err(id, &e),
    }
}

fn answer(id: &RequestId, r: Result<Value, ErrorObject>) -> Vec<u8> {
    match r {
        Ok(v) => jsonrpc::response(id, &v),
        Err(e) => jsonrpc::error_response(Some(id), &e),
    }
}

pub async fn request(
    gw: &Arc<Gateway>,
    cx: &Cx,
    id: RequestId,
    method: &str,
    params: Option<Value>,
) -> Reply {
    let p = match params::object(params.as_ref()) {
        Ok(p) => p,
        Err(e) => return err(&id, &e),
    };
    let tasks = cx.tasks_enabled();
    let result = match method {
        "initialize" => return initialize(gw, cx, &id, p),
        "ping" => Ok(json!({})),
        "tools/list" => tools_list(gw, cx, p),
        "tools/call" => return tools_call(gw, cx, id, p).await,
        // The task answers are serialised straight from their view (the hot path of polls).
        "tasks/get" if tasks => return typed(&id, tasks_get(gw, cx, p).await),
        "tasks/cancel" if tasks => return typed(&id, tasks_cancel(gw, cx, p).await),
        "tasks/list" if tasks && gw.has_auth() => tasks_list(gw, cx, p).await,
        "tasks/result" if tasks => return tasks_result(gw, cx, id, p).await,
        _ => Err(ErrorObject::method_not_found(method)),
    };
    typed(&id, result)
}

pub fn notification(gw: &Arc<Gateway>, cx: &Cx, method: &str, params: Option<Value>) -> Reply {
    if method == "notifications/cancelled" {
        // Cancels a plain request or a pending tasks/result read; never a task.
        if let Some(rid) = params
            .as_ref()
            .and_then(|p| p.get("requestId"))
            .and_then(|v| serde_json::from_value::<RequestId>(v.clone()).ok())
        {
            if let Some(tok) = gw.inflight.lock().remove(&(cx.nonce().to_string(), rid)) {
                tok.cancel();
            }
        }
    }
    Reply::Accepted
}

/// A client's answer to a request the server sent: to a plain call waiting on this node, or
/// to the task (on whichever node leads it) whose id the request id carries.
pub fn response(
    gw: &Arc<Gateway>,
    cx: &Cx,
    id: RequestId,
    outcome: Result<Value, ErrorObject>,
) -> Reply {
    if let RequestId::String(s) = id {
        if s.starts_with("tm-p-") {
            if let Some(tx) = gw.plain_pending.lock().remove(&s) {
                let _ = tx.send(outcome);
            }
        } else if let Some((task_id, _seq)) = s.strip_prefix("tm-").and_then(|r| r.rsplit_once('-'))
        {
            let task_id = task_id.to_string();
            let gw = gw.clone();
            let owner = cx.principal.clone();
            tokio::spawn(async move {
                if !gw
                    .router
                    .deliver_response(&task_id, &owner, s.clone(), outcome)
                    .await
                {
                    tracing::debug!(request_id = %s, "answer for no waiting task");
                }
            });
        }
    }
    Reply::Accepted
}

fn initialize(gw: &Arc<Gateway>, cx: &Cx, id: &RequestId, p: &Map<String, Value>) -> Reply {
    let requested = match params::req_str(p, "protocolVersion") {
        Ok(v) => v,
        Err(e) => return err(id, &e),
    };
    let caps = match params::opt_obj(p, "capabilities") {
        Ok(c) => c.cloned().unwrap_or_default(),
        Err(e) => return err(id, &e),
    };
    let version = taskmesh_mcp::negotiate_version(requested);
    let mut nonce = [0u8; 16];
    if getrandom::fill(&mut nonce).is_err() {
        return err(id, &ErrorObject::internal("OS random source failed"));
    }
    let claims = SessionClaims {
        version: version.to_string(),
        principal: cx.principal.clone(),
        elicitation: caps.contains_key("elicitation"),
        sampling: caps.contains_key("sampling"),
        nonce: nonce.iter().map(|b| format!("{b:02x}")).collect(),
        issued_at_ms: now_ms(),
    };
    let session_id = gw.sessions.mint(&claims);
    let tasks = taskmesh_mcp::version_has_tasks(version);
    let result = json!({
        "protocolVersion": version,
        "capabilities": taskmesh_mcp::server_capabilities(tasks, gw.has_auth()),
        "serverInfo": { "name": "taskmesh", "title": "taskmesh", "version": env!("CARGO_PKG_VERSION") },
        "instructions": "Long tool calls run as durable tasks: call with `task`, poll tasks/get, fetch tasks/result.",
    });
    tracing::debug!(principal = %cx.principal, version, "session initialised");
    Reply::Initialized {
        body: jsonrpc::response(id, &result),
        session_id,
    }
}

#[derive(Serialize, Deserialize)]
struct ToolsCursor {
    offset: usize,
}

fn tools_list(gw: &Arc<Gateway>, cx: &Cx, p: &Map<String, Value>) -> Result<Value, ErrorObject> {
    let offset = match params::opt_str(p, "cursor")? {
        None => 0,
        Some(c) => {
            gw.signer
                .verify::<ToolsCursor>("tools-cursor", c)
                .filter(|c| c.offset < gw.tools.len())
                .ok_or_else(|| ErrorObject::invalid_params("Invalid params: invalid cursor"))?
                .offset
        }
    };
    let page = gw.cfg.tools_page_size.max(1);
    let tasks = cx.tasks_enabled();
    let tools: Vec<Value> = gw
        .tools
        .all()
        .iter()
        .skip(offset)
        .take(page)
        .map(|t| t.spec().to_wire(tasks))
        .collect();
    let mut out = json!({ "tools": tools });
    if offset + page < gw.tools.len() {
        out["nextCursor"] = json!(gw.signer.sign(
            "tools-cursor",
            &ToolsCursor {
                offset: offset + page
            }
        ));
    }
    Ok(out)
}

async fn tools_call(gw: &Arc<Gateway>, cx: &Cx, id: RequestId, p: &Map<String, Value>) -> Reply {
    let name = match params::req_str(p, "name") {
        Ok(n) => n,
        Err(e) => return err(&id, &e),
    };
    let args = match params::opt_obj(p, "arguments") {
        Ok(a) => a.cloned().unwrap_or_default(),
        Err(e) => return err(&id, &e),
    };
    let task = match params::opt_obj(p, "task") {
        Ok(t) => t,
        Err(e) => return err(&id, &e),
    };
    let meta = match params::opt_obj(p, "_meta") {
        Ok(m) => m,
        Err(e) => return err(&id, &e),
    };
    let progress_token = match meta.and_then(|m| m.get("progressToken")) {
        None | Some(Value::Null) => None,
        Some(t @ (Value::String(_) | Value::Number(_))) => Some(t.clone()),
        Some(_) => {
            return err(
                &id,
                &ErrorObject::invalid_params(
                    "Invalid params: '_meta.progressToken' must be a string or an integer",
                ),
            )
        }
    };
    let Some(tool) = gw.tools.get(name).cloned() else {
        return err(
            &id,
            &ErrorObject::invalid_params(format!("Invalid params: unknown tool '{name}'")),
        );
    };
    if let Err(e) = tool.validate(&args) {
        return err(&id, &e);
    }
    let claims = cx.session.as_ref().map(|(_, c)| c);
    let client = ClientCaps {
        elicitation: claims.is_some_and(|c| c.elicitation),
        sampling: claims.is_some_and(|c| c.sampling),
    };
    if !cx.tasks_enabled() {
        // Older protocol versions: a plain tools server; `task` is ignored.
        return call_plain(gw, cx, id, tool, args, progress_token, client);
    }
    let support = tool.spec().task_support;
    match (task, support) {
        (Some(_), TaskSupport::Forbidden) => err(
            &id,
            &ErrorObject::new(
                METHOD_NOT_FOUND,
                format!("Tool '{name}' does not support task-augmented calls (execution.taskSupport is 'forbidden')"),
            ),
        ),
        (None, TaskSupport::Required) => err(
            &id,
            &ErrorObject::new(
                METHOD_NOT_FOUND,
                format!("Tool '{name}' must be called as a task (execution.taskSupport is 'required'): add a 'task' parameter"),
            ),
        ),
        (None, _) => call_plain(gw, cx, id, tool, args, progress_token, client),
        (Some(task), _) => {
            let ttl_ms = match params::opt_u64(task, "ttl") {
                Ok(t) => t,
                Err(e) => {
                    return err(&id, &ErrorObject::invalid_params(e.message.replace("'ttl'", "'task.ttl'")))
                }
            };
            let task_id = match mint_task_id() {
                Ok(t) => t,
                Err(e) => return err(&id, &wire::host_error(&e)),
            };
            let new = NewTask {
                task_id,
                owner: cx.principal.clone(),
                session: cx.session_id().map(str::to_string),
                tool: name.to_string(),
                arguments_json: Value::Object(args).to_string(),
                progress_token,
                ttl_ms,
                client,
            };
            match gw.router.create(new).await {
                Ok(created) => ok(&id, &CreateTaskResult { task: wire::task(&created.task) }),
                Err(e) => err(&id, &wire::host_error(&e)),
            }
        }
    }
}

/// Side channel of a plain (non-task) call: messages go on the POST's SSE stream.
struct PlainIo {
    gw: std::sync::Weak<Gateway>,
    tx: mpsc::Sender<Arc<Vec<u8>>>,
    progress_token: Option<Value>,
    nonce: String,
    seq: std::sync::atomic::AtomicU64,
}

impl ToolIo for PlainIo {
    fn progress(&self, progress: f64, total: Option<f64>, message: Option<String>) {
        if let Some(token) = &self.progress_token {
            let mut p = json!({ "progressToken": token, "progress": progress });
            if let Some(t) = total {
                p["total"] = json!(t);
            }
            if let Some(m) = message {
                p["message"] = json!(m);
            }
            let _ = self.tx.try_send(Arc::new(jsonrpc::notification(
                "notifications/progress",
                &p,
            )));
        }
    }

    fn request(&self, method: &'static str, params: Value) -> BoxFuture<'static, ToolResult> {
        let n = self.seq.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let rid = format!("tm-p-{}-{n}", self.nonce);
        let (reply, rx) = oneshot::channel();
        let gw = self.gw.upgrade();
        let tx = self.tx.clone();
        async move {
            let Some(gw) = gw else {
                return Err(ErrorObject::internal("server stopping"));
            };
            gw.plain_pending.lock().insert(rid.clone(), reply);
            let msg = jsonrpc::request(&RequestId::String(rid.clone()), method, &params);
            if tx.send(Arc::new(msg)).await.is_err() {
                gw.plain_pending.lock().remove(&rid);
                return Err(ErrorObject::internal("the client went away"));
            }
            rx.await
                .unwrap_or_else(|_| Err(ErrorObject::internal("no answer")))
        }
        .boxed()
    }
}

fn call_plain(
    gw: &Arc<Gateway>,
    cx: &Cx,
    id: RequestId,
    tool: Arc<dyn Tool>,
    args: Map<String, Value>,
    progress_token: Option<Value>,
    client: ClientCaps,
) -> Reply {
    let (tx, rx) = mpsc::channel(gw.cfg.stream_buffer.max(2));
    let cancel = CancellationToken::new();
    let key = (cx.nonce().to_string(), id.clone());
    gw.inflight.lock().insert(key.clone(), cancel.clone());
    let ctx = ToolContext {
        cancel: cancel.clone(),
        io: Arc::new(PlainIo {
            gw: Arc::downgrade(gw),
            tx: tx.clone(),
            progress_token: progress_token.clone(),
            nonce: cx.nonce().to_string(),
            seq: std::sync::atomic::AtomicU64::new(1),
        }),
        has_progress_token: progress_token.is_some(),
        client_elicitation: client.elicitation,
        client_sampling: client.sampling,
    };
    // Tools that ask the client something are the task-required ones; a call that has no
    // progress token and cannot ask anything is answered as plain JSON.
    let json_if_alone =
        progress_token.is_none() && tool.spec().task_support != TaskSupport::Required;
    let run = tool.call(args, ctx);
    let gw2 = gw.clone();
    tokio::spawn(async move {
        let result = tokio::select! {
            r = run => Some(r),
            _ = cancel.cancelled() => None,
            _ = tx.closed() => None,
        };
        gw2.inflight.lock().remove(&key);
        if let Some(r) = result {
            let _ = tx.send(Arc::new(answer(&id, r))).await;
        }
    });
    Reply::Stream { rx, json_if_alone }
}

fn task_id_param(p: &Map<String, Value>) -> Result<&str, ErrorObject> {
    params::req_str(p, "taskId")
}

/// The client-facing error of a failed task operation; unknown ids are counted for the
/// enumeration watch.
fn task_error(gw: &Gateway, cx: &Cx, task_id: &str, e: &HostError) -> ErrorObject {
    if matches!(e, HostError::NotFound) {
        gw.limits.failed_lookup(&cx.principal, task_id);
    }
    wire::host_error(e)
}

/// A task operation's answer: the flat Task object, or the client-facing error.
fn flat_task(
    gw: &Gateway,
    cx: &Cx,
    task_id: &str,
    r: Result<taskmesh_task::TaskView, HostError>,
) -> Result<taskmesh_mcp::Task, ErrorObject> {
    let r = r.map_err(|e| task_error(gw, cx, task_id, &e))?;
    Ok(wire::task(&r))
}

async fn tasks_get(
    gw: &Arc<Gateway>,
    cx: &Cx,
    p: &Map<String, Value>,
) -> Result<taskmesh_mcp::Task, ErrorObject> {
    let task_id = task_id_param(p)?;
    flat_task(gw, cx, task_id, gw.router.get(task_id, &cx.principal).await)
}

async fn tasks_cancel(
    gw: &Arc<Gateway>,
    cx: &Cx,
    p: &Map<String, Value>,
) -> Result<taskmesh_mcp::Task, ErrorObject> {
    let task_id = task_id_param(p)?;
    flat_task(
        gw,
        cx,
        task_id,
        gw.router.cancel(task_id, &cx.principal).await,
    )
}

/// A signed `tasks/list` cursor (one-letter JSON keys: it travels in every next-page request).
#[derive(Serialize, Deserialize)]
struct ListCursor {
    /// Principal the cursor was issued to.
    #[serde(rename = "o")]
    owner: String,
    /// Last task id of the previous page.
    #[serde(rename = "a")]
    after: String,
    /// Issued at (ms).
    #[serde(rename = "t")]
    issued_at_ms: u64,
}

async fn tasks_list(
    gw: &Arc<Gateway>,
    cx: &Cx,
    p: &Map<String, Value>,
) -> Result<Value, ErrorObject> {
    let after = match params::opt_str(p, "cursor")? {
        None => None,
        Some(c) => {
            let now = now_ms();
            let cur = gw
                .signer
                .verify::<ListCursor>("tasks-cursor", c)
                .filter(|c| {
                    c.owner == cx.principal
                        && now <= c.issued_at_ms.saturating_add(gw.cfg.cursor_ttl_ms)
                })
                .ok_or_else(|| {
                    ErrorObject::invalid_params("Invalid params: invalid or expired cursor")
                })?;
            Some(cur.after)
        }
    };
    let (records, more) = gw
        .router
        .list(&cx.principal, after.as_deref(), gw.cfg.tasks_page_size)
        .await
        .map_err(|e| wire::host_error(&e))?;
    let next_cursor = match (more, records.last()) {
        (true, Some(last)) => Some(gw.signer.sign(
            "tasks-cursor",
            &ListCursor {
                owner: cx.principal.clone(),
                after: last.task_id.clone(),
                issued_at_ms: now_ms(),
            },
        )),
        _ => None,
    };
    let out = ListTasksResult {
        tasks: records.iter().map(wire::task).collect(),
        next_cursor,
    };
    serde_json::to_value(out).map_err(|e| ErrorObject::internal(e.to_string()))
}

fn audit_result(principal: &str, task_id: &str) {
    tracing::info!(target: "audit", event = "task_result_retrieved", task_id = %task_id, principal = %principal, "task result retrieved");
}

async fn tasks_result(gw: &Arc<Gateway>, cx: &Cx, id: RequestId, p: &Map<String, Value>) -> Reply {
    let task_id = match task_id_param(p) {
        Ok(t) => t.to_string(),
        Err(e) => return err(&id, &e),
    };
    let attachment = match gw.router.attach(&task_id, &cx.principal).await {
        Ok(a) => a,
        Err(e) => return err(&id, &task_error(gw, cx, &task_id, &e)),
    };
    let (mut messages, mut done) = match attachment {
        Attachment::Terminal(r) => {
            audit_result(&cx.principal, &task_id);
            return Reply::Json(answer(&id, wire::terminal_answer(&r)));
        }
        Attachment::Live { messages, done, .. } => (messages, done),
    };
    // Running: hold the request open as an SSE stream that carries the task's messages.
    let (tx, rx) = mpsc::channel(gw.cfg.stream_buffer.max(2));
    let cancel = CancellationToken::new();
    let key = (cx.nonce().to_string(), id.clone());
    gw.inflight.lock().insert(key.clone(), cancel.clone());
    let gw = gw.clone();
    let principal = cx.principal.clone();
    tokio::spawn(async move {
        let mut messages_open = true;
        let final_answer = loop {
            tokio::select! {
                m = messages.recv(), if messages_open => match m {
                    Some(m) => {
                        if tx.send(m).await.is_err() {
                            break None;
                        }
                    }
                    None => messages_open = false,
                },
                r = &mut done => match r {
                    Ok(record) => break Some(wire::terminal_answer(&record)),
                    Err(_) => {
                        // The waiter was dropped: expired, or the shard moved. Look again.
                        match gw.router.attach(&task_id, &principal).await {
                            Ok(Attachment::Terminal(record)) => break Some(wire::terminal_answer(&record)),
                            Ok(Attachment::Live { messages: m, done: d, .. }) => {
                                messages = m;
                                messages_open = true;
                                done = d;
                            }
                            Err(e) => break Some(Err(wire::host_error(&e))),
                        }
                    }
                },
                _ = cancel.cancelled() => break None,
                _ = tx.closed() => break None,
            }
        };
        gw.inflight.lock().remove(&key);
        if let Some(a) = final_answer {
            audit_result(&principal, &task_id);
            let _ = tx.send(Arc::new(answer(&id, a))).await;
        }
    });
    Reply::Stream {
        rx,
        json_if_alone: false,
    }
}

/// A cancelled plain request's answer when the transport must still say something.
pub fn cancelled_error() -> ErrorObject {
    ErrorObject::new(REQUEST_CANCELLED, "Request cancelled")
}
