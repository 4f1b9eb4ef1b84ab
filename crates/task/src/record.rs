//! The durable form of a task.

use serde::{Deserialize, Serialize};

use crate::{TaskId, TaskStatus};

/// What a task's underlying request produced, kept byte for byte so that `tasks/result`
/// replays exactly what the original request would have returned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Outcome {
    /// A successful JSON-RPC result (a `CallToolResult`), as JSON text.
    Result {
        /// The result object serialised as JSON, exactly as it was produced.
        json: String,
    },
    /// A JSON-RPC error of the underlying request; `data_json` is the error's `data` as JSON.
    Error {
        /// The JSON-RPC error code.
        code: i64,
        /// The error's message.
        message: String,
        /// The error's `data` as JSON text; `None` when the error carries no `data`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        data_json: Option<String>,
    },
}

/// The original `tools/call`, kept so that an execution can be re-run after a failover.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolRequest {
    /// Name of the called tool; an execution started again after a failover looks it up by it.
    pub tool: String,
    /// The `arguments` object as JSON text.
    pub arguments_json: String,
    /// The request's `_meta.progressToken` as JSON text, when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress_token_json: Option<String>,
    /// What the requesting client declared it can answer (elicitation, sampling).
    #[serde(default)]
    pub client: ClientCaps,
    /// What the client answered before the task was created, by request key, as the JSON
    /// text of an object: the tool's questions settled first on protocol 2026-07-28. Its
    /// executions get them without asking again. `None` for most tasks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answers_json: Option<String>,
    /// The W3C `traceparent` of the span that created the task, when its request was traced
    /// (sampled): each execution of the task is traced under it. `None` for most tasks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
}

impl ToolRequest {
    /// A call of `tool` with the `arguments` object's JSON text; no progress token, no client
    /// capabilities, no answers, not traced.
    pub fn new(tool: impl Into<String>, arguments_json: impl Into<String>) -> Self {
        Self {
            tool: tool.into(),
            arguments_json: arguments_json.into(),
            progress_token_json: None,
            client: ClientCaps::default(),
            answers_json: None,
            traceparent: None,
        }
    }
}

/// The client capabilities a task's execution may rely on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientCaps {
    /// The client's session declared elicitation support (`elicitation/create` may be sent).
    #[serde(default)]
    pub elicitation: bool,
    /// The client's session declared sampling support (`sampling/createMessage` may be sent).
    #[serde(default)]
    pub sampling: bool,
    /// The client runs `elicitation/create` as a task when asked to (2025-11-25 client
    /// capability `tasks.requests.elicitation.create`): the request is sent task-augmented.
    #[serde(default)]
    pub elicitation_tasks: bool,
    /// The client runs `sampling/createMessage` as a task when asked to (client capability
    /// `tasks.requests.sampling.createMessage`).
    #[serde(default)]
    pub sampling_tasks: bool,
}

impl ClientCaps {
    /// Whether a request of `method` may be sent to the client task-augmented.
    pub fn runs_as_task(&self, method: &str) -> bool {
        match method {
            "elicitation/create" => self.elicitation_tasks,
            "sampling/createMessage" => self.sampling_tasks,
            _ => false,
        }
    }
}

/// A request of a task's execution that the client runs as its own task (a task-augmented
/// `elicitation/create` or `sampling/createMessage`), recorded once the client created it: the
/// execution follows it with `tasks/get` and takes its answer from `tasks/result`, and a later
/// execution (after a failover) follows the same client task when its tool asks the same
/// request again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientTask {
    /// Which of the execution's requests it answers: the key the tool asked it under, or
    /// `<method>#<n>` for the n-th request of that method the tool asked without one.
    pub key: String,
    /// The request's method.
    pub method: String,
    /// The client's task id.
    pub task_id: String,
}

/// The durable form of a task: what its shard's state machine, log and snapshots hold.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskRecord {
    /// Task id, unique within the cluster; its [`crate::stable_hash`] picks the task's shard.
    pub task_id: TaskId,
    /// The authorization context (principal) the task is bound to.
    pub owner: String,
    /// The MCP session that created it, for status notifications on that session's streams.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// Current lifecycle status; once terminal it never changes.
    pub status: TaskStatus,
    /// Human-readable text about the current status (MCP `statusMessage`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_message: Option<String>,
    /// When the task was created, in ms since the Unix epoch; the TTL counts from here.
    pub created_at_ms: u64,
    /// When the task last changed, in ms since the Unix epoch; it never moves backwards.
    pub last_updated_at_ms: u64,
    /// Retention from `created_at_ms`; `None` = unlimited.
    pub ttl_ms: Option<u64>,
    /// Polling interval suggested to clients (MCP `pollInterval`), in ms; fixed at creation.
    pub poll_interval_ms: u64,
    /// The original tool call, to run the execution again after a failover.
    pub request: ToolRequest,
    /// What the tool call produced; set only by a `Finish` (`completed` or `failed`), so `None`
    /// while the task is live and for a cancelled task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<Outcome>,
    /// The Raft term under which the current execution was started. State changes proposed by
    /// an execution of an older term are rejected.
    pub exec_term: u64,
    /// Log index of the last change: strictly increases with every applied change.
    pub updated_index: u64,
    /// The id of the task that an upstream MCP server runs for this one, once the upstream
    /// accepted the call as a task ([`crate::Command::Follow`]): a new leader follows that
    /// task instead of running the tool again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream_task: Option<String>,
    /// The client task the execution waits on, while it waits ([`crate::Command::FollowClient`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_task: Option<ClientTask>,
    /// Set when a worker runs the task's work ([`crate::worker`]): its resume policy, attempts
    /// and current lease.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<crate::WorkerJob>,
    /// The subscriptions that watch the task and the events owed to them ([`crate::outbox`]);
    /// `None` for a task nobody watches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outbox: Option<Box<crate::Outbox>>,
}

