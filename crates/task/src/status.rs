//! The status state machine of MCP 2025-11-25:
//!
//! ```text
//! [*] -> working
//! working        -> input_required | completed | failed | cancelled
//! input_required -> working        | completed | failed | cancelled
//! completed | failed | cancelled: terminal, never change
//! ```

use serde::{Deserialize, Serialize};

/// Where a task is in its lifecycle; serialised in snake case (`input_required`), as in MCP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    /// The execution is running. Every task starts here; a resumed one returns here.
    Working,
    /// The execution waits for the client to answer a request it sent (e.g. an elicitation).
    InputRequired,
    /// Terminal: the tool call succeeded; the outcome holds its result.
    Completed,
    /// Terminal: the tool call failed (an error, or a result with `isError`) or could not run to
    /// its end; the outcome says why.
    Failed,
    /// Terminal: `tasks/cancel` stopped the task before it ended.
    Cancelled,
}

impl TaskStatus {
    /// Every status, non-terminal ones first.
    pub const ALL: [TaskStatus; 5] = [
        TaskStatus::Working,
        TaskStatus::InputRequired,
        TaskStatus::Completed,
        TaskStatus::Failed,
        TaskStatus::Cancelled,
    ];

    /// `completed`, `failed` and `cancelled` are terminal and sticky.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            TaskStatus::Completed | TaskStatus::Failed | TaskStatus::Cancelled
        )
    }

    /// The MCP name of the status (`working`, `input_required`, ...), also its serde form.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Working => "working",
            TaskStatus::InputRequired => "input_required",
            TaskStatus::Completed => "completed",
            TaskStatus::Failed => "failed",
            TaskStatus::Cancelled => "cancelled",
        }
    }
}

impl std::fmt::Display for TaskStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
