//! Workers: processes in any language that pull the work of tasks through the worker API,
//! hold it under a lease and complete it (proto/taskmesh/v1/worker.proto, docs/workers.md).
//!
//! A worker registers on some node the tools it serves ([`Host::register_worker`]); they join
//! the node's tool registry as the source `workers`, so `tools/list` shows them and a
//! `tools/call` of one creates a task whose record says a worker runs it (`worker`). Its
//! execution on the shard's leader (`execute.rs`) does not call the tool: it puts the task in
//! this node's queue of the tool (`queue.rs`, fair across principals) and waits. A poll
//! (`lease.rs`) takes queued tasks, writes each one's lease through the shard's log and hands
//! them to the worker; the execution then watches the lease's deadline and, when it runs out,
//! takes the lease back and decides by the tool's resume policy. Heartbeats, input requests
//! and the completion travel as operations to the shard's leader, wherever it is, fenced by
//! the lease's token in the state machine.

mod execute;
mod lease;
mod peers;
mod queue;
mod settings;
mod tool;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use taskmesh_tools::{Tool, ToolRegistry, ToolSpec};
use tokio::sync::{oneshot, Notify};

pub(crate) use execute::execute;
pub use lease::{LeaseAsk, LeaseBeat, LeaseComplete, LeaseRef, Leased, Renewed};
pub use peers::{Digest, WORKER_DIGEST_TTL};
pub use settings::{IdentitySettings, WorkerSettings};
use tool::check_declared;
pub(crate) use tool::{placeholder, WorkerTool};

use crate::Host;

/// The tool registry source of the tools live workers serve.
const SOURCE: &str = "workers";
/// Longest tool name (the MCP tool name rules).
const MAX_TOOL_NAME: usize = 128;

/// Why a worker call was refused; nothing changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WorkerError {
    /// The request can never succeed as sent (a malformed tool, a bad argument).
    #[error("{0}")]
    Invalid(String),
    /// The credential may not do this (a tool its identity is not allowed).
    #[error("{0}")]
    Forbidden(String),
    /// No such registration or lease (or it is another identity's).
    #[error("{0}")]
    NotFound(String),
    /// The name is taken by another source's tool, or served with another declaration.
    #[error("{0}")]
    Conflict(String),
    /// The lease is not the task's current one: it ran out or was granted again since.
    #[error("the lease is not the task's current one: it ran out, or the task was leased again since; stop the task's work")]
    StaleLease,
    /// The task has ended (cancelled, or already completed); a completion changes nothing.
    #[error("the task has already ended ({0})")]
    Ended(String),
    /// A limit of the node is reached; try later or elsewhere.
    #[error("{0}")]
    Exhausted(String),
    /// The node cannot serve it now (no shard leader reachable); nothing changed, retry.
    #[error("{0}")]
    Unavailable(String),
    /// No worker credential, or one that is not valid.
    #[error("{0}")]
    Unauthenticated(String),
    /// A failure whose effect is not known.
    #[error("{0}")]
    Internal(String),
}

impl From<crate::HostError> for WorkerError {
    /// A lease operation's failure, as the worker is told it.
    fn from(e: crate::HostError) -> Self {
        use crate::HostError as H;
        match e {
            H::StaleLease => WorkerError::StaleLease,
            H::Terminal(s) => WorkerError::Ended(s.to_string()),
            H::NotFound => {
                WorkerError::NotFound("no such task: its id is unknown, or it expired".into())
            }
            H::Invalid(m) => WorkerError::Invalid(m),
            H::NotLeader { .. } | H::Unavailable(_) => {
                WorkerError::Unavailable(format!("{e}; nothing changed, try again"))
            }
            other => WorkerError::Internal(other.to_string()),
        }
    }
}

impl WorkerError {
    /// The gRPC code's name this error is answered with (also the JSON mirror's `code`).
    pub fn code(&self) -> &'static str {
        match self {
            WorkerError::Invalid(_) => "INVALID_ARGUMENT",
            WorkerError::Forbidden(_) => "PERMISSION_DENIED",
            WorkerError::NotFound(_) => "NOT_FOUND",
            WorkerError::Conflict(_) => "ALREADY_EXISTS",
            WorkerError::StaleLease | WorkerError::Ended(_) => "FAILED_PRECONDITION",
            WorkerError::Exhausted(_) => "RESOURCE_EXHAUSTED",
            WorkerError::Unavailable(_) => "UNAVAILABLE",
            WorkerError::Unauthenticated(_) => "UNAUTHENTICATED",
            WorkerError::Internal(_) => "INTERNAL",
        }
    }
}

