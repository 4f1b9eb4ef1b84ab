//! The requestor side of MCP tasks (2025-11-25): a task-augmented `tools/call`, then the task
//! followed to its result.
//!
//! [`Client::call_tool_as_task`] sends the call with a `task` field and returns a
//! [`TaskCall`] once the server created the task; [`Client::follow_task`] makes one for a task
//! created earlier (by another connection, or before a failover). A task call polls
//! `tasks/get` at the server's `pollInterval`, kept within [`Polling`]'s bounds; once the task
//! is `input_required` or terminal it sends `tasks/result`, which the server answers when the
//! task ends and on whose stream it sends the task's requests meanwhile. What the server sends
//! about the task comes out of [`TaskCall::next`] as for a plain call: progress on the call's
//! progress token (valid for the task's whole life), the task's requests (found by their
//! related-task `_meta`, by the `tasks/result` stream that carried them, or as the only call in
//! flight), its log messages, and its status changes. Lifecycle events are logged.

use std::sync::{Arc, Weak};
use std::time::Duration;

use serde_json::{json, Map, Value};
use taskmesh_mcp::META_RELATED_TASK;
use tokio::sync::{mpsc, oneshot};

use crate::call::Steps;
use crate::{CallEvent, Client, ClientError, HeaderName, HeaderValue, Inner, Step, CALL_EVENTS};

/// How often a followed task is polled: the server's `pollInterval`, kept within
/// `[min, max]`; when the server suggests none, `default` first and then twice the last pause
/// each time (an exponential backoff up to `max`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Polling {
    /// The shortest pause between two `tasks/get`.
    pub min: Duration,
    /// The longest pause between two `tasks/get`.
    pub max: Duration,
    /// The first pause when the server suggests none (then kept within the bounds too).
    pub default: Duration,
}

impl Default for Polling {
    fn default() -> Self {
        Self {
            min: Duration::from_millis(100),
            max: Duration::from_secs(5),
            default: Duration::from_secs(1),
        }
    }
}

impl Polling {
    /// The pause after a `tasks/get` that suggested `poll_interval_ms`.
    pub fn pause(&self, poll_interval_ms: Option<u64>) -> Duration {
        let wanted = poll_interval_ms.map_or(self.default, Duration::from_millis);
        wanted.clamp(self.min, self.max.max(self.min))
    }

    /// The pause after a `tasks/get` that suggested `poll_interval_ms`, when the last pause
    /// was `last`: the suggestion within the bounds, or without one, twice `last` (the
    /// default at first) up to `max`. `last` becomes the pause returned.
    pub fn next_pause(
        &self,
        poll_interval_ms: Option<u64>,
        last: &mut Option<Duration>,
    ) -> Duration {
        let pause = match (poll_interval_ms, *last) {
            (None, Some(before)) => (before * 2).clamp(self.min, self.max.max(self.min)),
            (suggested, _) => self.pause(suggested),
        };
        *last = Some(pause);
        pause
    }
}

/// What the server answered a task-augmented `tools/call` with ([`Client::start_task`]).
#[derive(Debug, Clone, PartialEq)]
pub enum TaskStart {
    /// The task it created: its `Task` object (`taskId`, `status`, ...).
    Created(Value),
    /// The `CallToolResult`: it ran the call without a task.
    Answered(Value),
}

/// The most pages of `tasks/list` read before the list is taken as endless.
pub const MAX_TASK_PAGES: usize = 1000;

/// How a tool may be called, from its `tools/list` entry's `execution.taskSupport`
/// (2025-11-25): `"forbidden"` (also when absent or unknown), `"optional"` or `"required"`.
pub fn task_support(tool: &Value) -> &str {
    match tool["execution"]["taskSupport"].as_str() {
        Some(s @ ("optional" | "required")) => s,
        _ => "forbidden",
    }
}

/// Where the events of the followed tasks go: by progress token and by task id.
#[derive(Default)]
pub(crate) struct Follows {
    by_token: std::collections::HashMap<String, mpsc::Sender<CallEvent>>,
    by_task: std::collections::HashMap<String, mpsc::Sender<CallEvent>>,
    /// Wakes a followed task's poll loop (a status notification came for it).
    wake: std::collections::HashMap<String, Arc<tokio::sync::Notify>>,
    /// Requests about a task that came before its follower (the server may ask as soon as it
    /// created the task, on another stream than the one that carries the creation's answer),
    /// by task id: handed to the follower when it starts, refused after [`PARK_GRACE`].
    parked: std::collections::HashMap<String, Vec<CallEvent>>,
}

