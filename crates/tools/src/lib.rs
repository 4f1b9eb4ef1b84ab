//! Tools: what a `tools/call` runs.
//!
//! A [`Tool`] declares its [`ToolSpec`] (name, schema, `execution.taskSupport`, resume policy)
//! and runs with a [`ToolContext`] that lets it report progress, ask the client for input
//! (`elicitation/create`, `sampling/createMessage`) and notice cancellation. The same tool runs
//! inside a task actor (task-augmented calls) or inline in the gateway (plain calls); the
//! context hides which.

pub mod builtin;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, RwLock};

use futures::future::BoxFuture;
use serde::Serialize;
use serde_json::{json, Value};
use taskmesh_mcp::notify::LogMessage;
use taskmesh_mcp::{ErrorObject, TaskSupport};
use tokio::sync::watch;
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
    /// A spec with no title, description, output schema or annotations; [`ToolSpec::titled`]
    /// and [`ToolSpec::described`] add the first two.
    pub fn new(
        name: impl Into<String>,
        input_schema: Value,
        task_support: TaskSupport,
        resume: ResumePolicy,
    ) -> Self {
        Self {
            name: name.into(),
            title: None,
            description: None,
            input_schema,
            task_support,
            resume,
            output_schema: None,
            annotations: None,
        }
    }

    /// The same spec with the display name `title`.
    pub fn titled(mut self, title: impl Into<String>) -> Self {
        self.title = Some(title.into());
        self
    }

    /// The same spec with the description `description`.
    pub fn described(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }

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

/// A [`ToolResult`] to come: a tool's run, or the client's answer to a request of the tool.
pub type ToolFuture = BoxFuture<'static, ToolResult>;

/// The side channel from a running tool to its client.
pub trait ToolIo: Send + Sync {
    /// `notifications/progress` on the original progress token (dropped when there is none).
    fn progress(&self, progress: f64, total: Option<f64>, message: Option<String>);
    /// Send a request to the client and wait for its answer.
    fn request(&self, method: &'static str, params: Value) -> ToolFuture;
    /// Send a request under `key`, a name of the tool's that is unique in the call: on
    /// protocol 2026-07-28 a plain call asks in `inputRequests` rounds whose answers come back
    /// by key (and [`ToolContext::ask`] finds answers given earlier by it). Elsewhere the key
    /// is not seen: the default is [`ToolIo::request`].
    fn ask(&self, key: &str, method: &'static str, params: Value) -> ToolFuture {
        let _ = key;
        self.request(method, params)
    }
    /// `notifications/message` to the client, sent only if the client's session asked for messages of that level or above
    /// (`logging/setLevel`; all of them when it never did). Done once it is handed on.
    fn log(&self, message: LogMessage) -> BoxFuture<'static, ()>;
    /// End the connection that carries the call's messages now, on purpose: the client
    /// reconnects (`Last-Event-ID`) and gets what follows. Only a 2025-11-25 plain call's
    /// resumable stream has one to end; elsewhere (the default) nothing happens.
    fn close_connection(&self) {}
    /// Record, with the task, that an upstream server runs the call as its task `upstream_task`
    /// (see [`ToolContext::upstream_task`]); done once it is durable. A plain call has nothing
    /// to record it in: the default does nothing.
    fn record_upstream_task(
        &self,
        upstream_task: String,
    ) -> BoxFuture<'static, Result<(), String>> {
        let _ = upstream_task;
        Box::pin(async { Ok(()) })
    }
}

