//! The status, status message and stored outcome a tool run ends with: a pure function of the
//! tool's result and the size limit on stored outcomes. A task actor applies it to its tool's
//! result when the tool finishes ([`TaskMsg::Done`](super::TaskMsg::Done)).

use serde_json::Value;
use taskmesh_mcp::jsonrpc;
use taskmesh_task::{Outcome, TaskStatus};
use taskmesh_tools::{first_text, ToolResult};

/// The terminal status, status message and stored outcome of a tool run. An outcome of more than
/// `max_result_bytes` (its stored JSON) is not kept: the task fails with a message that says so.
pub fn finish_of(result: &ToolResult, max_result_bytes: usize) -> (TaskStatus, String, Outcome) {
    let (status, message, outcome) = outcome_of(result);
    let size = match &outcome {
        Outcome::Result { json } => json.len(),
        Outcome::Error {
            message, data_json, ..
        } => message.len() + data_json.as_ref().map_or(0, String::len),
    };
    if size <= max_result_bytes {
        return (status, message, outcome);
    }
    let why = format!(
        "The tool's result of {size} bytes exceeds the limit of {max_result_bytes} bytes \
         (setting tasks.max_result_bytes)."
    );
    (
        TaskStatus::Failed,
        why.clone(),
        Outcome::Error {
            code: jsonrpc::INTERNAL_ERROR,
            message: why,
            data_json: None,
        },
    )
}

fn outcome_of(result: &ToolResult) -> (TaskStatus, String, Outcome) {
    match result {
        Ok(v) => {
            let is_error = v.get("isError").and_then(Value::as_bool).unwrap_or(false);
            let outcome = Outcome::Result {
                json: v.to_string(),
            };
            if is_error {
                let why = first_text(v).unwrap_or("the tool reported an error");
                (
                    TaskStatus::Failed,
                    format!("The tool failed: {why}"),
                    outcome,
                )
            } else {
                (TaskStatus::Completed, "The task completed.".into(), outcome)
            }
        }
        Err(e) => (
            TaskStatus::Failed,
            format!(
                "The request failed with JSON-RPC error {}: {}",
                e.code, e.message
            ),
            Outcome::Error {
                code: e.code,
                message: e.message.clone(),
                data_json: e.data.as_ref().map(|d| d.to_string()),
            },
        ),
    }
}
