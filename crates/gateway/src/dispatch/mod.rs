//! JSON-RPC dispatch: one classified message in, one [`Reply`] out.
//!
//! A message reaches dispatch from [`crate::http`], which has checked the Origin, the bearer
//! token, the body limit and the session, and parsed the body into a request, a notification
//! or a response. [`request`] is the method table: it hands each method to its family,
//! `session` (`initialize`), `tools` (`tools/list`, `tools/call` and the side channel of a
//! plain call) or `tasks` (`tasks/get`, `tasks/cancel`, `tasks/list`, `tasks/result`).
//! [`notification`] and [`response`] take what the client sends that needs no answer.
//!
//! Version rules live here: with 2025-11-25 the server declares `tasks` and enforces each
//! tool's `execution.taskSupport`; with 2025-06-18 and 2025-03-26 it is a plain tools server
//! (the `task` field is ignored and `tasks/*` methods do not exist). A session whose client
//! does not speak tasks (either version, without the `tasks` capability) has its plain calls
//! of task-capable tools handed off (`handoff`).

mod handoff;
mod session;
pub(crate) mod tasks;
pub(crate) mod tools;

use std::sync::Arc;

use serde::Serialize;
use serde_json::{json, Value};
use taskmesh_mcp::jsonrpc::{self, ErrorObject, RequestId, REQUEST_CANCELLED};
use taskmesh_mcp::{params, ServerRequestId};
use taskmesh_task::TaskView;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::service::task_id_param;
pub use crate::session::Cx;
use crate::{wire, Gateway};

/// What the transport sends back.
pub enum Reply {
    /// One JSON-RPC response, as `application/json`.
    Json(Vec<u8>),
    /// A JSON-RPC response to `initialize`, with the new session id for the header.
    Initialized {
        /// The serialised JSON-RPC response.
        body: Vec<u8>,
        /// The signed session id minted for it, sent in the `Mcp-Session-Id` header.
        session_id: String,
    },
    /// JSON-RPC messages as `text/event-stream`; the last one is the response. With
    /// `json_if_alone`, the transport waits for the first message and answers
    /// `application/json` when that first message is already the response.
    Stream {
        /// The messages to send, serialised, in order; the stream ends when the sender is dropped.
        rx: mpsc::Receiver<crate::delivery::JsonMessage>,
        /// Answer `application/json` when the first message is already the response (set for a
        /// plain call without a progress token to a tool that is not task-required).
        json_if_alone: bool,
        /// The `tasks/result` request the stream answers (carried in its event ids, so that a
        /// reconnection can answer it again once the stream itself is gone).
        origin: Option<crate::resume::ResultOrigin>,
        /// Cancelled by the producer once it has let go of its task attachment (a
        /// `tasks/result` stream; see [`crate::resume::Opening::released`]).
        released: Option<tokio_util::sync::CancellationToken>,
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

/// The answer of a `tasks/get` or `tasks/cancel`: the task's `Task` object, written from the
/// view as it stands.
fn task_answer(id: &RequestId, r: Result<TaskView, ErrorObject>) -> Reply {
    match r {
        Ok(task) => ok(id, &wire::TaskObject::classic(&task)),
        Err(e) => err(id, &e),
    }
}

fn answer(id: &RequestId, r: Result<Value, ErrorObject>) -> Vec<u8> {
    match r {
        Ok(v) => jsonrpc::response(id, &v),
        Err(e) => jsonrpc::error_response(Some(id), &e),
    }
}

/// Answer one JSON-RPC request: `params` must be an object, null or absent (else `-32602`),
/// then the method runs. An unknown method gets `-32601`, and so do `tasks/*` in a session
/// without tasks and `tasks/list` when authentication is off.
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
        "initialize" => return session::initialize(gw, cx, &id, p),
        "ping" => Ok(json!({})),
        "logging/setLevel" => Box::pin(crate::logging::set_level(gw, cx, p)).await,
        "tools/list" => tools::tools_list(gw, cx, p),
        // The other methods' futures are boxed: this function's own future is as large as
        // its largest branch, and every poll would otherwise move a create's or a held
        // result's state around (see docs/benchmarks.md).
        "tools/call" => return Box::pin(tools::tools_call(gw, cx, id, p)).await,
        // The task answers are serialised straight from their view (the hot path of polls).
        "tasks/get" if tasks => {
            let task = async { gw.get_task(&cx.principal, task_id_param(p)?).await };
            return task_answer(&id, task.await);
        }
        "tasks/cancel" if tasks => {
            return task_answer(&id, Box::pin(tasks::tasks_cancel(gw, cx, p)).await)
        }
        "tasks/list" if tasks && gw.has_auth() => Box::pin(tasks::tasks_list(gw, cx, p)).await,
        "tasks/result" if tasks => {
            return match task_id_param(p) {
                Ok(t) => Box::pin(tasks::tasks_result(gw, cx, id, t.to_string())).await,
                Err(e) => err(&id, &e),
            }
        }
        _ => Err(ErrorObject::method_not_found(method)),
    };
    typed(&id, result)
}

/// Take a client notification; always HTTP 202. `notifications/cancelled` cancels the plain
/// request or pending `tasks/result` read its `requestId` names; others are ignored.
pub fn notification(gw: &Arc<Gateway>, cx: &Cx, method: &str, params: Option<Value>) -> Reply {
    if method == "notifications/cancelled" {
        // Cancels a plain request or a pending tasks/result read; never a task.
        if let Some(rid) = params
            .as_ref()
            .and_then(|p| p.get("requestId"))
            .and_then(|v| serde_json::from_value::<RequestId>(v.clone()).ok())
        {
            gw.inflight.cancel(cx.nonce(), &rid);
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
        match s.parse::<ServerRequestId>() {
            Ok(ServerRequestId::Plain { .. }) => {
                if let Some(tx) = gw.plain_pending.lock().remove(&s) {
                    let _ = tx.send(outcome);
                }
            }
            Ok(ServerRequestId::Task { task_id, .. }) => {
                let gw = gw.clone();
                let owner = cx.principal.clone();
                tokio::spawn(async move {
                    if !gw.deliver(&owner, &task_id, s.clone(), outcome).await {
                        tracing::debug!(request_id = %s, "answer for no waiting task");
                    }
                });
            }
            // Not an id this server sends: nothing waits for the answer.
            Err(_) => {}
        }
    }
    Reply::Accepted
}

/// A cancelled plain request's answer when the transport must still say something.
pub fn cancelled_error() -> ErrorObject {
    ErrorObject::new(REQUEST_CANCELLED, "Request cancelled")
}

/// Register request `id` as cancellable by `notifications/cancelled` and return its token, or
/// the answer refusing it when the session already has `limits.max_inflight_per_session`
/// requests in flight.
fn begin_cancellable(gw: &Gateway, cx: &Cx, id: &RequestId) -> Result<CancellationToken, Reply> {
    let cancel = CancellationToken::new();
    if gw.inflight.begin(cx.nonce(), id, cancel.clone()) {
        return Ok(cancel);
    }
    Err(err(
        id,
        &ErrorObject::new(
            taskmesh_mcp::jsonrpc::CAPACITY_EXCEEDED,
            format!(
                "this session already has {} requests in flight \
                 (limits.max_inflight_per_session)",
                gw.inflight.per_session()
            ),
        ),
    ))
}
