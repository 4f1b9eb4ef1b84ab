//! Configuration: one typed struct, filled from a TOML file, then `TASKMESH_*` environment
//! variables, then command-line flags (each overriding the one before). Every field is
//! documented in docs/configuration.md.
//!
//! Environment variables name a setting by its TOML path in upper case, with `__` between a
//! section and a key: `TASKMESH_LISTEN`, `TASKMESH_TASKS__MAX_LIVE_TASKS=5000`,
//! `TASKMESH_AUTH__TOKENS='{ "s3cret" = "alice" }'`. A value is read as TOML when it parses as
//! one (numbers, booleans, arrays, inline tables) and as a string otherwise.

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;

/// The most runtime threads a node may be given.
pub const MAX_WORKER_THREADS: usize = 1024;
/// The most events `http.sse_buffer_events` may keep per stream.
pub const MAX_SSE_BUFFER_EVENTS: usize = 65_536;
/// The smallest `http.max_header_bytes`: the HTTP/1 parser's buffer cannot be smaller.
pub const MIN_HEADER_BYTES: usize = 8 * 1024;
/// The largest `http.max_header_bytes` accepted.
pub const MAX_HEADER_BYTES: usize = 1024 * 1024;
/// The largest `http.max_listen_task_ids` accepted.
pub const MAX_LISTEN_TASK_IDS: usize = 100_000;

/// The most logical shards a cluster may have: every node keeps per-shard state (a Raft group
/// per replica it holds, its trees, its reconciler), and the shard count never changes.
pub const MAX_SHARDS: u32 = 4096;

/// A node's whole configuration: the built-in defaults, overridden by a TOML file, then by
/// `TASKMESH_*` environment variables, then by command-line flags (see [`Config::load`]).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// MCP listen address (`/mcp` is served there).
    pub listen: SocketAddr,
    /// Where the node keeps its database and session key.
    pub data_dir: PathBuf,
    /// This node's id in its shard groups.
    pub node_id: u64,
    /// Logical shards, a power of two, fixed when the data directory is created.
    pub shards: u32,
    /// How long a stopping node waits for open streams to finish, in ms.
    pub shutdown_drain_ms: u64,
    /// How long a stopping node keeps serving after `GET /readyz` turned 503, before it hands
    /// over its leaderships and drains, in ms: time for load balancers to notice.
    pub shutdown_unready_wait_ms: u64,
    /// Threads of the node's async runtime; 0: one per CPU core.
    pub worker_threads: usize,
    /// Whether the kernel may back the node's memory with transparent huge pages (2 MiB).
    /// Off by default: a huge page becomes resident whole at its first touch, so the sparse
    /// buffers of each idle shard replica cost ~3.3 MiB of RSS instead of ~0.4 MiB.
    pub transparent_huge_pages: bool,
    /// `[http]`: request body size, allowed origins and SSE streams of the MCP endpoint.
    pub http: HttpConfig,
    /// `[auth]`: static bearer tokens, trusted OAuth issuers and the scopes each operation needs.
    pub auth: taskmesh_gateway::auth::AuthConfig,
    /// `[session]`: the key that signs session ids and cursors, and the verified-id cache.
    pub session: SessionConfig,
    /// `[tasks]`: TTLs, polling, the live-task cap, expiry, listing and task write retries.
    pub tasks: TasksConfig,
    /// `[tools]`: whether the built-in tools are served, and the `tools/list` page size.
    pub tools: ToolsConfig,
    /// `[raft]`: timings and snapshot settings of every Raft group this node holds a replica of.
    pub raft: RaftConfig,
    /// `[log]`: the tracing filter and the output format.
    pub log: LogConfig,
    /// `[metrics]`: Prometheus metrics, and the listener for operators' tools.
    pub metrics: MetricsConfig,
    /// `[tracing]`: OpenTelemetry spans exported over OTLP/HTTP (off unless an endpoint is set).
    pub tracing: taskmesh_telemetry::TracingConfig,
    /// `[limits]`: the request rate per principal and the in-flight requests per session.
    pub limits: LimitsConfig,
    /// `[cluster]`: multi-node operation; without `peers` the node runs as a single server.
    pub cluster: ClusterConfig,
    /// `[[upstream]]`: MCP servers whose tools this node serves as its own (every node of a
    /// cluster reads the same list).
    pub upstream: Vec<taskmesh_upstream::UpstreamConfig>,
}

