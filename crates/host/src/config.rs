//! The settings of a node's task runtime, with their defaults (documented in
//! docs/configuration.md under `[tasks]`).

/// Settings of the task runtime. Those a node sets from `[tasks]` are documented there, in
/// docs/configuration.md; the others (`expiry_batch`, `attach_buffer`, `event_buffer`) keep
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
    fn default() -> Self {
        Self {
            node_id: 0,
            default_ttl_ms: Some(3_600_000),
            max_ttl_ms: Some(86_400_000),
            poll_interval_ms: 1_000,
            max_live_tasks: 10_000,
            max_live_tasks_per_principal: 0,
            expiry_sweep_interval_ms: 1_000,
            expiry_batch: 512,
            attach_buffer: 64,
            event_buffer: 8_192,
            reconcile_interval_ms: 1_000,
            write_retry_min_ms: 50,
            write_retry_max_ms: 1_000,
            max_result_bytes: 4 * 1024 * 1024,
        }
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
