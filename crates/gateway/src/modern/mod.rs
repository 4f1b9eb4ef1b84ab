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
//! and with the extension declared
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

pub(crate) mod listen;
mod rounds;
pub mod tasks;

use std::sync::Arc;

use std::convert::Infallible;

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use serde_json::{json, Map, Value};
use taskmesh_host::{HostError, NewTask, TaskRead};
use taskmesh_mcp::jsonrpc::{self, ErrorObject, Message, METHOD_NOT_FOUND};
use taskmesh_mcp::{params, LogLevel, TaskSupport};
use taskmesh_router::mint_task_id;
use taskmesh_task::ClientCaps;
use taskmesh_tools::ToolContext;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;

use crate::service::task_id_param;
use crate::{wire, Gateway};

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
        Ok(Answer::Refused(r)) => r,
        Err(f) => reply(
            f.status.unwrap_or_else(|| http_status(&f.error)),
            jsonrpc::error_response(Some(&id), &f.error),
        ),
    }
}

/// The SSE answer of a plain call with a progress token: its progress notifications as they
/// come, then its response. A client that closes the stream cancels the call (the tool's
/// future is dropped).
fn progress_stream(
    id: jsonrpc::RequestId,
    mut notes: mpsc::Receiver<Vec<u8>>,
    done: tokio::task::JoinHandle<Result<Value, ErrorObject>>,
) -> Response {
    let (tx, rx) = mpsc::channel::<Result<Bytes, Infallible>>(16);
    tokio::spawn(async move {
        let abort = done.abort_handle();
        let frame = |json: &[u8]| -> Result<Bytes, Infallible> {
            let mut f = Vec::with_capacity(json.len() + 8);
            f.extend_from_slice(b"data: ");
            f.extend_from_slice(json);
            f.extend_from_slice(b"\n\n");
            Ok(Bytes::from(f))
        };
        while let Some(n) = notes.recv().await {
            if tx.send(frame(&n)).await.is_err() {
                abort.abort();
                return;
            }
        }
        let outcome = done
            .await
            .unwrap_or_else(|_| Err(ErrorObject::internal("the call stopped")));
        let last = match outcome {
            Ok(v @ Value::Object(_)) => jsonrpc::response(&id, &with_server_info(v)),
            Ok(other) => jsonrpc::error_response(
                Some(&id),
                &ErrorObject::internal(format!(
                    "the tool answered with something that is not a result: {other}"
                )),
            ),
            Err(e) => jsonrpc::error_response(Some(&id), &e),
        };
        let _ = tx.send(frame(&last)).await;
    });
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        [(
            axum::http::HeaderName::from_static("x-accel-buffering"),
            "no",
        )],
        Body::from_stream(ReceiverStream::new(rx)),
    )
        .into_response()
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

fn mismatch(what: impl Into<String>) -> Failure {
    ErrorObject::new(HEADER_MISMATCH, what).into()
}

/// `-32021` for a request that needed the tasks extension declared.
fn missing_extension(message: String) -> ErrorObject {
    ErrorObject {
        code: MISSING_CAPABILITY,
        message,
        data: Some(json!({ "requiredCapabilities": { "extensions": { EXTENSION: {} } } })),
    }
}

/// A header's value, decoded from the `=?base64?...?=` form when it has it ([`decoded`]).
fn header_text(headers: &HeaderMap, name: &str) -> Option<String> {
    decoded(headers.get(name)?)
}

/// A routing header's value: decoded when it has the `=?base64?...?=` form (strict Base64
/// with padding, of UTF-8), as it is otherwise (both markers are needed); `None` when it is
/// not visible ASCII or its Base64 is not valid.
fn decoded(raw: &axum::http::HeaderValue) -> Option<String> {
    let text = raw.to_str().ok()?;
    match text
        .strip_prefix("=?base64?")
        .and_then(|r| r.strip_suffix("?="))
    {
        Some(encoded) => {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .ok()?;
            String::from_utf8(bytes).ok()
        }
        None => Some(text.to_string()),
    }
}

/// What a request declared in its `_meta`.
struct Declared {
    /// The tasks extension.
    tasks: bool,
    /// `elicitation` and `sampling`: what the tasks it creates may ask the client (in
    /// `inputRequests`).
    client: ClientCaps,
    /// The client capabilities as declared.
    caps: Map<String, Value>,
}

/// `-32602` with HTTP 400, for a request whose `_meta` lacks what every request carries.
fn malformed(message: impl Into<String>) -> Failure {
    Failure {
        error: ErrorObject::invalid_params(message),
        status: Some(StatusCode::BAD_REQUEST),
    }
}

