//! Protocol 2026-07-28 with the tasks extension (`io.modelcontextprotocol/tasks`), on `/mcp`
//! beside 2025-11-25 ([`crate::dispatch`]), over the same task store.
//!
//! A POST without `Mcp-Session-Id` whose request names its protocol version in `_meta`
//! (`io.modelcontextprotocol/protocolVersion`) is of this generation and is served here,
//! statelessly: nothing about the client is kept between requests. Each request carries:
//!
//! - `_meta` protocol version: one of [`SUPPORTED`], else `-32022` (HTTP 400) with the
//!   versions served in `data.supported`; the `MCP-Protocol-Version` header must name the same
//!   one, else `-32020` (HTTP 400);
//! - `_meta` client capabilities (an object, else `-32602`); the request declares the tasks
//!   extension when `extensions["io.modelcontextprotocol/tasks"]` is in it;
//! - `Mcp-Method` equal to its method, and `Mcp-Name` equal to the tool's name on `tools/call`
//!   and to the task id on `tasks/get`, `tasks/update` and `tasks/cancel` (plain, or
//!   `=?base64?...?=`), else `-32020` (HTTP 400);
//! - on `tools/call`, an `Mcp-Param-{name}` header for each argument the tool's input schema
//!   mirrors (`x-mcp-header`), reading as the argument does, else `-32020` (HTTP 400).
//!
//! Methods: `server/discover`, `tools/list`, `tools/call`, `subscriptions/listen` ([`listen`]),
//! the events extension's `events/list`, `events/poll`, `events/stream` ([`events`]),
//! `events/subscribe` and `events/unsubscribe` (`subscribe.rs`), and
//! with the tasks extension declared
//! `tasks/get`, `tasks/update`, `tasks/cancel` (without it: `-32021`, HTTP 400). Any other
//! method, `tasks/result` and `tasks/list` included, is `-32601` with HTTP 404. Every result
//! carries `resultType` and the server's info in `_meta`.
//!
//! Who decides on a task is the server: a `tools/call` that declares the extension, of a tool
//! that may run as a task (its taskSupport is not `forbidden`), creates one (durably, before
//! the answer) and answers the flat `CreateTaskResult`; without the extension a tool that runs
//! only as a task answers `-32021`, any other runs as a plain call. A `task` parameter is
//! ignored. Tasks are bound to the principal, so a task made through either generation is
//! served to its owner through the other ([`tasks`] says how each field reads).
//!
//! A request comes from [`crate::http`] (`handle`); its `_meta` and headers are checked in
//! `check.rs`, `tools/call` runs in `call.rs` (its input rounds in `rounds.rs`), and the other
//! methods are answered here.

mod call;
mod check;
mod cursor;
pub(crate) mod events;
mod handoff;
pub(crate) mod listen;
mod rounds;
mod subscribe;
pub mod tasks;

use std::sync::Arc;

use axum::body::Body;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Map, Value};
use taskmesh_host::{HostError, TaskRead};
use taskmesh_mcp::jsonrpc::{self, ErrorObject, Message, METHOD_NOT_FOUND};
use taskmesh_mcp::params;
use tokio::sync::mpsc;

use call::{progress_stream, tools_call};
use check::{check, check_param_headers, Declared};

use crate::service::task_id_param;
use crate::Gateway;

/// The protocol version of this generation.
pub const VERSION: &str = "2026-07-28";
/// The versions a request of this generation may name.
pub const SUPPORTED: [&str; 1] = [VERSION];
/// The tasks extension's identifier.
pub const EXTENSION: &str = "io.modelcontextprotocol/tasks";
/// `_meta` key of a request's protocol version.
pub const META_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
/// `_meta` key of a request's client capabilities.
pub const META_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
/// `_meta` key of the deprecated per-request log level.
pub const META_LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";
/// `_meta` key of the server's info on a result.
pub const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
/// A routing header, or the protocol version header, disagrees with the body.
pub const HEADER_MISMATCH: i64 = -32020;
/// The request lacks a client capability that it needs (the tasks extension).
pub const MISSING_CAPABILITY: i64 = -32021;
/// The request's protocol version is not served.
pub const UNSUPPORTED_VERSION: i64 = -32022;