/// A tool as a worker declares it at registration.
#[derive(Debug, Clone)]
pub struct Declared {
    /// Its `tools/list` entry and resume policy.
    pub spec: ToolSpec,
}

/// What a registration answers.
#[derive(Debug, Clone)]
pub struct Registered {
    /// The registration's id.
    pub worker_id: String,
    /// `workers.lease_ms`.
    pub lease_ms: u64,
    /// `workers.poll_wait_max_ms`.
    pub poll_wait_max_ms: u64,
    /// `workers.idle_timeout_ms`.
    pub idle_timeout_ms: u64,
    /// This node's id.
    pub node_id: u64,
}

/// A live registration, as `taskmesh workers` and `GET /status` show it.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkerInfo {
    /// The registration's id.
    pub worker_id: String,
    /// The worker identity (its credential's).
    pub identity: String,
    /// The label the worker gave.
    pub label: String,
    /// The tools it serves.
    pub tools: Vec<String>,
    /// Leases it may hold at once.
    pub max_concurrent_tasks: u32,
    /// The node holding it.
    pub node_id: u64,
    /// When it registered, in ms since the Unix epoch.
    pub registered_at_ms: u64,
}

struct Registration {
    info: WorkerInfo,
    tools: Vec<Arc<WorkerTool>>,
    last_seen: Instant,
}

/// A task waiting in a queue: its shard and execution term, and who to tell when it is leased.
pub(crate) struct Waiting {
    shard: u32,
    term: u64,
    tool: String,
    queued_at: Instant,
    granted: oneshot::Sender<bool>,
}

/// This node's worker state: its registrations and the queues of the tasks whose shards it
/// leads.
pub(crate) struct Workers {
    pub(crate) settings: WorkerSettings,
    queues: Mutex<queue::Queues<Waiting>>,
    /// Woken when a task is queued: waiting polls look again.
    queued: Notify,
    registrations: Mutex<HashMap<String, Registration>>,
    /// Bumped when what this node tells its peers changed (see `peers.rs`).
    changes: tokio::sync::watch::Sender<u64>,
    /// What each peer last told of its workers.
    peers: Mutex<HashMap<u64, peers::PeerWorkers>>,
    /// The input requests of workers, by (task id, key), with their answers to come: a
    /// repeated ask waits for the first one's answer.
    pub(crate) asks: Mutex<HashMap<(String, String), lease::Asked>>,
}

impl Workers {
    pub(crate) fn new(settings: WorkerSettings) -> Self {
        Self {
            settings,
            queues: Mutex::new(queue::Queues::default()),
            queued: Notify::new(),
            registrations: Mutex::new(HashMap::new()),
            changes: tokio::sync::watch::Sender::new(0),
            peers: Mutex::new(HashMap::new()),
            asks: Mutex::new(HashMap::new()),
        }
    }

    /// Tell the peers (through the router's exchange) that the digest changed.
    fn changed(&self) {
        self.changes.send_modify(|v| *v += 1);
    }

    /// Forget the input requests of task `task_id` (its execution ended here).
    pub(crate) fn forget_asks(&self, task_id: &str) {
        self.asks.lock().retain(|(t, _), _| t != task_id);
    }

    /// How many tasks of `tool` wait for a worker here.
    pub(crate) fn queued(&self, tool: &str) -> usize {
        self.queues.lock().len(tool)
    }
}

/// A fresh secret: 128 random bits as lowercase hex.
pub(crate) fn secret() -> Result<String, WorkerError> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes)
        .map_err(|e| WorkerError::Unavailable(format!("OS random source failed: {e}")))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

