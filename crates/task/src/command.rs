//! The commands a shard's log carries, and what applying one produced.

use serde::{Deserialize, Serialize};

use crate::{Outcome, TaskId, TaskRecord, TaskStatus};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Command {
    /// Create a task. Idempotent by task id: a retry returns the existing record unchanged.
    Create { record: TaskRecord },
    /// A non-terminal status change decided by the execution of `term`
    /// (`working` <-> `input_required`, or a new status message).
    SetStatus {
        task_id: TaskId,
        term: u64,
        status: TaskStatus,
        message: Option<String>,
        at_ms: u64,
    },
    /// The execution of `term` finished: `completed` or `failed` with its outcome.
    Finish {
        task_id: TaskId,
        term: u64,
        status: TaskStatus,
        message: Option<String>,
        outcome: Outcome,
        at_ms: u64,
    },
    /// `tasks/cancel`: becomes `cancelled` unless already terminal.
    Cancel {
        task_id: TaskId,
        message: String,
        at_ms: u64,
    },
    /// A leader of `term` restarts the execution of a live task (resume policy `rerun`).
    Resume {
        task_id: TaskId,
        term: u64,
        message: Option<String>,
        at_ms: u64,
    },
    /// Delete the listed tasks whose TTL has run out at `now_ms`.
    Expire { task_ids: Vec<TaskId>, now_ms: u64 },
}

impl Command {
    /// The task a single-task command is about.
    pub fn task_id(&self) -> Option<&str> {
        match self {
            Command::Create { record } => Some(&record.task_id),
            Command::SetStatus { task_id, .. }
            | Command::Finish { task_id, .. }
            | Command::Cancel { task_id, .. }
            | Command::Resume { task_id, .. } => Some(task_id),
            Command::Expire { .. } => None,
        }
    }
}

/// Why a command changed nothing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum Rejection {
    #[error("task not found")]
    NotFound,
    #[error("task is already in terminal status '{0}'")]
    Terminal(TaskStatus),
    #[error("proposed under term {proposed}, but the execution belongs to term {current}")]
    StaleTerm { proposed: u64, current: u64 },
    #[error("invalid transition: {0}")]
    Invalid(String),
}

/// What applying a command did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Applied {
    /// A new record, or the existing one for a repeated create (`fresh == false`).
    Created { record: TaskRecord, fresh: bool },
    /// The record after the change.
    Updated { record: TaskRecord },
    /// Nothing changed.
    Rejected(Rejection),
    /// These ids were deleted.
    Expired { task_ids: Vec<TaskId> },
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
            Command::Expire { task_ids, .. } => {
                return write!(f, "expire({} tasks)", task_ids.len());
            }
        };
        match self.task_id() {
            Some(id) => write!(f, "{op}({id})"),
            None => f.write_str(op),
        }
    }
}