/// What a running tool gets besides its arguments: cancellation, the side channel to its
/// client and what that client declared it can answer.
#[derive(Clone)]
pub struct ToolContext {
    /// Cancelled when the call or task is cancelled or its execution stops; the tool should
    /// then return.
    pub cancel: CancellationToken,
    /// Fired before `cancel` when the call or task itself ends (cancelled, expired, finished
    /// otherwise), not when its execution is handed over to another one (leadership moved,
    /// node shutdown). Work the tool left running elsewhere (an upstream's task) is to be
    /// stopped only then. The same token as `cancel` for a plain call.
    pub ended: CancellationToken,
    /// The side channel to the client: progress and requests.
    pub io: Arc<dyn ToolIo>,
    /// Whether the caller supplied a progress token.
    pub has_progress_token: bool,
    /// The client declared the `elicitation` capability.
    pub client_elicitation: bool,
    /// The client declared the `sampling` capability.
    pub client_sampling: bool,
    /// The principal the call or task is bound to (`anonymous` without authentication).
    pub principal: String,
    /// The upstream task an earlier execution of this task handed the call to
    /// ([`ToolIo::record_upstream_task`]): the tool follows it rather than call again. `None`
    /// for a plain call and a first execution.
    pub upstream_task: Option<String>,
    /// What the client answered before the call ran, by the key of the request answered
    /// ([`ToolContext::ask`] returns it at once): the questions a tool asks before its task is
    /// created ([`Tool::ask_first`]), or the answers of earlier rounds of a protocol 2026-07-28
    /// plain call. Empty for most calls.
    pub answers: Arc<serde_json::Map<String, Value>>,
    /// The W3C `traceparent` of the span the call runs in, when its request is traced
    /// (sampled): what the tool calls elsewhere (an upstream MCP server) carries it on. `None`
    /// for most calls.
    pub traceparent: Option<String>,
}

impl ToolContext {
    /// Ask the client `method` with `params` under `key` ([`ToolIo::ask`]); an answer the
    /// client gave under that key already ([`ToolContext::answers`]) is returned at once.
    pub fn ask(&self, key: &str, method: &'static str, params: Value) -> ToolFuture {
        if let Some(a) = self.answers.get(key) {
            let a = a.clone();
            return Box::pin(async move { Ok(a) });
        }
        self.io.ask(key, method, params)
    }
}

/// A request a tool asks the client before its task is created ([`Tool::ask_first`]).
#[derive(Debug, Clone)]
pub struct Question {
    /// The key the answer comes back by, and that the tool asks it by ([`ToolContext::ask`]).
    pub key: String,
    /// `elicitation/create`, `sampling/createMessage` or `roots/list`.
    pub method: &'static str,
    /// The request's params.
    pub params: Value,
}

/// A tool that `tools/call` can run, as a task or as a plain call.
pub trait Tool: Send + Sync {
    /// The tool's declaration.
    fn spec(&self) -> &ToolSpec;
    /// Check the arguments before anything is created; errors are `-32602` naming the argument.
    fn validate(&self, args: &serde_json::Map<String, Value>) -> Result<(), ErrorObject>;
    /// Run the tool on arguments that passed [`Tool::validate`]: a `CallToolResult` or a JSON-RPC
    /// error, which for a task becomes its outcome.
    fn call(&self, args: serde_json::Map<String, Value>, ctx: ToolContext) -> ToolFuture;
    /// Whether a call may be run again from the start to take the client's answers (protocol
    /// 2026-07-28 plain calls ask in rounds, each a new run that gets the answers so far). An
    /// upstream's tool cannot: its call would be made again.
    fn reruns_for_input(&self) -> bool {
        true
    }
    /// Whether the tool's work is run by workers that pull it (the worker API): its calls are
    /// always tasks, whose executions wait for a worker's lease rather than call
    /// [`Tool::call`]. False by default.
    fn runs_on_workers(&self) -> bool {
        false
    }
    /// The questions to settle before a task of this tool is created (protocol 2026-07-28 with
    /// the tasks extension: `inputRequests` rounds on `tools/call`, then the task, whose
    /// execution gets the answers in [`ToolContext::answers`]). Elsewhere the tool asks them as
    /// it runs, by the same keys. None by default.
    fn ask_first(&self) -> &[Question] {
        &[]
    }
}

/// The tools this node serves, in a stable order, and what changes them.
///
/// Tools come from sources: the built-in ones ([`ToolRegistry::register`]) and each upstream
/// server, whose whole set [`ToolRegistry::set_source`] replaces when it is listed again (or
/// withdrawn when it cannot be reached). Readers take a [`Listing`], a snapshot that stays
/// consistent while the registry changes; [`ToolRegistry::changes`] says when it did, so that
/// clients can be sent `notifications/tools/list_changed`. A name belongs to the first source
/// that served it: another source's tool of the same name is left out.
pub struct ToolRegistry {
    listing: RwLock<Arc<Listing>>,
    changes: watch::Sender<u64>,
    /// What each source reports about itself, for `GET /status`.
    sources: Mutex<BTreeMap<String, Value>>,
}

