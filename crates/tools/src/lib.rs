//! Tools: what a `tools/call` runs.
//!
//! A [`Tool`] declares its [`ToolSpec`] (name, schema, `execution.taskSupport`, resume policy)
//! and runs with a [`ToolContext`] that lets it report progress, ask the client for input
//! (`elicitation/create`, `sampling/createMessage`) and notice cancellation. The same tool runs
//! inside a task actor (task-augmented calls) or inline in the gateway (plain calls); the
//! context hides which.

pub mod builtin;

use std::collections::HashMap;
use std::sync::Arc;

use futures::future::BoxFuture;
use serde::Serialize;
use serde_json::{json, Value};
use taskmesh_mcp::{ErrorObject, TaskSupport};
use tokio_util::sync::CancellationToken;

/// What happens to a task whose execution was running on a node that died or restarted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ResumePolicy {
    /// Run the tool again from the start (idempotent tools).
    Rerun,
    /// Mark the task `failed` with a status message that says why.
    Fail,
}

impl ResumePolicy {
    /// The policy's name, as it also serialises: `rerun` or `fail`.
    pub fn as_str(self) -> &'static str {
        match self {
            ResumePolicy::Rerun => "rerun",
            ResumePolicy::Fail => "fail",
        }
    }
}

/// What a tool declares about itself: its `tools/list` entry, whether it runs as a task and
/// what becomes of its task when the execution is lost.
#[derive(Debug, Clone)]
pub struct ToolSpec {
    /// The name the tool is listed and called by (`name`); unique in a registry.
    pub name: String,
    /// Display name for people (`title`).
    pub title: Option<String>,
    /// What the tool does (`description`).
    pub description: Option<String>,
    /// JSON Schema of the call's `arguments` (`inputSchema`).
    pub input_schema: Value,
    /// Whether the tool may, must or must not be called as a task (`execution.taskSupport`).
    pub task_support: TaskSupport,
    /// What becomes of a task of this tool whose execution was lost to a node restart or a
    /// failover.
    pub resume: ResumePolicy,
    /// JSON Schema of the result's `structuredContent` (`outputSchema`), when the tool has one.
    pub output_schema: Option<Value>,
    /// Hints about the tool's behaviour (`annotations`: `readOnlyHint` and the like), as the
    /// tool declares them.
    pub annotations: Option<Value>,
}

impl ToolSpec {
    /// The `tools/list` entry. `execution.taskSupport` is always present.
    pub fn to_wire(&self, with_execution: bool) -> Value {
        let mut v = json!({
            "name": self.name,
            "inputSchema": self.input_schema,
        });
        if let Some(title) = &self.title {
            v["title"] = json!(title);
        }
        if let Some(description) = &self.description {
            v["description"] = json!(description);
        }
        if let Some(schema) = &self.output_schema {
            v["outputSchema"] = schema.clone();
        }
        if let Some(annotations) = &self.annotations {
            v["annotations"] = annotations.clone();
        }
        if with_execution {
            v["execution"] = json!({ "taskSupport": self.task_support });
        }
        v
    }
}

/// What a tool run produced: a `CallToolResult` (possibly `isError: true`) or a JSON-RPC error.
pub type ToolResult = Result<Value, ErrorObject>;

