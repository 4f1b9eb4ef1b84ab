//! The settings of a node's task runtime: [`TaskSettings`], the `[tasks]` section of the
//! node's TOML file (its fields, defaults and checks are the section's only definition), and
//! [`HostConfig`], what the runtime runs with, derived from it.

use serde::Deserialize;

/// `[tasks]`: the lifetime, polling, admission and listing of tasks. The section is owned
/// here because the task host reads most of it; the gateway reads `list_page_size` and
/// `cursor_ttl_ms` from it. Every field is documented in docs/configuration.md.
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
    /// How often a shard leader checks that every live task has its execution, in ms.
    /// Default 1000, at least 1.
    pub reconcile_interval_ms: u64,
    /// First pause before a refused task write is tried again, in ms (doubles per refusal).
    /// Default 50, at least 1 and at most `write_retry_max_ms`.
    pub write_retry_min_ms: u64,
    /// Longest pause between tries of a refused task write, in ms. Default 1000.
    pub write_retry_max_ms: u64,
    /// Largest outcome a task keeps, in bytes of JSON; a larger one fails the task. Default
    /// 4194304 (4 MiB), at least [`MIN_RESULT_BYTES`].
    pub max_result_bytes: usize,
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
            write_retry_min_ms: 50,
            write_retry_max_ms: 1_000,
            max_result_bytes: 4 * 1024 * 1024,
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
        Ok(())
    }

    /// The runtime settings of node `node_id`'s task host: a TTL of 0 becomes `None` (no
    /// default TTL, no cap); the settings without a key keep their [`HostConfig`] defaults.
    pub fn host_config(&self, node_id: u64) -> HostConfig {
        let ms = |v: u64| (v > 0).then_some(v);
        HostConfig {
            node_id,
            default_ttl_ms: ms(self.default_ttl_ms),
            max_ttl_ms: ms(self.max_ttl_ms),
            poll_interval_ms: self.poll_interval_ms,
            max_live_tasks: self.max_live_tasks,
            max_live_tasks_per_principal: self.max_live_tasks_per_principal,
            expiry_sweep_interval_ms: self.expiry_sweep_interval_ms,
            expiry_batch: 512,
            attach_buffer: 64,
            event_buffer: 8_192,
            reconcile_interval_ms: self.reconcile_interval_ms,
            write_retry_min_ms: self.write_retry_min_ms,
            write_retry_max_ms: self.write_retry_max_ms,
            max_result_bytes: self.max_result_bytes,
        }
    }
}

/// Settings of the task runtime, made by [`TaskSettings::host_config`]. Those a node sets from
/// `[tasks]` are documented there, in docs/configuration.md; the others (`expiry_batch`, `attach_buffer`, `event_buffer`) keep
/// their defaults and are listed under "Fixed limits" there.
#[derive(Debug, Clone)]
pub struct HostConfig {
    /// This node's id, named in audit events (0: not part of a cluster's numbering).
    pub node_id: u64,
    /// TTL applied when a create asks for none; `None` = unlimited.
    pub default_ttl_ms: Option<u64>,
    /// Largest TTL granted; a larger request is lowered to it. `None` = no cap (and requests
    /// without a ttl may then be unlimited).
    pub max_ttl_ms: Option<u64>,
    /// `pollInterval` sent with every task.
    pub poll_interval_ms: u64,
    /// Live tasks (actors) this node hosts at most.
    pub max_live_tasks: usize,
    /// Live tasks of one principal this node hosts at most; 0 = only `max_live_tasks` bounds
    /// them.
    pub max_live_tasks_per_principal: usize,
    /// How often a shard leader looks for expired tasks.
    pub expiry_sweep_interval_ms: u64,
    /// At most this many ids per `Expire` command.
    pub expiry_batch: usize,
    /// Queue of task messages (elicitation, progress) per attached `tasks/result` stream.
    pub attach_buffer: usize,
    /// Capacity of the host's event channel.
    pub event_buffer: usize,
    /// How often a shard leader's reconciler checks that every live task has its execution.
    pub reconcile_interval_ms: u64,
    /// First pause before a refused task write (or a reconciler pass that could not confirm
    /// the leadership) is tried again; it doubles on every further refusal.
    pub write_retry_min_ms: u64,
    /// Longest pause between tries of a refused write.
    pub write_retry_max_ms: u64,
    /// Largest outcome (the stored result or error JSON) a task keeps; a larger one fails the
    /// task with a message that names this limit.
    pub max_result_bytes: usize,
}

impl Default for HostConfig {
    /// The runtime settings of [`TaskSettings::default`] on a node outside a cluster's
    /// numbering.
    fn default() -> Self {
        TaskSettings::default().host_config(0)
    }
}

impl HostConfig {
    /// The TTL granted for a requested one.
    pub fn grant_ttl(&self, requested: Option<u64>) -> Option<u64> {
        let wanted = requested.or(self.default_ttl_ms);
        match (wanted, self.max_ttl_ms) {
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
    fn the_defaults_are_valid_and_make_the_default_host_config() {
        assert_eq!(TaskSettings::default().validate(), Ok(()));
        let host = TaskSettings::default().host_config(7);
        assert_eq!(
            (host.node_id, host.default_ttl_ms, host.max_ttl_ms),
            (7, Some(3_600_000), Some(86_400_000))
        );
    }

    #[test]
    fn a_ttl_of_zero_is_none() {
        let settings = TaskSettings {
            default_ttl_ms: 0,
            max_ttl_ms: 0,
            ..TaskSettings::default()
        };
        let host = settings.host_config(1);
        assert_eq!((host.default_ttl_ms, host.max_ttl_ms), (None, None));
    }

    #[test]
    fn a_bad_value_is_refused_naming_its_key() {
        type Edit = fn(&mut TaskSettings);
        let cases: [(Edit, &str); 8] = [
            (|s| s.max_live_tasks = 0, "max_live_tasks"),
            (|s| s.poll_interval_ms = 0, "poll_interval_ms"),
            (|s| s.reconcile_interval_ms = 0, "reconcile_interval_ms"),
            (|s| s.write_retry_min_ms = 0, "write_retry_min_ms"),
            (|s| s.write_retry_max_ms = 10, "write_retry_min_ms"),
            (|s| s.max_result_bytes = 1023, "max_result_bytes"),
            (|s| s.list_page_size = 0, "list_page_size"),
            (|s| s.default_ttl_ms = s.max_ttl_ms + 1, "default_ttl_ms"),
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
