//! Domain -> wire: task views as MCP `Task` objects, host errors as JSON-RPC errors, stored
//! outcomes as `tasks/result` answers; the HTTP status of a body that is no usable message.

use axum::http::StatusCode;
use serde_json::{json, Map, Value};
use taskmesh_host::HostError;
use taskmesh_mcp::jsonrpc::{
    self, EnvelopeError, ErrorObject, CAPACITY_EXCEEDED, INTERNAL_ERROR, INVALID_PARAMS,
};
use taskmesh_mcp::time::rfc3339_ms;
use taskmesh_mcp::{Task, WireStatus, META_RELATED_TASK};
use taskmesh_task::{Outcome, TaskRecord, TaskStatus, TaskView};

/// The HTTP status of a body that is no usable message: 400, but 200 for a request whose params
/// cannot be read (answered, with its id, like any other `-32602`, on either protocol
/// generation).
pub(crate) fn envelope_status(e: &EnvelopeError) -> StatusCode {
    match e.id() {
        Some(_) => StatusCode::OK,
        None => StatusCode::BAD_REQUEST,
    }
}

/// The MCP status string of a task status (one for one).
pub fn wire_status(s: TaskStatus) -> WireStatus {
    match s {
        TaskStatus::Working => WireStatus::Working,
        TaskStatus::InputRequired => WireStatus::InputRequired,
        TaskStatus::Completed => WireStatus::Completed,
        TaskStatus::Failed => WireStatus::Failed,
        TaskStatus::Cancelled => WireStatus::Cancelled,
    }
}

/// A task view as the MCP `Task` object: times in RFC 3339 with milliseconds, `ttl` and
/// `pollInterval` in milliseconds.
pub fn task(r: &TaskView) -> Task {
    Task {
        task_id: r.task_id.clone(),
        status: wire_status(r.status),
        status_message: r.status_message.clone(),
        created_at: rfc3339_ms(r.created_at_ms),
        last_updated_at: rfc3339_ms(r.last_updated_at_ms),
        ttl: r.ttl_ms,
        poll_interval: Some(r.poll_interval_ms),
    }
}

/// The serialised `notifications/tasks/status` notification for a task view; its params are
/// the task's `Task` object.
pub fn status_notification(r: &TaskView) -> Vec<u8> {
    jsonrpc::notification("notifications/tasks/status", &task(r))
}

/// The value of the related-task `_meta` entry for `task_id`: `{"taskId": task_id}`.
pub fn related(task_id: &str) -> Value {
    json!({ "taskId": task_id })
}

/// A host error as the client sees it. Unknown, expired and foreign tasks all read the same.
pub fn host_error(e: &HostError) -> ErrorObject {
    match e {
        HostError::NotFound => {
            ErrorObject::new(INVALID_PARAMS, "Failed to retrieve task: Task not found")
        }
        HostError::Terminal(s) => ErrorObject::new(
            INVALID_PARAMS,
            format!("Cannot cancel task: already in terminal status '{s}'"),
        ),
        HostError::Capacity { .. } => ErrorObject::new(CAPACITY_EXCEEDED, e.to_string()),
        // Only these two are known to have changed nothing.
        HostError::NotLeader { .. } | HostError::Unavailable(_) => ErrorObject::new(
            INTERNAL_ERROR,
            format!("{e}; the request changed nothing and can be retried"),
        ),
        HostError::Invalid(_) => ErrorObject::new(INVALID_PARAMS, e.to_string()),
        HostError::Misconfigured(_) => ErrorObject::new(
            INTERNAL_ERROR,
            format!("{e}; the request changed nothing; the server's operator must act"),
        ),
        // A failure whose effect is not known: said as it is, with its cause.
        HostError::Shard { source, .. } => {
            ErrorObject::new(INTERNAL_ERROR, format!("{e}: {source}"))
        }
        HostError::Internal(_) => ErrorObject::new(INTERNAL_ERROR, e.to_string()),
    }
}

/// The `tasks/result` answer of a terminal record: the stored result with the related-task
/// `_meta`, the stored JSON-RPC error, or for a cancelled task the documented error.
pub fn terminal_answer(r: &TaskRecord) -> Result<Value, ErrorObject> {
    match (&r.outcome, r.status) {
        (Some(Outcome::Result { json }), _) => {
            let mut obj: Map<String, Value> = serde_json::from_str(json)
                .map_err(|e| ErrorObject::internal(format!("stored result unreadable: {e}")))?;
            jsonrpc::put_meta(&mut obj, META_RELATED_TASK, related(&r.task_id));
            Ok(Value::Object(obj))
        }
        (
            Some(Outcome::Error {
                code,
                message,
                data_json,
            }),
            _,
        ) => Err(ErrorObject {
            code: *code,
            message: message.clone(),
            data: data_json
                .as_deref()
                .and_then(|d| serde_json::from_str(d).ok()),
        }),
        (None, TaskStatus::Cancelled) => Err(ErrorObject {
            code: INTERNAL_ERROR,
            message: "Task was cancelled: it has no result".into(),
            data: Some(json!({
                "taskId": r.task_id,
                "status": "cancelled",
                "_meta": { META_RELATED_TASK: related(&r.task_id) },
            })),
        }),
        (None, s) => Err(ErrorObject::internal(format!(
            "task is {s} without an outcome"
        ))),
    }
}
