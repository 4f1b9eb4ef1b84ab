//! The name, unit and meaning of every metric a node exports (units are in the names:
//! `_seconds`, `_bytes`, `_total` for counters).

use metrics::Unit;

/// MCP requests answered, by `method` (a fixed list, else `other`) and `outcome` (`ok`, or
/// `error` for a JSON-RPC error answer).
pub const MCP_REQUESTS: &str = "taskmesh_mcp_requests_total";
/// Time from a request's body read to its answer (for a streamed answer: to its first
/// event), by `method`.
pub const MCP_REQUEST_DURATION: &str = "taskmesh_mcp_request_duration_seconds";
/// Requests refused before any method ran, by HTTP `status` and `cause`.
pub const HTTP_REFUSALS: &str = "taskmesh_http_refusals_total";
/// SSE answers open on the node.
pub const SSE_STREAMS: &str = "taskmesh_sse_streams";
/// Tasks this node's gateway created.
pub const TASKS_CREATED: &str = "taskmesh_tasks_created_total";
/// Tasks that reached a terminal `status` on a shard this node led.
pub const TASKS_TERMINAL: &str = "taskmesh_tasks_terminal_total";
/// `tasks/cancel` requests this node's gateway handled, by `outcome` (`ok`, `terminal`,
/// `not_found`, `error`).
pub const TASK_CANCELS: &str = "taskmesh_task_cancels_total";
/// Terminal tasks whose retention ended, deleted by a shard this node led.
pub const TASKS_EXPIRED: &str = "taskmesh_tasks_expired_total";
/// Task actors running on this node (tasks it executes).
pub const LIVE_TASKS: &str = "taskmesh_live_tasks";
/// Task records held by each `shard` replica on this node, terminal ones included.
pub const SHARD_TASKS: &str = "taskmesh_shard_tasks";
/// 1 when this node leads `shard`, else 0.
pub const RAFT_LEADER: &str = "taskmesh_raft_is_leader";
/// The Raft term of this node's replica of `shard`.
pub const RAFT_TERM: &str = "taskmesh_raft_term";
/// The last log index this node's replica of `shard` applied.
pub const RAFT_APPLIED_INDEX: &str = "taskmesh_raft_applied_index";
/// The last log index this node's replica of `shard` holds.
pub const RAFT_LAST_LOG_INDEX: &str = "taskmesh_raft_last_log_index";
/// The index the group of `shard` committed, as this replica knows it.
pub const RAFT_COMMITTED_INDEX: &str = "taskmesh_raft_committed_index";
/// On a leader: how many entries `follower` of `shard` is behind the leader's last entry.
pub const RAFT_FOLLOWER_LAG: &str = "taskmesh_raft_follower_lag_entries";
/// Times this node's replica of `shard` saw the group's leader change to another node.
pub const RAFT_LEADER_CHANGES: &str = "taskmesh_raft_leader_changes_total";
/// Times this node became the leader of `shard`.
pub const RAFT_LEADERSHIPS_WON: &str = "taskmesh_raft_leaderships_won_total";
/// Requests this node forwarded to another `node` (the shard's leader, or who it thought
/// was), by `outcome`: `ok`, `not_leader` (answered with a hint or none: the request hops on),
/// `unavailable` (no answer, or the node could not serve now: retried), `error` (final).
pub const FORWARDED: &str = "taskmesh_forwarded_requests_total";
/// Reads (`tasks/get`) per batch a gateway sent to another node on its read stream.
pub const READ_BATCH: &str = "taskmesh_forwarded_read_batch_reads";
/// One sync to disk: of the write-ahead log (an `fdatasync` serving every append, vote and
/// apply that queued while the previous one ran: the group commit), or of the database.
pub const STORAGE_FSYNC: &str = "taskmesh_storage_fsync_seconds";
/// Segment files the write-ahead log has now (each up to `raft.log_segment_bytes`).
pub const WAL_SEGMENTS: &str = "taskmesh_wal_segments";
/// Bytes written to the write-ahead log.
pub const WAL_WRITTEN_BYTES: &str = "taskmesh_wal_written_bytes_total";
/// A Raft log append, from the write to its flush on disk (what a proposal waits for before
/// the leader counts its own vote).
pub const RAFT_LOG_APPEND: &str = "taskmesh_raft_log_append_seconds";
/// Snapshots built by this node's replicas, by `shard`.
pub const SNAPSHOT_BUILDS: &str = "taskmesh_raft_snapshot_builds_total";
/// Bytes of the snapshots built, by `shard`.
pub const SNAPSHOT_BUILT_BYTES: &str = "taskmesh_raft_snapshot_built_bytes_total";
/// Time to build a snapshot (capture, encode, store, flush).
pub const SNAPSHOT_BUILD_DURATION: &str = "taskmesh_raft_snapshot_build_seconds";
/// Snapshots installed on this node's replicas (sent by a leader), by `shard`.
pub const SNAPSHOT_INSTALLS: &str = "taskmesh_raft_snapshot_installs_total";
/// Bytes of the snapshots installed, by `shard`.
pub const SNAPSHOT_INSTALLED_BYTES: &str = "taskmesh_raft_snapshot_installed_bytes_total";
/// Time to install a snapshot (decode, restore, flush).
pub const SNAPSHOT_INSTALL_DURATION: &str = "taskmesh_raft_snapshot_install_seconds";
/// How long a task executing on this node waited in `input_required` for its client's
/// answers, until it went back to `working`.
pub const INPUT_REQUIRED_WAIT: &str = "taskmesh_input_required_wait_seconds";
/// Cancellable requests held open on this node: plain `tools/call`s running and
/// `tasks/result` reads waiting for their task to end.
pub const INFLIGHT: &str = "taskmesh_inflight_requests";
/// Elections this node's replica of `shard` started (it became a candidate).
pub const RAFT_ELECTIONS: &str = "taskmesh_raft_elections_total";
/// Groups whose replica on this node is quiescent (its Raft timers stopped while the group is
/// idle), by `role` (`leader` or `follower`).
pub const RAFT_QUIESCENT: &str = "taskmesh_raft_quiescent_groups";
/// Node beats this node sent to a peer, by `outcome` (`ok` or `failed`).
pub const RAFT_BEATS: &str = "taskmesh_raft_beats_total";
/// Proposals under way on this node's replica of `shard`.
pub const RAFT_PROPOSALS_IN_FLIGHT: &str = "taskmesh_raft_proposals_in_flight";
/// Sessions holding an open GET stream on this node (a session keeps no other state on a
/// node).
pub const SESSIONS_WITH_STREAMS: &str = "taskmesh_sessions_with_streams";
/// Connections open on the MCP listener.
pub const HTTP_CONNECTIONS: &str = "taskmesh_http_connections";
/// Connections the MCP listener closed before serving a request, by `cause`
/// (`max_connections`, `no_request`, `tls_handshake_failed`, `tls_handshake_timeout`).
pub const HTTP_CONNECTIONS_CLOSED: &str = "taskmesh_http_connections_closed_total";
/// Whether the node is ready to serve (`GET /readyz`): 1 or 0.
pub const READY: &str = "taskmesh_ready";
/// Plain calls of clients that do not speak tasks run as tasks (`tasks.handoff_after_ms`).
pub const PLAIN_CALLS_AS_TASKS: &str = "taskmesh_plain_calls_as_tasks_total";
/// Of those, the ones still running at the hand-off, answered with their task.
pub const HANDOFFS: &str = "taskmesh_handoffs_total";
/// Requests run as the client's tasks: created, and ended by outcome.
pub const CLIENT_TASKS: &str = "taskmesh_client_tasks_total";
/// Tasks waiting for a worker in this node's queues, by `tool`.
pub const WORKER_QUEUED: &str = "taskmesh_worker_queued_tasks";
/// Worker lease events, by `tool` and `event` (`granted`, `expired`, `completed`,
/// `stale_refused`).
pub const WORKER_LEASES: &str = "taskmesh_worker_leases_total";
/// From a task's queueing to its lease being written, by `tool`.
pub const WORKER_DISPATCH: &str = "taskmesh_worker_dispatch_seconds";
/// Live worker registrations on this node.
pub const WORKERS_LIVE: &str = "taskmesh_workers_live";
/// Webhook deliveries settled on this node, by `webhook` and `outcome` (`acked`, `refused`,
/// `abandoned`).
pub const WEBHOOK_DELIVERIES: &str = "taskmesh_webhook_deliveries_total";
/// Webhook delivery attempts made by this node, by `webhook`.
pub const WEBHOOK_ATTEMPTS: &str = "taskmesh_webhook_attempts_total";
/// From a task's status change to the receiver's 2xx, by `webhook`.
pub const WEBHOOK_LAG: &str = "taskmesh_webhook_delivery_lag_seconds";
/// Whether this node has suspended a webhook (1) or not (0), by `webhook`.
pub const WEBHOOK_SUSPENDED: &str = "taskmesh_webhook_suspended";
/// Tasks of the shards this node leads that owe a webhook an event not settled yet, by
/// `shard`.
pub const WEBHOOK_QUEUED: &str = "taskmesh_webhook_queued";