impl Host {
    /// Register a worker of `identity` serving `tools` (see the module doc). Refused, changing
    /// nothing, when a tool is malformed, not allowed to the identity, named like a built-in
    /// or upstream tool, or served by another live worker with another declaration.
    pub fn register_worker(
        &self,
        identity: &str,
        label: &str,
        tools: Vec<Declared>,
        max_concurrent_tasks: u32,
    ) -> Result<Registered, WorkerError> {
        let w = &self.inner.workers;
        let s = &w.settings;
        if tools.is_empty() || tools.len() > s.max_tools_per_worker {
            return Err(WorkerError::Invalid(format!(
                "a registration declares 1 to {} tools (workers.max_tools_per_worker); got {}",
                s.max_tools_per_worker,
                tools.len()
            )));
        }
        let allowed = s.identities.get(identity);
        for (i, d) in tools.iter().enumerate() {
            check_declared(d)?;
            if tools[..i].iter().any(|o| o.spec.name == d.spec.name) {
                return Err(WorkerError::Invalid(format!(
                    "tool '{}' is declared twice",
                    d.spec.name
                )));
            }
            if !allowed.is_some_and(|a| a.allows(&d.spec.name)) {
                return Err(WorkerError::Forbidden(format!(
                    "worker identity '{identity}' may not serve tool '{}' (workers.identities)",
                    d.spec.name
                )));
            }
        }
        let mut regs = w.registrations.lock();
        if regs.len() >= s.max_registrations {
            return Err(WorkerError::Exhausted(format!(
                "this node holds {} worker registrations (workers.max_registrations); register on another node or later",
                regs.len()
            )));
        }
        let listing = self.inner.tools.snapshot();
        for d in &tools {
            let name = &d.spec.name;
            match listing.get(name) {
                Some(t) if !t.runs_on_workers() => {
                    return Err(WorkerError::Conflict(format!(
                        "tool '{name}' is already served by this node (a built-in or upstream tool)"
                    )))
                }
                Some(t)
                    if t.spec().to_wire(true) != d.spec.to_wire(true)
                        || t.spec().resume != d.spec.resume =>
                {
                    return Err(WorkerError::Conflict(format!(
                        "tool '{name}' is served by another live worker with another declaration"
                    )))
                }
                _ => {}
            }
        }
        let worker_id = secret()?;
        let info = WorkerInfo {
            worker_id: worker_id.clone(),
            identity: identity.to_string(),
            label: label.to_string(),
            tools: tools.iter().map(|d| d.spec.name.clone()).collect(),
            max_concurrent_tasks: max_concurrent_tasks.max(1),
            node_id: self.inner.cfg.node_id,
            registered_at_ms: crate::now_ms(),
        };
        let tools = tools
            .into_iter()
            .map(|d| Arc::new(WorkerTool { spec: d.spec }))
            .collect();
        regs.insert(
            worker_id.clone(),
            Registration {
                info,
                tools,
                last_seen: Instant::now(),
            },
        );
        publish(&self.inner.tools, &regs);
        metrics::live(regs.len());
        drop(regs);
        w.changed();
        tracing::info!(worker_id = %worker_id, identity, "worker registered");
        Ok(Registered {
            worker_id,
            lease_ms: s.lease_ms,
            poll_wait_max_ms: s.poll_wait_max_ms,
            idle_timeout_ms: s.idle_timeout_ms,
            node_id: self.inner.cfg.node_id,
        })
    }

    /// End `identity`'s registration `worker_id`; its tools go when no other serves them.
    pub fn deregister_worker(&self, identity: &str, worker_id: &str) -> Result<(), WorkerError> {
        let mut regs = self.inner.workers.registrations.lock();
        match regs.get(worker_id) {
            Some(r) if r.info.identity == identity => {
                regs.remove(worker_id);
                publish(&self.inner.tools, &regs);
                metrics::live(regs.len());
                self.inner.workers.changed();
                tracing::info!(worker_id, identity, "worker deregistered");
                Ok(())
            }
            _ => Err(unknown_registration(worker_id)),
        }
    }

    /// The live registrations of this node, oldest first.
    pub fn workers(&self) -> Vec<WorkerInfo> {
        let mut all: Vec<WorkerInfo> = self
            .inner
            .workers
            .registrations
            .lock()
            .values()
            .map(|r| r.info.clone())
            .collect();
        all.sort_by(|a, b| {
            (a.registered_at_ms, &a.worker_id).cmp(&(b.registered_at_ms, &b.worker_id))
        });
        all
    }