/// How long a request about a task not followed yet waits for its follower.
pub(crate) const PARK_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// The task a request or notification is about, by its related-task `_meta`.
pub(crate) fn related_task(params: &Value) -> Option<&str> {
    params
        .get("_meta")?
        .get(META_RELATED_TASK)?
        .get("taskId")?
        .as_str()
}

impl Follows {
    /// A `notifications/tasks/status` for task `task_id` came: its follower polls now rather
    /// than at the end of its pause (what the notification says is not taken as such: the poll
    /// reads the task).
    pub(crate) fn wake(&self, task_id: &str) {
        if let Some(w) = self.wake.get(task_id) {
            w.notify_one();
        }
    }

    pub(crate) fn of_token(&self, token: &str) -> Option<mpsc::Sender<CallEvent>> {
        self.by_token.get(token).cloned()
    }

    /// The followed task a request or notification is about, by its related-task `_meta`.
    pub(crate) fn of_params(&self, params: &Value) -> Option<mpsc::Sender<CallEvent>> {
        self.by_task.get(related_task(params)?).cloned()
    }

    /// Keep `event`, about task `task_id` that no follower follows yet, for its follower.
    pub(crate) fn park(&mut self, task_id: &str, event: CallEvent) {
        self.parked
            .entry(task_id.to_owned())
            .or_default()
            .push(event);
    }

    /// What was parked for `task_id` and not handed over yet.
    pub(crate) fn unpark(&mut self, task_id: &str) -> Vec<CallEvent> {
        self.parked.remove(task_id).unwrap_or_default()
    }
}

/// A task the server runs for a call of this client, followed to its result.
///
/// ```no_run
/// # async fn demo() -> Result<(), taskmesh_client::ClientError> {
/// use serde_json::{json, Map};
/// use taskmesh_client::{CallEvent, Client, Endpoint, HttpSpec, Options, Polling, Step};
///
/// let spec = HttpSpec::new("http://127.0.0.1:8080/mcp").with_bearer("alice-token-1");
/// let client = Client::connect(&Endpoint::Http(spec), &Options::default()).await?;
/// let mut args = Map::new();
/// args.insert("seconds".into(), json!(5));
/// let mut call = client
///     .call_tool_as_task("slow_compute", args, None, &[], Polling::default())
///     .await?;
/// let task_id = call.task_id().to_string();
/// loop {
///     match call.next().await {
///         Step::Event(CallEvent::Progress { progress, total, .. }) => {
///             println!("{progress}/{total:?}")
///         }
///         Step::Event(CallEvent::Request { reply, .. }) => {
///             let _ = reply.send(Ok(json!({ "action": "decline" })));
///         }
///         Step::Event(_) => {}
///         Step::Done(result) => {
///             println!("{}", result?);
///             break;
///         }
///     }
/// }
/// // The task, as the server keeps it, from this or any other connection of its owner.
/// let task = client.get_task(&task_id).await?;
/// assert_eq!(task["status"], "completed");
/// # Ok(())
/// # }
/// ```
pub struct TaskCall {
    task_id: String,
    steps: Steps,
    inner: Arc<Inner>,
    token: Option<String>,
    driver: Option<tokio::task::AbortHandle>,
}

impl Client {
    /// Send a task-augmented `tools/call` of `name` (`ttl_ms`: the retention asked for) and
    /// follow the task the server creates. A server that answers with the result itself (it
    /// ran the call plainly) gives a task call whose outcome is that result.
    pub async fn call_tool_as_task(
        &self,
        name: &str,
        arguments: Map<String, Value>,
        ttl_ms: Option<u64>,
        headers: &[(HeaderName, HeaderValue)],
        polling: Polling,
    ) -> Result<TaskCall, ClientError> {
        let inner = &self.inner;
        let (tx, rx) = mpsc::channel(CALL_EVENTS);
        let id = inner.next_id();
        let token = format!("taskmesh-{id}");
        inner
            .follows
            .lock()
            .by_token
            .insert(token.clone(), tx.clone());
        let mut task = Map::new();
        if let Some(ttl) = ttl_ms {
            task.insert("ttl".into(), json!(ttl));
        }
        let params = json!({
            "name": name,
            "arguments": arguments,
            "task": task,
            "_meta": { "progressToken": token },
        });
        let created = async {
            let answer = inner
                .start(id, "tools/call", params, Some((tx.clone(), None)), headers)
                .await?;
            answer.await.unwrap_or_else(|_| Err(inner.why_closed()))
        }
        .await;
        let mut call = TaskCall::unstarted(inner.clone(), rx, Some(token));
        let created = created?;
        let Some(task_id) = created["task"]["taskId"].as_str().map(str::to_string) else {
            if created.get("content").is_some() {
                call.steps.outcome = Some(Ok(created));
                return Ok(call);
            }
            return Err(ClientError::Protocol(
                "the answer to a task-augmented tools/call is neither a task nor a result".into(),
            ));
        };
        tracing::info!(upstream = %inner.name, tool = name, task_id = %task_id,
            status = created["task"]["status"].as_str().unwrap_or_default(), "upstream task created");
        call.start(task_id, tx, polling);
        Ok(call)
    }