/// Multi-node operation. With no peers the node is the embedded single-node server.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterConfig {
    /// Internal gRPC address (Raft traffic and the task service between nodes).
    pub grpc_listen: Option<SocketAddr>,
    /// The gRPC address other nodes reach this node at; default: `grpc_listen`.
    pub advertise: Option<String>,
    /// Seed peers (id + gRPC address): with `bootstrap`, the cluster's first members (this
    /// node among them); otherwise the nodes a joining node contacts first.
    pub peers: Vec<PeerConfig>,
    /// Create the cluster (its metadata group, identity and first members; the shard groups
    /// follow) on its first start. Idempotent. Also `--bootstrap`.
    pub bootstrap: bool,
    /// Replicas per shard (fewer while the cluster has fewer nodes); fixed at creation.
    pub replication: u32,
    /// How often a node compares itself with the cluster metadata and moves towards it, in ms.
    pub reconcile_interval_ms: u64,
    /// How many shards a reconciler pass works on at once (opening, creating, changing members,
    /// handing over). Default 16; at least 1.
    pub reconcile_shards_in_flight: usize,
    /// A new replica becomes a voter once it is at most this many log entries behind.
    pub catch_up_entries: u64,
    /// A leader hands a shard to its preferred leader only after leading it this long, in ms.
    pub leader_settle_ms: u64,
    /// How long a request keeps retrying while a shard has no reachable leader, in ms.
    pub request_retry_ms: u64,
    /// How long a stopping node waits for the leadership of its shards to move, in ms.
    pub leader_transfer_ms: u64,
    /// Most forwarded polls sent to one node in one batch.
    pub get_batch_max: usize,
    /// Most batches of forwarded polls under way to one node at once.
    pub get_batches_in_flight: usize,
    /// `[cluster.tls]`: mutual TLS on the internal port (required unless `insecure`).
    pub tls: Option<ClusterTlsConfig>,
    /// Run the internal port as plain, unauthenticated gRPC: anyone who reaches it can read
    /// and forge any task and vote in any Raft group. Only for a network nothing else can
    /// reach; logged as a warning at every start. Default false.
    pub insecure: bool,
}

/// `[cluster.tls]`: the node's mutual TLS on the internal port. Every peer's certificate must
/// chain to `ca_file` and name a member of the cluster (`node-{id}.taskmesh`), or an operator
/// (`admin.taskmesh`, the cluster service only); this node's certificate must name this node.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterTlsConfig {
    /// The cluster's certificate authority (PEM).
    pub ca_file: PathBuf,
    /// This node's certificate (PEM, the leaf first).
    pub cert_file: PathBuf,
    /// Its private key (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key_file: PathBuf,
    /// How often the three files are checked for a change, in ms. Default 10000, at least 100.
    #[serde(default = "default_tls_reload_ms")]
    pub reload_interval_ms: u64,
    /// How long an incoming connection's TLS handshake may take, in ms. Default 5000, at
    /// least 100.
    #[serde(default = "default_handshake_ms")]
    pub handshake_timeout_ms: u64,
}

fn default_handshake_ms() -> u64 {
    5_000
}

/// `[metrics]`: Prometheus metrics (`GET /metrics`) and the operators' listener.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsConfig {
    /// Record metrics and serve them. Off: nothing is recorded and `/metrics` answers 404.
    pub enabled: bool,
    /// A second listener, without authentication, serving only `/metrics`, `/healthz` and
    /// `/readyz` (for Prometheus and probes on a network only operators reach). Unset: those
    /// are served on the MCP listener only (`/metrics` with the rules of `/status`).
    pub listen: Option<SocketAddr>,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            listen: None,
        }
    }
}

