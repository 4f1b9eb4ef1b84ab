//! The settings of a node's task runtime: [`TaskSettings`], the `[tasks]` section of the
//! node's TOML file (its fields, defaults and checks are the section's only definition), and
//! [`HostConfig`], what the runtime runs with, derived from it.

use serde::Deserialize;

/// `[tasks]`: the lifetime, polling, admission and listing of tasks, and the hand-off of plain
/// calls. The section is owned here because the task host reads most of it; the gateway reads
/// `list_page_size`, `cursor_ttl_ms` and the `handoff_*` keys from it. Every field is documented in docs/configuration.md.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TaskSettings {
    /// TTL when a create asks for none, in ms; 0 = unlimited. Default 3600000 (1 h); at most
    /// `max_ttl_ms` when that is set.
    pub default_ttl_ms: u64,
    /// Largest TTL granted, in ms; a larger request is lowered to it. 0 = no cap. Default
    /// 86400000 (24 h).
    pub max_ttl_ms: u64,
    /// `pollInterval` suggested to clients with every task, in ms. Default 1000, at least 1.
    pub poll_interval_ms: u64,
    /// Live (non-terminal) tasks this node runs at once; past it a task-augmented `tools/call`
    /// gets `-32001` and creates nothing. Default 10000, at least 1.
    pub max_live_tasks: usize,
    /// Live tasks of one principal this node runs at once; past it that principal's
    /// task-augmented `tools/call` gets `-32001` and creates nothing. 0 (the default): only
    /// `max_live_tasks` bounds them.
    pub max_live_tasks_per_principal: usize,
    /// How often a shard leader deletes expired tasks, in ms (below 10 acts as 10). Default
    /// 1000.
    pub expiry_sweep_interval_ms: u64,
    /// Tasks per `tasks/list` page (read by the gateway). Default 50, at least 1.
    pub list_page_size: usize,
    /// Lifetime of a `tasks/list` cursor, in ms; an older one is refused with `-32602` (read
    /// by the gateway). Default 3600000 (1 h).
    pub cursor_ttl_ms: u64,
    /// How often a shard leader checks the tasks whose execution on it ended or never began
    /// (an execution that stopped, a create that did not spawn one), in ms. Default 1000, at
    /// least 1.
    pub reconcile_interval_ms: u64,
    /// How often a shard leader checks every live task, in ms: the same check over the whole
    /// shard, whose cost grows with its live tasks (it also runs on every leadership change).
    /// Default 60000, at least `reconcile_interval_ms`.
    pub reconcile_full_interval_ms: u64,
    /// First pause before a refused task write is tried again, in ms (doubles per refusal).
    /// Default 50, at least 1 and at most `write_retry_max_ms`.
    pub write_retry_min_ms: u64,
    /// Longest pause between tries of a refused task write, in ms. Default 1000.
    pub write_retry_max_ms: u64,
    /// Largest outcome a task keeps, in bytes of JSON; a larger one fails the task. Default
    /// 4194304 (4 MiB), at least [`MIN_RESULT_BYTES`].
    pub max_result_bytes: usize,
    /// Hand-off of plain calls (read by the gateway): a plain `tools/call` of a tool that may
    /// run as a task, from a session that does not speak tasks, runs as a durable task; when
    /// it is still running after this many ms, the call answers with the task's id and how to
    /// follow it (the hand-off tools below), and the task runs on. 0 turns hand-off off (plain
    /// calls then run on the node that took them and end with their connection). Default
    /// 20000 (20 s, below the usual 60 s request timeouts of MCP clients).
    pub handoff_after_ms: u64,
    /// Longest a call of the hand-off result tool waits for the task to end before it answers
    /// that the task is still working, in ms (a shorter wait may be asked in the call). Default
    /// 30000, at least 1.
    pub handoff_wait_max_ms: u64,
    /// Name of the hand-off tool that tells a task's status. Default `task_status`.
    pub handoff_status_tool: String,
    /// Name of the hand-off tool that waits for a task's result and returns it. Default
    /// `task_result`.
    pub handoff_result_tool: String,
    /// Name of the hand-off tool that cancels a task. Default `task_cancel`.
    pub handoff_cancel_tool: String,
    /// TTL asked of a client's task, in ms: an `elicitation/create` or `sampling/createMessage`
    /// sent task-augmented to a client that declared it runs them as tasks carries
    /// `task.ttl` = this. Default 86400000 (24 h: a person may take hours to answer), at least
    /// 1000.
    pub client_task_ttl_ms: u64,
    /// Shortest pause between two `tasks/get` of a client's task, in ms: the client's
    /// `pollInterval` is raised to it. Default 500, at least 1.
    pub client_poll_min_ms: u64,
    /// Longest pause between two `tasks/get` of a client's task, in ms: the client's
    /// `pollInterval` is lowered to it (and used when it suggests none). Default 30000, at
    /// least `client_poll_min_ms`.
    pub client_poll_max_ms: u64,
    /// How long a `tasks/get` or `tasks/result` sent to a client about its task may go
    /// unanswered, in ms; past it the client is taken as gone and the request that its task
    /// answers fails (the tool decides; the built-in tools fail their task with a status
    /// message that says so). Default 600000 (10 min), at least 1000.
    pub client_answer_timeout_ms: u64,
}