    /// Send a task-augmented `tools/call` of `name` (`ttl_ms`: the retention asked for) and
    /// return what the server answered, without following the task: for a caller that leaves
    /// it running, to be read or followed later ([`Client::follow_task`]) by any connection of
    /// its owner. Nothing is asked of this connection on the task's behalf.
    pub async fn start_task(
        &self,
        name: &str,
        arguments: Map<String, Value>,
        ttl_ms: Option<u64>,
        headers: &[(HeaderName, HeaderValue)],
    ) -> Result<TaskStart, ClientError> {
        let mut task = Map::new();
        if let Some(ttl) = ttl_ms {
            task.insert("ttl".into(), json!(ttl));
        }
        let params = json!({ "name": name, "arguments": arguments, "task": task });
        let id = self.inner.next_id();
        let answer = self
            .inner
            .start(id, "tools/call", params, None, headers)
            .await?;
        let answer = answer
            .await
            .unwrap_or_else(|_| Err(self.inner.why_closed()))?;
        match answer.get("task") {
            Some(t) if t["taskId"].is_string() => Ok(TaskStart::Created(t.clone())),
            _ if answer.get("content").is_some() => Ok(TaskStart::Answered(answer)),
            _ => Err(ClientError::Protocol(
                "the answer to a task-augmented tools/call is neither a task nor a result".into(),
            )),
        }
    }

    /// Whether the server accepts task-augmented `tools/call` (its `tasks.requests.tools.call`
    /// capability).
    pub fn offers_tasks(&self) -> bool {
        self.server.capabilities["tasks"]["requests"]["tools"]
            .get("call")
            .is_some()
    }

    /// Whether the server implements `tasks/list` (its `tasks.list` capability).
    pub fn lists_tasks(&self) -> bool {
        self.server.capabilities["tasks"].get("list").is_some()
    }

    /// `tasks/get`: the task as the server has it now (a flat `Task`).
    pub async fn get_task(&self, task_id: &str) -> Result<Value, ClientError> {
        self.request("tasks/get", json!({ "taskId": task_id }))
            .await
    }

    /// `tasks/result`: the task's outcome, once it is terminal (the server holds the answer
    /// until then). A request the task makes meanwhile belongs to no call of this client and
    /// is refused: [`Client::follow_task`] answers them.
    pub async fn task_result(&self, task_id: &str) -> Result<Value, ClientError> {
        self.request("tasks/result", json!({ "taskId": task_id }))
            .await
    }

    /// `tasks/cancel`: the task as cancelled (a server refuses a task already terminal).
    pub async fn cancel_task(&self, task_id: &str) -> Result<Value, ClientError> {
        self.request("tasks/cancel", json!({ "taskId": task_id }))
            .await
    }

    /// Every task `tasks/list` gives, all pages (at most [`MAX_TASK_PAGES`]), as it gives them.
    pub async fn list_tasks(&self) -> Result<Vec<Value>, ClientError> {
        let mut tasks = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..MAX_TASK_PAGES {
            let params = match &cursor {
                Some(c) => json!({ "cursor": c }),
                None => json!({}),
            };
            let page = self.request("tasks/list", params).await?;
            let Some(list) = page.get("tasks").and_then(Value::as_array) else {
                return Err(ClientError::Protocol(
                    "tasks/list result has no tasks array".into(),
                ));
            };
            tasks.extend(list.iter().cloned());
            match page.get("nextCursor") {
                Some(Value::String(c)) => cursor = Some(c.clone()),
                None | Some(Value::Null) => return Ok(tasks),
                Some(_) => {
                    return Err(ClientError::Protocol(
                        "tasks/list nextCursor is not a string".into(),
                    ))
                }
            }
        }
        Err(ClientError::Protocol(format!(
            "tasks/list did not end within {MAX_TASK_PAGES} pages"
        )))
    }