/// One seed node in `cluster.peers`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeerConfig {
    /// The peer's node id: at least 1 and unique within `cluster.peers`.
    pub id: u64,
    /// The peer's internal gRPC address.
    pub grpc: String,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        let batching = taskmesh_router::GetBatching::default();
        Self {
            grpc_listen: None,
            advertise: None,
            peers: Vec::new(),
            bootstrap: false,
            replication: 3,
            reconcile_interval_ms: 500,
            reconcile_shards_in_flight: 16,
            catch_up_entries: 100,
            leader_settle_ms: 3_000,
            request_retry_ms: taskmesh_router::DEFAULT_RETRY_BUDGET.as_millis() as u64,
            leader_transfer_ms: 3_000,
            get_batch_max: batching.max_items,
            get_batches_in_flight: batching.in_flight,
            tls: None,
            insecure: false,
        }
    }
}

/// `[limits]`: how much one principal and one session may ask of the node.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    /// Requests per second per principal; 0 = no limit.
    pub requests_per_second: u32,
    /// Burst above the rate; 0 = the rate.
    pub burst: u32,
    /// Unknown-task lookups per minute per principal before an audit warning; 0 = never.
    pub failed_lookup_alert_per_minute: u32,
    /// Tasks one principal may create per minute on this node; past it `-32001`. 0 (the
    /// default) = no limit.
    pub tasks_per_minute: u32,
    /// Sessions (`initialize`) one principal may open per minute on this node; past it
    /// `-32001`. 0 (the default) = no limit.
    pub sessions_per_minute: u32,
    /// Wrong bearer tokens one client address may send within a minute; past it its wrong
    /// tokens get 429 (valid ones are served) until its minute is over. Default 20; 0 = unlimited.
    pub failed_auth_per_minute: u32,
    /// Cancellable requests (plain `tools/call`, held `tasks/result`) one session may have in
    /// flight at once; more are refused with `-32001`. At least 1.
    pub max_inflight_per_session: usize,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        let g = taskmesh_gateway::GatewayConfig::default();
        Self {
            requests_per_second: g.rate_limit_per_second,
            burst: g.rate_limit_burst,
            failed_lookup_alert_per_minute: g.failed_lookup_alert_per_minute,
            failed_auth_per_minute: g.failed_auth_per_minute,
            tasks_per_minute: g.tasks_per_minute,
            sessions_per_minute: g.sessions_per_minute,
            max_inflight_per_session: g.max_inflight_per_session,
        }
    }
}