/// The side channel from a running tool to its client.
pub trait ToolIo: Send + Sync {
    /// `notifications/progress` on the original progress token (dropped when there is none).
    fn progress(&self, progress: f64, total: Option<f64>, message: Option<String>);
    /// Send a request to the client and wait for its answer.
    fn request(&self, method: &'static str, params: Value) -> BoxFuture<'static, ToolResult>;
}

/// What a running tool gets besides its arguments: cancellation, the side channel to its
/// client and what that client declared it can answer.
#[derive(Clone)]
pub struct ToolContext {
    /// Cancelled when the call or task is cancelled or its execution stops; the tool should
    /// then return.
    pub cancel: CancellationToken,
    /// The side channel to the client: progress and requests.
    pub io: Arc<dyn ToolIo>,
    /// Whether the caller supplied a progress token.
    pub has_progress_token: bool,
    /// The client declared the `elicitation` capability.
    pub client_elicitation: bool,
    /// The client declared the `sampling` capability.
    pub client_sampling: bool,
}

/// A tool that `tools/call` can run, as a task or as a plain call.
pub trait Tool: Send + Sync {
    /// The tool's declaration.
    fn spec(&self) -> &ToolSpec;
    /// Check the arguments before anything is created; errors are `-32602` naming the argument.
    fn validate(&self, args: &serde_json::Map<String, Value>) -> Result<(), ErrorObject>;
    /// Run the tool on arguments that passed [`Tool::validate`]: a `CallToolResult` or a JSON-RPC
    /// error, which for a task becomes its outcome.
    fn call(
        &self,
        args: serde_json::Map<String, Value>,
        ctx: ToolContext,
    ) -> BoxFuture<'static, ToolResult>;
}

/// The tools this node serves, in a stable order.
#[derive(Clone, Default)]
pub struct ToolRegistry {
    order: Vec<Arc<dyn Tool>>,
    by_name: HashMap<String, Arc<dyn Tool>>,
}

impl ToolRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// A registry of the built-in tools, in the order of [`builtin::all`].
    pub fn with_builtins() -> Self {
        let mut r = Self::new();
        for t in builtin::all() {
            r.register(t);
        }
        r
    }

    /// Add `tool`; one registered earlier under the same name is replaced, keeping its place in
    /// the order.
    pub fn register(&mut self, tool: Arc<dyn Tool>) {
        let name = tool.spec().name.clone();
        if self.by_name.insert(name.clone(), tool.clone()).is_none() {
            self.order.push(tool);
        } else if let Some(slot) = self.order.iter_mut().find(|t| t.spec().name == name) {
            *slot = tool;
        }
    }

    /// The tool named `name`, if registered.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.by_name.get(name)
    }

    /// Every registered tool, in registration order (the order of `tools/list`).
    pub fn all(&self) -> &[Arc<dyn Tool>] {
        &self.order
    }

    /// How many tools are registered.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// Whether no tool is registered.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }
}

/// A `CallToolResult` with one text block.
pub fn text_result(text: impl Into<String>, is_error: bool) -> Value {
    json!({
        "content": [{ "type": "text", "text": text.into() }],
        "isError": is_error,
    })
}

/// The first text block of a `CallToolResult`, for status messages.
pub fn first_text(result: &Value) -> Option<&str> {
    result
        .get("content")?
        .as_array()?
        .iter()
        .find_map(|c| (c.get("type")?.as_str()? == "text").then(|| c.get("text")?.as_str())?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str) -> ToolSpec {
        ToolSpec {
            name: name.to_string(),
            title: None,
            description: None,
            input_schema: json!({"type": "object"}),
            task_support: TaskSupport::Optional,
            resume: ResumePolicy::Fail,
            output_schema: None,
            annotations: None,
        }
    }

    /// A tool's entry carries only what it declares: a name made at run time, no title or
    /// description when it has none, its output schema and annotations as given.
    #[test]
    fn a_tools_list_entry_has_what_the_tool_declares() {
        let bare = spec(&format!("up_{}", 7)).to_wire(true);
        assert_eq!(
            bare,
            json!({"name": "up_7", "inputSchema": {"type": "object"},
                   "execution": {"taskSupport": "optional"}})
        );
        let mut full = spec("echo");
        full.title = Some("Echo".into());
        full.description = Some("Says it back.".into());
        full.output_schema = Some(json!({"type": "object", "properties": {"text": {}}}));
        full.annotations = Some(json!({"readOnlyHint": true}));
        let v = full.to_wire(false);
        assert_eq!(v["title"], "Echo");
        assert_eq!(v["description"], "Says it back.");
        assert_eq!(v["outputSchema"]["type"], "object");
        assert_eq!(v["annotations"]["readOnlyHint"], true);
        assert!(v.get("execution").is_none());
    }
}
