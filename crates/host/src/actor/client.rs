//! Tasks in the other direction: a request of the tool that the client runs as its own task.
//!
//! A client that declared `tasks.requests.elicitation.create` (or
//! `tasks.requests.sampling.createMessage`) gets such a request task-augmented
//! (`task: {ttl: tasks.client_task_ttl_ms}`). When it answers with a `CreateTaskResult`, the
//! actor records the client's task id with the task ([`taskmesh_task::Command::FollowClient`],
//! through the shard's log) and a [`Following`] polls it: `tasks/get` at the client's
//! `pollInterval` kept within `[tasks.client_poll_min_ms, tasks.client_poll_max_ms]`, then
//! `tasks/result` once it is `completed`, whose answer is the tool's. Those requests travel to
//! the client as the tool's own do (an attached `tasks/result` stream or the session's GET
//! streams; [`super::TaskMsg::ToClient`]), and the server task stays `input_required`
//! meanwhile. A client task that ends `failed` or `cancelled`, that the client no longer knows
//! (expired), or about which the client does not answer within
//! `tasks.client_answer_timeout_ms` (gone) gives the tool's request an error that says so.
//!
//! A task that ends while it waits (cancelled, expired) sends the client `tasks/cancel` of its
//! task.
//!
//! After a failover the new leader's execution (a `rerun` tool run again) asks the same request
//! under the same key; the actor then follows the recorded client task rather than ask again.

use std::time::Duration;

use ractor::ActorRef;
use serde_json::{json, Value};
use taskmesh_mcp::jsonrpc::{ErrorObject, INVALID_PARAMS};
use taskmesh_task::ClientTask;
use taskmesh_tools::ToolResult;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::TaskMsg;

/// The bounds a follower polls within, from `[tasks]`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Bounds {
    pub(super) min: Duration,
    pub(super) max: Duration,
    pub(super) answer_timeout: Duration,
}

/// A client task being followed, with the tool's request it answers.
pub(super) struct Following {
    pub(super) client_task: ClientTask,
    pub(super) reply: oneshot::Sender<ToolResult>,
    stop: CancellationToken,
}

impl Following {
    /// Start following `client_task` for the actor `actor`; `first_poll_ms` is the
    /// `pollInterval` the client suggested when it created it.
    pub(super) fn start(
        actor: ActorRef<TaskMsg>,
        client_task: ClientTask,
        reply: oneshot::Sender<ToolResult>,
        first_poll_ms: Option<u64>,
        bounds: Bounds,
    ) -> Following {
        let stop = CancellationToken::new();
        let (stopping, task_id, key) = (
            stop.clone(),
            client_task.task_id.clone(),
            client_task.key.clone(),
        );
        let method = client_task.method.clone();
        tokio::spawn(async move {
            let outcome = tokio::select! {
                o = follow(&actor, &task_id, &method, first_poll_ms, bounds) => o,
                () = stopping.cancelled() => return,
            };
            let (outcome, event) = outcome;
            count(event);
            let _ = actor.cast(TaskMsg::ClientTaskEnded { key, outcome });
        });
        Following {
            client_task,
            reply,
            stop,
        }
    }

    /// Stop polling (the execution stops).
    pub(super) fn stop(self) {
        self.stop.cancel();
    }
}

/// Count a client task event (`created`, or how it ended).
pub(super) fn count(event: &'static str) {
    taskmesh_metrics::metrics::counter!(taskmesh_metrics::names::CLIENT_TASKS, "event" => event)
        .increment(1);
}

/// The id of the client task in a client's answer to a task-augmented request, when it is a
/// `CreateTaskResult`.
pub(super) fn created_task(answer: &Value) -> Option<(String, Option<u64>)> {
    let task = answer.get("task")?;
    let id = task.get("taskId")?.as_str()?;
    Some((
        id.to_string(),
        task.get("pollInterval").and_then(Value::as_u64),
    ))
}

/// Ask the client `method` about its task through the actor, within the answer timeout.
async fn ask(
    actor: &ActorRef<TaskMsg>,
    method: &'static str,
    task_id: &str,
    bounds: Bounds,
) -> ToolResult {
    let (reply, rx) = oneshot::channel();
    let params = json!({ "taskId": task_id });
    if actor
        .cast(TaskMsg::ToClient {
            method,
            params,
            reply,
        })
        .is_err()
    {
        return Err(ErrorObject::internal("the task stopped"));
    }
    match tokio::time::timeout(bounds.answer_timeout, rx).await {
        Ok(Ok(answer)) => answer,
        Ok(Err(_)) => Err(ErrorObject::internal("the task stopped")),
        Err(_) => Err(ErrorObject::internal(format!(
            "the client did not answer {method} about its task {task_id} within {} s \
             (tasks.client_answer_timeout_ms): the client is taken as gone",
            bounds.answer_timeout.as_secs()
        ))),
    }
}

/// Poll the client's task `task_id` until it ends; its result, or why there is none, with how
/// it ended (`completed`, `failed`, `cancelled` or `lost`, for the metrics).
async fn follow(
    actor: &ActorRef<TaskMsg>,
    task_id: &str,
    method: &str,
    first_poll_ms: Option<u64>,
    bounds: Bounds,
) -> (ToolResult, &'static str) {
    let lost_on = |e| (Err(lost(task_id, method, e)), "lost");
    let pause = |ms: Option<u64>| {
        ms.map_or(bounds.max, Duration::from_millis)
            .clamp(bounds.min, bounds.max)
    };
    let mut next = pause(first_poll_ms);
    loop {
        tokio::time::sleep(next).await;
        let task = match ask(actor, "tasks/get", task_id, bounds).await {
            Ok(t) => t,
            Err(e) => return lost_on(e),
        };
        let status = task.get("status").and_then(Value::as_str).unwrap_or("");
        let said = task
            .get("statusMessage")
            .and_then(Value::as_str)
            .map(|m| format!(": {m}"))
            .unwrap_or_default();
        match status {
            "working" | "input_required" => {
                next = pause(task.get("pollInterval").and_then(Value::as_u64));
            }
            "completed" => break,
            "failed" => {
                // Its `tasks/result` says why (a requestor reads it for every terminal status
                // that has one).
                let why = match ask(actor, "tasks/result", task_id, bounds).await {
                    Err(e) => format!(" ({})", e.message),
                    Ok(_) => String::new(),
                };
                let e = ErrorObject::internal(format!(
                    "the client's task {task_id} for {method} ended failed{said}{why}"
                ));
                return (Err(e), "failed");
            }
            "cancelled" => {
                let e = ErrorObject::internal(format!(
                    "the client's task {task_id} for {method} ended cancelled{said}"
                ));
                return (Err(e), "cancelled");
            }
            other => {
                let e = ErrorObject::internal(format!(
                    "the client's task {task_id} for {method} has an unknown status '{other}'"
                ));
                return (Err(e), "lost");
            }
        }
    }
    match ask(actor, "tasks/result", task_id, bounds).await {
        Ok(answer) => (Ok(answer), "completed"),
        Err(e) => lost_on(e),
    }
}

/// The error of a request about the client's task that got no answer.
fn lost(task_id: &str, method: &str, e: ErrorObject) -> ErrorObject {
    if e.code == INVALID_PARAMS {
        return ErrorObject::internal(format!(
            "the client no longer knows its task {task_id} for {method} (expired or deleted): {}",
            e.message
        ));
    }
    ErrorObject::internal(format!(
        "the client's task {task_id} for {method} could not be followed: {}",
        e.message
    ))
}