/// The tools served at one moment, in `tools/list` order.
#[derive(Clone, Default)]
pub struct Listing {
    order: Vec<(String, Arc<dyn Tool>)>,
    by_name: HashMap<String, Arc<dyn Tool>>,
    /// Every source that ever served tools, in the order it first did (built-in tools before
    /// all): a source's tools stay in its place, also when it comes back after a withdrawal.
    sources: Vec<String>,
}

impl Listing {
    /// The tool named `name`, if served.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.by_name.get(name)
    }

    /// Every tool, in `tools/list` order.
    pub fn tools(&self) -> impl Iterator<Item = &Arc<dyn Tool>> {
        self.order.iter().map(|(_, t)| t)
    }

    /// How many tools are served.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// Whether no tool is served.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// The place of `source` in the order of sources (the built-in tools first).
    fn rank(&self, source: &str) -> usize {
        if source == BUILTIN {
            return 0;
        }
        self.sources
            .iter()
            .position(|s| s == source)
            .map_or(usize::MAX, |i| i + 1)
    }

    /// The `tools/list` entries, for telling whether a change changed anything.
    fn wire(&self) -> Vec<Value> {
        self.tools().map(|t| t.spec().to_wire(true)).collect()
    }
}

/// The source of the built-in tools.
const BUILTIN: &str = "";

impl Default for ToolRegistry {
    fn default() -> Self {
        Self {
            listing: RwLock::new(Arc::new(Listing::default())),
            changes: watch::Sender::new(0),
            sources: Mutex::new(BTreeMap::new()),
        }
    }
}

