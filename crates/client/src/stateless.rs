//! The requestor side of protocol 2026-07-28 with the tasks extension
//! (`io.modelcontextprotocol/tasks`), over Streamable HTTP: no session and no handshake, so
//! every request carries its protocol version and client capabilities in `_meta` and the
//! routing headers (`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`) taken from its body.
//!
//! [`StatelessClient::discover`] asks `server/discover` whether the server speaks 2026-07-28;
//! then [`StatelessClient::call_tool`] sends a `tools/call` that declares the extension when
//! the server offers it. The server decides how the call runs, and the [`StatelessCall`] it
//! returns follows whichever it chose:
//!
//! - a task (`resultType: "task"`): `tasks/get` polled at the task's `pollIntervalMs` within
//!   [`Polling`]'s bounds; its status changes come out as [`CallEvent::Status`]; while it is
//!   `input_required`, each of its `inputRequests` not asked before comes out as a
//!   [`CallEvent::Request`] and the answers go back with `tasks/update`; once terminal its
//!   outcome is the inline `result` (`completed`), the JSON-RPC `error` (`failed`), or
//!   [`ClientError::TaskCancelled`];
//! - a plain call: its progress (the request carries a progress token) and log messages from
//!   the SSE answer, and its result; an `input_required` answer (MRTR) comes out as requests
//!   too, and the call is sent again with their answers in `inputResponses` and the
//!   `requestState` echoed, until the server answers with a result (or a task).
//!
//! [`StatelessClient::follow_task`] follows a task made earlier the same way;
//! [`StatelessClient::get_task`], [`StatelessClient::update_task`] and
//! [`StatelessClient::cancel_task`] are the extension's three methods one by one.

use std::collections::HashSet;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use base64::Engine as _;
use parking_lot::Mutex;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::{json, Map, Value};
use taskmesh_mcp::jsonrpc::{self, ErrorObject, Message, RequestId};
use tokio::sync::{mpsc, oneshot};

use crate::call::Steps;
use crate::wire::{self, Body, HttpTransport, Response, WireError};
use crate::{CallEvent, ClientError, HttpSpec, Options, Polling, ServerInfo, Step, CALL_EVENTS};

/// The protocol version this client speaks.
pub const V2026_07_28: &str = "2026-07-28";
/// The tasks extension's identifier.
pub const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";
const META_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
const META_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
const META_CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";

/// The most input rounds of one plain call before it is taken as endless.
const MAX_ROUNDS: usize = 64;

/// A client of one 2026-07-28 server. Cheap to clone; it holds no connection state.
#[derive(Clone)]
pub struct StatelessClient {
    shared: Arc<Shared>,
}

struct Shared {
    wire: HttpTransport,
    name: String,
    max_message_bytes: usize,
    server: ServerInfo,
    next_id: AtomicI64,
}

impl StatelessClient {
    /// Ask the server at `spec` (`server/discover`, within `opts.connect_timeout`) and keep
    /// what it answers. [`ClientError::Protocol`] when it does not list 2026-07-28 among its
    /// versions; an `Rpc` or `Transport` error when it does not answer `server/discover`
    /// (a server of 2025-11-25 only).
    pub async fn discover(spec: &HttpSpec, opts: &Options) -> Result<Self, ClientError> {
        let mut headers = HeaderMap::new();
        for (k, v) in &spec.headers {
            let (Ok(k), Ok(mut v)) = (
                HeaderName::try_from(k.as_str()),
                HeaderValue::try_from(v.as_str()),
            ) else {
                return Err(ClientError::Transport(format!(
                    "header {k} is not valid HTTP"
                )));
            };
            v.set_sensitive(true);
            headers.append(k, v);
        }
        let mut shared = Shared {
            wire: HttpTransport::new(wire::default_http(), &spec.url, headers),
            name: opts.name.clone(),
            max_message_bytes: opts.max_message_bytes,
            server: ServerInfo {
                protocol_version: V2026_07_28.into(),
                capabilities: json!({}),
                server_info: json!({}),
            },
            next_id: AtomicI64::new(1),
        };
        let answer = tokio::time::timeout(
            opts.connect_timeout,
            shared.request("server/discover", json!({}), None),
        )
        .await
        .map_err(|_| ClientError::Timeout(opts.connect_timeout))??;
        let speaks = answer["supportedVersions"]
            .as_array()
            .is_some_and(|v| v.iter().any(|v| v == V2026_07_28));
        if !speaks {
            return Err(ClientError::Protocol(format!(
                "the server does not list {V2026_07_28} among its versions"
            )));
        }
        shared.server.capabilities = answer.get("capabilities").cloned().unwrap_or(json!({}));
        shared.server.server_info = answer["_meta"][META_SERVER_INFO].clone();
        Ok(Self {
            shared: Arc::new(shared),
        })
    }