    /// Follow task `task_id`, created earlier, to its result.
    pub fn follow_task(&self, task_id: &str, polling: Polling) -> TaskCall {
        let (tx, rx) = mpsc::channel(CALL_EVENTS);
        let mut call = TaskCall::unstarted(self.inner.clone(), rx, None);
        tracing::info!(upstream = %self.inner.name, task_id, "following an upstream task");
        call.start(task_id.to_string(), tx, polling);
        call
    }
}

impl TaskCall {
    /// A task call whose events come on `events`, not yet following a task.
    fn unstarted(
        inner: Arc<Inner>,
        events: mpsc::Receiver<CallEvent>,
        token: Option<String>,
    ) -> Self {
        TaskCall {
            task_id: String::new(),
            steps: Steps::new(events, oneshot::channel().1),
            inner,
            token,
            driver: None,
        }
    }

    fn start(&mut self, task_id: String, tx: mpsc::Sender<CallEvent>, polling: Polling) {
        let wake = Arc::new(tokio::sync::Notify::new());
        {
            let mut follows = self.inner.follows.lock();
            follows.by_task.insert(task_id.clone(), tx.clone());
            follows.wake.insert(task_id.clone(), wake.clone());
            for early in follows.unpark(&task_id) {
                if let Err(
                    mpsc::error::TrySendError::Full(e) | mpsc::error::TrySendError::Closed(e),
                ) = tx.try_send(early)
                {
                    crate::incoming::refuse(
                        e,
                        taskmesh_mcp::jsonrpc::ErrorObject::internal("the call could not take it"),
                    );
                }
            }
        }
        let (done_tx, done_rx) = oneshot::channel();
        self.steps.result = done_rx;
        self.task_id = task_id.clone();
        let weak = Arc::downgrade(&self.inner);
        let driver = tokio::spawn(async move {
            let outcome = drive(weak, &task_id, tx, polling, &wake).await;
            let _ = done_tx.send(outcome);
        });
        self.driver = Some(driver.abort_handle());
    }

    /// The server's id of the task; empty when the server answered the call without a task.
    pub fn task_id(&self) -> &str {
        &self.task_id
    }

    /// The next event of the task, or its outcome (the last item): the `CallToolResult`, the
    /// JSON-RPC error `tasks/result` answered with ([`ClientError::Rpc`], the call's outcome),
    /// [`ClientError::TaskCancelled`], [`ClientError::TaskLost`] when the server no longer
    /// knows the task, or how the connection failed.
    pub async fn next(&mut self) -> Step {
        self.steps.next(&self.inner).await
    }

    /// Stop following the task and leave it running on the server; its id (empty when the
    /// server answered the call without a task). It can be followed again with
    /// [`Client::follow_task`].
    pub fn detach(self) -> String {
        self.task_id.clone()
    }

    /// Cancel the task on the server (`tasks/cancel`); its outcome is not awaited.
    pub async fn cancel(mut self, reason: &str) {
        self.steps.ended = true;
        if let Some(d) = self.driver.take() {
            d.abort();
        }
        if self.task_id.is_empty() {
            return;
        }
        match self
            .inner
            .request("tasks/cancel", json!({ "taskId": self.task_id }), None)
            .await
        {
            Ok(_) => {
                tracing::info!(upstream = %self.inner.name, task_id = %self.task_id, reason, "upstream task cancelled")
            }
            Err(e) => {
                tracing::info!(upstream = %self.inner.name, task_id = %self.task_id, reason, error = %e, "upstream task not cancelled")
            }
        }
    }
}

impl Drop for TaskCall {
    /// Stops following; the task itself runs on (it may be followed again).
    fn drop(&mut self) {
        if let Some(d) = self.driver.take() {
            d.abort();
        }
        let mut follows = self.inner.follows.lock();
        if let Some(t) = &self.token {
            follows.by_token.remove(t);
        }
        follows.by_task.remove(&self.task_id);
        follows.wake.remove(&self.task_id);
    }
}