    /// The worker settings this node runs with.
    pub fn worker_settings(&self) -> &WorkerSettings {
        &self.inner.workers.settings
    }

    /// Drop the registrations idle for `workers.idle_timeout_ms`; their tools go when no
    /// other registration serves them. Run by the host's sweeper.
    pub(crate) fn sweep_idle_workers(&self) {
        let idle = Duration::from_millis(self.inner.workers.settings.idle_timeout_ms);
        let mut regs = self.inner.workers.registrations.lock();
        let before = regs.len();
        regs.retain(|id, r| {
            let keep = r.last_seen.elapsed() < idle;
            if !keep {
                tracing::info!(worker_id = %id, identity = %r.info.identity, "worker registration dropped: idle");
            }
            keep
        });
        if regs.len() != before {
            publish(&self.inner.tools, &regs);
            metrics::live(regs.len());
            self.inner.workers.changed();
        }
        drop(regs);
        self.sweep_peer_workers();
    }

    /// Mark every registration of `identity` on this node as seen now: a heartbeat of one of
    /// its leases shows the worker alive, also while all its places are busy and it does not
    /// poll.
    pub fn worker_alive(&self, identity: &str) {
        let now = Instant::now();
        for r in self.inner.workers.registrations.lock().values_mut() {
            if r.info.identity == identity {
                r.last_seen = now;
            }
        }
    }

    /// `identity`'s registration `worker_id`, marked as seen now: its tools and how many leases
    /// it may hold.
    fn touch_worker(
        &self,
        identity: &str,
        worker_id: &str,
    ) -> Result<(Vec<String>, u32), WorkerError> {
        let mut regs = self.inner.workers.registrations.lock();
        match regs.get_mut(worker_id) {
            Some(r) if r.info.identity == identity => {
                r.last_seen = Instant::now();
                Ok((r.info.tools.clone(), r.info.max_concurrent_tasks))
            }
            _ => Err(unknown_registration(worker_id)),
        }
    }
}

fn unknown_registration(worker_id: &str) -> WorkerError {
    WorkerError::NotFound(format!(
        "no live worker registration '{worker_id}' of this credential on this node: register again"
    ))
}

/// Serve the tools of the live registrations as the `workers` source (one entry per name).
fn publish(registry: &ToolRegistry, regs: &HashMap<String, Registration>) {
    let mut order: Vec<&Registration> = regs.values().collect();
    order.sort_by_key(|r| (r.info.registered_at_ms, r.info.worker_id.clone()));
    let mut seen = std::collections::HashSet::new();
    let mut tools: Vec<Arc<dyn Tool>> = Vec::new();
    for r in order {
        for t in &r.tools {
            if seen.insert(t.spec.name.clone()) {
                tools.push(t.clone());
            }
        }
    }
    tools.sort_by(|a, b| a.spec().name.cmp(&b.spec().name));
    registry.set_source(SOURCE, tools);
}

/// The worker metrics (docs/operations.md).
pub(crate) mod metrics {
    use taskmesh_metrics::metrics::{counter, gauge, histogram};
    use taskmesh_metrics::names;

    /// `tool`'s queue holds `n` tasks now.
    pub(crate) fn queued(tool: &str, n: usize) {
        gauge!(names::WORKER_QUEUED, "tool" => tool.to_string()).set(n as f64);
    }

    /// A lease `event` of a task of `tool`.
    pub(crate) fn lease(tool: &str, event: &'static str) {
        counter!(names::WORKER_LEASES, "tool" => tool.to_string(), "event" => event).increment(1);
    }

    /// A task of `tool` was leased `waited` after it was queued.
    pub(crate) fn dispatched(tool: &str, waited: std::time::Duration) {
        histogram!(names::WORKER_DISPATCH, "tool" => tool.to_string()).record(waited.as_secs_f64());
    }

    /// The node holds `n` registrations.
    pub(crate) fn live(n: usize) {
        gauge!(names::WORKERS_LIVE).set(n as f64);
    }
}
