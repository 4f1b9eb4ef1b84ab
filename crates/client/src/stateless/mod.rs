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
//!
//! The client and its calls are here; how a call or a task is followed is in `drive.rs`,
//! and how one request goes on the wire in `request.rs`.

mod drive;
mod request;

use std::sync::atomic::AtomicI64;
use std::sync::Arc;

use parking_lot::Mutex;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::{json, Map, Value};
use tokio::sync::{mpsc, oneshot};

use crate::call::Steps;
use crate::wire::{self, HttpTransport, Response};
use crate::{ClientError, HttpSpec, Options, Polling, ServerInfo, Step, CALL_EVENTS};

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
///
/// ```no_run
/// # async fn demo() -> Result<(), taskmesh_client::ClientError> {
/// use serde_json::Map;
/// use taskmesh_client::{HttpSpec, Options, Polling, StatelessClient, Step};
///
/// let spec = HttpSpec::new("http://127.0.0.1:8080/mcp");
/// let client = StatelessClient::discover(&spec, &Options::default()).await?;
/// assert!(client.offers_tasks());
/// let mut call = client.call_tool("failing_job", Map::new(), Polling::default()).await?;
/// println!("task {:?}", call.task_id());
/// let outcome = loop {
///     if let Step::Done(outcome) = call.next().await {
///         break outcome;
///     }
/// };
/// // A tool error is a `completed` task whose result has `isError`.
/// assert_eq!(outcome?["isError"], true);
/// # Ok(())
/// # }
/// ```
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
            First::Stream(id, Box::new(resp))
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
}

/// The first answer to a `tools/call`: read whole, or a stream still to read.
enum First {
    Answer(Value),
    /// Request `id`'s SSE answer.
    Stream(i64, Box<Response>),
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
    fn only_a_task_result_names_a_created_task() {
        let t = json!({"resultType": "task", "taskId": "t-1", "status": "working"});
        assert_eq!(created_task(&t).as_deref(), Some("t-1"));
        assert_eq!(
            created_task(&json!({"resultType": "complete", "taskId": "x"})),
            None
        );
        assert_eq!(created_task(&json!({"content": []})), None);
    }
}