/// `[http]`: what the MCP HTTP endpoint accepts and how it keeps SSE streams open.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpConfig {
    /// Largest request body, in bytes; a larger one gets HTTP 413. Default 1 MiB, at least 1024.
    pub max_body_bytes: usize,
    /// Origins allowed to call (DNS-rebinding protection): an entry without a port matches any
    /// port, `"*"` allows all; a request without `Origin` is allowed. Default: localhost only.
    pub allowed_origins: Vec<String>,
    /// Interval of keep-alive comments on SSE streams, in ms (below 100 acts as 100). Default
    /// 15000.
    pub sse_keepalive_ms: u64,
    /// GET streams one session may hold open at once; one more gets HTTP 429. At least 1.
    pub max_streams_per_session: usize,
    /// SSE answers of every kind open at once on the node; one more gets HTTP 429. Default
    /// 10000, at least 1.
    pub max_sse_streams: usize,
    /// SSE answers one principal may have open at once on the node; one more gets HTTP 429.
    /// Default 1000, at least 1.
    pub max_sse_streams_per_principal: usize,
    /// Connections open at once on the MCP listener; one more is closed as soon as it is
    /// accepted. Default 10000, at least 1.
    pub max_connections: usize,
    /// How long a request's headers may take to arrive (from the moment the connection waits
    /// for them, also between requests on a kept-alive connection) before the connection is
    /// closed, in ms. Default 10000, at least 100.
    pub header_read_timeout_ms: u64,
    /// The most bytes a request's head (request line and headers) may take; a larger one gets
    /// HTTP 431 and its connection is closed. Default 65536, between 8192 and 1048576.
    pub max_header_bytes: usize,
    /// How long a request's body may take to arrive once its headers did, in ms; slower gets
    /// HTTP 408. Default 30000, at least 100.
    pub body_read_timeout_ms: u64,
    /// Task ids one 2026-07-28 `subscriptions/listen` may watch; more get `-32602`. Default
    /// 1000, between 1 and 100000.
    pub max_listen_task_ids: usize,
    /// `subscriptions/listen` streams one principal may hold open on a node; one more gets
    /// HTTP 429. Default 64, at least 1.
    pub max_listen_streams_per_principal: usize,
    /// How long a 2026-07-28 plain call's `requestState` stays good, in ms. Default 600000,
    /// at least 1000.
    pub request_state_ttl_ms: u64,
    /// Events one SSE stream keeps for a reconnection with `Last-Event-ID`, and the most that
    /// wait unread before its producer is held back. Default 256, between 1 and 65536.
    pub sse_buffer_events: usize,
    /// The reconnection delay sent in the SSE `retry` field, in ms. Default 1000.
    pub sse_retry_ms: u64,
    /// How long a stream whose connection ended is kept for a reconnection, in ms; 0: not
    /// kept. Default 10000.
    pub sse_resume_window_ms: u64,
    /// `[http.tls]`: serve the MCP listener over TLS (HTTPS). Unset: plain HTTP.
    pub tls: Option<ListenerTls>,
    /// After how long the server closes an SSE connection on purpose (the client reconnects
    /// with `Last-Event-ID`), in ms, for 2025-11-25 sessions; 0: never. Default 300000.
    pub sse_max_stream_ms: u64,
}

/// `[http.tls]`: the MCP listener's certificate and key (PEM files), read again when either
/// changes, so a certificate is replaced without a restart.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListenerTls {
    /// The certificate (the leaf first, then its chain).
    pub cert_file: PathBuf,
    /// Its private key (PKCS#8, PKCS#1 or SEC1).
    pub key_file: PathBuf,
    /// How often the files are checked for a change, in ms. Default 10000, at least 100.
    #[serde(default = "default_tls_reload_ms")]
    pub reload_interval_ms: u64,
}

fn default_tls_reload_ms() -> u64 {
    10_000
}

/// `[session]`: how session ids and `tasks/list` cursors are signed and checked.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SessionConfig {
    /// Secret signing session ids and cursors; shared by all nodes of a cluster. Unset: a
    /// random key is created in the data directory.
    pub secret: Option<String>,
    /// Session ids whose signature was verified, kept so that later requests skip the HMAC;
    /// 0 = verify every request.
    pub verified_cache: usize,
}

impl Default for SessionConfig {
    fn default() -> Self {
        Self {
            secret: None,
            verified_cache: taskmesh_gateway::GatewayConfig::default().verified_session_cache,
        }
    }
}

/// `[tasks]`: the lifetime, polling, admission and listing of tasks.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TasksConfig {
    /// TTL when a create asks for none, ms; 0 = unlimited.
    pub default_ttl_ms: u64,
    /// Largest TTL granted, ms; 0 = no cap.
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
    /// Tasks per `tasks/list` page. Default 50, at least 1.
    pub list_page_size: usize,
    /// Lifetime of a `tasks/list` cursor, in ms; an older one is refused with `-32602`.
    /// Default 3600000 (1 h).
    pub cursor_ttl_ms: u64,
    /// How often a shard leader checks that every live task has its execution, ms.
    pub reconcile_interval_ms: u64,
    /// First pause before a refused task write is tried again, ms (doubles per refusal).
    pub write_retry_min_ms: u64,
    /// Longest pause between tries of a refused task write, ms.
    pub write_retry_max_ms: u64,
    /// Largest outcome a task keeps, bytes of JSON.
    pub max_result_bytes: usize,
}

/// `[tools]`: which tools the node serves and how `tools/list` pages them.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ToolsConfig {
    /// Serve the built-in tools.
    pub builtin: bool,
    /// Serve the tools the official conformance suite calls (`test_simple_text`, ...), listed
    /// first. Default false.
    pub conformance: bool,
    /// Tools per `tools/list` page. Default 50, at least 1.
    pub page_size: usize,
}

