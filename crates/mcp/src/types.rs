//! MCP message shapes used by taskmesh, per protocol version.

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// The protocol version with the tasks utility.
pub const V2025_11_25: &str = "2025-11-25";
/// Older versions served as plain tools servers (no `tasks` capability).
pub const V2025_06_18: &str = "2025-06-18";
/// The oldest version served, also as a plain tools server.
pub const V2025_03_26: &str = "2025-03-26";
/// Every version this server speaks, newest first.
pub const SUPPORTED_VERSIONS: [&str; 3] = [V2025_11_25, V2025_06_18, V2025_03_26];

/// `_meta` key that ties a message to a task.
pub const META_RELATED_TASK: &str = "io.modelcontextprotocol/related-task";
/// Optional `CreateTaskResult._meta` key with an interim text for the model.
pub const META_MODEL_IMMEDIATE_RESPONSE: &str = "io.modelcontextprotocol/model-immediate-response";

/// Whether `v` is a protocol version this server speaks.
pub fn is_supported_version(v: &str) -> bool {
    SUPPORTED_VERSIONS.contains(&v)
}

/// Whether a negotiated version carries the 2025-11-25 tasks utility.
pub fn version_has_tasks(v: &str) -> bool {
    v == V2025_11_25
}

/// Pick the version to answer `initialize` with: the client's when supported, else our newest.
pub fn negotiate_version(requested: &str) -> &'static str {
    SUPPORTED_VERSIONS
        .iter()
        .copied()
        .find(|v| *v == requested)
        .unwrap_or(V2025_11_25)
}

/// Wire status strings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WireStatus {
    /// `working`: the task runs.
    Working,
    /// `input_required`: the task waits for the client to answer a request it sent.
    InputRequired,
    /// `completed`: the tool finished with a result.
    Completed,
    /// `failed`: the task ended without success: a tool error (`isError: true`), a JSON-RPC
    /// error, or an execution that could not go on.
    Failed,
    /// `cancelled`: the task was cancelled by `tasks/cancel`; it has no result.
    Cancelled,
}

/// The flat `Task` object (`tasks/get`, `tasks/cancel`, status notifications, list entries;
/// nested under `task` in `CreateTaskResult`). `ttl` is always emitted, `null` = unlimited.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Task {
    /// `taskId`: the task's id.
    pub task_id: String,
    /// `status`: where the task stands.
    pub status: WireStatus,
    /// `statusMessage`: text describing the status, for people; left out when `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_message: Option<String>,
    /// `createdAt`: when the task was created, RFC 3339 in UTC with milliseconds.
    pub created_at: String,
    /// `lastUpdatedAt`: when the task last changed, RFC 3339 in UTC with milliseconds.
    pub last_updated_at: String,
    /// `ttl`: milliseconds from creation after which the task may be deleted; `null` =
    /// unlimited.
    #[serde(default)]
    pub ttl: Option<u64>,
    /// `pollInterval`: milliseconds the client should wait between `tasks/get` polls; left
    /// out when `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub poll_interval: Option<u64>,
}

/// `CreateTaskResult`: the task nested under `task`. `T` is how the task is held: a [`Task`]
/// as read, or a server's own view that serialises as one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CreateTaskResult<T = Task> {
    /// The task just created.
    pub task: T,
}

/// `ListTasksResult`; `T` as in [`CreateTaskResult`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListTasksResult<T = Task> {
    /// The tasks of this page.
    pub tasks: Vec<T>,
    /// `nextCursor`: pass it to `tasks/list` for the next page; absent on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// `execution.taskSupport` of a tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskSupport {
    /// `forbidden`: the tool cannot be called as a task; with 2025-11-25 a call with `task`
    /// gets `-32601`.
    Forbidden,
    /// `optional`: the tool runs either as a task or as a plain call.
    Optional,
    /// `required`: the tool must be called as a task; with 2025-11-25 a call without `task`
    /// gets `-32601` (older versions call it plainly).
    Required,
}

/// Server capabilities for `initialize`. `tasks` only for 2025-11-25; `tasks.list` only when
/// tasks can be scoped to an authenticated principal.
pub fn server_capabilities(with_tasks: bool, with_list: bool) -> Value {
    let mut caps = json!({
        "tools": { "listChanged": true },
        "logging": {},
    });
    if with_tasks {
        let mut tasks = json!({
            "cancel": {},
            "requests": { "tools": { "call": {} } }
        });
        if with_list {
            tasks["list"] = json!({});
        }
        caps["tasks"] = tasks;
    }
    caps
}

/// The severity of a log message (`notifications/message`), as `logging/setLevel` names it
/// (RFC 5424's levels), least severe first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LogLevel {
    /// `debug`
    Debug,
    /// `info`
    Info,
    /// `notice`
    Notice,
    /// `warning`
    Warning,
    /// `error`
    Error,
    /// `critical`
    Critical,
    /// `alert`
    Alert,
    /// `emergency`
    Emergency,
}

impl LogLevel {
    /// Every level, least severe first.
    pub const ALL: [LogLevel; 8] = [
        LogLevel::Debug,
        LogLevel::Info,
        LogLevel::Notice,
        LogLevel::Warning,
        LogLevel::Error,
        LogLevel::Critical,
        LogLevel::Alert,
        LogLevel::Emergency,
    ];

    /// The level of its wire name.
    pub fn parse(name: &str) -> Option<LogLevel> {
        LogLevel::ALL.into_iter().find(|l| l.as_str() == name)
    }

    /// Its wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Notice => "notice",
            LogLevel::Warning => "warning",
            LogLevel::Error => "error",
            LogLevel::Critical => "critical",
            LogLevel::Alert => "alert",
            LogLevel::Emergency => "emergency",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_levels_parse_and_order_by_severity() {
        for l in LogLevel::ALL {
            assert_eq!(LogLevel::parse(l.as_str()), Some(l));
        }
        assert!(LogLevel::Debug < LogLevel::Warning && LogLevel::Alert < LogLevel::Emergency);
        assert_eq!(LogLevel::parse("WARNING"), None);
        assert_eq!(LogLevel::parse("fatal"), None);
    }

    #[test]
    fn ttl_null_is_always_emitted_and_absent_is_tolerated() {
        let t = Task {
            task_id: "a".into(),
            status: WireStatus::InputRequired,
            status_message: None,
            created_at: "x".into(),
            last_updated_at: "y".into(),
            ttl: None,
            poll_interval: Some(500),
        };
        let s = serde_json::to_string(&t).unwrap();
        assert!(s.contains("\"ttl\":null"), "{s}");
        assert!(s.contains("\"status\":\"input_required\""));
        let back: Task = serde_json::from_str(
            r#"{"taskId":"a","status":"working","createdAt":"x","lastUpdatedAt":"y"}"#,
        )
        .unwrap();
        assert_eq!(back.ttl, None);
    }

    #[test]
    fn capabilities_shapes() {
        let c = server_capabilities(true, false);
        assert_eq!(c["tasks"]["requests"]["tools"]["call"], json!({}));
        assert!(c["tasks"].get("list").is_none());
        assert_eq!(server_capabilities(true, true)["tasks"]["list"], json!({}));
        assert!(server_capabilities(false, true).get("tasks").is_none());
    }

    #[test]
    fn version_negotiation() {
        assert_eq!(negotiate_version("2025-06-18"), "2025-06-18");
        assert_eq!(negotiate_version("1999-01-01"), "2025-11-25");
        assert!(version_has_tasks("2025-11-25"));
        assert!(!version_has_tasks("2025-03-26"));
    }
}