/// Header carrying the client's protocol version (`MCP-Protocol-Version`), in lower case. Both
/// generations read it: here it must name the request's `_meta` version; with a 2025-11-25
/// session ([`crate::http`]) it is optional and, when sent, must be supported and, after
/// `initialize`, equal the session's.
pub const VERSION_HEADER: &str = "mcp-protocol-version";
const METHOD_HEADER: &str = "mcp-method";
const NAME_HEADER: &str = "mcp-name";

/// Whether a message that came without a session is of this generation: its
/// `MCP-Protocol-Version` header names a version of it, or its `_meta` names a protocol
/// version (whatever its method: an `initialize` of this generation is an unknown method).
pub(crate) fn is_modern(headers: &HeaderMap, msg: &Message) -> bool {
    let by_header = headers
        .get(VERSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| SUPPORTED.contains(&v));
    let params = match msg {
        Message::Request { params, .. } | Message::Notification { params, .. } => params.as_ref(),
        Message::Response { .. } => None,
    };
    by_header
        || params
            .and_then(|p| p.get("_meta"))
            .and_then(|m| m.get(META_VERSION))
            .is_some()
}

/// Why a request is not answered with a result: its JSON-RPC error, and the HTTP status when
/// it is not the one [`http_status`] gives the code.
struct Failure {
    error: ErrorObject,
    status: Option<StatusCode>,
}

impl From<ErrorObject> for Failure {
    fn from(error: ErrorObject) -> Self {
        Self {
            error,
            status: None,
        }
    }
}

/// What a request of this generation is answered with.
enum Answer {
    /// One JSON result.
    Value(Value),
    /// The `tasks/get` answer of a `working` task, serialised straight from its view.
    Working(taskmesh_task::TaskView),
    /// A plain call that reports progress: its notifications, then its result, as an SSE
    /// stream.
    Progress {
        /// The call's `notifications/progress`, serialised; closed when the call ends.
        notes: mpsc::Receiver<Vec<u8>>,
        /// The call's outcome.
        done: tokio::task::JoinHandle<Result<Value, ErrorObject>>,
    },
    /// An accepted `subscriptions/listen`: its stream.
    Listen(listen::Listen),
    /// An accepted `events/stream`: its stream.
    Events(events::Stream),
    /// A refusal that is not a JSON-RPC error (too many streams: HTTP 429).
    Refused(Response),
}

/// Answer one message of this generation.
pub(crate) async fn handle(
    gw: &Arc<Gateway>,
    headers: &HeaderMap,
    principal: &str,
    msg: Message,
) -> Response {
    let Message::Request { id, method, params } = msg else {
        // Clients send no notifications or responses on this version: nothing to answer.
        return StatusCode::ACCEPTED.into_response();
    };
    match serve(gw, headers, principal, &method, params.as_ref()).await {
        Ok(Answer::Value(v)) => reply(StatusCode::OK, jsonrpc::response(&id, &with_server_info(v))),
        Ok(Answer::Working(view)) => reply(
            StatusCode::OK,
            jsonrpc::response(&id, &tasks::WorkingAnswer::of(&view)),
        ),
        Ok(Answer::Progress { notes, done }) => progress_stream(id, notes, done),
        Ok(Answer::Listen(l)) => listen::stream(gw, principal, id, l),
        Ok(Answer::Events(s)) => events::stream(gw, principal, id, s),
        Ok(Answer::Refused(r)) => r,
        Err(f) => reply(
            f.status.unwrap_or_else(|| http_status(&f.error)),
            jsonrpc::error_response(Some(&id), &f.error),
        ),
    }
}

