//! `[workers]`: leases, polls, queues and the credentials of workers (docs/configuration.md).

use std::collections::HashMap;

use serde::Deserialize;

/// `[workers]`: how long leases and registrations last, how long polls wait, how many tasks
/// wait per tool, and which worker identities may serve which tools. Owned here because the
/// task host runs the leases; the gateway reads the credentials (`tokens`, `scope`,
/// `identities`) when it authenticates a worker.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WorkerSettings {
    /// How long a lease lasts from its grant or its last heartbeat, in ms. Default 30000; at
    /// least 1000.
    pub lease_ms: u64,
    /// The longest wait a poll is granted, in ms. Default 30000; at least 1.
    pub poll_wait_max_ms: u64,
    /// A registration without a poll or heartbeat for this long is dropped, in ms. Default
    /// 90000; at least `poll_wait_max_ms` + 1000.
    pub idle_timeout_ms: u64,
    /// Leases a task may be granted before a lease that runs out fails it (resume policy
    /// `rerun`). Default 3; at least 1.
    pub max_attempts: u32,
    /// Tasks of one tool that may wait for a worker on a node (in the queues of the shards it
    /// leads); past it a create of that tool gets `-32001`. Default 10000; at least 1.
    pub max_queued_per_tool: usize,
    /// How long a task waits while no live worker serves its tool, in ms; then it fails with a
    /// message saying so. Default 300000 (5 min); at least 1.
    pub queue_timeout_ms: u64,
    /// Most tools one registration may declare. Default 64; at least 1.
    pub max_tools_per_worker: usize,
    /// Most registrations a node holds at once. Default 1000; at least 1.
    pub max_registrations: usize,
    /// Most leases one poll takes. Default 64; at least 1.
    pub max_tasks_per_poll: u32,
    /// Static worker tokens: token -> worker identity. Never accepted on `/mcp`.
    pub tokens: HashMap<String, String>,
    /// The OAuth scope an access token must grant to act as a worker (its principal is the
    /// worker identity); such a token is refused on `/mcp`. Default `taskmesh:worker`.
    pub scope: String,
    /// `[workers.identities.<identity>]`: what each worker identity may serve. An identity
    /// without an entry may register no tool.
    pub identities: HashMap<String, IdentitySettings>,
}

/// What one worker identity may do.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct IdentitySettings {
    /// Tool names it may register: exact names, or prefixes ending in `*` (`billing_*`); `*`
    /// alone allows every name.
    pub tools: Vec<String>,
}

impl IdentitySettings {
    /// Whether `tool` is among the names allowed.
    pub fn allows(&self, tool: &str) -> bool {
        self.tools.iter().any(|p| match p.strip_suffix('*') {
            Some(prefix) => tool.starts_with(prefix),
            None => p == tool,
        })
    }
}

impl Default for WorkerSettings {
    fn default() -> Self {
        Self {
            lease_ms: 30_000,
            poll_wait_max_ms: 30_000,
            idle_timeout_ms: 90_000,
            max_attempts: 3,
            max_queued_per_tool: 10_000,
            queue_timeout_ms: 300_000,
            max_tools_per_worker: 64,
            max_registrations: 1_000,
            max_tasks_per_poll: 64,
            tokens: HashMap::new(),
            scope: "taskmesh:worker".into(),
            identities: HashMap::new(),
        }
    }
}

impl WorkerSettings {
    /// Check the section; the error names the key.
    pub fn validate(&self) -> Result<(), String> {
        if self.lease_ms < 1_000 {
            return Err("workers.lease_ms must be at least 1000".into());
        }
        if self.poll_wait_max_ms == 0 {
            return Err("workers.poll_wait_max_ms must be at least 1".into());
        }
        if self.idle_timeout_ms < self.poll_wait_max_ms.saturating_add(1_000) {
            return Err(format!(
                "workers.idle_timeout_ms must be at least workers.poll_wait_max_ms + 1000 (got {} and {})",
                self.idle_timeout_ms, self.poll_wait_max_ms
            ));
        }
        let at_least_one = [
            ("max_attempts", self.max_attempts as usize),
            ("max_queued_per_tool", self.max_queued_per_tool),
            ("queue_timeout_ms", self.queue_timeout_ms as usize),
            ("max_tools_per_worker", self.max_tools_per_worker),
            ("max_registrations", self.max_registrations),
            ("max_tasks_per_poll", self.max_tasks_per_poll as usize),
        ];
        if let Some((key, _)) = at_least_one.iter().find(|(_, v)| *v == 0) {
            return Err(format!("workers.{key} must be at least 1"));
        }
        if self.scope.trim().is_empty() {
            return Err("workers.scope must not be empty".into());
        }
        if let Some((_, identity)) = self
            .tokens
            .iter()
            .find(|(t, i)| t.is_empty() || i.is_empty())
        {
            return Err(format!(
                "workers.tokens: tokens and identities must not be empty (identity '{identity}')"
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identities_allow_exact_names_and_prefixes() {
        let id = IdentitySettings {
            tools: vec!["report".into(), "billing_*".into()],
        };
        assert!(id.allows("report"));
        assert!(id.allows("billing_invoice"));
        assert!(!id.allows("reports"));
        assert!(!id.allows("admin"));
        assert!(IdentitySettings {
            tools: vec!["*".into()]
        }
        .allows("anything"));
        assert!(!IdentitySettings::default().allows("report"));
    }

    #[test]
    fn each_bound_is_checked_by_name() {
        assert_eq!(WorkerSettings::default().validate(), Ok(()));
        let bad = WorkerSettings {
            lease_ms: 10,
            ..WorkerSettings::default()
        };
        assert!(bad.validate().unwrap_err().contains("workers.lease_ms"));
        let bad = WorkerSettings {
            max_attempts: 0,
            ..WorkerSettings::default()
        };
        assert!(bad.validate().unwrap_err().contains("workers.max_attempts"));
        let bad = WorkerSettings {
            idle_timeout_ms: 1_000,
            ..WorkerSettings::default()
        };
        assert!(bad
            .validate()
            .unwrap_err()
            .contains("workers.idle_timeout_ms"));
    }
}