/// The most `raft.log_cache_bytes` may be (64 MiB): it is held by every busy group.
pub const MAX_LOG_CACHE_BYTES: usize = 64 << 20;

/// `[raft]`: the Raft settings shared by every group on the node (task shards and the
/// metadata group), and the size limits of snapshot transfers.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RaftConfig {
    /// Interval of leader heartbeats, in ms. Default 100; must be below
    /// `election_timeout_min_ms`.
    pub heartbeat_interval_ms: u64,
    /// Lower bound of the randomised election timeout, in ms. Default 300; must exceed
    /// `heartbeat_interval_ms`.
    pub election_timeout_min_ms: u64,
    /// Upper bound of the randomised election timeout, in ms. Default 600; must exceed
    /// `election_timeout_min_ms`.
    pub election_timeout_max_ms: u64,
    /// A group with nothing to do for this long quiesces: it stops its heartbeats and election
    /// timers, and the node's one beat per peer and heartbeat interval stands in for them until
    /// a proposal, a read or a failure wakes it. In ms; default 1000; 0 turns quiescence off.
    /// Otherwise at least twice `heartbeat_interval_ms`.
    pub quiesce_after_ms: u64,
    /// How often the node beats to each peer for its quiescent groups (and checks its groups'
    /// quiescence), in ms. Default 150; at most half of `election_timeout_min_ms`, so that a
    /// quiescent follower hears at least two beats before it would tick again.
    pub beat_interval_ms: u64,
    /// How often the node checks again that each group it leads quiescently is still settled,
    /// in ms. A leader that stopped leading while quiet is normally found sooner: the first
    /// beat a member answers from a newer term wakes the group. Default 10000; at least
    /// `beat_interval_ms`.
    pub quiet_recheck_ms: u64,
    /// The most heartbeats (AppendEntries without entries, of any group) one call to a peer
    /// carries; while 4 calls are under way the next ones queue, up to 16 calls' worth, and a
    /// heartbeat past that fails at once like an unreachable peer's. 1: every heartbeat is its
    /// own call. Default 1024; at least 1.
    pub heartbeat_batch_max: usize,
    /// A group builds a snapshot after this many entries were applied since the last one
    /// (the log before it is then purged). Default 10000.
    pub snapshot_logs_since_last: u64,
    /// Log entries already covered by a snapshot that are kept for followers lagging a little.
    /// Default 1000.
    pub max_in_snapshot_log_to_keep: u64,
    /// Time for sending one snapshot chunk to a follower and for its final install, in ms.
    pub install_snapshot_timeout_ms: u64,
    /// Bytes of snapshot data per message.
    pub snapshot_chunk_bytes: usize,
    /// The largest snapshot a node accepts from a leader (held in memory while it arrives).
    pub max_snapshot_bytes: u64,
    /// The size at which a segment of the node's write-ahead log (every group's Raft log) is
    /// closed and the next one begun; dead segments are deleted whole. Default 64 MiB.
    pub log_segment_bytes: u64,
    /// Per group: how many bytes (encoded) of the latest entries appended to its log are also
    /// kept in memory, so that replication to the followers and the apply take them from
    /// there instead of reading and decoding the log again. Let go when the group quiesces.
    /// Default 65536; 0: none are kept; at most [`MAX_LOG_CACHE_BYTES`].
    pub log_cache_bytes: usize,
}

/// `[log]`: what the node logs and in which format.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    /// A tracing filter, e.g. `info` or `info,taskmesh_host=debug`.
    pub level: String,
    /// `text` or `json`.
    pub format: String,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            data_dir: PathBuf::from("./data"),
            node_id: 1,
            shards: 32,
            shutdown_drain_ms: 5_000,
            shutdown_unready_wait_ms: 0,
            worker_threads: 0,
            transparent_huge_pages: false,
            http: HttpConfig::default(),
            auth: taskmesh_gateway::auth::AuthConfig::default(),
            session: SessionConfig::default(),
            tasks: TasksConfig::default(),
            tools: ToolsConfig::default(),
            raft: RaftConfig::default(),
            log: LogConfig::default(),
            metrics: MetricsConfig::default(),
            tracing: taskmesh_telemetry::TracingConfig::default(),
            limits: LimitsConfig::default(),
            cluster: ClusterConfig::default(),
            upstream: Vec::new(),
        }
    }
}

