//! The commands a shard's log carries, and what applying one produced.

use serde::{Deserialize, Serialize};

use crate::{Outcome, TaskId, TaskRecord, TaskStatus};

/// A change to a shard's task records: what the shard's Raft log carries, applied by
/// [`crate::ShardState::apply`]. Times are the proposer's clock, in ms since the Unix epoch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
// `Create` is the largest variant and the most common command: boxing its record would add an
// allocation to every create and save nothing on the others, which are short-lived.
#[allow(clippy::large_enum_variant)]
pub enum Command {
    /// Create a task. Idempotent by task id: a retry returns the existing record unchanged.
    Create {
        /// The new record; it must be `working`. Its `updated_index` is set to the entry's log
        /// index and its `outcome` cleared when applied.
        record: TaskRecord,
    },
    /// A non-terminal status change decided by the execution of `term`
    /// (`working` <-> `input_required`, or a new status message).
    SetStatus {
        /// The task to change.
        task_id: TaskId,
        /// Execution term of the proposer; rejected if older than the record's `exec_term`.
        term: u64,
        /// The new status: `working` or `input_required` (a terminal one is rejected).
        status: TaskStatus,
        /// The new status message; `None` clears it.
        message: Option<String>,
        /// When the change was decided; `last_updated_at_ms` never moves back before it.
        at_ms: u64,
    },
    /// The execution of `term` finished: `completed` or `failed` with its outcome.
    Finish {
        /// The task that finished.
        task_id: TaskId,
        /// Execution term of the proposer; rejected if older than the record's `exec_term`.
        term: u64,
        /// `completed` or `failed`; any other status is rejected.
        status: TaskStatus,
        /// The final status message; `None` clears it.
        message: Option<String>,
        /// What the execution produced, kept for `tasks/result`.
        outcome: Outcome,
        /// When the execution finished; `last_updated_at_ms` never moves back before it.
        at_ms: u64,
    },
    /// `tasks/cancel`: becomes `cancelled` unless already terminal.
    Cancel {
        /// The task to cancel.
        task_id: TaskId,
        /// The status message the cancelled task shows.
        message: String,
        /// When the cancel was requested; `last_updated_at_ms` never moves back before it.
        at_ms: u64,
    },
    /// A leader of `term` restarts the execution of a live task (resume policy `rerun`).
    Resume {
        /// The live task whose execution restarts.
        task_id: TaskId,
        /// The new leader's term; becomes the record's `exec_term`. Rejected if older than it.
        term: u64,
        /// The status message set with the return to `working`; `None` clears it.
        message: Option<String>,
        /// When the restart was decided; `last_updated_at_ms` never moves back before it.
        at_ms: u64,
    },
    /// The execution of `term` handed the call to an upstream MCP server that runs it as its
    /// own task `upstream_task`: recorded so that a later leader follows that task instead of
    /// running the tool again. The status stays; the status message becomes `message`.
    Follow {
        /// The task whose execution is followed upstream.
        task_id: TaskId,
        /// Execution term of the proposer; rejected if older than the record's `exec_term`.
        term: u64,
        /// The upstream's task id.
        upstream_task: String,
        /// The new status message; `None` clears it.
        message: Option<String>,
        /// When the upstream accepted the task; `last_updated_at_ms` never moves back before it.
        at_ms: u64,
    },
    /// The execution of `term` waits on a task the client runs for one of its requests
    /// (`Some`), or no longer does (`None`): recorded so that a later execution follows the same
    /// client task. The status stays; the status message becomes `message`.
    FollowClient {
        /// The task whose execution waits.
        task_id: TaskId,
        /// Execution term of the proposer; rejected if older than the record's `exec_term`.
        term: u64,
        /// The client's task, or `None` once its answer is in.
        client_task: Option<crate::ClientTask>,
        /// The new status message; `None` clears it.
        message: Option<String>,
        /// When it changed; `last_updated_at_ms` never moves back before it.
        at_ms: u64,
    },
    /// The worker execution of `term` grants `lease` on a worker task that waits for one
    /// (see [`crate::worker`]): the record's `attempts` becomes the lease's attempt.
    Grant {
        /// The task leased.
        task_id: TaskId,
        /// Execution term of the proposer; rejected if older than the record's `exec_term`.
        term: u64,
        /// The lease granted; its attempt must be the record's `attempts` + 1.
        lease: crate::Lease,
        /// When it was granted; `last_updated_at_ms` never moves back before it.
        at_ms: u64,
    },
    /// A worker's heartbeat: the lease with `token`, live at `at_ms`, runs until `deadline_ms`
    /// (never earlier than it did), and the status message becomes `message` when given.
    Renew {
        /// The leased task.
        task_id: TaskId,
        /// The lease's token; any other (or a lease past its deadline) is rejected.
        token: String,
        /// The new deadline, in ms since the Unix epoch.
        deadline_ms: u64,
        /// A new status message; `None` keeps the current one.
        message: Option<String>,
        /// When the heartbeat arrived, on the proposer's clock.
        at_ms: u64,
    },
    /// A worker completes its leased task: `completed` or `failed` with the outcome, once. The
    /// lease with `token` must be the record's and live at `at_ms`.
    Complete {
        /// The leased task.
        task_id: TaskId,
        /// The lease's token; any other (or a lease past its deadline) is rejected.
        token: String,
        /// `completed` or `failed`.
        status: TaskStatus,
        /// The final status message; `None` clears it.
        message: Option<String>,
        /// What the worker's call produced.
        outcome: Outcome,
        /// When the completion arrived, on the proposer's clock.
        at_ms: u64,
    },
    /// The worker execution of `term` takes back the lease with `token`, whose deadline has
    /// passed at `at_ms` (a renewal applied first makes this a rejection): the task waits for a
    /// worker again, or is finished by the resume policy after.
    Release {
        /// The leased task.
        task_id: TaskId,
        /// Execution term of the proposer; rejected if older than the record's `exec_term`.
        term: u64,
        /// The token of the lease that ran out.
        token: String,
        /// The new status message; `None` clears it.
        message: Option<String>,
        /// When the lease was found run out; after its deadline.
        at_ms: u64,
    },
    /// A subscription starts watching the task (see [`crate::outbox`]): the task's later status
    /// changes are owed to it, and its last one at once when the task is terminal already.
    /// Allowed on terminal records; refused past [`crate::outbox::MAX_WATCHERS`].
    Watch {
        /// The watched task.
        task_id: TaskId,
        /// The subscription, and which changes it is owed.
        watcher: crate::outbox::Watcher,
    },
    /// The shard's leader settles events of its tasks' outboxes (see [`crate::outbox`]): per
    /// task, the (log index of the event, subscription) pairs delivered or given up, and the
    /// subscriptions (ended ones) that stop watching it. One entry for many tasks, so that
    /// settling costs a log entry per batch of deliveries, not per delivery. Allowed on terminal
    /// records; tasks that are gone are skipped.
    Settle {
        /// What is settled, task by task.
        settled: Vec<crate::outbox::Settlement>,
    },
    /// Add or refresh a client's webhook subscription (see [`crate::subscription`]): stored
    /// whole (a refresh replaces the one of the same id), and made to watch the shard's tasks
    /// it covers that are not over yet (a task that is already at its watcher limit is left
    /// out).
    Subscribe {
        /// The subscription as it is from now on.
        subscription: crate::Subscription,
    },
    /// Remove client subscriptions; unknown ids are ignored.
    Unsubscribe {
        /// Their ids.
        ids: Vec<String>,
    },
    /// Restore records from a backup (`taskmesh restore`): each record whose task id the shard
    /// does not hold is inserted as it was backed up, except that a live one's `exec_term` is
    /// reset to 0 so that this shard's leader takes its execution over (by the tool's resume
    /// policy). Records the shard holds already are left as they are: a restore run twice
    /// changes nothing the second time.
    Import {
        /// The backed-up records.
        records: Vec<TaskRecord>,
    },
    /// Delete the listed tasks whose TTL has run out at `now_ms`.
    Expire {
        /// Candidates for deletion; those missing or not expired at `now_ms` are left alone.
        task_ids: Vec<TaskId>,
        /// The instant the TTLs are checked against, in ms since the Unix epoch.
        now_ms: u64,
    },
}

