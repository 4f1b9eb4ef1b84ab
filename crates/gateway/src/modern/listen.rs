//! `subscriptions/listen` on protocol 2026-07-28: one long-lived POST answered with an SSE
//! stream of the notifications the client opted in to.
//!
//! The filter's `toolsListChanged` and the tasks extension's `taskIds` are honored; the
//! prompt and resource fields name nothing this server has and are left out of the
//! acknowledgement. `taskIds` needs the extension declared (else `-32021`) and at most
//! `max_listen_task_ids` ids (else `-32602`); an id that names no task of the caller is left
//! out of the acknowledgement too, as it would answer `tasks/get` with an error. A principal
//! holds at most `max_listen_streams_per_principal` streams on a node (one more: HTTP 429).
//!
//! The stream's first message is `notifications/subscriptions/acknowledged` with the filter
//! that is honored. Then, for each task it watches, a `notifications/tasks` with the task's
//! `DetailedTask` as it stands (what `tasks/get` answers, outcome inline once terminal), and
//! another after each change of it. Every message carries the listen request's id in
//! `_meta["io.modelcontextprotocol/subscriptionId"]`. Changes are coalesced: a task that
//! changed twice before its notification was written is told once, in its newer state.
//!
//! Status changes reach every node (each node follows every other one's status stream), so
//! a stream may be opened on any node for tasks led anywhere. Once every task it watches is
//! terminal (or gone) and it watches nothing else, and when the node shuts down, the stream
//! ends with the listen request's response `{resultType: "complete"}`. A client that closes
//! the stream ends the subscription.

use std::collections::{HashMap, HashSet};
use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderName, StatusCode};
use axum::response::{IntoResponse, Response};
use parking_lot::Mutex;
use serde_json::{json, Map, Value};
use taskmesh_host::{HostError, TaskRead};
use taskmesh_mcp::jsonrpc::{self, ErrorObject, RequestId};
use tokio::sync::Notify;

use super::{complete, missing_extension, tasks, with_server_info, Declared, EXTENSION};
use crate::Gateway;

/// `_meta` key of the subscription a listen-stream message belongs to.
pub const META_SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

/// What one open stream waits to tell: the tasks that changed since it last looked, and
/// whether the tool list did.
#[derive(Default)]
struct Dirty {
    tasks: HashSet<String>,
    tools: bool,
}

/// One open listen stream, as the node's registry knows it.
struct Listener {
    dirty: Mutex<Dirty>,
    wake: Notify,
}

impl Listener {
    fn mark_task(&self, task_id: &str) {
        self.dirty.lock().tasks.insert(task_id.to_string());
        self.wake.notify_one();
    }

    fn mark_tools(&self) {
        self.dirty.lock().tools = true;
        self.wake.notify_one();
    }

    fn take(&self) -> Dirty {
        std::mem::take(&mut *self.dirty.lock())
    }
}

#[derive(Default)]
struct Registry {
    next: u64,
    by_task: HashMap<String, HashMap<u64, Arc<Listener>>>,
    tools: HashMap<u64, Arc<Listener>>,
    by_principal: HashMap<String, usize>,
}

/// Take one of `principal`'s places among `held` streams, unless it holds `limit` already.
pub(super) fn take_place(held: &mut HashMap<String, usize>, principal: &str, limit: usize) -> bool {
    let n = held.entry(principal.to_string()).or_default();
    if *n >= limit {
        return false;
    }
    *n += 1;
    true
}

/// Give back one of `principal`'s places among `held` streams.
pub(super) fn give_place(held: &mut HashMap<String, usize>, principal: &str) {
    if let Some(n) = held.get_mut(principal) {
        *n -= 1;
        if *n == 0 {
            held.remove(principal);
        }
    }
}

/// The HTTP answer of a long-lived request: the SSE stream of what `rx` gives.
pub(super) fn sse_response(rx: tokio::sync::mpsc::Receiver<Result<Bytes, Infallible>>) -> Response {
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        [(HeaderName::from_static("x-accel-buffering"), "no")],
        Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(rx)),
    )
        .into_response()
}

/// The listen streams open on this node, by the tasks they watch.
#[derive(Default)]
pub(crate) struct Listeners {
    registry: Mutex<Registry>,
    /// Tasks watched by at least one stream: status changes skip the lock while it is 0.
    watched: AtomicUsize,
    /// Cancelled when the node ends its subscriptions (shutdown).
    ending: tokio_util::sync::CancellationToken,
}

impl Listeners {
    /// A task changed: the streams that watch it look again.
    pub(crate) fn task_changed(&self, task_id: &str) {
        if self.watched.load(Ordering::Relaxed) == 0 {
            return;
        }
        if let Some(ls) = self.registry.lock().by_task.get(task_id) {
            for l in ls.values() {
                l.mark_task(task_id);
            }
        }
    }

    /// End every stream with its response; streams opened later end at once.
    pub(crate) fn end_all(&self) {
        self.ending.cancel();
    }

