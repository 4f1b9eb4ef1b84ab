//! Configuration: one typed struct, filled from a TOML file, then `TASKMESH_*` environment
//! variables, then command-line flags (each overriding the one before). Every field is
//! documented in docs/configuration.md.
//!
//! The node defines its own keys (the top level, `[cluster]`, `[metrics]`, `[log]`); every
//! other section is a type of the crate that uses it, with its defaults and its `validate()`
//! (`[tasks]`: `taskmesh_host::TaskSettings`, `[raft]`: `taskmesh_shard::RaftSettings`,
//! `[http]`, `[session]`, `[limits]`, `[tools]`: `taskmesh_gateway::settings`, ...), and
//! [`Config`] only composes them.
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
    pub http: taskmesh_gateway::settings::HttpSettings,
    /// `[auth]`: static bearer tokens, trusted OAuth issuers and the scopes each operation needs.
    pub auth: taskmesh_gateway::auth::AuthConfig,
    /// `[session]`: the key that signs session ids and cursors, and the verified-id cache.
    pub session: taskmesh_gateway::settings::SessionSettings,
    /// `[tasks]`: TTLs, polling, the live-task cap, expiry, listing and task write retries.
    pub tasks: taskmesh_host::TaskSettings,
    /// `[workers]`: leases, polls and queues of worker tasks, and the workers' credentials.
    pub workers: taskmesh_host::WorkerSettings,
    /// `[events]`: timeouts, retries, concurrency and egress of webhook deliveries.
    pub events: taskmesh_host::EventSettings,
    /// `[[webhooks]]`: the operator's webhooks, sent the events of every task they cover.
    pub webhooks: Vec<taskmesh_host::WebhookSettings>,
    /// `[tools]`: whether the built-in tools are served, and the `tools/list` page size.
    pub tools: taskmesh_gateway::settings::ToolsSettings,
    /// `[raft]`: timings and snapshot settings of every Raft group this node holds a replica of.
    pub raft: taskmesh_shard::RaftSettings,
    /// `[log]`: the tracing filter and the output format.
    pub log: LogConfig,
    /// `[metrics]`: Prometheus metrics, and the listener for operators' tools.
    pub metrics: MetricsConfig,
    /// `[tracing]`: OpenTelemetry spans exported over OTLP/HTTP (off unless an endpoint is set).
    pub tracing: taskmesh_telemetry::TracingConfig,
    /// `[limits]`: the request rate per principal and the in-flight requests per session.
    pub limits: taskmesh_gateway::settings::LimitsSettings,
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

fn default_tls_reload_ms() -> u64 {
    10_000
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
            http: Default::default(),
            auth: Default::default(),
            session: Default::default(),
            tasks: Default::default(),
            workers: Default::default(),
            events: Default::default(),
            webhooks: Vec::new(),
            tools: Default::default(),
            raft: Default::default(),
            log: Default::default(),
            metrics: Default::default(),
            tracing: Default::default(),
            limits: Default::default(),
            cluster: Default::default(),
            upstream: Vec::new(),
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
