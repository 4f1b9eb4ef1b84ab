//! `tools/list` and `tools/call`.
//!
//! [`super::request`] hands both methods here. A task-augmented call (2025-11-25, with `task`)
//! mints a task id and creates the task through the router; a plain call runs the tool on this
//! node, its progress and its requests to the client travel on the POST's SSE stream
//! ([`PlainIo`]), and a client's answer to such a request comes back through
//! [`super::response`].

use std::sync::Arc;

use futures::future::BoxFuture;
use futures::FutureExt;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use taskmesh_host::NewTask;
use taskmesh_mcp::jsonrpc::{self, ErrorObject, RequestId, METHOD_NOT_FOUND};
use taskmesh_mcp::notify::{self, LogMessage};
use taskmesh_mcp::time::now_us;
use taskmesh_mcp::{params, CreateTaskResult, ServerRequestId, TaskSupport};
use taskmesh_router::mint_task_id;
use taskmesh_task::{ClientCaps, ToolRequest};
use taskmesh_tools::{Tool, ToolContext, ToolFuture, ToolIo};
use tokio::sync::{mpsc, oneshot};

use super::{answer, begin_cancellable, err, handoff, ok, Cx, Reply};
use crate::delivery::{JsonMessage, Kind};
use crate::{wire, Gateway};

#[derive(Serialize, Deserialize)]
struct ToolsCursor {
    offset: usize,
}

pub(super) fn tools_list(
    gw: &Arc<Gateway>,
    cx: &Cx,
    p: &Map<String, Value>,
) -> Result<Value, ErrorObject> {
    if handoff::applies(gw, cx) {
        return handed_off_page(
            gw,
            p,
            crate::handoff::listing(gw, cx.tasks_enabled(), !cx.tasks_enabled()),
        );
    }
    tools_page(gw, p, cx.tasks_enabled())
}

/// One page of `tools/list` for a session whose plain calls are handed off: `all` is its whole
/// list (the registered tools as it may call them, then the offered tools).
pub(crate) fn handed_off_page(
    gw: &Gateway,
    p: &Map<String, Value>,
    all: Vec<Value>,
) -> Result<Value, ErrorObject> {
    let offset = match params::opt_str(p, "cursor")? {
        None => 0,
        Some(c) => {
            gw.signer
                .verify::<ToolsCursor>("tools-cursor", c)
                .filter(|c| c.offset < all.len())
                .ok_or_else(|| ErrorObject::invalid_params("Invalid params: invalid cursor"))?
                .offset
        }
    };
    let page = gw.cfg.tools.page_size.max(1);
    let total = all.len();
    let tools: Vec<Value> = all.into_iter().skip(offset).take(page).collect();
    let mut out = json!({ "tools": tools });
    if offset + page < total {
        out["nextCursor"] = json!(gw.signer.sign(
            "tools-cursor",
            &ToolsCursor {
                offset: offset + page
            }
        ));
    }
    Ok(out)
}

/// One page of `tools/list` from its `cursor` param, each tool with its
/// `execution.taskSupport` when `with_execution` (a version with tasks in the tool list).
pub(crate) fn tools_page(
    gw: &Gateway,
    p: &Map<String, Value>,
    with_execution: bool,
) -> Result<Value, ErrorObject> {
    // One snapshot for the whole page: the list may change meanwhile (clients hear of it by
    // notifications/tools/list_changed), and a cursor past its end is then refused.
    let listing = gw.tools.snapshot();
    let offset = match params::opt_str(p, "cursor")? {
        None => 0,
        Some(c) => {
            gw.signer
                .verify::<ToolsCursor>("tools-cursor", c)
                .filter(|c| c.offset < listing.len())
                .ok_or_else(|| ErrorObject::invalid_params("Invalid params: invalid cursor"))?
                .offset
        }
    };
    let page = gw.cfg.tools.page_size.max(1);
    let tools: Vec<Value> = listing
        .tools()
        .skip(offset)
        .take(page)
        .map(|t| t.spec().to_wire(with_execution))
        .collect();
    let mut out = json!({ "tools": tools });
    if offset + page < listing.len() {
        out["nextCursor"] = json!(gw.signer.sign(
            "tools-cursor",
            &ToolsCursor {
                offset: offset + page
            }
        ));
    }
    Ok(out)
}