fn reply(status: StatusCode, body: Vec<u8>) -> Response {
    let mut r = Response::new(Body::empty());
    crate::metrics::mark(&mut r, &body);
    *r.status_mut() = status;
    *r.body_mut() = Body::from(body);
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static("application/json"),
    );
    r
}

/// The HTTP status that goes with an error of this generation.
fn http_status(e: &ErrorObject) -> StatusCode {
    match e.code {
        HEADER_MISMATCH | MISSING_CAPABILITY | UNSUPPORTED_VERSION => StatusCode::BAD_REQUEST,
        METHOD_NOT_FOUND => StatusCode::NOT_FOUND,
        _ => StatusCode::OK,
    }
}

fn server_info() -> Value {
    json!({ "name": "taskmesh", "title": "taskmesh", "version": env!("CARGO_PKG_VERSION") })
}

fn with_server_info(mut v: Value) -> Value {
    if let Value::Object(m) = &mut v {
        jsonrpc::put_meta(m, META_SERVER_INFO, server_info());
    }
    v
}

fn complete(mut m: Map<String, Value>) -> Value {
    m.insert("resultType".into(), json!("complete"));
    Value::Object(m)
}

/// `-32021` for a request that needed the tasks extension declared.
fn missing_extension(message: String) -> ErrorObject {
    ErrorObject {
        code: MISSING_CAPABILITY,
        message,
        data: Some(json!({ "requiredCapabilities": { "extensions": { EXTENSION: {} } } })),
    }
}

async fn serve(
    gw: &Arc<Gateway>,
    headers: &HeaderMap,
    principal: &str,
    method: &str,
    params: Option<&Value>,
) -> Result<Answer, Failure> {
    let p = params::object(params)?;
    let declared = check(headers, method, p)?;
    if method == "tools/call" {
        // An unknown tool is the dispatch's to refuse.
        if let Some(tool) = p
            .get("name")
            .and_then(Value::as_str)
            .and_then(|n| gw.tools.get(n))
        {
            let args = p.get("arguments").and_then(Value::as_object);
            check_param_headers(headers, &tool.spec().input_schema, args)?;
        }
    }
    Ok(dispatch(gw, principal, method, p, &declared).await?)
}

async fn dispatch(
    gw: &Arc<Gateway>,
    principal: &str,
    method: &str,
    p: &Map<String, Value>,
    declared: &Declared,
) -> Result<Answer, ErrorObject> {
    let value = match method {
        "server/discover" => discover(),
        "tools/list" => {
            let mut page = if !declared.tasks && gw.cfg.tasks.handoff_after_ms > 0 {
                crate::dispatch::tools::handed_off_page(gw, p, crate::handoff::listing(gw, false, false))?
            } else {
                crate::dispatch::tools::tools_page(gw, p, false)?
            };
            // The tool list may change at any time (upstreams): not to be cached.
            page["ttlMs"] = json!(0);
            page["cacheScope"] = json!("public");
            complete(page.as_object().cloned().unwrap_or_default())
        }
        "tools/call" => return Box::pin(tools_call(gw, principal, p, declared)).await,
        "tasks/get" | "tasks/update" | "tasks/cancel" if !declared.tasks => {
            return Err(missing_extension(format!(
                "{method} needs the tasks extension ({EXTENSION}) declared in the request's client capabilities"
            )))
        }
        "tasks/get" => return tasks_get(gw, principal, task_id_param(p)?).await,
        "subscriptions/listen" => {
            return Ok(match listen::open(gw, principal, p, declared).await? {
                Ok(l) => Answer::Listen(l),
                Err(refused) => Answer::Refused(refused),
            })
        }
        "events/list" => events::list(p)?,
        "events/poll" => events::poll(gw, principal, p).await?,
        "events/subscribe" => subscribe::subscribe(gw, principal, p).await?,
        "events/unsubscribe" => subscribe::unsubscribe(gw, principal, p).await?,
        "events/stream" => {
            return Ok(match events::open(gw, principal, p)? {
                Ok(s) => Answer::Events(s),
                Err(refused) => Answer::Refused(refused),
            })
        }
        "tasks/update" => tasks_update(gw, principal, task_id_param(p)?, p).await?,
        "tasks/cancel" => tasks_cancel(gw, principal, task_id_param(p)?).await?,
        _ => return Err(ErrorObject::method_not_found(method)),
    };
    Ok(Answer::Value(value))
}