impl TaskRecord {
    /// The instant the record may be deleted, if it ever expires.
    pub fn expires_at_ms(&self) -> Option<u64> {
        self.ttl_ms.map(|t| self.created_at_ms.saturating_add(t))
    }

    /// Whether the TTL has run out at `now_ms`.
    pub fn is_expired(&self, now_ms: u64) -> bool {
        self.expires_at_ms().is_some_and(|at| now_ms >= at)
    }

    /// About how many bytes the record takes encoded: its variable-length parts plus a fixed
    /// allowance for the rest. Bounds the pages of a backup.
    pub fn approx_bytes(&self) -> usize {
        let outcome = match &self.outcome {
            Some(Outcome::Result { json }) => json.len(),
            Some(Outcome::Error {
                message, data_json, ..
            }) => message.len() + data_json.as_ref().map_or(0, String::len),
            None => 0,
        };
        256 + self.task_id.len()
            + self.owner.len()
            + self.session.as_ref().map_or(0, String::len)
            + self.status_message.as_ref().map_or(0, String::len)
            + self.request.tool.len()
            + self.request.arguments_json.len()
            + self.request.answers_json.as_ref().map_or(0, String::len)
            + outcome
    }
}

/// What a poll, a cancel, a list and a status event show of a task: the fields of an MCP Task
/// object and the change index. Built from a record without touching its owner, session,
/// request or outcome: the owner is checked where the record is read, a status event carries
/// the session beside the view, and only `tasks/result`, the log and snapshots need the rest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskView {
    /// Task id, unique within the cluster.
    pub task_id: TaskId,
    /// Current lifecycle status.
    pub status: TaskStatus,
    /// Human-readable text about the current status (MCP `statusMessage`), if any.
    pub status_message: Option<String>,
    /// When the task was created, in ms since the Unix epoch.
    pub created_at_ms: u64,
    /// When the task last changed, in ms since the Unix epoch.
    pub last_updated_at_ms: u64,
    /// Retention from `created_at_ms`, in ms; `None` = unlimited.
    pub ttl_ms: Option<u64>,
    /// Polling interval suggested to clients (MCP `pollInterval`), in ms.
    pub poll_interval_ms: u64,
    /// Log index of the record's last change; a larger one is a later state of the task.
    pub updated_index: u64,
}

impl From<&TaskRecord> for TaskView {
    fn from(r: &TaskRecord) -> Self {
        Self {
            task_id: r.task_id.clone(),
            status: r.status,
            status_message: r.status_message.clone(),
            created_at_ms: r.created_at_ms,
            last_updated_at_ms: r.last_updated_at_ms,
            ttl_ms: r.ttl_ms,
            poll_interval_ms: r.poll_interval_ms,
            updated_index: r.updated_index,
        }
    }
}

#[cfg(any(test, feature = "fixtures"))]
impl TaskRecord {
    /// A fixture for tests, benches and examples: a fresh `working` task of `alice`, created at
    /// 1 000 ms with a one-hour TTL, running `slow_compute` for 5 s in execution term 1. Change
    /// what a test needs with struct update syntax (`TaskRecord { ttl_ms: None,
    /// ..TaskRecord::sample(id) }`).
    pub fn sample(task_id: &str) -> Self {
        TaskRecord {
            task_id: task_id.to_string(),
            owner: "alice".to_string(),
            session: None,
            status: TaskStatus::Working,
            status_message: None,
            created_at_ms: 1_000,
            last_updated_at_ms: 1_000,
            ttl_ms: Some(3_600_000),
            poll_interval_ms: 500,
            request: ToolRequest {
                tool: "slow_compute".to_string(),
                arguments_json: r#"{"seconds":5}"#.to_string(),
                progress_token_json: None,
                client: ClientCaps::default(),
                answers_json: None,
                traceparent: None,
            },
            outcome: None,
            exec_term: 1,
            updated_index: 0,
            upstream_task: None,
            client_task: None,
            worker: None,
            outbox: None,
        }
    }
}