impl ToolRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// A registry of the built-in tools, in the order of [`builtin::all`].
    pub fn with_builtins() -> Self {
        let r = Self::new();
        for t in builtin::all() {
            r.register(t);
        }
        r
    }

    /// Add a built-in `tool`, after the built-in tools already there and before every other
    /// source's; one registered earlier under the same name is replaced, keeping its place.
    pub fn register(&self, tool: Arc<dyn Tool>) {
        self.update(|l| {
            let name = tool.spec().name.clone();
            if l.by_name.insert(name.clone(), tool.clone()).is_none() {
                let at = l
                    .order
                    .iter()
                    .position(|(s, _)| s != BUILTIN)
                    .unwrap_or(l.order.len());
                l.order.insert(at, (BUILTIN.to_string(), tool));
            } else if let Some(slot) = l.order.iter_mut().find(|(_, t)| t.spec().name == name) {
                *slot = (BUILTIN.to_string(), tool);
            }
        });
    }

    /// Serve exactly `tools` for `source` (an upstream's name, not empty): its earlier tools are
    /// replaced, in the source's place (after the built-in tools and the sources that first
    /// served tools before it; at the end for a new source); an empty list withdraws them, the
    /// source keeping its place for when it serves again. Returns the names left out because
    /// another source serves them.
    pub fn set_source(&self, source: &str, tools: Vec<Arc<dyn Tool>>) -> Vec<String> {
        let mut left_out = Vec::new();
        self.update(|l| {
            if !l.sources.iter().any(|s| s == source) {
                l.sources.push(source.to_string());
            }
            for (s, t) in &l.order {
                if s == source {
                    l.by_name.remove(&t.spec().name);
                }
            }
            l.order.retain(|(s, _)| s != source);
            let mine = l.rank(source);
            let before = l
                .order
                .iter()
                .position(|(s, _)| l.rank(s) > mine)
                .unwrap_or(l.order.len());
            let mut added = Vec::new();
            for t in tools {
                let name = t.spec().name.clone();
                if l.by_name.contains_key(&name) {
                    left_out.push(name);
                    continue;
                }
                l.by_name.insert(name, t.clone());
                added.push((source.to_string(), t));
            }
            l.order.splice(before..before, added);
        });
        left_out
    }

    /// Apply `change` to a copy of the listing and publish it; readers holding the old one keep
    /// it. A change that leaves `tools/list` as it was is not announced.
    fn update(&self, change: impl FnOnce(&mut Listing)) {
        let mut listing = self.listing.write().unwrap_or_else(|e| e.into_inner());
        let mut next = Listing::clone(&listing);
        change(&mut next);
        let changed = next.wire() != listing.wire();
        *listing = Arc::new(next);
        drop(listing);
        if changed {
            self.changes.send_modify(|v| *v += 1);
        }
    }

    /// The tools served now.
    pub fn snapshot(&self) -> Arc<Listing> {
        self.listing
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The tool named `name`, if served now.
    pub fn get(&self, name: &str) -> Option<Arc<dyn Tool>> {
        self.snapshot().get(name).cloned()
    }

    /// How many tools are served now.
    pub fn len(&self) -> usize {
        self.snapshot().len()
    }

    /// Whether no tool is served now.
    pub fn is_empty(&self) -> bool {
        self.snapshot().is_empty()
    }

    /// Bumped each time what `tools/list` shows changes.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Record what `source` reports about itself (its state, for `GET /status`).
    pub fn report_source(&self, source: &str, status: Value) {
        self.sources
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(source.to_string(), status);
    }

    /// What every source last reported, in name order.
    pub fn source_reports(&self) -> Vec<Value> {
        self.sources
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect()
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
        ToolSpec::new(
            name,
            json!({"type": "object"}),
            TaskSupport::Optional,
            ResumePolicy::Fail,
        )
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

    /// A tool with only a spec, for the registry's tests.
    struct Named(ToolSpec);

    impl Tool for Named {
        fn spec(&self) -> &ToolSpec {
            &self.0
        }
        fn validate(&self, _: &serde_json::Map<String, Value>) -> Result<(), ErrorObject> {
            Ok(())
        }
        fn call(&self, _: serde_json::Map<String, Value>, _: ToolContext) -> ToolFuture {
            Box::pin(async { Ok(text_result("", false)) })
        }
    }

    fn tools(names: &[&str]) -> Vec<Arc<dyn Tool>> {
        names
            .iter()
            .map(|n| Arc::new(Named(spec(n))) as Arc<dyn Tool>)
            .collect()
    }

    fn names(r: &ToolRegistry) -> Vec<String> {
        r.snapshot()
            .tools()
            .map(|t| t.spec().name.clone())
            .collect()
    }

    /// A source's tools are replaced as a whole in their place; a name another source has is
    /// left out; a snapshot taken before a change keeps what it saw; only changes of what
    /// `tools/list` shows are announced.
    #[test]
    fn sources_replace_their_tools_in_place_and_announce_real_changes() {
        let r = ToolRegistry::new();
        let mut changes = r.changes();
        r.register(tools(&["greet"]).remove(0));
        assert!(r.set_source("a", tools(&["a1", "a2"])).is_empty());
        assert!(r.set_source("b", tools(&["b1"])).is_empty());
        assert_eq!(names(&r), ["greet", "a1", "a2", "b1"]);
        assert!(changes.has_changed().unwrap());
        changes.borrow_and_update();

        let before = r.snapshot();
        assert_eq!(
            r.set_source("a", tools(&["a3", "greet", "b1"])),
            ["greet", "b1"]
        );
        assert_eq!(names(&r), ["greet", "a3", "b1"]);
        assert_eq!(before.len(), 4, "an earlier snapshot is unchanged");
        assert!(r.get("a1").is_none() && r.get("a3").is_some());
        assert!(changes.has_changed().unwrap());
        changes.borrow_and_update();

        // The same tools again: nothing to announce.
        r.set_source("a", tools(&["a3"]));
        assert!(!changes.has_changed().unwrap());

        r.set_source("a", Vec::new());
        assert_eq!(names(&r), ["greet", "b1"]);
        assert!(changes.has_changed().unwrap());
        changes.borrow_and_update();
        r.set_source("a", tools(&["a1"]));
        assert_eq!(
            names(&r),
            ["greet", "a1", "b1"],
            "a source back after a withdrawal is in its place again"
        );
        r.register(tools(&["late"]).remove(0));
        assert_eq!(names(&r), ["greet", "late", "a1", "b1"]);
    }
}