impl Command {
    /// The task a single-task command is about.
    pub fn task_id(&self) -> Option<&str> {
        match self {
            Command::Create { record } => Some(&record.task_id),
            Command::SetStatus { task_id, .. }
            | Command::Finish { task_id, .. }
            | Command::Cancel { task_id, .. }
            | Command::Resume { task_id, .. }
            | Command::Follow { task_id, .. }
            | Command::FollowClient { task_id, .. }
            | Command::Grant { task_id, .. }
            | Command::Renew { task_id, .. }
            | Command::Complete { task_id, .. }
            | Command::Release { task_id, .. }
            | Command::Watch { task_id, .. } => Some(task_id),
            Command::Expire { .. }
            | Command::Import { .. }
            | Command::Settle { .. }
            | Command::Subscribe { .. }
            | Command::Unsubscribe { .. } => None,
        }
    }
}

/// Why a command changed nothing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum Rejection {
    /// No record has the command's task id (never created, or already expired and deleted).
    #[error("task not found")]
    NotFound,
    /// The record is already in the given terminal status, which never changes.
    #[error("task is already in terminal status '{0}'")]
    Terminal(TaskStatus),
    /// The command was proposed under a term older than the record's `exec_term`: a newer
    /// execution has taken over the task.
    #[error("proposed under term {proposed}, but the execution belongs to term {current}")]
    StaleTerm {
        /// The term the command was proposed under.
        proposed: u64,
        /// The record's `exec_term`.
        current: u64,
    },
    /// A lease command whose token is not the task's current lease, or whose lease is past its
    /// deadline (a completion or renewal), or not yet (a release); or a grant on a task that
    /// is leased already.
    #[error("the lease is not the task's current one, or it has run out")]
    StaleLease,
    /// The lifecycle does not allow the change (a create not in `working`, a terminal status
    /// through `SetStatus`, a `Finish` that is neither `completed` nor `failed`).
    #[error("invalid transition: {0}")]
    Invalid(String),
}