    /// What `server/discover` said (`protocol_version` is always 2026-07-28).
    pub fn server(&self) -> &ServerInfo {
        &self.shared.server
    }

    /// Whether the server offers the tasks extension (so requests declare it).
    pub fn offers_tasks(&self) -> bool {
        self.shared.server.capabilities["extensions"]
            .get(TASKS_EXTENSION)
            .is_some()
    }

    /// Send request `method` with `params` (its `_meta` added) and wait for its result. What
    /// an SSE answer carries before the result is dropped.
    pub async fn request(&self, method: &str, params: Value) -> Result<Value, ClientError> {
        self.shared.request(method, params, None).await
    }

    /// Every tool the server lists, all pages, as it lists them.
    pub async fn list_tools(&self) -> Result<Vec<Value>, ClientError> {
        let mut tools = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..crate::MAX_TOOL_PAGES {
            let params = match &cursor {
                Some(c) => json!({ "cursor": c }),
                None => json!({}),
            };
            let page = self.request("tools/list", params).await?;
            let Some(list) = page.get("tools").and_then(Value::as_array) else {
                return Err(ClientError::Protocol(
                    "tools/list result has no tools array".into(),
                ));
            };
            tools.extend(list.iter().cloned());
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
        Err(ClientError::Protocol("tools/list did not end".into()))
    }

    /// `tasks/get`: the task's `DetailedTask` (its outcome inline once terminal, its
    /// `inputRequests` while `input_required`).
    pub async fn get_task(&self, task_id: &str) -> Result<Value, ClientError> {
        self.request("tasks/get", json!({ "taskId": task_id }))
            .await
    }

    /// `tasks/update`: answers to the task's input requests, by their keys.
    pub async fn update_task(
        &self,
        task_id: &str,
        responses: Map<String, Value>,
    ) -> Result<(), ClientError> {
        self.request(
            "tasks/update",
            json!({ "taskId": task_id, "inputResponses": responses }),
        )
        .await
        .map(drop)
    }

    /// `tasks/cancel`: asks the server to cancel the task (acknowledged also when it is
    /// terminal already; the task may still end otherwise).
    pub async fn cancel_task(&self, task_id: &str) -> Result<(), ClientError> {
        self.request("tasks/cancel", json!({ "taskId": task_id }))
            .await
            .map(drop)
    }

    /// Send `tools/call` of `name` with `arguments` and follow how the server runs it (see
    /// the module doc). Returns once the first answer came: a task's id is known by then.
    pub async fn call_tool(
        &self,
        name: &str,
        arguments: Map<String, Value>,
        polling: Polling,
    ) -> Result<StatelessCall, ClientError> {
        let (tx, rx) = mpsc::channel(CALL_EVENTS);
        let id = self.shared.next_id();
        let token = format!("taskmesh-{id}");
        let params = json!({
            "name": name,
            "arguments": arguments,
            "_meta": { "progressToken": token },
        });
        let resp = self.shared.send(id, "tools/call", &params).await?;
        let task_id = Arc::new(Mutex::new(None));
        // A JSON answer is read now, so that a created task's id is known on return.
        let first = if resp.is_sse() {
            First::Stream(Box::new(resp))
        } else {
            let answer = self.shared.answer(id, resp, None).await?;
            if let Some(t) = created_task(&answer) {
                *task_id.lock() = Some(t);
            }
            First::Answer(answer)
        };
        let client = self.clone();
        let slot = task_id.clone();
        let call = Call {
            name: name.to_string(),
            arguments,
            token,
        };
        let (done_tx, done_rx) = oneshot::channel();
        let driver = tokio::spawn(async move {
            let outcome = client.drive_call(call, first, &tx, &slot, polling).await;
            let _ = done_tx.send(outcome);
        });
        Ok(StatelessCall {
            task_id,
            steps: Steps::new(rx, done_rx),
            driver: driver.abort_handle(),
            client: self.clone(),
        })
    }

    /// Follow task `task_id`, created earlier, to its outcome.
    pub fn follow_task(&self, task_id: &str, polling: Polling) -> StatelessCall {
        let (tx, rx) = mpsc::channel(CALL_EVENTS);
        let (done_tx, done_rx) = oneshot::channel();
        let client = self.clone();
        let id = task_id.to_string();
        let driver = tokio::spawn(async move {
            let outcome = client.follow(&id, &tx, polling).await;
            let _ = done_tx.send(outcome);
        });
        StatelessCall {
            task_id: Arc::new(Mutex::new(Some(task_id.to_string()))),
            steps: Steps::new(rx, done_rx),
            driver: driver.abort_handle(),
            client: self.clone(),
        }
    }

    /// A plain call's rounds, or the task it became, to its outcome.
    async fn drive_call(
        &self,
        call: Call,
        first: First,
        events: &mpsc::Sender<CallEvent>,
        task_id: &Mutex<Option<String>>,
        polling: Polling,
    ) -> Result<Value, ClientError> {
        let mut answer = match first {
            First::Answer(a) => a,
            First::Stream(resp) => self.shared.answer(0, *resp, Some(events)).await?,
        };
        for _ in 0..MAX_ROUNDS {
            if let Some(id) = created_task(&answer) {
                *task_id.lock() = Some(id.clone());
                return self.follow(&id, events, polling).await;
            }
            if answer["resultType"] != "input_required" {
                return Ok(answer);
            }
            let mut asked = HashSet::new();
            let responses = ask(&answer["inputRequests"], &mut asked, events).await?;
            let mut params = json!({
                "name": call.name,
                "arguments": call.arguments,
                "inputResponses": responses,
                "_meta": { "progressToken": call.token },
            });
            if let Some(state) = answer.get("requestState") {
                params["requestState"] = state.clone();
            }
            answer = self
                .shared
                .request("tools/call", params, Some(events))
                .await?;
        }
        Err(ClientError::Protocol(format!(
            "the call still asked for input after {MAX_ROUNDS} rounds"
        )))
    }

    /// Poll task `task_id` to its outcome, asking its input requests on the way.
    async fn follow(
        &self,
        task_id: &str,
        events: &mpsc::Sender<CallEvent>,
        polling: Polling,
    ) -> Result<Value, ClientError> {
        let mut last: Option<(String, Option<String>)> = None;
        let mut asked = HashSet::new();
        loop {
            let task = match self.get_task(task_id).await {
                Ok(t) => t,
                Err(ClientError::Rpc(e)) => {
                    return Err(ClientError::TaskLost(format!(
                        "tasks/get of task {task_id} answered error {}: {}",
                        e.code, e.message
                    )))
                }
                Err(e) => return Err(e),
            };
            let status = task["status"].as_str().unwrap_or_default().to_string();
            let message = task["statusMessage"].as_str().map(str::to_string);
            let now = (status.clone(), message.clone());
            if last.as_ref() != Some(&now) {
                let _ = events.try_send(CallEvent::Status {
                    status: status.clone(),
                    message: message.clone(),
                });
                last = Some(now);
            }
            match status.as_str() {
                "working" => {}
                "input_required" => {
                    let responses = ask(&task["inputRequests"], &mut asked, events).await?;
                    if !responses.is_empty() {
                        self.update_task(task_id, responses).await?;
                        continue;
                    }
                }
                "completed" => {
                    return task.get("result").cloned().ok_or_else(|| {
                        ClientError::Protocol(format!(
                            "task {task_id} is completed but tasks/get carries no result"
                        ))
                    })
                }
                "failed" => {
                    let error = serde_json::from_value::<ErrorObject>(task["error"].clone())
                        .unwrap_or_else(|_| ErrorObject {
                            code: jsonrpc::INTERNAL_ERROR,
                            message: message.unwrap_or_else(|| "the task failed".into()),
                            data: None,
                        });
                    return Err(ClientError::Rpc(error));
                }
                "cancelled" => {
                    return Err(ClientError::TaskCancelled(format!(
                        "task {task_id} was cancelled{}",
                        message.map(|m| format!(": {m}")).unwrap_or_default()
                    )))
                }
                other => {
                    return Err(ClientError::Protocol(format!(
                        "tasks/get of task {task_id} gave status {other:?}"
                    )))
                }
            }
            tokio::time::sleep(polling.pause(task["pollIntervalMs"].as_u64())).await;
        }
    }
}

/// The first answer to a `tools/call`: read whole, or a stream still to read.
enum First {
    Answer(Value),
    Stream(Box<Response>),
}

/// A call to send again with the answers of its input rounds.
struct Call {
    name: String,
    arguments: Map<String, Value>,
    token: String,
}

/// The id of the task a `tools/call` answer created, when it is a `CreateTaskResult`.
fn created_task(answer: &Value) -> Option<String> {
    if answer["resultType"] != "task" {
        return None;
    }
    answer["taskId"].as_str().map(str::to_string)
}

/// Ask the caller each request of `requests` (`inputRequests`: key → `{method, params}`)
/// whose key is not in `asked`; their answers by key. A request the caller answers with an
/// error ends the call with that error.
async fn ask(
    requests: &Value,
    asked: &mut HashSet<String>,
    events: &mpsc::Sender<CallEvent>,
) -> Result<Map<String, Value>, ClientError> {
    let mut responses = Map::new();
    let Some(requests) = requests.as_object() else {
        return Ok(responses);
    };
    for (key, request) in requests {
        if !asked.insert(key.clone()) {
            continue;
        }
        let (reply, answer) = oneshot::channel();
        let event = CallEvent::Request {
            method: request["method"].as_str().unwrap_or_default().to_string(),
            params: request.get("params").cloned().unwrap_or(json!({})),
            reply,
        };
        if events.send(event).await.is_err() {
            return Err(ClientError::Closed("the call was given up".into()));
        }
        match answer.await {
            Ok(Ok(v)) => {
                responses.insert(key.clone(), v);
            }
            Ok(Err(e)) => return Err(ClientError::Rpc(e)),
            Err(_) => return Err(ClientError::Closed("the request was not answered".into())),
        }
    }
    Ok(responses)
}

impl Shared {
    fn next_id(&self) -> i64 {
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
    async fn send(&self, id: i64, method: &str, params: &Value) -> Result<Response, ClientError> {
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

    async fn request(
        &self,
        method: &str,
        params: Value,
        events: Option<&mpsc::Sender<CallEvent>>,
    ) -> Result<Value, ClientError> {
        let id = self.next_id();
        let resp = self.send(id, method, &params).await?;
        self.answer(id, resp, events).await
    }

    /// The answer `resp` carries for request `id` (any id when `id` is 0); progress and log
    /// messages before it go to `events`.
    async fn answer(
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
                if id == 0 || got == RequestId::Number(id) {
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
fn header_value(v: &str) -> HeaderValue {
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

/// A `tools/call` of 2026-07-28 in flight, or a followed task: its events, then its outcome.
pub struct StatelessCall {
    task_id: Arc<Mutex<Option<String>>>,
    steps: Steps,
    driver: tokio::task::AbortHandle,
    client: StatelessClient,
}

impl StatelessCall {
    /// The id of the task the server made of the call, once it made one.
    pub fn task_id(&self) -> Option<String> {
        self.task_id.lock().clone()
    }

    /// The next event, or the outcome (the last item): the `CallToolResult`, the JSON-RPC
    /// error of a failed call or task, [`ClientError::TaskCancelled`],
    /// [`ClientError::TaskLost`] when the server no longer knows the task, or how the
    /// request failed.
    pub async fn next(&mut self) -> Step {
        self.steps
            .next_or(|| ClientError::Closed("the call stopped".into()))
            .await
    }

    /// Stop following; cancel the task on the server (`tasks/cancel`) when there is one, else
    /// give up the plain call (its stream closed, which cancels it).
    pub async fn cancel(mut self) -> Result<(), ClientError> {
        self.steps.ended = true;
        self.driver.abort();
        match self.task_id() {
            Some(id) => self.client.cancel_task(&id).await,
            None => Ok(()),
        }
    }
}

impl Drop for StatelessCall {
    /// Stops following; a task runs on (it may be followed again).
    fn drop(&mut self) {
        self.driver.abort();
    }
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

    #[test]
    fn only_a_task_result_names_a_created_task() {
        let t = json!({"resultType": "task", "taskId": "t-1", "status": "working"});
        assert_eq!(created_task(&t).as_deref(), Some("t-1"));
        assert_eq!(
            created_task(&json!({"resultType": "complete", "taskId": "x"})),
            None
        );
        assert_eq!(created_task(&json!({"content": []})), None);
    }

    #[tokio::test]
    async fn each_input_request_is_asked_once() {
        let (tx, mut rx) = mpsc::channel(4);
        let answering = tokio::spawn(async move {
            let mut asked = vec![];
            while let Some(CallEvent::Request { method, reply, .. }) = rx.recv().await {
                asked.push(method);
                let _ = reply.send(Ok(json!({"action": "decline"})));
            }
            asked
        });
        let requests = json!({
            "k1": {"method": "elicitation/create", "params": {"message": "one"}},
            "k2": {"method": "elicitation/create", "params": {"message": "two"}},
        });
        let mut asked = HashSet::new();
        let first = ask(&requests, &mut asked, &tx).await.unwrap();
        assert_eq!(first.len(), 2);
        let again = ask(&requests, &mut asked, &tx).await.unwrap();
        assert!(again.is_empty(), "the same keys are not asked again");
        drop(tx);
        assert_eq!(answering.await.unwrap().len(), 2);
    }
}
