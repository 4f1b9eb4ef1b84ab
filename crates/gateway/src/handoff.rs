//! The hand-off of plain calls, for clients that do not speak tasks: what both protocol
//! generations share (the offered tools, the hand-off answer, the session's tool list).
//!
//! Most MCP clients call tools plainly: a long call blocks until the client's own timeout, and
//! its work is lost with the connection. For a client that does not speak tasks (on
//! 2025-11-25 a session that did not declare the `tasks` capability, or of a version before
//! tasks; on 2026-07-28 a request without the tasks extension), a plain `tools/call` of a tool
//! that may run as a task runs as a durable task from the start. When the task ends within
//! `tasks.handoff_after_ms` the call answers with its result, as a plain call would; when it
//! still runs then, the call answers with a `CallToolResult` ([`handed_off`]) that tells the
//! model the work goes on as a task and how to follow it, and whose `structuredContent` is the
//! task as `tasks/get` shows it with the call that fetches its result. The task runs on.
//!
//! Such clients are offered three tools to follow a task ([`Offered`]): its status, its result
//! (waiting for it up to `tasks.handoff_wait_max_ms`, then answering that it still works), and
//! its cancellation, each scoped to the caller's principal exactly as `tasks/*` are. They are
//! listed only to those clients ([`listing`]); a registered tool of the same name is hidden
//! from them. `dispatch/handoff.rs` and `modern/handoff.rs` run the calls on each generation.

use std::time::Duration;

use serde_json::{json, Map, Value};
use taskmesh_mcp::jsonrpc::ErrorObject;
use taskmesh_mcp::TaskSupport;
use taskmesh_task::{TaskStatus, TaskView};

use crate::{wire, Gateway};

/// The three tools offered to sessions whose plain calls are handed off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Offered {
    /// A task's status, at once.
    Status,
    /// A task's result, waited for within a bound.
    Result,
    /// Cancel a task.
    Cancel,
}

impl Offered {
    const ALL: [Offered; 3] = [Offered::Status, Offered::Result, Offered::Cancel];

    /// The offered tool named `name` under this node's settings.
    pub(crate) fn named(gw: &Gateway, name: &str) -> Option<Offered> {
        Self::ALL.into_iter().find(|o| o.name(gw) == name)
    }

    pub(crate) fn name(self, gw: &Gateway) -> &str {
        let t = &gw.cfg.tasks;
        match self {
            Offered::Status => &t.handoff_status_tool,
            Offered::Result => &t.handoff_result_tool,
            Offered::Cancel => &t.handoff_cancel_tool,
        }
    }

    /// The tool's `tools/list` entry.
    fn spec(self, gw: &Gateway, with_execution: bool) -> Value {
        let task_id = json!({
            "type": "string",
            "description": "The id of the task, as the call that handed it off gave it.",
        });
        let wait_max_s = gw.cfg.tasks.handoff_wait_max_ms.div_ceil(1000);
        let (title, description, properties) = match self {
            Offered::Status => (
                "Task status",
                "Tell the status of a task that a tool call handed off (working, input_required, \
                 completed, failed or cancelled), without waiting."
                    .to_string(),
                json!({ "taskId": task_id }),
            ),
            Offered::Result => (
                "Task result",
                format!(
                    "Wait for a task that a tool call handed off to finish, and return its \
                     result: the result the tool call would have returned. Waits at most \
                     waitSeconds (at most {wait_max_s}); a task still running then is reported \
                     as still working, and this tool can be called again."
                ),
                json!({
                    "taskId": task_id,
                    "waitSeconds": {
                        "type": "number",
                        "minimum": 0,
                        "description": format!("How long to wait for the result, in seconds (default and most: {wait_max_s})."),
                    },
                }),
            ),
            Offered::Cancel => (
                "Cancel task",
                "Cancel a task that a tool call handed off; it stops and will have no result."
                    .to_string(),
                json!({ "taskId": task_id }),
            ),
        };
        let mut v = json!({
            "name": self.name(gw),
            "title": title,
            "description": description,
            "inputSchema": {
                "type": "object",
                "properties": properties,
                "required": ["taskId"],
            },
        });
        if with_execution {
            v["execution"] = json!({ "taskSupport": "forbidden" });
        }
        v
    }
}

/// Whether a plain call of a tool with `support` is handed off, for a client that does not
/// speak tasks: a tool that may run as a task is; one that must is too where the version has
/// no tasks (`required_too`), and is refused as the version says where it has them (2025-11-25
/// `-32601`, 2026-07-28 `-32021`).
pub(crate) fn hands_off(support: TaskSupport, required_too: bool) -> bool {
    match support {
        TaskSupport::Optional => true,
        TaskSupport::Required => required_too,
        TaskSupport::Forbidden => false,
    }
}

