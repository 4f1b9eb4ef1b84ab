//! The name, unit and meaning of every metric a node exports (units are in the names:
//! `_seconds`, `_bytes`, `_total` for counters).

use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};

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

/// Describe every metric to the recorder (their help text and units).
pub(crate) fn describe() {
    describe_counter!(MCP_REQUESTS, "MCP requests answered, by method and outcome");
    describe_histogram!(
        MCP_REQUEST_DURATION,
        Unit::Seconds,
        "Time from a request's body read to its answer (streams: to their first event), by method"
    );
    describe_counter!(
        HTTP_REFUSALS,
        "Requests refused before any method ran, by HTTP status and cause"
    );
    describe_gauge!(SSE_STREAMS, "SSE answers open on this node");
    describe_counter!(TASKS_CREATED, "Tasks this node's gateway created");
    describe_counter!(
        TASKS_TERMINAL,
        "Tasks that reached a terminal status on a shard this node led, by status"
    );
    describe_counter!(
        TASK_CANCELS,
        "tasks/cancel requests this node's gateway handled, by outcome"
    );
    describe_counter!(
        TASKS_EXPIRED,
        "Terminal tasks deleted at the end of their retention by a shard this node led"
    );
    describe_gauge!(LIVE_TASKS, "Task actors running on this node");
    describe_gauge!(
        SHARD_TASKS,
        "Task records held by this node's replica of each shard"
    );
    describe_gauge!(RAFT_LEADER, "1 when this node leads the shard, else 0");
    describe_gauge!(
        RAFT_QUIESCENT,
        "Groups whose replica on this node is quiescent, by role"
    );
    describe_counter!(RAFT_BEATS, "Node beats sent to peers, by outcome");
    describe_gauge!(RAFT_TERM, "Raft term of this node's replica of the shard");
    describe_gauge!(
        RAFT_APPLIED_INDEX,
        "Last log index applied by this node's replica of the shard"
    );
    describe_gauge!(
        RAFT_LAST_LOG_INDEX,
        "Last log index held by this node's replica of the shard"
    );
    describe_gauge!(
        RAFT_COMMITTED_INDEX,
        "Committed log index of the shard's group, as this replica knows it"
    );
    describe_gauge!(
        RAFT_FOLLOWER_LAG,
        "On a leader: entries a follower of the shard is behind"
    );
    describe_counter!(
        RAFT_LEADER_CHANGES,
        "Times this node's replica of the shard saw its leader change to another node"
    );
    describe_counter!(
        RAFT_LEADERSHIPS_WON,
        "Times this node became the leader of the shard"
    );
    describe_counter!(
        FORWARDED,
        "Requests forwarded to another node, by node and outcome"
    );
    describe_histogram!(
        READ_BATCH,
        "Reads per batch a gateway sent to another node on its read stream"
    );
    describe_histogram!(
        STORAGE_FSYNC,
        Unit::Seconds,
        "One sync to disk of the write-ahead log (a group commit) or of the database"
    );
    describe_gauge!(WAL_SEGMENTS, "Segment files the write-ahead log has now");
    describe_counter!(
        WAL_WRITTEN_BYTES,
        Unit::Bytes,
        "Bytes written to the write-ahead log"
    );
    describe_histogram!(
        RAFT_LOG_APPEND,
        Unit::Seconds,
        "A Raft log append, from the write to its flush on disk"
    );
    describe_counter!(SNAPSHOT_BUILDS, "Snapshots built, by shard");
    describe_counter!(
        SNAPSHOT_BUILT_BYTES,
        Unit::Bytes,
        "Bytes of the snapshots built, by shard"
    );
    describe_histogram!(
        SNAPSHOT_BUILD_DURATION,
        Unit::Seconds,
        "Time to build a snapshot"
    );
    describe_counter!(
        SNAPSHOT_INSTALLS,
        "Snapshots installed from a leader, by shard"
    );
    describe_counter!(
        SNAPSHOT_INSTALLED_BYTES,
        Unit::Bytes,
        "Bytes of the snapshots installed, by shard"
    );
    describe_histogram!(
        SNAPSHOT_INSTALL_DURATION,
        Unit::Seconds,
        "Time to install a snapshot"
    );
    describe_histogram!(
        INPUT_REQUIRED_WAIT,
        Unit::Seconds,
        "How long a task waited in input_required for its client's answers"
    );
    describe_gauge!(
        INFLIGHT,
        "Plain tools/call requests running and tasks/result reads waiting, on this node"
    );
    describe_counter!(
        RAFT_ELECTIONS,
        "Elections this node's replica of the shard started"
    );
    describe_gauge!(
        RAFT_PROPOSALS_IN_FLIGHT,
        "Proposals under way on this node's replica of the shard"
    );
    describe_gauge!(
        SESSIONS_WITH_STREAMS,
        "Sessions holding an open GET stream on this node"
    );
    describe_gauge!(HTTP_CONNECTIONS, "Connections open on the MCP listener");
    describe_counter!(
        HTTP_CONNECTIONS_CLOSED,
        "Connections the MCP listener closed before serving a request, by cause"
    );
    describe_gauge!(
        READY,
        "1 when the node is ready to serve (GET /readyz), else 0"
    );
}
