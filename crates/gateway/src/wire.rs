//! Domain -> wire: task views as MCP `Task` objects, host errors as JSON-RPC errors, stored
//! outcomes as `tasks/result` answers; the HTTP status of a body that is no usable message.

use axum::http::StatusCode;
use serde::ser::{Serialize, SerializeStruct, Serializer};
use serde_json::{json, Map, Value};
use taskmesh_host::HostError;
use taskmesh_mcp::jsonrpc::{
    self, EnvelopeError, ErrorObject, CAPACITY_EXCEEDED, INTERNAL_ERROR, INVALID_PARAMS,
};
use taskmesh_mcp::time::Rfc3339Ms;
use taskmesh_mcp::{WireStatus, META_RELATED_TASK};
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

/// A task view as the MCP `Task` object of either protocol generation, serialised from the
/// view as it stands (no field copied on the way): times in RFC 3339 with milliseconds, the
/// retention and the poll interval in milliseconds, `null` retention for unlimited.
#[derive(Debug, Clone, Copy)]
pub struct TaskObject<'a> {
    view: &'a TaskView,
    status: TaskStatus,
    /// The names of the two fields that differ between the generations: `ttl` and
    /// `pollInterval` (2025-11-25), `ttlMs` and `pollIntervalMs` (the 2026-07-28 extension).
    names: (&'static str, &'static str),
}

impl<'a> TaskObject<'a> {
    /// The 2025-11-25 `Task` of `view`.
    pub fn classic(view: &'a TaskView) -> Self {
        Self {
            view,
            status: view.status,
            names: ("ttl", "pollInterval"),
        }
    }

    /// The 2026-07-28 `Task` of `view`, with `status` as given (a tool error reads
    /// `completed` there).
    pub fn extension(view: &'a TaskView, status: TaskStatus) -> Self {
        Self {
            view,
            status,
            names: ("ttlMs", "pollIntervalMs"),
        }
    }
}

impl TaskObject<'_> {
    /// The number of fields [`TaskObject::write_fields`] writes (one skipped when absent).
    pub const FIELDS: usize = 7;

    /// Write the task's fields into `t`, a struct being serialised: the `Task` object's own, or
    /// an answer that holds a task's fields beside its own (no `#[serde(flatten)]`, which goes
    /// through a buffered map).
    pub fn write_fields<T: serde::ser::SerializeStruct>(&self, t: &mut T) -> Result<(), T::Error> {
        let v = self.view;
        let (ttl, poll_interval) = self.names;
        t.serialize_field("taskId", &v.task_id)?;
        t.serialize_field("status", &wire_status(self.status))?;
        match &v.status_message {
            Some(m) => t.serialize_field("statusMessage", m)?,
            None => t.skip_field("statusMessage")?,
        }
        t.serialize_field("createdAt", &Rfc3339Ms(v.created_at_ms))?;
        t.serialize_field("lastUpdatedAt", &Rfc3339Ms(v.last_updated_at_ms))?;
        t.serialize_field(ttl, &v.ttl_ms)?;
        t.serialize_field(poll_interval, &v.poll_interval_ms)
    }
}

impl Serialize for TaskObject<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut t = s.serialize_struct("Task", Self::FIELDS)?;
        self.write_fields(&mut t)?;
        t.end()
    }
}

/// The serialised `notifications/tasks/status` notification for a task view; its params are
/// the task's 2025-11-25 `Task` object.
pub fn status_notification(r: &TaskView) -> Vec<u8> {
    jsonrpc::notification("notifications/tasks/status", &TaskObject::classic(r))
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
        HostError::Capacity { .. } | HostError::QueueFull(_) => {
            ErrorObject::new(CAPACITY_EXCEEDED, e.to_string())
        }
        // Only a worker's call presents a lease; an MCP request never meets this.
        HostError::StaleLease => ErrorObject::new(INVALID_PARAMS, e.to_string()),
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

#[cfg(test)]
mod tests {
    use taskmesh_mcp::Task;
    use taskmesh_task::TaskRecord;

    use super::*;

    #[test]
    fn a_task_object_reads_back_as_the_task_of_each_generation() {
        let mut view = TaskView::from(&TaskRecord::sample("t-1"));
        view.status_message = Some("half way".into());
        view.ttl_ms = Some(60_000);
        let classic: Task = serde_json::from_value(json!(TaskObject::classic(&view))).unwrap();
        assert_eq!(
            classic,
            Task {
                task_id: "t-1".into(),
                status: wire_status(view.status),
                status_message: Some("half way".into()),
                created_at: taskmesh_mcp::time::rfc3339_ms(view.created_at_ms),
                last_updated_at: taskmesh_mcp::time::rfc3339_ms(view.last_updated_at_ms),
                ttl: Some(60_000),
                poll_interval: Some(view.poll_interval_ms),
            }
        );

        view.status_message = None;
        view.ttl_ms = None;
        let modern = json!(TaskObject::extension(&view, TaskStatus::Completed));
        assert_eq!(
            modern["status"], "completed",
            "the status given, not the view's"
        );
        assert_eq!(
            modern["ttlMs"],
            Value::Null,
            "unlimited is null, not left out"
        );
        assert_eq!(modern["pollIntervalMs"], view.poll_interval_ms);
        assert!(modern.get("statusMessage").is_none());
        assert!(modern.get("ttl").is_none() && modern.get("pollInterval").is_none());
    }
}