/// Whether `name` is a tool name MCP allows: 1 to 128 ASCII letters, digits, `_`, `-`, `.`.
fn is_tool_name(name: &str) -> bool {
    (1..=128).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// The smallest `tasks.max_result_bytes` accepted.
pub const MIN_RESULT_BYTES: usize = 1024;

impl Default for TaskSettings {
    fn default() -> Self {
        Self {
            default_ttl_ms: 3_600_000,
            max_ttl_ms: 86_400_000,
            poll_interval_ms: 1_000,
            max_live_tasks: 10_000,
            max_live_tasks_per_principal: 0,
            expiry_sweep_interval_ms: 1_000,
            list_page_size: 50,
            cursor_ttl_ms: 3_600_000,
            reconcile_interval_ms: 1_000,
            reconcile_full_interval_ms: 60_000,
            write_retry_min_ms: 50,
            write_retry_max_ms: 1_000,
            max_result_bytes: 4 * 1024 * 1024,
            handoff_after_ms: 20_000,
            handoff_wait_max_ms: 30_000,
            handoff_status_tool: "task_status".into(),
            handoff_result_tool: "task_result".into(),
            handoff_cancel_tool: "task_cancel".into(),
            client_task_ttl_ms: 86_400_000,
            client_poll_min_ms: 500,
            client_poll_max_ms: 30_000,
            client_answer_timeout_ms: 600_000,
        }
    }
}

impl TaskSettings {
    /// Refuse values that cannot work, naming the key as it is written (`tasks.<key>`).
    pub fn validate(&self) -> Result<(), String> {
        if self.max_live_tasks == 0 {
            return Err("tasks.max_live_tasks must be at least 1".into());
        }
        if self.poll_interval_ms == 0 {
            return Err("tasks.poll_interval_ms must be at least 1".into());
        }
        if self.reconcile_interval_ms == 0 {
            return Err("tasks.reconcile_interval_ms must be at least 1".into());
        }
        if self.reconcile_full_interval_ms < self.reconcile_interval_ms {
            return Err(
                "tasks.reconcile_full_interval_ms must be at least tasks.reconcile_interval_ms"
                    .into(),
            );
        }
        if self.write_retry_min_ms == 0 || self.write_retry_max_ms < self.write_retry_min_ms {
            return Err(format!(
                "tasks.write_retry_min_ms must be at least 1 and at most tasks.write_retry_max_ms \
                 (got {} and {})",
                self.write_retry_min_ms, self.write_retry_max_ms
            ));
        }
        if self.max_result_bytes < MIN_RESULT_BYTES {
            return Err(format!(
                "tasks.max_result_bytes must be at least {MIN_RESULT_BYTES}"
            ));
        }
        if self.list_page_size == 0 {
            return Err("tasks.list_page_size must be at least 1".into());
        }
        if self.max_ttl_ms > 0 && self.default_ttl_ms > self.max_ttl_ms {
            return Err("tasks.default_ttl_ms must not exceed tasks.max_ttl_ms".into());
        }
        if self.client_task_ttl_ms < 1000 {
            return Err("tasks.client_task_ttl_ms must be at least 1000".into());
        }
        if self.client_poll_min_ms == 0 || self.client_poll_max_ms < self.client_poll_min_ms {
            return Err(format!(
                "tasks.client_poll_min_ms must be at least 1 and at most tasks.client_poll_max_ms \
                 (got {} and {})",
                self.client_poll_min_ms, self.client_poll_max_ms
            ));
        }
        if self.client_answer_timeout_ms < 1000 {
            return Err("tasks.client_answer_timeout_ms must be at least 1000".into());
        }
        if self.handoff_wait_max_ms == 0 {
            return Err("tasks.handoff_wait_max_ms must be at least 1".into());
        }
        let names = [
            ("handoff_status_tool", &self.handoff_status_tool),
            ("handoff_result_tool", &self.handoff_result_tool),
            ("handoff_cancel_tool", &self.handoff_cancel_tool),
        ];
        for (i, (key, name)) in names.iter().enumerate() {
            if !is_tool_name(name) {
                return Err(format!(
                    "tasks.{key} must be 1 to 128 characters of A-Z, a-z, 0-9, '_', '-' and '.' \
                     (got '{name}')"
                ));
            }
            if let Some((other, _)) = names[..i].iter().find(|(_, n)| n == name) {
                return Err(format!(
                    "tasks.{key} must differ from tasks.{other} (both are '{name}')"
                ));
            }
        }
        Ok(())
    }

    /// The runtime settings of node `node_id`'s task host: these settings, and the fixed
    /// bounds that have no key.
    pub fn host_config(&self, node_id: u64) -> HostConfig {
        HostConfig {
            node_id,
            tasks: self.clone(),
            expiry_batch: 512,
            attach_buffer: 64,
            event_buffer: 8_192,
            workers: crate::WorkerSettings::default(),
            events: crate::outbox::EventSettings::default(),
            webhooks: Vec::new(),
        }
    }
}

/// Settings of the task runtime, made by [`TaskSettings::host_config`]: `[tasks]` as
/// configured, and the bounds without a key (`expiry_batch`, `attach_buffer`,
/// `event_buffer`), listed under "Fixed limits" in docs/configuration.md.
#[derive(Debug, Clone)]
pub struct HostConfig {
    /// This node's id, named in audit events (0: not part of a cluster's numbering).
    pub node_id: u64,
    /// `[tasks]`: TTLs, polling, the live-task caps, expiry, reconciliation, write retries and
    /// the largest outcome.
    pub tasks: TaskSettings,
    /// At most this many ids per `Expire` command.
    pub expiry_batch: usize,
    /// Queue of task messages (elicitation, progress) per attached `tasks/result` stream.
    pub attach_buffer: usize,
    /// Capacity of the host's event channel.
    pub event_buffer: usize,
    /// `[workers]`: leases, polls, queues and worker credentials.
    pub workers: crate::WorkerSettings,
    /// `[events]`: timeouts, retries, concurrency and egress of webhook deliveries.
    pub events: crate::outbox::EventSettings,
    /// `[[webhooks]]`: the operator's webhooks, sent the events of every task they cover.
    pub webhooks: Vec<crate::outbox::WebhookSettings>,
}

impl Default for HostConfig {
    /// The runtime settings of [`TaskSettings::default`] on a node outside a cluster's
    /// numbering.
    fn default() -> Self {
        TaskSettings::default().host_config(0)
    }
}

impl HostConfig {
    /// The TTL granted for a requested one: `tasks.default_ttl_ms` when none is asked for,
    /// lowered to `tasks.max_ttl_ms` (0 in either: unlimited, no cap).
    pub fn grant_ttl(&self, requested: Option<u64>) -> Option<u64> {
        let ms = |v: u64| (v > 0).then_some(v);
        let wanted = requested.or(ms(self.tasks.default_ttl_ms));
        match (wanted, ms(self.tasks.max_ttl_ms)) {
            (Some(w), Some(max)) => Some(w.min(max)),
            (None, Some(max)) => Some(max),
            (w, None) => w,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_valid_and_grant_an_hour_up_to_a_day() {
        assert_eq!(TaskSettings::default().validate(), Ok(()));
        let host = TaskSettings::default().host_config(7);
        assert_eq!(host.node_id, 7);
        assert_eq!(host.grant_ttl(None), Some(3_600_000));
        assert_eq!(host.grant_ttl(Some(u64::MAX)), Some(86_400_000));
    }

    #[test]
    fn a_bad_value_is_refused_naming_its_key() {
        type Edit = fn(&mut TaskSettings);
        let cases: [(Edit, &str); 15] = [
            (|s| s.max_live_tasks = 0, "max_live_tasks"),
            (|s| s.poll_interval_ms = 0, "poll_interval_ms"),
            (|s| s.reconcile_interval_ms = 0, "reconcile_interval_ms"),
            (
                |s| s.reconcile_full_interval_ms = 999,
                "reconcile_full_interval_ms",
            ),
            (|s| s.write_retry_min_ms = 0, "write_retry_min_ms"),
            (|s| s.write_retry_max_ms = 10, "write_retry_min_ms"),
            (|s| s.max_result_bytes = 1023, "max_result_bytes"),
            (|s| s.list_page_size = 0, "list_page_size"),
            (|s| s.default_ttl_ms = s.max_ttl_ms + 1, "default_ttl_ms"),
            (|s| s.handoff_wait_max_ms = 0, "handoff_wait_max_ms"),
            (|s| s.client_task_ttl_ms = 999, "client_task_ttl_ms"),
            (|s| s.client_poll_max_ms = 1, "client_poll_min_ms"),
            (
                |s| s.client_answer_timeout_ms = 10,
                "client_answer_timeout_ms",
            ),
            (
                |s| s.handoff_result_tool = "wait for it".into(),
                "handoff_result_tool",
            ),
            (
                |s| s.handoff_cancel_tool = s.handoff_status_tool.clone(),
                "handoff_cancel_tool",
            ),
        ];
        for (edit, key) in cases {
            let mut settings = TaskSettings::default();
            edit(&mut settings);
            let named = format!("tasks.{key}");
            assert!(
                settings.validate().is_err_and(|e| e.contains(&named)),
                "{key}"
            );
        }
    }

    #[test]
    fn unknown_keys_are_refused() {
        let parsed: Result<TaskSettings, _> = serde_json::from_str(r#"{"max_live": 3}"#);
        assert!(parsed.unwrap_err().to_string().contains("max_live"));
        let parsed: TaskSettings = serde_json::from_str(r#"{"max_live_tasks": 3}"#).unwrap();
        assert_eq!(parsed.max_live_tasks, 3);
        assert_eq!(
            parsed.poll_interval_ms, 1_000,
            "a missing key keeps its default"
        );
    }
}
