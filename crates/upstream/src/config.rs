//! `[[upstream]]`: the MCP servers whose tools a node serves.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;
use taskmesh_client::HeaderName;
use taskmesh_mcp::TaskSupport;
use taskmesh_tools::ResumePolicy;

/// One upstream server. Exactly one of `url` (Streamable HTTP) and `command` (stdio) is set.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct UpstreamConfig {
    /// The upstream's name, in logs, `GET /status` and task status messages; unique.
    pub name: String,
    /// Streamable HTTP endpoint of the upstream.
    pub url: Option<String>,
    /// Headers sent with every HTTP request (credentials, say: they never appear in logs,
    /// `/status` or errors).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// The program of a stdio upstream, which the node starts and supervises.
    pub command: Option<String>,
    /// Its arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// Its whole environment: nothing of the node's environment is passed on.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Its working directory; the node's when unset.
    pub cwd: Option<PathBuf>,
    /// The protocol version to speak; unset: the newest taskmesh knows that the upstream
    /// accepts.
    pub protocol_version: Option<String>,
    /// Prefix added to the upstream's tool names in this node's `tools/list`.
    #[serde(default)]
    pub prefix: String,
    /// Which of the upstream's tools are served.
    #[serde(default)]
    pub tools: ToolFilter,
    /// Per-tool settings, by the upstream's tool name.
    #[serde(default)]
    pub overrides: BTreeMap<String, ToolOverride>,
    /// How long one call may take before it is cancelled upstream and fails, ms. Default
    /// 300000 (5 min).
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// Calls in flight to this upstream from one node, at most; more wait. Default 64.
    #[serde(default = "default_max_concurrent_calls")]
    pub max_concurrent_calls: usize,
    /// Processes of a stdio upstream the node may run at once (each carries one call at a
    /// time, since stdio cannot tell which call a request belongs to). Default 4.
    #[serde(default = "default_processes")]
    pub processes: usize,
    /// Largest message accepted from the upstream, bytes. Default 16777216 (16 MiB).
    #[serde(default = "default_max_message_bytes")]
    pub max_message_bytes: usize,
    /// How long connecting (the handshake) may take, ms. Default 10000.
    #[serde(default = "default_connect_timeout_ms")]
    pub connect_timeout_ms: u64,
    /// After a failed attempt to list the upstream's tools, the wait before the next, ms; it
    /// doubles with each further failure up to `retry_max_ms`. Default 500.
    #[serde(default = "default_retry_initial_ms")]
    pub retry_initial_ms: u64,
    /// The longest wait between two attempts, ms. Default 30000.
    #[serde(default = "default_retry_max_ms")]
    pub retry_max_ms: u64,
    /// Attempts a call of a `rerun` tool gets when the upstream cannot be reached, its
    /// connection ends before the answer or it answers something that is not MCP; between
    /// two, the wait of `retry_initial_ms` doubling up to `retry_max_ms`. A `fail` tool gets
    /// one. Default 3.
    #[serde(default = "default_call_attempts")]
    pub call_attempts: u32,
    /// For an upstream that runs calls as tasks itself: the shortest pause between two
    /// `tasks/get` of one of its tasks, ms, whatever `pollInterval` it suggests. Default 100.
    #[serde(default = "default_task_poll_min_ms")]
    pub task_poll_min_ms: u64,
    /// The longest such pause, ms; also bounds the pause when the upstream suggests none
    /// (then 1000). Default 5000.
    #[serde(default = "default_task_poll_max_ms")]
    pub task_poll_max_ms: u64,
    /// HTTP header that carries the calling principal to the upstream with each call; unset
    /// (the default): the upstream sees only this node's own credentials (`headers`).
    pub forward_principal_header: Option<String>,
}

/// `tools`: which of the upstream's tools are served.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ToolFilter {
    /// When non-empty, only these (the upstream's names).
    #[serde(default)]
    pub include: Vec<String>,
    /// Never these.
    #[serde(default)]
    pub exclude: Vec<String>,
}

impl ToolFilter {
    /// Whether the upstream's tool `name` is served.
    pub fn serves(&self, name: &str) -> bool {
        (self.include.is_empty() || self.include.iter().any(|n| n == name))
            && !self.exclude.iter().any(|n| n == name)
    }
}

/// `overrides.NAME`: settings of one upstream tool.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ToolOverride {
    /// `execution.taskSupport` served for it: `optional` (default), `required` or `forbidden`.
    pub task_support: Option<String>,
    /// What a task of it becomes after a failover: `fail` (default: an upstream tool is not
    /// known to be idempotent) or `rerun`.
    pub resume: Option<String>,
    /// Its call timeout, ms; default the upstream's `timeout_ms`.
    pub timeout_ms: Option<u64>,
}