/// What applying a command did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Applied {
    /// A new record, or the existing one for a repeated create (`fresh == false`).
    Created {
        /// The stored record: the new one, or the existing one unchanged.
        record: TaskRecord,
        /// Whether this command created the record.
        fresh: bool,
    },
    /// The record after the change.
    Updated {
        /// The changed record, its `updated_index` set to the entry's log index.
        record: TaskRecord,
    },
    /// Nothing changed.
    Rejected(Rejection),
    /// The records an `Import` inserted (those the shard did not hold), as stored.
    Imported {
        /// The inserted records, each with `updated_index` set to the entry's log index.
        records: Vec<TaskRecord>,
    },
    /// A `Subscribe` or `Unsubscribe` was applied.
    Subscribed {
        /// Tasks the subscription started watching (0 for an `Unsubscribe`).
        watching: usize,
        /// The records it made owe an event at once (ended tasks it now watches), as they are
        /// after the entry: their delivery starts from these.
        owing: Vec<TaskRecord>,
    },
    /// A `Settle` changed this many outboxes.
    Settled {
        /// Records whose outbox changed.
        changed: usize,
    },
    /// These ids were deleted.
    Expired {
        /// Ids of the records deleted: those of the command that were present and expired.
        task_ids: Vec<TaskId>,
    },
}

/// How a command appears in log lines: its operation and task id, never its payload.
impl std::fmt::Display for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let op = match self {
            Command::Create { .. } => "create",
            Command::SetStatus { .. } => "set_status",
            Command::Finish { .. } => "finish",
            Command::Cancel { .. } => "cancel",
            Command::Resume { .. } => "resume",
            Command::Follow { .. } => "follow",
            Command::FollowClient { .. } => "follow_client",
            Command::Grant { .. } => "grant",
            Command::Renew { .. } => "renew",
            Command::Complete { .. } => "complete",
            Command::Release { .. } => "release",
            Command::Watch { .. } => "watch",
            Command::Subscribe { .. } => "subscribe",
            Command::Unsubscribe { .. } => "unsubscribe",
            Command::Settle { settled } => {
                return write!(f, "settle({} tasks)", settled.len());
            }
            Command::Expire { task_ids, .. } => {
                return write!(f, "expire({} tasks)", task_ids.len());
            }
            Command::Import { records } => {
                return write!(f, "import({} tasks)", records.len());
            }
        };
        match self.task_id() {
            Some(id) => write!(f, "{op}({id})"),
            None => f.write_str(op),
        }
    }
}