pub(super) async fn tools_call(
    gw: &Arc<Gateway>,
    cx: &Cx,
    id: RequestId,
    p: &Map<String, Value>,
) -> Reply {
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
    let handoff = handoff::applies(gw, cx);
    if handoff {
        if let Some(which) = crate::handoff::Offered::named(gw, name) {
            return handoff::offered(gw, cx, id, which, &args).await;
        }
    }
    let Some(tool) = gw.tools.get(name) else {
        return err(
            &id,
            &ErrorObject::invalid_params(format!("Invalid params: unknown tool '{name}'")),
        );
    };
    if let Err(e) = tool.validate(&args) {
        return err(&id, &e);
    }
    let claims = cx.session.as_ref().map(|(_, c)| c);
    // Requests run as client tasks only on a version with tasks.
    let tasks = cx.tasks_enabled();
    let client = ClientCaps {
        elicitation: claims.is_some_and(|c| c.elicitation),
        sampling: claims.is_some_and(|c| c.sampling),
        elicitation_tasks: tasks && claims.is_some_and(|c| c.elicitation_tasks),
        sampling_tasks: tasks && claims.is_some_and(|c| c.sampling_tasks),
    };
    let support = tool.spec().task_support;
    let plain = task.is_none() || !cx.tasks_enabled();
    if handoff && plain && crate::handoff::hands_off(support, !cx.tasks_enabled()) {
        // A client that does not speak tasks: the call runs as a task it can be handed.
        return handoff::call(gw, cx, id, &tool, args, progress_token, client, true).await;
    }
    // Workers run a tool only as a task: its plain call runs one and answers at its end.
    let by_workers = tool.runs_on_workers();
    if !cx.tasks_enabled() {
        // Older protocol versions: a plain tools server; `task` is ignored.
        if by_workers {
            return handoff::call(gw, cx, id, &tool, args, progress_token, client, false).await;
        }
        return call_plain(gw, cx, id, tool, args, progress_token, client);
    }
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
        (None, _) if by_workers => {
            handoff::call(gw, cx, id, &tool, args, progress_token, client, false).await
        }
        (None, _) => call_plain(gw, cx, id, tool, args, progress_token, client),
        (Some(task), _) => {
            let ttl_ms = match params::opt_u64(task, "ttl") {
                Ok(t) => t,
                Err(e) => {
                    return err(&id, &ErrorObject::invalid_params(e.message.replace("'ttl'", "'task.ttl'")))
                }
            };
            let new = match new_task(cx, tool.as_ref(), args, ttl_ms, progress_token, client) {
                Ok(n) => n,
                Err(e) => return err(&id, &e),
            };
            match gw.create_task(new).await {
                Ok(created) => ok(&id, &CreateTaskResult { task: wire::TaskObject::classic(&created.task) }),
                Err(e) => err(&id, &e),
            }
        }
    }
}

/// Whether a lost lease reruns a task of `tool`, when workers run it (`None` otherwise).
pub(crate) fn worker_rerun(tool: &dyn taskmesh_tools::Tool) -> Option<bool> {
    tool.runs_on_workers()
        .then(|| tool.spec().resume == taskmesh_tools::ResumePolicy::Rerun)
}

/// The task a `tools/call` of `tool` creates in this session, with a fresh id (recorded on the
/// request's span).
pub(super) fn new_task(
    cx: &Cx,
    tool: &dyn taskmesh_tools::Tool,
    args: Map<String, Value>,
    ttl_ms: Option<u64>,
    progress_token: Option<Value>,
    client: ClientCaps,
) -> Result<NewTask, ErrorObject> {
    let task_id = mint_task_id().map_err(|e| wire::host_error(&e))?;
    tracing::Span::current().record("task_id", task_id.as_str());
    Ok(NewTask {
        task_id,
        owner: cx.principal.clone(),
        session: cx.session_id().map(str::to_string),
        ttl_ms,
        request: ToolRequest {
            progress_token_json: progress_token.map(|t| t.to_string()),
            client,
            traceparent: taskmesh_telemetry::current_traceparent(),
            ..ToolRequest::new(&tool.spec().name, Value::Object(args).to_string())
        },
        worker_rerun: worker_rerun(tool),
    })
}