    /// The tools served changed: the streams that asked are told.
    pub(crate) fn tools_changed(&self) {
        for l in self.registry.lock().tools.values() {
            l.mark_tools();
        }
    }

    /// Register a stream of `principal` watching `tasks` (and the tool list when `tools`);
    /// `None` when the principal holds `limit` streams already.
    fn open(
        self: &Arc<Self>,
        principal: &str,
        limit: usize,
        tasks: &[String],
        tools: bool,
    ) -> Option<Registration> {
        let listener = Arc::new(Listener {
            dirty: Mutex::new(Dirty {
                // The current state of each task is told first.
                tasks: tasks.iter().cloned().collect(),
                tools: false,
            }),
            wake: Notify::new(),
        });
        let mut r = self.registry.lock();
        if !take_place(&mut r.by_principal, principal, limit) {
            return None;
        }
        r.next += 1;
        let id = r.next;
        for t in tasks {
            let ls = r.by_task.entry(t.clone()).or_default();
            if ls.is_empty() {
                self.watched.fetch_add(1, Ordering::Relaxed);
            }
            ls.insert(id, listener.clone());
        }
        if tools {
            r.tools.insert(id, listener.clone());
        }
        listener.wake.notify_one();
        Some(Registration {
            listeners: self.clone(),
            id,
            principal: principal.to_string(),
            tasks: tasks.iter().cloned().collect(),
            listener,
        })
    }

