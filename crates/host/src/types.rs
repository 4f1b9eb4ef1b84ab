//! What the host hands out and takes in: the events it announces, a new task as the gateway
//! validated it, a `tasks/result` attachment, a replica's status.

use std::sync::Arc;

use taskmesh_task::{TaskRecord, TaskView, ToolRequest};
use tokio::sync::{mpsc, oneshot};

/// What the host announces.
#[derive(Debug, Clone)]
pub enum HostEvent {
    /// A task changed (for `notifications/tasks/status` on its session's streams): the task
    /// after the change.
    Status {
        /// The task as it stands after the change.
        task: TaskView,
        /// The MCP session that created the task, which its notifications go to; `None` for a
        /// task without one (protocol 2026-07-28).
        session: Option<String>,
        /// When the shard's leader applied the change, µs since the epoch (see [`Stamped`]).
        at_us: u64,
    },
    /// A task-related JSON-RPC message (request or notification) for a session, delivered on
    /// one of its GET streams because no `tasks/result` stream is attached.
    SessionMessage {
        /// Id of the session whose GET stream gets the message.
        session: String,
        /// Task the message belongs to.
        task_id: String,
        /// For a server request, its id: a GET stream sends it only once its claim succeeded
        /// ([`crate::Host::claim`]), so that exactly one stream carries it. `None` for a
        /// notification.
        request_id: Option<String>,
        /// The serialised JSON-RPC message.
        json: Arc<Vec<u8>>,
        /// When the task handed the message out, µs since the epoch (see [`Stamped`]).
        at_us: u64,
    },
}

/// A serialised JSON-RPC message a task sends its client, with the moment the task handed it
/// out: the start of its delivery delay, which the gateway measures when it writes the
/// message to a client's stream. The moment is the wall clock of the node that handed it out
/// (µs since the epoch), so across machines the delay includes their clocks' offset.
#[derive(Debug, Clone)]
pub struct Stamped {
    /// The message.
    pub json: Arc<Vec<u8>>,
    /// µs since the epoch; 0 for a message sent again (to a reader that attached after it was
    /// first handed out), whose wait was not the stream's.
    pub at_us: u64,
}

/// A task's end, as a `tasks/result` reader learns it.
#[derive(Debug, Clone)]
pub struct Ended {
    /// The record in its terminal status, with its outcome.
    pub record: TaskRecord,
    /// When the leader applied the terminal status, µs since the epoch; 0 when not known (a
    /// waiter resolved by a recheck after its event was missed).
    pub at_us: u64,
}

/// A new task as the gateway validated it.
#[derive(Debug, Clone)]
pub struct NewTask {
    /// Task id, minted by the gateway (128 random bits, in hex); a create repeated with the
    /// same id returns the existing task.
    pub task_id: String,
    /// Principal that creates the task; only it can read, cancel or answer the task.
    pub owner: String,
    /// Session the call came in on: it gets the task's status notifications, and the task's
    /// messages when no `tasks/result` reader is attached.
    pub session: Option<String>,
    /// TTL the call asked for (`task.ttl`), in milliseconds; `None` takes `tasks.default_ttl_ms`,
    /// and `tasks.max_ttl_ms` caps either.
    pub ttl_ms: Option<u64>,
    /// The call, as the record keeps it from here on: the tool (a node that does not serve it
    /// refuses the create, `Misconfigured`), its arguments validated by the gateway, the
    /// progress token, what the client declared and answered, and the `traceparent` of the
    /// span the create runs in when its request is traced.
    pub request: ToolRequest,
    /// Set when workers run the tool (as the gateway's registry says): whether a lease that
    /// runs out offers the task again (resume policy `rerun`). The leader then creates the task
    /// for workers whether or not it lists the tool itself yet.
    pub worker_rerun: Option<bool>,
}

/// What a create returned: the task as committed, and whether this call created it (`false`:
/// a retry of a create that had already committed, which started nothing).
#[derive(Debug, Clone)]
pub struct Created {
    /// The task as committed.
    pub task: TaskView,
    /// Whether this call created the task: `false` for a retried create that had already
    /// committed.
    pub fresh: bool,
}

/// What a read of a task found ([`crate::Host::read`]).
#[derive(Debug, Clone)]
pub enum TaskRead {
    /// The task as it stands (any status when the read asked for no detail).
    Task(TaskView),
    /// An `input_required` task and the requests it waits on, serialised, in the order sent.
    Waiting {
        /// The task.
        task: TaskView,
        /// The requests.
        requests: Vec<Arc<Vec<u8>>>,
    },
    /// A terminal task, with its outcome.
    Ended(Box<TaskRecord>),
}

impl TaskRead {
    /// The task's view, whatever else was read.
    pub fn into_view(self) -> TaskView {
        match self {
            TaskRead::Task(task) | TaskRead::Waiting { task, .. } => task,
            TaskRead::Ended(record) => TaskView::from(&*record),
        }
    }
}

/// A `tasks/result` attachment.
pub enum Attachment {
    /// The task is terminal: answer at once.
    Terminal(Box<TaskRecord>),
    /// The task runs: relay `messages` until `done` yields the terminal record (or closes,
    /// when the task expired or its shard moved).
    Live {
        /// The task as it stood when the reader attached.
        task: TaskView,
        /// The task's messages (its requests to the client, progress notifications), serialised,
        /// starting with the requests still unanswered.
        messages: mpsc::Receiver<Stamped>,
        /// Yields the terminal record when the task ends; closes without one when the task
        /// expired or its shard moved.
        done: oneshot::Receiver<Ended>,
    },
}

/// One shard replica as this node sees it (for `GET /status`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardStatus {
    /// Shard id (`0..shard_count`).
    pub shard: u32,
    /// Id of this node (the replica's Raft member id).
    pub node: u64,
    /// Whether this replica leads its group now.
    pub is_leader: bool,
    /// Node id of the group's leader as this replica knows it; `None` when it knows none.
    pub leader: Option<u64>,
    /// The replica's current Raft term.
    pub term: u64,
    /// Index of the last log entry applied to the in-memory state; `None` before any.
    pub last_applied_index: Option<u64>,
    /// First index in the local log; `None` when the log is empty or could not be read.
    pub first_log_index: Option<u64>,
    /// Last index in the local log; `None` when the log is empty or could not be read.
    pub last_log_index: Option<u64>,
    /// Task records in the replica's state, terminal ones included.
    pub tasks: usize,
    /// Of those, the records not yet terminal.
    pub live_tasks: usize,
    /// The group's voters as this replica knows them.
    pub voters: Vec<u64>,
    /// The index the group committed, as this replica knows it.
    pub committed_index: Option<u64>,
    /// Proposals under way on this replica.
    pub proposals_in_flight: usize,
    /// On a follower: how long ago the leader's last AppendEntries (or heartbeat) reached it,
    /// in ms; `None` on the leader and before any.
    pub leader_silence_ms: Option<u64>,
    /// On the leader: each follower and learner with how many entries it is behind the
    /// leader's last (all of them while not known). Empty elsewhere.
    pub follower_lag: Vec<(u64, u64)>,
    /// Whether the replica is quiescent (its group idle, its Raft timers stopped), and how.
    pub quiet: taskmesh_shard::Quiet,
}