/// The `tools/list` entries for a client whose plain calls are handed off: the registered
/// tools, then the offered tools. The `outputSchema` of a tool whose calls are handed off is
/// left out (a hand-off answer cannot match it); `with_execution` and `required_too` as for
/// [`hands_off`].
pub(crate) fn listing(gw: &Gateway, with_execution: bool, required_too: bool) -> Vec<Value> {
    let offered: Vec<&str> = Offered::ALL.iter().map(|o| o.name(gw)).collect();
    let mut all: Vec<Value> = gw
        .tools
        .snapshot()
        .tools()
        .filter(|t| !offered.contains(&t.spec().name.as_str()))
        .map(|t| {
            let spec = t.spec();
            let mut v = spec.to_wire(with_execution);
            if hands_off(spec.task_support, required_too) {
                if let Some(m) = v.as_object_mut() {
                    m.remove("outputSchema");
                }
            }
            v
        })
        .collect();
    all.extend(Offered::ALL.iter().map(|o| o.spec(gw, with_execution)));
    all
}

/// The answer of a plain call of `tool` whose task `task` still runs after
/// `tasks.handoff_after_ms`.
pub(crate) fn handed_off(gw: &Gateway, tool: &str, task: &TaskView) -> Value {
    crate::metrics::handed_off();
    let t = &gw.cfg.tasks;
    let text = format!(
        "The call of `{tool}` goes on in the background as task {id} ({status}). Do not call \
         `{tool}` again for this. To get its result, call the tool `{result}` with \
         {{\"taskId\": \"{id}\"}}: it waits up to {wait} seconds and returns the result once the \
         task has finished, or says it is still working. `{status_tool}` tells its status at \
         once, and `{cancel}` stops it.",
        id = task.task_id,
        status = status_words(task),
        result = t.handoff_result_tool,
        wait = t.handoff_wait_max_ms.div_ceil(1000),
        status_tool = t.handoff_status_tool,
        cancel = t.handoff_cancel_tool,
    );
    described(gw, task, text)
}

/// The answer of the result tool for a task that still runs when its wait is over.
pub(crate) fn still_running(gw: &Gateway, task: &TaskView) -> Value {
    let text = format!(
        "Task {} is still {}. Call `{}` again to keep waiting.",
        task.task_id,
        status_words(task),
        gw.cfg.tasks.handoff_result_tool,
    );
    described(gw, task, text)
}

/// The answer of the status tool.
pub(crate) fn status(gw: &Gateway, task: &TaskView) -> Value {
    let text = format!("Task {}: {}.", task.task_id, status_words(task));
    described(gw, task, text)
}

/// The answer of the cancel tool.
pub(crate) fn cancelled(gw: &Gateway, task: &TaskView) -> Value {
    let text = format!("Task {} is cancelled.", task.task_id);
    described(gw, task, text)
}

/// The `taskId` argument of an offered tool.
pub(crate) fn task_id_arg(args: &Map<String, Value>) -> Result<&str, ErrorObject> {
    taskmesh_mcp::params::req_str(args, "taskId")
}

/// How long a call of the result tool waits: its `waitSeconds`, at most (and by default)
/// `tasks.handoff_wait_max_ms`.
pub(crate) fn wait_of(gw: &Gateway, args: &Map<String, Value>) -> Result<Duration, ErrorObject> {
    let wait_max = Duration::from_millis(gw.cfg.tasks.handoff_wait_max_ms);
    match args.get("waitSeconds") {
        None | Some(Value::Null) => Ok(wait_max),
        Some(v) => match v.as_f64().filter(|s| s.is_finite() && *s >= 0.0) {
            Some(s) => Ok(Duration::from_secs_f64(s.min(wait_max.as_secs_f64()))),
            None => Err(ErrorObject::invalid_params(
                "Invalid params: 'waitSeconds' must be a number of seconds, at least 0",
            )),
        },
    }
}

/// A task's status in words, with its status message.
fn status_words(task: &TaskView) -> String {
    let status = match task.status {
        TaskStatus::Working => "working",
        TaskStatus::InputRequired => "waiting for input",
        TaskStatus::Completed => "completed",
        TaskStatus::Failed => "failed",
        TaskStatus::Cancelled => "cancelled",
    };
    match &task.status_message {
        Some(m) => format!("{status}: {m}"),
        None => status.to_string(),
    }
}

/// A `CallToolResult` about a task: `text` for the model, and as `structuredContent` the task
/// as `tasks/get` shows it, with the call that fetches its result.
fn described(gw: &Gateway, task: &TaskView, text: String) -> Value {
    let mut structured = serde_json::to_value(wire::TaskObject::classic(task))
        .unwrap_or_else(|_| json!({ "taskId": task.task_id }));
    if !task.status.is_terminal() {
        structured["followWith"] = json!({
            "tool": gw.cfg.tasks.handoff_result_tool,
            "arguments": { "taskId": task.task_id },
        });
    }
    json!({
        "content": [{ "type": "text", "text": text }],
        "structuredContent": structured,
        "isError": false,
    })
}