    fn forget_task(&self, r: &mut Registry, id: u64, task_id: &str) {
        if let Some(ls) = r.by_task.get_mut(task_id) {
            ls.remove(&id);
            if ls.is_empty() {
                r.by_task.remove(task_id);
                self.watched.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }
}

/// A stream's place in the registry, given back when the stream ends.
struct Registration {
    listeners: Arc<Listeners>,
    id: u64,
    principal: String,
    tasks: HashSet<String>,
    listener: Arc<Listener>,
}

impl Registration {
    /// Stop watching `task_id` (it is terminal or gone).
    fn done_with(&mut self, task_id: &str) {
        if self.tasks.remove(task_id) {
            let mut r = self.listeners.registry.lock();
            self.listeners.forget_task(&mut r, self.id, task_id);
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut r = self.listeners.registry.lock();
        for t in std::mem::take(&mut self.tasks) {
            self.listeners.forget_task(&mut r, self.id, &t);
        }
        r.tools.remove(&self.id);
        give_place(&mut r.by_principal, &self.principal);
    }
}

/// An accepted `subscriptions/listen`, to be answered with its stream.
pub(super) struct Listen {
    tools: bool,
    task_ids: Option<Vec<String>>,
    registration: Registration,
}

/// Check a `subscriptions/listen` request and register its stream (see the module doc).
pub(super) async fn open(
    gw: &Arc<Gateway>,
    principal: &str,
    p: &Map<String, Value>,
    declared: &Declared,
) -> Result<Result<Listen, Response>, ErrorObject> {
    let filter = match p.get("notifications") {
        Some(Value::Object(f)) => f,
        _ => {
            return Err(ErrorObject::invalid_params(
                "Invalid params: 'notifications' must be an object (the subscription's filter)",
            ))
        }
    };
    let flag = |name: &str| -> Result<bool, ErrorObject> {
        match filter.get(name) {
            None | Some(Value::Null) => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(_) => Err(ErrorObject::invalid_params(format!(
                "Invalid params: 'notifications.{name}' must be a boolean"
            ))),
        }
    };
    let tools = flag("toolsListChanged")?;
    flag("promptsListChanged")?;
    flag("resourcesListChanged")?;
    let requested = match filter.get("taskIds") {
        None | Some(Value::Null) => None,
        Some(Value::Array(ids)) => {
            let ids: Option<Vec<String>> =
                ids.iter().map(|v| v.as_str().map(str::to_string)).collect();
            Some(ids.ok_or_else(|| {
                ErrorObject::invalid_params(
                    "Invalid params: 'notifications.taskIds' must be an array of strings",
                )
            })?)
        }
        Some(_) => {
            return Err(ErrorObject::invalid_params(
                "Invalid params: 'notifications.taskIds' must be an array of strings",
            ))
        }
    };
    if requested.is_some() && !declared.tasks {
        return Err(missing_extension(format!(
            "task notifications need the tasks extension ({EXTENSION}) declared in the request's client capabilities"
        )));
    }
    let max = gw.cfg.http.max_listen_task_ids;
    if let Some(ids) = &requested {
        if ids.len() > max {
            return Err(ErrorObject::invalid_params(format!(
                "Invalid params: at most {max} taskIds may be watched by one subscription (got {})",
                ids.len()
            )));
        }
    }
    // The ids that name a task of the caller, each once, in the order asked.
    let mut accepted = Vec::new();
    if let Some(ids) = &requested {
        let mut seen = HashSet::new();
        for id in ids {
            if !seen.insert(id.as_str()) {
                continue;
            }
            match gw.router.get(id, principal).await {
                Ok(_) => accepted.push(id.clone()),
                Err(e) => {
                    if matches!(e, HostError::NotFound) {
                        gw.limits.failed_lookup(principal, id);
                    }
                }
            }
        }
    }
    let limit = gw.cfg.http.max_listen_streams_per_principal;
    let Some(registration) = gw.listeners.open(principal, limit, &accepted, tools) else {
        return Ok(Err((
            StatusCode::TOO_MANY_REQUESTS,
            [(header::RETRY_AFTER, "1")],
            format!(
                "Too Many Requests: this principal holds {limit} subscriptions/listen streams on this node already"
            ),
        )
            .into_response()));
    };
    Ok(Ok(Listen {
        tools,
        task_ids: requested.map(|_| accepted),
        registration,
    }))
}

/// A listen-stream message: `params._meta` carries the subscription id.
fn notification(method: &str, mut params: Map<String, Value>, id: &RequestId) -> Vec<u8> {
    jsonrpc::put_meta(&mut params, META_SUBSCRIPTION_ID, json!(id));
    jsonrpc::notification(method, &Value::Object(params))
}

fn frame(json: &[u8]) -> Bytes {
    let mut f = Vec::with_capacity(json.len() + 8);
    f.extend_from_slice(b"data: ");
    f.extend_from_slice(json);
    f.extend_from_slice(b"\n\n");
    Bytes::from(f)
}

/// A task's `DetailedTask` as `tasks/get` gives it, with the log index of that state and
/// whether it is terminal; `None` when the task is gone.
async fn detailed(
    gw: &Arc<Gateway>,
    principal: &str,
    task_id: &str,
) -> Option<(Map<String, Value>, u64, bool)> {
    let read = gw.router.read(task_id, principal, true).await.ok()?;
    let (index, terminal) = match &read {
        TaskRead::Task(t) | TaskRead::Waiting { task: t, .. } => (t.updated_index, false),
        TaskRead::Ended(r) => (r.updated_index, true),
    };
    Some((tasks::detailed(&read), index, terminal))
}

/// The stream of an accepted listen request `id` (see the module doc).
pub(super) fn stream(
    gw: &Arc<Gateway>,
    principal: &str,
    id: RequestId,
    listen: Listen,
) -> Response {
    let keepalive = Duration::from_millis(gw.cfg.http.sse_keepalive_ms.max(100));
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, Infallible>>(4);
    let gw = gw.clone();
    let principal = principal.to_string();
    tokio::spawn(async move {
        let Listen {
            tools,
            task_ids,
            mut registration,
        } = listen;
        let mut honored = Map::new();
        if tools {
            honored.insert("toolsListChanged".into(), json!(true));
        }
        if let Some(ids) = &task_ids {
            honored.insert("taskIds".into(), json!(ids));
        }
        let ack = notification(
            "notifications/subscriptions/acknowledged",
            Map::from_iter([("notifications".to_string(), Value::Object(honored))]),
            &id,
        );
        if tx.send(Ok(frame(&ack))).await.is_err() {
            return;
        }
        let listener = registration.listener.clone();
        let ending = gw.listeners.ending.clone();
        // The log index of the last state told of each task.
        let mut told: HashMap<String, u64> = HashMap::new();
        loop {
            if (!tools && registration.tasks.is_empty()) || ending.is_cancelled() {
                break;
            }
            tokio::select! {
                () = ending.cancelled() => break,
                () = listener.wake.notified() => {}
                () = tokio::time::sleep(keepalive) => {
                    if tx.send(Ok(Bytes::from_static(b":\n\n"))).await.is_err() {
                        return;
                    }
                    continue;
                }
                () = tx.closed() => return,
            }
            let dirty = listener.take();
            if dirty.tools {
                let n = notification("notifications/tools/list_changed", Map::new(), &id);
                if tx.send(Ok(frame(&n))).await.is_err() {
                    return;
                }
            }
            for task_id in dirty.tasks {
                if !registration.tasks.contains(&task_id) {
                    continue;
                }
                let Some((d, index, terminal)) = detailed(&gw, &principal, &task_id).await else {
                    registration.done_with(&task_id);
                    continue;
                };
                if terminal {
                    registration.done_with(&task_id);
                }
                if told.get(&task_id).is_some_and(|t| *t >= index) {
                    continue;
                }
                told.insert(task_id, index);
                let n = notification("notifications/tasks", d, &id);
                if tx.send(Ok(frame(&n))).await.is_err() {
                    return;
                }
            }
        }
        drop(registration);
        let mut end = Map::new();
        jsonrpc::put_meta(&mut end, META_SUBSCRIPTION_ID, json!(id));
        let last = jsonrpc::response(&id, &with_server_info(complete(end)));
        let _ = tx.send(Ok(frame(&last))).await;
    });
    sse_response(rx)
}