fn default_timeout_ms() -> u64 {
    300_000
}
fn default_max_concurrent_calls() -> usize {
    64
}
fn default_processes() -> usize {
    4
}
fn default_max_message_bytes() -> usize {
    16 << 20
}
fn default_connect_timeout_ms() -> u64 {
    10_000
}
fn default_retry_initial_ms() -> u64 {
    500
}
fn default_retry_max_ms() -> u64 {
    30_000
}
fn default_call_attempts() -> u32 {
    3
}
fn default_task_poll_min_ms() -> u64 {
    100
}
fn default_task_poll_max_ms() -> u64 {
    5_000
}

/// A setting of an upstream that cannot be used, named.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("upstream {upstream:?}: {what}")]
pub struct ConfigError {
    /// The upstream's name.
    pub upstream: String,
    /// What is wrong.
    pub what: String,
}

/// `taskSupport` text as the enum.
pub fn task_support_of(s: &str) -> Option<TaskSupport> {
    match s {
        "optional" => Some(TaskSupport::Optional),
        "required" => Some(TaskSupport::Required),
        "forbidden" => Some(TaskSupport::Forbidden),
        _ => None,
    }
}

/// `resume` text as the enum.
pub fn resume_of(s: &str) -> Option<ResumePolicy> {
    match s {
        "fail" => Some(ResumePolicy::Fail),
        "rerun" => Some(ResumePolicy::Rerun),
        _ => None,
    }
}

impl UpstreamConfig {
    fn error(&self, what: impl Into<String>) -> ConfigError {
        ConfigError {
            upstream: self.name.clone(),
            what: what.into(),
        }
    }

    /// Check the settings.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.name.is_empty() {
            return Err(self.error("name is empty"));
        }
        match (&self.url, &self.command) {
            (Some(_), Some(_)) => return Err(self.error("set either url or command, not both")),
            (None, None) => return Err(self.error("set url (Streamable HTTP) or command (stdio)")),
            (Some(url), None) => {
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err(self.error("url must be an http:// or https:// URL"));
                }
                if !self.args.is_empty() || !self.env.is_empty() || self.cwd.is_some() {
                    return Err(self.error("args, env and cwd are for a command upstream"));
                }
                if let Some(h) = &self.forward_principal_header {
                    if HeaderName::try_from(h.as_str()).is_err() {
                        return Err(self.error(format!(
                            "forward_principal_header {h:?} is not an HTTP header name"
                        )));
                    }
                    let reserved = [
                        "mcp-session-id",
                        "mcp-protocol-version",
                        "content-type",
                        "accept",
                        "content-length",
                        "host",
                    ];
                    if reserved.iter().any(|r| h.eq_ignore_ascii_case(r))
                        || self.headers.keys().any(|k| k.eq_ignore_ascii_case(h))
                    {
                        return Err(self.error(format!(
                            "forward_principal_header {h:?} is a header taskmesh or headers already sets"
                        )));
                    }
                }
            }
            (None, Some(cmd)) => {
                if cmd.is_empty() {
                    return Err(self.error("command is empty"));
                }
                if !self.headers.is_empty() || self.forward_principal_header.is_some() {
                    return Err(
                        self.error("headers and forward_principal_header are for a url upstream")
                    );
                }
            }
        }
        if let Some(v) = &self.protocol_version {
            if !taskmesh_mcp::is_supported_version(v) {
                return Err(self.error(format!(
                    "protocol_version {v:?} is not one taskmesh speaks ({})",
                    taskmesh_mcp::SUPPORTED_VERSIONS.join(", ")
                )));
            }
        }
        if self.timeout_ms == 0 || self.connect_timeout_ms == 0 {
            return Err(self.error("timeout_ms and connect_timeout_ms must be at least 1"));
        }
        if self.max_concurrent_calls == 0 || self.processes == 0 {
            return Err(self.error("max_concurrent_calls and processes must be at least 1"));
        }
        if self.retry_initial_ms == 0 || self.retry_max_ms < self.retry_initial_ms {
            return Err(self.error(
                "retry_initial_ms must be at least 1 and retry_max_ms at least retry_initial_ms",
            ));
        }
        if self.call_attempts == 0 {
            return Err(self.error("call_attempts must be at least 1"));
        }
        if self.task_poll_min_ms == 0 || self.task_poll_max_ms < self.task_poll_min_ms {
            return Err(self.error(
                "task_poll_min_ms must be at least 1 and task_poll_max_ms at least task_poll_min_ms",
            ));
        }
        if self.max_message_bytes < 1024 {
            return Err(self.error("max_message_bytes must be at least 1024"));
        }
        for (tool, o) in &self.overrides {
            if let Some(t) = &o.task_support {
                if task_support_of(t).is_none() {
                    return Err(self.error(format!(
                        "overrides.{tool}.task_support {t:?} is not optional, required or forbidden"
                    )));
                }
            }
            if let Some(r) = &o.resume {
                if resume_of(r).is_none() {
                    return Err(self.error(format!(
                        "overrides.{tool}.resume {r:?} is not fail or rerun"
                    )));
                }
            }
            if o.timeout_ms == Some(0) {
                return Err(self.error(format!("overrides.{tool}.timeout_ms must be at least 1")));
            }
        }
        Ok(())
    }
}