/// Poll task `task_id` until it needs input or ends, then take its result.
async fn drive(
    inner: Weak<Inner>,
    task_id: &str,
    events: mpsc::Sender<CallEvent>,
    polling: Polling,
    wake: &tokio::sync::Notify,
) -> Result<Value, ClientError> {
    let mut last: Option<(String, Option<String>)> = None;
    let mut last_pause = None;
    loop {
        let inner = inner
            .upgrade()
            .ok_or_else(|| ClientError::Closed("the client was dropped".into()))?;
        let task = match inner
            .request("tasks/get", json!({ "taskId": task_id }), None)
            .await
        {
            Ok(t) => t,
            Err(ClientError::Rpc(e)) => {
                tracing::info!(upstream = %inner.name, task_id, code = e.code, error = %e.message, "the upstream no longer knows the task");
                return Err(ClientError::TaskLost(format!(
                    "tasks/get of task {task_id} answered error {}: {}",
                    e.code, e.message
                )));
            }
            Err(e) => return Err(e),
        };
        let status = task["status"].as_str().unwrap_or_default().to_string();
        let message = task["statusMessage"].as_str().map(str::to_string);
        let now = (status.clone(), message.clone());
        if last.as_ref() != Some(&now) {
            tracing::debug!(upstream = %inner.name, task_id, status = %status, message = ?message, "upstream task status");
            let _ = events.try_send(CallEvent::Status {
                status: status.clone(),
                message: message.clone(),
            });
            last = Some(now);
        }
        match status.as_str() {
            "working" => {
                let pause = polling.next_pause(task["pollInterval"].as_u64(), &mut last_pause);
                drop(inner);
                // A status notification of the task cuts the pause short (never awaited
                // instead of polling: notifications may not come at all).
                tokio::select! {
                    () = tokio::time::sleep(pause) => {}
                    () = wake.notified() => last_pause = None,
                }
            }
            "input_required" | "completed" | "failed" => {
                let r = inner
                    .request(
                        "tasks/result",
                        json!({ "taskId": task_id }),
                        Some((events.clone(), None)),
                    )
                    .await;
                match &r {
                    Ok(_) => {
                        tracing::info!(upstream = %inner.name, task_id, "upstream task result taken")
                    }
                    Err(e) => {
                        tracing::info!(upstream = %inner.name, task_id, error = %e, "upstream task ended without a result")
                    }
                }
                return r;
            }
            "cancelled" => {
                tracing::info!(upstream = %inner.name, task_id, "upstream task cancelled by the server");
                return Err(ClientError::TaskCancelled(format!(
                    "the server cancelled task {task_id}{}",
                    message.map(|m| format!(": {m}")).unwrap_or_default()
                )));
            }
            other => {
                return Err(ClientError::Protocol(format!(
                    "tasks/get of task {task_id} gave status {other:?}"
                )))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_poll_interval_is_kept_within_bounds() {
        let p = Polling {
            min: Duration::from_millis(100),
            max: Duration::from_millis(2_000),
            default: Duration::from_millis(500),
        };
        assert_eq!(p.pause(Some(10)), Duration::from_millis(100));
        assert_eq!(p.pause(Some(700)), Duration::from_millis(700));
        assert_eq!(p.pause(Some(60_000)), Duration::from_millis(2_000));
        assert_eq!(p.pause(None), Duration::from_millis(500));
        let odd = Polling {
            min: Duration::from_millis(300),
            max: Duration::from_millis(200),
            default: Duration::from_millis(1),
        };
        assert_eq!(odd.pause(None), Duration::from_millis(300));
    }

    #[test]
    fn without_a_suggestion_the_pause_doubles_up_to_the_bound() {
        let p = Polling {
            min: Duration::from_millis(100),
            max: Duration::from_millis(2_000),
            default: Duration::from_millis(500),
        };
        let mut last = None;
        let pauses: Vec<u128> = [None, None, None, None, Some(300), None]
            .into_iter()
            .map(|s| p.next_pause(s, &mut last).as_millis())
            .collect();
        assert_eq!(pauses, [500, 1_000, 2_000, 2_000, 300, 600]);
    }

    #[test]
    fn related_task_meta_finds_the_follower() {
        let mut f = Follows::default();
        let (tx, _rx) = mpsc::channel(1);
        f.by_task.insert("t-1".into(), tx);
        let about = json!({ "_meta": { META_RELATED_TASK: { "taskId": "t-1" } } });
        assert!(f.of_params(&about).is_some());
        let other = json!({ "_meta": { META_RELATED_TASK: { "taskId": "t-2" } } });
        assert!(f.of_params(&other).is_none());
        assert!(f.of_params(&json!({})).is_none());
    }
}