/// How long a `server/discover` answer may be kept, ms.
const DISCOVER_TTL_MS: u64 = 60_000;

/// `server/discover`: the versions served and what the server offers.
fn discover() -> Value {
    let mut versions: Vec<&str> = SUPPORTED.to_vec();
    versions.extend(taskmesh_mcp::SUPPORTED_VERSIONS);
    json!({
        "resultType": "complete",
        "supportedVersions": versions,
        "capabilities": {
            "tools": { "listChanged": true },
            "extensions": { EXTENSION: {}, events::EVENTS_EXTENSION: {} },
        },
        // What a node offers changes only with its configuration, the same for every caller.
        "ttlMs": DISCOVER_TTL_MS,
        "cacheScope": "public",
    })
}

/// `tasks/get`: the `DetailedTask`, its outcome inline once terminal, the requests it waits on
/// while `input_required` (one read on the task's leader).
async fn tasks_get(
    gw: &Arc<Gateway>,
    principal: &str,
    task_id: &str,
) -> Result<Answer, ErrorObject> {
    Ok(match gw.read_task(principal, task_id, true).await? {
        TaskRead::Task(task) => Answer::Working(task),
        read => Answer::Value(complete(tasks::detailed(&read))),
    })
}

/// `tasks/update`: each answer of `inputResponses` goes to the request of the task it is keyed
/// by; keys the task does not wait on are ignored.
async fn tasks_update(
    gw: &Arc<Gateway>,
    principal: &str,
    task_id: &str,
    p: &Map<String, Value>,
) -> Result<Value, ErrorObject> {
    let responses = p
        .get("inputResponses")
        .and_then(Value::as_object)
        .ok_or_else(|| {
            ErrorObject::invalid_params("Invalid params: 'inputResponses' must be an object")
        })?;
    gw.get_task(principal, task_id).await?;
    for (key, answer) in responses {
        let taken = gw
            .deliver(principal, task_id, key.clone(), Ok(answer.clone()))
            .await;
        if !taken {
            tracing::debug!(task_id, key = %key, "tasks/update answer for no pending request; ignored");
        }
    }
    Ok(complete(Map::new()))
}

/// `tasks/cancel`: an acknowledgement, also for a task already terminal.
async fn tasks_cancel(
    gw: &Arc<Gateway>,
    principal: &str,
    task_id: &str,
) -> Result<Value, ErrorObject> {
    match gw.cancel_task(task_id, principal).await {
        Ok(_) | Err(HostError::Terminal(_)) => Ok(complete(Map::new())),
        Err(e) => Err(gw.task_error(principal, task_id, &e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fast_answer_of_a_working_task_is_its_detailed_task() {
        let mut r = taskmesh_task::TaskRecord::sample("t-9");
        r.status_message = Some("busy".into());
        let v = taskmesh_task::TaskView::from(&r);
        let fast = serde_json::to_value(tasks::WorkingAnswer::of(&v)).unwrap();
        assert_eq!(fast, with_server_info(complete(tasks::live(&v))));
        r.ttl_ms = None;
        r.status_message = None;
        let v = taskmesh_task::TaskView::from(&r);
        let fast = serde_json::to_value(tasks::WorkingAnswer::of(&v)).unwrap();
        assert_eq!(fast, with_server_info(complete(tasks::live(&v))));
        assert_eq!(fast["ttlMs"], Value::Null);
    }
}
