//! What the host hands out and takes in: the events it announces, a new task as the gateway
//! validated it, a `tasks/result` attachment, a replica's status.

use std::sync::Arc;

use serde_json::Value;
use taskmesh_task::{ClientCaps, TaskRecord, TaskView};
use tokio::sync::{mpsc, oneshot};

/// What the host announces.
#[derive(Debug, Clone)]
pub enum HostEvent {
    /// A task changed (for `notifications/tasks/status` on its session's streams): the task
    /// after the change.
    Status { task: TaskView },
    /// A task-related JSON-RPC message (request or notification) for a session, delivered on
    /// its GET stream because no `tasks/result` stream is attached.
    SessionMessage {
        session: String,
        task_id: String,
        json: Arc<Vec<u8>>,
    },
}

/// A new task as the gateway validated it.
#[derive(Debug, Clone)]
pub struct NewTask {
    pub task_id: String,
    pub owner: String,
    pub session: Option<String>,
    pub tool: String,
    /// The call's `arguments`: a JSON object, validated against the tool by the gateway and
    /// carried from there on as this text (it is parsed again only by the execution).
    pub arguments_json: String,
    pub progress_token: Option<Value>,
    pub ttl_ms: Option<u64>,
    pub client: ClientCaps,
}

/// What a create returned: the task as committed, and whether this call created it (`false`:
/// a retry of a create that had already committed, which started nothing).
#[derive(Debug, Clone)]
pub struct Created {
    pub task: TaskView,
    pub fresh: bool,
}

/// A `tasks/result` attachment.
pub enum Attachment {
    /// The task is terminal: answer at once.
    Terminal(TaskRecord),
    /// The task runs: relay `messages` until `done` yields the terminal record (or closes,
    /// when the task expired or its shard moved).
    Live {
        /// The task as it stood when the reader attached.
        task: TaskView,
        messages: mpsc::Receiver<Arc<Vec<u8>>>,
        done: oneshot::Receiver<TaskRecord>,
    },
}

/// One shard replica as this node sees it (for `GET /status`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardStatus {
    pub shard: u32,
    pub node: u64,
    pub is_leader: bool,
    pub leader: Option<u64>,
    pub term: u64,
    pub last_applied_index: Option<u64>,
    pub first_log_index: Option<u64>,
    pub last_log_index: Option<u64>,
    pub tasks: usize,
    pub live_tasks: usize,
    /// The group's voters as this replica knows them.
    pub voters: Vec<u64>,
}