/// Check a node's upstream list: each entry, and names unique.
pub fn validate_all(list: &[UpstreamConfig]) -> Result<(), ConfigError> {
    for (i, u) in list.iter().enumerate() {
        u.validate()?;
        if list[..i].iter().any(|o| o.name == u.name) {
            return Err(u.error("the name is used by another upstream"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(toml_text: &str) -> UpstreamConfig {
        #[derive(Deserialize)]
        struct Doc {
            upstream: Vec<UpstreamConfig>,
        }
        let doc: Doc = toml::from_str(toml_text).expect("parses");
        doc.upstream.into_iter().next().expect("one upstream")
    }

    #[test]
    fn a_stdio_upstream_takes_its_defaults_and_overrides() {
        let u = parse(
            r#"
            [[upstream]]
            name = "files"
            command = "mcp-files"
            args = ["--root", "/srv"]
            env = { HOME = "/srv" }
            prefix = "files_"
            tools = { exclude = ["delete"] }
            overrides.copy = { task_support = "required", resume = "rerun", timeout_ms = 5000 }
            "#,
        );
        assert!(u.validate().is_ok());
        assert_eq!(u.timeout_ms, 300_000);
        assert_eq!(u.max_concurrent_calls, 64);
        assert!(u.tools.serves("copy") && !u.tools.serves("delete"));
        assert_eq!(u.overrides["copy"].timeout_ms, Some(5000));
    }

    #[test]
    fn settings_that_cannot_work_are_refused_by_name() {
        let bad = [
            ("name = \"a\"", "set url"),
            ("name = \"a\"\nurl = \"ftp://x\"", "http://"),
            (
                "name = \"a\"\nurl = \"http://x\"\ncommand = \"y\"",
                "not both",
            ),
            (
                "name = \"a\"\nurl = \"http://x\"\nargs = [\"1\"]",
                "command upstream",
            ),
            (
                "name = \"a\"\ncommand = \"y\"\nheaders = { A = \"b\" }",
                "url upstream",
            ),
            (
                "name = \"a\"\ncommand = \"y\"\nprotocol_version = \"1999-01-01\"",
                "protocol_version",
            ),
            ("name = \"a\"\ncommand = \"y\"\nprocesses = 0", "at least 1"),
            (
                "name = \"a\"\ncommand = \"y\"\nretry_initial_ms = 900\nretry_max_ms = 800",
                "retry_max_ms",
            ),
            (
                "name = \"a\"\ncommand = \"y\"\noverrides.t = { resume = \"maybe\" }",
                "overrides.t.resume",
            ),
            (
                "name = \"a\"\ncommand = \"y\"\noverrides.t = { task_support = \"x\" }",
                "task_support",
            ),
            ("name = \"a\"\ncommand = \"y\"\ncall_attempts = 0", "call_attempts"),
            (
                "name = \"a\"\ncommand = \"y\"\ntask_poll_min_ms = 600\ntask_poll_max_ms = 500",
                "task_poll_max_ms",
            ),
            (
                "name = \"a\"\ncommand = \"y\"\nforward_principal_header = \"X-User\"",
                "url upstream",
            ),
            (
                "name = \"a\"\nurl = \"http://x\"\nforward_principal_header = \"bad header\"",
                "not an HTTP header name",
            ),
            (
                "name = \"a\"\nurl = \"http://x\"\nforward_principal_header = \"Mcp-Session-Id\"",
                "already sets",
            ),
            (
                "name = \"a\"\nurl = \"http://x\"\nheaders = { x-user = \"me\" }\nforward_principal_header = \"X-User\"",
                "already sets",
            ),
        ];
        for (body, want) in bad {
            let u = parse(&format!("[[upstream]]\n{body}\n"));
            let e = u.validate().expect_err(body).to_string();
            assert!(e.contains(want), "{body}: {e}");
        }
        let twice = [
            parse("[[upstream]]\nname = \"a\"\ncommand = \"y\"\n"),
            parse("[[upstream]]\nname = \"a\"\ncommand = \"z\"\n"),
        ];
        assert!(validate_all(&twice)
            .unwrap_err()
            .to_string()
            .contains("another upstream"));
    }
}