/// Check the request's `_meta` and headers (see the module doc).
fn check(headers: &HeaderMap, method: &str, p: &Map<String, Value>) -> Result<Declared, Failure> {
    let meta = p.get("_meta").and_then(Value::as_object).ok_or_else(|| {
        malformed(
            "Invalid params: every request carries '_meta' with its protocol version and \
             client capabilities",
        )
    })?;
    let version = meta
        .get(META_VERSION)
        .and_then(Value::as_str)
        .ok_or_else(|| {
            malformed(format!(
                "Invalid params: '_meta.{META_VERSION}' must be a string"
            ))
        })?;
    let caps = meta
        .get(META_CAPABILITIES)
        .and_then(Value::as_object)
        .ok_or_else(|| {
            malformed(format!(
                "Invalid params: '_meta.{META_CAPABILITIES}' must be an object"
            ))
        })?;
    // The header is compared first: a body that names an unsupported version under a header
    // that names another one is a mismatch.
    match headers.get(VERSION_HEADER).and_then(|v| v.to_str().ok()) {
        Some(h) if h == version => {}
        Some(h) => {
            return Err(mismatch(format!(
                "MCP-Protocol-Version header {h:?} differs from the request's protocol version {version:?}"
            )))
        }
        None => return Err(mismatch("the MCP-Protocol-Version header is required")),
    }
    if !SUPPORTED.contains(&version) {
        return Err(ErrorObject {
            code: UNSUPPORTED_VERSION,
            message: format!("Unsupported protocol version: {version}"),
            data: Some(json!({ "supported": SUPPORTED, "requested": version })),
        }
        .into());
    }
    match header_text(headers, METHOD_HEADER) {
        Some(m) if m == method => {}
        Some(m) => {
            return Err(mismatch(format!(
                "Mcp-Method header {m:?} differs from the request's method {method:?}"
            )))
        }
        None => return Err(mismatch("the Mcp-Method header is required")),
    }
    let named = match method {
        "tools/call" => Some("name"),
        "tasks/get" | "tasks/update" | "tasks/cancel" => Some("taskId"),
        _ => None,
    };
    if let Some(field) = named {
        let want = p.get(field).and_then(Value::as_str).unwrap_or_default();
        match header_text(headers, NAME_HEADER) {
            Some(n) if n.trim() == want => {}
            Some(n) => {
                return Err(mismatch(format!(
                    "Mcp-Name header {n:?} differs from the request's {field} {want:?}"
                )))
            }
            None => {
                return Err(mismatch(format!(
                    "the Mcp-Name header is required on {method}"
                )))
            }
        }
    }
    let tasks = caps
        .get("extensions")
        .and_then(|e| e.get(EXTENSION))
        .is_some_and(Value::is_object);
    Ok(Declared {
        tasks,
        client: ClientCaps {
            elicitation: caps.get("elicitation").is_some_and(Value::is_object),
            sampling: caps.get("sampling").is_some_and(Value::is_object),
        },
        caps: caps.clone(),
    })
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

/// The parameters a tool's input schema mirrors into `Mcp-Param-{name}` headers
/// (`x-mcp-header`): each header name with the property path it mirrors, for the properties
/// reachable from the root through `properties` keys alone (an annotation elsewhere mirrors
/// nothing).
fn header_params(schema: &Value) -> Vec<(String, Vec<String>)> {
    fn walk(schema: &Value, path: &mut Vec<String>, out: &mut Vec<(String, Vec<String>)>) {
        let Some(props) = schema.get("properties").and_then(Value::as_object) else {
            return;
        };
        for (key, prop) in props {
            path.push(key.clone());
            if let Some(name) = prop.get("x-mcp-header").and_then(Value::as_str) {
                out.push((name.to_string(), path.clone()));
            }
            walk(prop, path, out);
            path.pop();
        }
    }
    let mut out = Vec::new();
    walk(schema, &mut Vec::new(), &mut out);
    out
}

/// A `tools/call`'s `Mcp-Param-{name}` headers against its arguments: each parameter the
/// tool mirrors ([`header_params`]) has its header exactly when the arguments have a value
/// there, and the header (decoded from `=?base64?...?=`, strictly) reads as the value does
/// (a string as it is, an integer in decimal, a boolean as `true`/`false`); else `-32020`
/// (HTTP 400).
fn check_param_headers(
    headers: &HeaderMap,
    schema: &Value,
    args: Option<&Map<String, Value>>,
) -> Result<(), Failure> {
    for (name, path) in header_params(schema) {
        let mut at = args.map(|a| Value::Object(a.clone()));
        for key in &path {
            at = at.and_then(|v| v.get(key).cloned());
        }
        let expected = match at {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s),
            Some(other) => Some(other.to_string()),
        };
        let header = format!("mcp-param-{}", name.to_ascii_lowercase());
        let given = match headers.get(&header) {
            None => None,
            Some(raw) => Some(decoded(raw).ok_or_else(|| {
                mismatch(format!(
                    "Mcp-Param-{name}: not a valid header value (visible ASCII, or =?base64?...?= with valid Base64 of UTF-8)"
                ))
            })?),
        };
        let field = path.join(".");
        match (expected, given) {
            (None, None) => {}
            (Some(_), None) => {
                return Err(mismatch(format!(
                "the Mcp-Param-{name} header is required: the arguments have a value at '{field}'"
            )))
            }
            (None, Some(_)) => {
                return Err(mismatch(format!(
                    "Mcp-Param-{name} header given, but the arguments have no value at '{field}'"
                )))
            }
            (Some(want), Some(got)) if want != got => {
                return Err(mismatch(format!(
                    "Mcp-Param-{name} header {got:?} differs from the arguments' '{field}' {want:?}"
                )))
            }
            _ => {}
        }
    }
    Ok(())
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
            let mut page = crate::dispatch::tools::tools_page(gw, p, false)?;
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
        "tasks/get" => return tasks_get(gw, principal, p).await,
        "subscriptions/listen" => {
            return Ok(match listen::open(gw, principal, p, declared).await? {
                Ok(l) => Answer::Listen(l),
                Err(refused) => Answer::Refused(refused),
            })
        }
        "tasks/update" => tasks_update(gw, principal, p).await?,
        "tasks/cancel" => tasks_cancel(gw, principal, p).await?,
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
            "extensions": { EXTENSION: {} },
        },
        // What a node offers changes only with its configuration, the same for every caller.
        "ttlMs": DISCOVER_TTL_MS,
        "cacheScope": "public",
    })
}