/// Side channel of a plain (non-task) call: messages go on the POST's SSE stream.
struct PlainIo {
    gw: std::sync::Weak<Gateway>,
    tx: mpsc::Sender<JsonMessage>,
    progress_token: Option<Value>,
    nonce: String,
    seq: std::sync::atomic::AtomicU64,
    /// Which log messages the call's stream carries.
    logs: Arc<tokio::sync::Mutex<crate::logging::LogFilter>>,
}

impl ToolIo for PlainIo {
    fn close_connection(&self) {
        let _ = self.tx.try_send(JsonMessage::close_here());
    }

    fn progress(&self, progress: f64, total: Option<f64>, message: Option<String>) {
        if let Some(token) = &self.progress_token {
            let json = notify::progress(token, progress, total, message.as_deref(), None);
            let m = JsonMessage::stamped(Arc::new(json), Kind::Message, now_us());
            let _ = self.tx.try_send(m);
        }
    }

    fn log(&self, message: LogMessage) -> BoxFuture<'static, ()> {
        let json = notify::message(&message, None);
        let (gw, tx, logs) = (self.gw.upgrade(), self.tx.clone(), self.logs.clone());
        async move {
            let Some(gw) = gw else { return };
            if logs.lock().await.allows(&gw, &json).await {
                let m = JsonMessage::stamped(Arc::new(json), Kind::Message, now_us());
                let _ = tx.send(m).await;
            }
        }
        .boxed()
    }

    fn request(&self, method: &'static str, params: Value) -> ToolFuture {
        let n = self.seq.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let rid = ServerRequestId::Plain {
            nonce: self.nonce.clone(),
            seq: n,
        }
        .to_string();
        let (reply, rx) = oneshot::channel();
        let gw = self.gw.upgrade();
        let tx = self.tx.clone();
        async move {
            let Some(gw) = gw else {
                return Err(ErrorObject::internal("server stopping"));
            };
            gw.plain_pending.lock().insert(rid.clone(), reply);
            let msg = jsonrpc::request(&RequestId::String(rid.clone()), method, &params);
            let msg = JsonMessage::stamped(Arc::new(msg), Kind::Message, now_us());
            if tx.send(msg).await.is_err() {
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
    let (tx, rx) = mpsc::channel(gw.cfg.http.sse_buffer_events.max(2));
    let cancel = match begin_cancellable(gw, cx, &id) {
        Ok(cancel) => cancel,
        Err(refused) => return refused,
    };
    let nonce = cx.nonce().to_string();
    let ctx = ToolContext {
        cancel: cancel.clone(),
        ended: cancel.clone(),
        io: Arc::new(PlainIo {
            gw: Arc::downgrade(gw),
            tx: tx.clone(),
            progress_token: progress_token.clone(),
            nonce: cx.nonce().to_string(),
            seq: std::sync::atomic::AtomicU64::new(1),
            logs: Arc::new(tokio::sync::Mutex::new(crate::logging::LogFilter::new(cx))),
        }),
        has_progress_token: progress_token.is_some(),
        client_elicitation: client.elicitation,
        client_sampling: client.sampling,
        principal: cx.principal.clone(),
        upstream_task: None,
        answers: Arc::default(),
        traceparent: taskmesh_telemetry::current_traceparent(),
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
        gw2.inflight.end(&nonce, &id);
        if let Some(r) = result {
            let _ = tx.send(JsonMessage::plain(Arc::new(answer(&id, r)))).await;
        }
    });
    Reply::Stream {
        rx,
        json_if_alone,
        origin: None,
        released: None,
    }
}