impl Default for HttpConfig {
    fn default() -> Self {
        let g = taskmesh_gateway::GatewayConfig::default();
        Self {
            max_body_bytes: g.max_body_bytes,
            allowed_origins: g.allowed_origins,
            sse_keepalive_ms: g.sse_keepalive_ms,
            max_streams_per_session: g.max_streams_per_session,
            max_sse_streams: g.max_sse_streams,
            max_sse_streams_per_principal: g.max_sse_streams_per_principal,
            max_connections: 10_000,
            header_read_timeout_ms: 10_000,
            max_header_bytes: 64 * 1024,
            tls: None,
            body_read_timeout_ms: g.body_read_timeout_ms,
            max_listen_task_ids: g.max_listen_task_ids,
            max_listen_streams_per_principal: g.max_listen_streams_per_principal,
            request_state_ttl_ms: g.request_state_ttl_ms,
            sse_buffer_events: g.stream_buffer,
            sse_retry_ms: g.sse_retry_ms,
            sse_resume_window_ms: g.sse_resume_window_ms,
            sse_max_stream_ms: g.sse_max_stream_ms,
        }
    }
}

impl Default for TasksConfig {
    fn default() -> Self {
        let h = taskmesh_host::HostConfig::default();
        let g = taskmesh_gateway::GatewayConfig::default();
        Self {
            default_ttl_ms: h.default_ttl_ms.unwrap_or(0),
            max_ttl_ms: h.max_ttl_ms.unwrap_or(0),
            poll_interval_ms: h.poll_interval_ms,
            max_live_tasks: h.max_live_tasks,
            max_live_tasks_per_principal: h.max_live_tasks_per_principal,
            expiry_sweep_interval_ms: h.expiry_sweep_interval_ms,
            list_page_size: g.tasks_page_size,
            cursor_ttl_ms: g.cursor_ttl_ms,
            reconcile_interval_ms: h.reconcile_interval_ms,
            write_retry_min_ms: h.write_retry_min_ms,
            write_retry_max_ms: h.write_retry_max_ms,
            max_result_bytes: h.max_result_bytes,
        }
    }
}

impl Default for ToolsConfig {
    fn default() -> Self {
        Self {
            builtin: true,
            conformance: false,
            page_size: taskmesh_gateway::GatewayConfig::default().tools_page_size,
        }
    }
}

impl Default for RaftConfig {
    fn default() -> Self {
        let s = taskmesh_shard::ShardConfig::default();
        let t = taskmesh_transport::TransportConfig::default();
        Self {
            heartbeat_interval_ms: s.heartbeat_interval_ms,
            election_timeout_min_ms: s.election_timeout_min_ms,
            election_timeout_max_ms: s.election_timeout_max_ms,
            quiesce_after_ms: 1_000,
            beat_interval_ms: 150,
            quiet_recheck_ms: 10_000,
            heartbeat_batch_max: 1024,
            snapshot_logs_since_last: s.snapshot_logs_since_last,
            max_in_snapshot_log_to_keep: s.max_in_snapshot_log_to_keep,
            install_snapshot_timeout_ms: s.install_snapshot_timeout_ms,
            snapshot_chunk_bytes: t.snapshot_chunk_bytes,
            max_snapshot_bytes: t.max_snapshot_bytes,
            log_segment_bytes: taskmesh_wal::DEFAULT_SEGMENT_BYTES,
            log_cache_bytes: s.log_cache_bytes,
        }
    }
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            level: "info,openraft=warn".into(),
            format: "text".into(),
        }
    }
}

mod load;
#[cfg(test)]
mod tests;
mod validate;

pub use load::Overrides;