async fn tools_call(
    gw: &Arc<Gateway>,
    principal: &str,
    p: &Map<String, Value>,
    declared: &Declared,
) -> Result<Answer, ErrorObject> {
    let name = params::req_str(p, "name")?;
    let args = params::opt_obj(p, "arguments")?
        .cloned()
        .unwrap_or_default();
    let tool = gw.tools.get(name).ok_or_else(|| {
        ErrorObject::invalid_params(format!("Invalid params: unknown tool '{name}'"))
    })?;
    tool.validate(&args)?;
    let support = tool.spec().task_support;
    if declared.tasks && support != TaskSupport::Forbidden {
        // The questions to settle first, in rounds, before the task is made with their answers.
        let first = tool.ask_first();
        let mut answers_json = None;
        if !first.is_empty() {
            let round = rounds::Round::of(gw, principal, name, &args, p)?;
            let mut kept = Map::new();
            let mut asked = Vec::new();
            for q in first {
                match round.answers.get(&q.key) {
                    Some(a) => {
                        kept.insert(q.key.clone(), a.clone());
                    }
                    None => {
                        rounds::may_ask(&declared.caps, q.method)?;
                        asked.push((q.key.clone(), q.method, q.params.clone()));
                    }
                }
            }
            if !asked.is_empty() {
                return Ok(Answer::Value(round.input_required(gw, &asked, kept)));
            }
            answers_json = Some(Value::Object(kept).to_string());
        }
        let task_id = mint_task_id().map_err(|e| wire::host_error(&e))?;
        tracing::Span::current().record("task_id", task_id.as_str());
        let new = NewTask {
            task_id,
            owner: principal.to_string(),
            session: None,
            tool: name.to_string(),
            arguments_json: Value::Object(args).to_string(),
            progress_token: None,
            ttl_ms: None,
            client: declared.client,
            answers_json,
            traceparent: taskmesh_telemetry::current_traceparent(),
        };
        let created = gw.create_task(new).await?;
        return Ok(Answer::Value(tasks::created(&created.task)));
    }
    if support == TaskSupport::Required {
        return Err(missing_extension(format!(
            "Tool '{name}' runs only as a task: declare the tasks extension ({EXTENSION}) in the request's client capabilities"
        )));
    }
    let meta = p.get("_meta");
    let token = match meta.and_then(|m| m.get("progressToken")) {
        None | Some(Value::Null) => None,
        Some(t @ (Value::String(_) | Value::Number(_))) => Some(t.clone()),
        Some(_) => {
            return Err(ErrorObject::invalid_params(
                "Invalid params: '_meta.progressToken' must be a string or an integer",
            ))
        }
    };
    let log_level = match meta.and_then(|m| m.get(META_LOG_LEVEL)) {
        None | Some(Value::Null) => None,
        Some(l) => Some(l.as_str().and_then(LogLevel::parse).ok_or_else(|| {
            ErrorObject::invalid_params(format!(
                "Invalid params: '_meta.{META_LOG_LEVEL}' must be one of debug, info, notice, warning, error, critical, alert, emergency"
            ))
        })?),
    };
    let round = rounds::Round::of(gw, principal, name, &args, p)?;
    let streamed = token.is_some() || log_level.is_some();
    let (notes_tx, notes) = mpsc::channel(PROGRESS_BUFFER);
    let io = Arc::new(rounds::RoundIo {
        stream: streamed.then_some(notes_tx),
        token: token.clone(),
        log_level,
        caps: declared.caps.clone(),
        reruns: tool.reruns_for_input(),
        answers: round.answers.clone(),
        asked: Default::default(),
        taken: Default::default(),
        unkeyed: Default::default(),
        refused: Default::default(),
    });
    let cancel = CancellationToken::new();
    let ctx = ToolContext {
        cancel: cancel.clone(),
        ended: cancel.clone(),
        io: io.clone(),
        has_progress_token: token.is_some(),
        client_elicitation: declared.client.elicitation,
        client_sampling: declared.client.sampling,
        principal: principal.to_string(),
        upstream_task: None,
        answers: Arc::default(),
        traceparent: taskmesh_telemetry::current_traceparent(),
    };
    let run = tool.call(args, ctx);
    let gw_round = gw.clone();
    let finish = async move {
        let _cancel_on_drop = cancel.drop_guard();
        match rounds::drive(run, io.clone()).await {
            rounds::Ran::Done(r) => match r? {
                Value::Object(m) => Ok(complete(m)),
                other => Err(ErrorObject::internal(format!(
                    "the tool answered with something that is not a result: {other}"
                ))),
            },
            rounds::Ran::Asked(asked) => {
                let kept = std::mem::take(&mut *io.taken.lock());
                Ok(round.input_required(&gw_round, &asked, kept))
            }
        }
    };
    if streamed {
        return Ok(Answer::Progress {
            notes,
            done: tokio::spawn(finish),
        });
    }
    finish.await.map(Answer::Value)
}