/// Which of the recorder's kinds a metric is.
#[derive(Clone, Copy)]
enum Kind {
    Counter,
    Gauge,
    Histogram,
}
use Kind::{Counter, Gauge, Histogram};

/// Every metric: its name, kind, unit (when it has one) and help text. One row a metric.
#[rustfmt::skip]
const METRICS: &[(&str, Kind, Option<Unit>, &str)] = &[
    (MCP_REQUESTS, Counter, None, "MCP requests answered, by method and outcome"),
    (MCP_REQUEST_DURATION, Histogram, Some(Unit::Seconds), "Time from a request's body read to its answer (streams: to their first event), by method"),
    (HTTP_REFUSALS, Counter, None, "Requests refused before any method ran, by HTTP status and cause"),
    (SSE_STREAMS, Gauge, None, "SSE answers open on this node"),
    (TASKS_CREATED, Counter, None, "Tasks this node's gateway created"),
    (TASKS_TERMINAL, Counter, None, "Tasks that reached a terminal status on a shard this node led, by status"),
    (TASK_CANCELS, Counter, None, "tasks/cancel requests this node's gateway handled, by outcome"),
    (TASKS_EXPIRED, Counter, None, "Terminal tasks deleted at the end of their retention by a shard this node led"),
    (LIVE_TASKS, Gauge, None, "Task actors running on this node"),
    (SHARD_TASKS, Gauge, None, "Task records held by this node's replica of each shard"),
    (RAFT_LEADER, Gauge, None, "1 when this node leads the shard, else 0"),
    (RAFT_QUIESCENT, Gauge, None, "Groups whose replica on this node is quiescent, by role"),
    (RAFT_BEATS, Counter, None, "Node beats sent to peers, by outcome"),
    (RAFT_TERM, Gauge, None, "Raft term of this node's replica of the shard"),
    (RAFT_APPLIED_INDEX, Gauge, None, "Last log index applied by this node's replica of the shard"),
    (RAFT_LAST_LOG_INDEX, Gauge, None, "Last log index held by this node's replica of the shard"),
    (RAFT_COMMITTED_INDEX, Gauge, None, "Committed log index of the shard's group, as this replica knows it"),
    (RAFT_FOLLOWER_LAG, Gauge, None, "On a leader: entries a follower of the shard is behind"),
    (RAFT_LEADER_CHANGES, Counter, None, "Times this node's replica of the shard saw its leader change to another node"),
    (RAFT_LEADERSHIPS_WON, Counter, None, "Times this node became the leader of the shard"),
    (FORWARDED, Counter, None, "Requests forwarded to another node, by node and outcome"),
    (READ_BATCH, Histogram, None, "Reads per batch a gateway sent to another node on its read stream"),
    (STORAGE_FSYNC, Histogram, Some(Unit::Seconds), "One sync to disk of the write-ahead log (a group commit) or of the database"),
    (WAL_SEGMENTS, Gauge, None, "Segment files the write-ahead log has now"),
    (WAL_WRITTEN_BYTES, Counter, Some(Unit::Bytes), "Bytes written to the write-ahead log"),
    (RAFT_LOG_APPEND, Histogram, Some(Unit::Seconds), "A Raft log append, from the write to its flush on disk"),
    (SNAPSHOT_BUILDS, Counter, None, "Snapshots built, by shard"),
    (SNAPSHOT_BUILT_BYTES, Counter, Some(Unit::Bytes), "Bytes of the snapshots built, by shard"),
    (SNAPSHOT_BUILD_DURATION, Histogram, Some(Unit::Seconds), "Time to build a snapshot"),
    (SNAPSHOT_INSTALLS, Counter, None, "Snapshots installed from a leader, by shard"),
    (SNAPSHOT_INSTALLED_BYTES, Counter, Some(Unit::Bytes), "Bytes of the snapshots installed, by shard"),
    (SNAPSHOT_INSTALL_DURATION, Histogram, Some(Unit::Seconds), "Time to install a snapshot"),
    (INPUT_REQUIRED_WAIT, Histogram, Some(Unit::Seconds), "How long a task waited in input_required for its client's answers"),
    (INFLIGHT, Gauge, None, "Plain tools/call requests running and tasks/result reads waiting, on this node"),
    (RAFT_ELECTIONS, Counter, None, "Elections this node's replica of the shard started"),
    (RAFT_PROPOSALS_IN_FLIGHT, Gauge, None, "Proposals under way on this node's replica of the shard"),
    (SESSIONS_WITH_STREAMS, Gauge, None, "Sessions holding an open GET stream on this node"),
    (HTTP_CONNECTIONS, Gauge, None, "Connections open on the MCP listener"),
    (HTTP_CONNECTIONS_CLOSED, Counter, None, "Connections the MCP listener closed before serving a request, by cause"),
    (READY, Gauge, None, "1 when the node is ready to serve (GET /readyz), else 0"),
    (PLAIN_CALLS_AS_TASKS, Counter, None, "Plain tools/call requests of clients that do not speak tasks that this node's gateway ran as tasks"),
    (HANDOFFS, Counter, None, "Of those, the calls still running at tasks.handoff_after_ms, answered with their task"),
    (WORKER_QUEUED, Gauge, None, "Tasks waiting for a worker in the queues of the shards this node leads, by tool"),
    (WORKER_LEASES, Counter, None, "Worker lease events on shards this node led, by tool and event (granted, expired, completed, stale_refused)"),
    (WORKER_DISPATCH, Histogram, Some(Unit::Seconds), "From a task's queueing to its lease being written, by tool"),
    (WORKERS_LIVE, Gauge, None, "Live worker registrations on this node"),
    (WEBHOOK_DELIVERIES, Counter, None, "Webhook deliveries settled by this node, by webhook and outcome (acked, refused, abandoned)"),
    (WEBHOOK_ATTEMPTS, Counter, None, "Webhook delivery attempts made by this node, by webhook"),
    (WEBHOOK_LAG, Histogram, Some(Unit::Seconds), "From a task's status change to the webhook receiver's 2xx, by webhook"),
    (WEBHOOK_SUSPENDED, Gauge, None, "Whether this node has suspended deliveries to a webhook after sustained failure (1) or not (0), by webhook"),
    (WEBHOOK_QUEUED, Gauge, None, "Tasks of a shard this node leads that owe a webhook an event not settled yet, by shard (0 where it does not lead)"),
    (CLIENT_TASKS, Counter, None, "Elicitation and sampling requests run as the client's tasks by executions on this node, by event (created, completed, failed, cancelled, lost)"),
];

/// Describe every metric to the recorder (their help text and units).
pub(crate) fn describe() {
    metrics::with_recorder(|recorder| {
        for &(name, kind, unit, help) in METRICS {
            let (name, help) = (name.into(), help.into());
            match kind {
                Kind::Counter => recorder.describe_counter(name, unit, help),
                Kind::Gauge => recorder.describe_gauge(name, unit, help),
                Kind::Histogram => recorder.describe_histogram(name, unit, help),
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::METRICS;

    /// No metric is described twice.
    #[test]
    fn every_metric_is_described_once() {
        let mut names: Vec<&str> = METRICS.iter().map(|m| m.0).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), METRICS.len());
    }
}
