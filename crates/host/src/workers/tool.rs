//! A tool that workers serve, as the tool registry holds it ([`WorkerTool`]), the checks of a
//! declared tool at registration, and the stand-in for a tool no live worker declares here.

use std::sync::Arc;

use serde_json::{Map, Value};
use taskmesh_mcp::{ErrorObject, TaskSupport};
use taskmesh_tools::{ResumePolicy, Tool, ToolContext, ToolFuture, ToolSpec};

use super::{Declared, WorkerError, MAX_TOOL_NAME};

/// A tool served by workers, as the registry holds it: its declaration. Its calls are tasks
/// whose executions wait for a lease; [`Tool::call`] is never the way it runs.
pub(crate) struct WorkerTool {
    pub(crate) spec: ToolSpec,
}

impl Tool for WorkerTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn validate(&self, args: &Map<String, Value>) -> Result<(), ErrorObject> {
        let required = self
            .spec
            .input_schema
            .get("required")
            .and_then(Value::as_array);
        if let Some(missing) = required
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .find(|k| !args.contains_key(*k))
        {
            return Err(ErrorObject::invalid_params(format!(
                "Invalid params: missing required argument '{missing}'"
            )));
        }
        Ok(())
    }

    fn call(&self, _args: Map<String, Value>, _ctx: ToolContext) -> ToolFuture {
        let name = self.spec.name.clone();
        Box::pin(async move {
            Err(ErrorObject::internal(format!(
                "tool '{name}' is run by workers, as a task"
            )))
        })
    }

    fn reruns_for_input(&self) -> bool {
        false
    }

    fn runs_on_workers(&self) -> bool {
        true
    }
}

/// Check one declared tool: its name, and that its schemas are JSON Schema objects.
pub(super) fn check_declared(d: &Declared) -> Result<(), WorkerError> {
    let name = &d.spec.name;
    let name_ok = !name.is_empty()
        && name.len() <= MAX_TOOL_NAME
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if !name_ok {
        return Err(WorkerError::Invalid(format!(
            "tool name '{name}' must be 1 to {MAX_TOOL_NAME} characters of A-Z, a-z, 0-9, '_', '-' and '.'"
        )));
    }
    let object_schema = |s: &Value| {
        s.as_object()
            .is_some_and(|o| o.get("type").and_then(Value::as_str) == Some("object"))
    };
    if !object_schema(&d.spec.input_schema) {
        return Err(WorkerError::Invalid(format!(
            "tool '{name}': inputSchema must be a JSON Schema object with \"type\": \"object\""
        )));
    }
    if let Some(required) = d.spec.input_schema.get("required") {
        if !required
            .as_array()
            .is_some_and(|r| r.iter().all(Value::is_string))
        {
            return Err(WorkerError::Invalid(format!(
                "tool '{name}': inputSchema.required must be an array of strings"
            )));
        }
    }
    if let Some(out) = &d.spec.output_schema {
        if !object_schema(out) {
            return Err(WorkerError::Invalid(format!(
                "tool '{name}': outputSchema must be a JSON Schema object with \"type\": \"object\""
            )));
        }
    }
    if d.spec.annotations.as_ref().is_some_and(|a| !a.is_object()) {
        return Err(WorkerError::Invalid(format!(
            "tool '{name}': annotations must be a JSON object"
        )));
    }
    Ok(())
}

/// The spec of a tool that workers serve, for a task whose tool no live worker declares here
/// (its execution waits for one all the same): what its record says.
pub(crate) fn placeholder(tool: &str, rerun: bool) -> Arc<dyn Tool> {
    Arc::new(WorkerTool {
        spec: ToolSpec::new(
            tool,
            serde_json::json!({ "type": "object" }),
            TaskSupport::Optional,
            if rerun {
                ResumePolicy::Rerun
            } else {
                ResumePolicy::Fail
            },
        ),
    })
}