/// Progress notifications and log messages a plain call may queue before its stream takes
/// them; more are dropped.
const PROGRESS_BUFFER: usize = 64;

/// `tasks/get`: the `DetailedTask`, its outcome inline once terminal, the requests it waits on
/// while `input_required` (one read on the task's leader).
async fn tasks_get(
    gw: &Arc<Gateway>,
    principal: &str,
    p: &Map<String, Value>,
) -> Result<Answer, ErrorObject> {
    let task_id = task_id_param(p)?;
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
    p: &Map<String, Value>,
) -> Result<Value, ErrorObject> {
    let task_id = task_id_param(p)?;
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
    p: &Map<String, Value>,
) -> Result<Value, ErrorObject> {
    let task_id = task_id_param(p)?;
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

    #[test]
    fn mirrored_parameters_are_found_through_properties_only() {
        let schema = json!({"type": "object", "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"},
            "db": {"type": "object", "properties": {"shard": {"type": "integer", "x-mcp-header": "Shard"}}},
            "list": {"type": "array", "items": {"type": "object", "properties": {"x": {"x-mcp-header": "X"}}}},
        }, "allOf": [{"properties": {"y": {"x-mcp-header": "Y"}}}]});
        let mut found = header_params(&schema);
        found.sort();
        assert_eq!(
            found,
            vec![
                ("Region".to_string(), vec!["region".to_string()]),
                (
                    "Shard".to_string(),
                    vec!["db".to_string(), "shard".to_string()]
                ),
            ]
        );
        let args = json!({"region": "eu", "db": {"shard": 7}});
        let mut h = HeaderMap::new();
        h.insert("mcp-param-region", "=?base64?ZXU=?=".parse().unwrap());
        h.insert("mcp-param-shard", "7".parse().unwrap());
        assert!(check_param_headers(&h, &schema, args.as_object()).is_ok());
        h.insert("mcp-param-shard", "8".parse().unwrap());
        assert!(check_param_headers(&h, &schema, args.as_object()).is_err());
        h.remove("mcp-param-shard");
        assert!(check_param_headers(&h, &schema, args.as_object()).is_err());
        h.insert("mcp-param-shard", "7".parse().unwrap());
        h.insert("mcp-param-region", "=?base64?ZXU?=".parse().unwrap());
        assert!(
            check_param_headers(&h, &schema, args.as_object()).is_err(),
            "no padding"
        );
    }

    #[test]
    fn header_values_decode_from_their_base64_form() {
        let mut h = HeaderMap::new();
        h.insert(NAME_HEADER, "plain-name".parse().unwrap());
        assert_eq!(header_text(&h, NAME_HEADER).as_deref(), Some("plain-name"));
        // "héllo" in base64.
        h.insert(NAME_HEADER, "=?base64?aMOpbGxv?=".parse().unwrap());
        assert_eq!(header_text(&h, NAME_HEADER).as_deref(), Some("héllo"));
        h.insert(NAME_HEADER, "=?base64?!!!?=".parse().unwrap());
        assert_eq!(header_text(&h, NAME_HEADER), None);
    }
}
