//! The shard host: everything a node does for the shards it leads.
//!
//! A request reaches the host from the router with a task id and a principal. The host finds
//! the shard's [`ShardReplica`], proposes a [`Command`] through its Raft log (create, cancel) or
//! reads its in-memory state after a leadership check (get, list), and owns the task actors:
//! one ractor actor per live task ([`actor`]), spawned after the create commits and re-spawned
//! by a new leader according to the tool's resume policy. Terminal tasks are rows, not actors.
//!
//! What the host tells the outside world (status changes, task messages for a session's GET
//! stream) goes out on one broadcast channel of [`HostEvent`]s that the gateway subscribes to.
//!
//! The operations live by what they do: `create.rs` (admission and the create proposal),
//! `reads.rs` (get, list), `attach.rs` (a `tasks/result` reader attaching, a client's answer
//! reaching the task), `shards.rs` (hosting replicas, their loops and their status), `slots.rs`
//! (live-task slots and their admission); cancel, the actor handles and shutdown stay here with
//! the host's state.

pub mod actor;
mod attach;
pub mod backup;
mod config;
mod create;
mod error;
mod events;
pub mod ops;
pub mod outbox;
mod reads;
mod reconcile;
mod shards;
mod slots;
mod types;
pub mod workers;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Mutex, RwLock};
use ractor::ActorRef;
use taskmesh_shard::ShardReplica;
use taskmesh_task::{Applied, Command, Rejection, TaskRecord, TaskView};
use taskmesh_tools::ToolRegistry;
use tokio::sync::{broadcast, oneshot};

pub use actor::TaskMsg;
pub use config::{HostConfig, TaskSettings, MIN_RESULT_BYTES};
pub use error::HostError;
pub use ops::{Answer, Op, Operation};
pub use outbox::{EventSettings, WebhookSettings, WebhookStatus, TASK_EVENT};
pub use taskmesh_shard::Quiet;
pub use types::{Attachment, Created, Ended, HostEvent, NewTask, ShardStatus, Stamped, TaskRead};
pub use workers::{WorkerError, WorkerInfo, WorkerSettings};

use shards::Hosted;

pub(crate) use taskmesh_mcp::time::{now_ms, now_us};

pub(crate) struct Inner {
    pub(crate) cfg: HostConfig,
    pub(crate) tools: Arc<ToolRegistry>,
    /// The shard count of the cluster (shard ids are `0..shard_count`).
    pub(crate) shard_count: u32,
    /// The replicas this node hosts (index = shard id) with the handles of their loops.
    pub(crate) shards: RwLock<Vec<Option<Hosted>>>,
    pub(crate) started: std::sync::atomic::AtomicBool,
    /// The task actors this node runs, by task id.
    pub(crate) actors: Mutex<HashMap<String, actor::Running>>,
    /// Tasks this node is creating: proposed, and their actor not yet running. The reconciler
    /// leaves them to the create.
    pub(crate) starting: Mutex<HashSet<String>>,
    /// Per shard, tasks whose execution here ended or never began since its reconciler last
    /// looked: the tasks its next pass checks (see `events.rs`).
    pub(crate) suspects: Mutex<HashMap<u32, HashSet<String>>>,
    /// The live-task slots, in all and by owner (`tasks.max_live_tasks`,
    /// `tasks.max_live_tasks_per_principal`).
    pub(crate) slots: Mutex<slots::Slots>,
    pub(crate) waiters: Mutex<HashMap<String, Vec<oneshot::Sender<Ended>>>>,
    pub(crate) events: broadcast::Sender<HostEvent>,
    /// (minute, reads of other principals' tasks in it), for their audit's rate limit.
    pub(crate) foreign_lookups: Mutex<(u64, u64)>,
    /// The worker registrations of this node and the queues of its worker tasks.
    pub(crate) workers: workers::Workers,
    /// The delivery of task events to the operator's webhooks; `None` without webhooks.
    pub(crate) delivery: Option<Arc<outbox::Delivery>>,
    /// The rendering of task events, for webhooks and reads.
    pub(crate) render: outbox::event::Renderer,
}

/// How often `stop_all` checks whether every stopped actor has finished.
const STOP_CHECK_INTERVAL: Duration = Duration::from_millis(10);

/// The task runtime of one node. Cheap to clone.
#[derive(Clone)]
pub struct Host {
    pub(crate) inner: Arc<Inner>,
}

impl Host {
    /// A host for a cluster of `shard_count` shards, hosting no replica yet (see
    /// [`Host::add_shard`]). Call [`Host::start`] to begin serving.
    pub fn new(cfg: HostConfig, tools: Arc<ToolRegistry>, shard_count: u32) -> Self {
        let (events, _) = broadcast::channel(cfg.event_buffer.max(16));
        // Before any shard of this process is opened (`events.retain_changes`).
        taskmesh_task::changes::set_capacity(cfg.events.retain_changes);
        // The settings were checked with the node's configuration; a failure here (the HTTP
        // client could not be built) leaves webhooks undelivered, and says so.
        let render = outbox::event::Renderer::default();
        let delivery = outbox::Delivery::new(&cfg.events, &cfg.webhooks, render.clone())
            .map_err(|e| tracing::error!(error = %e, "webhooks are not delivered"))
            .ok()
            .map(Arc::new);
        let cfg_workers = cfg.workers.clone();
        let slots = slots::Slots::new(
            cfg.tasks.max_live_tasks,
            cfg.tasks.max_live_tasks_per_principal,
        );
        Self {
            inner: Arc::new(Inner {
                cfg,
                tools,
                shard_count,
                shards: RwLock::new((0..shard_count).map(|_| None).collect()),
                started: std::sync::atomic::AtomicBool::new(false),
                actors: Mutex::new(HashMap::new()),
                starting: Mutex::new(HashSet::new()),
                suspects: Mutex::new(HashMap::new()),
                slots: Mutex::new(slots),
                waiters: Mutex::new(HashMap::new()),
                events,
                foreign_lookups: Mutex::new((0, 0)),
                workers: workers::Workers::new(cfg_workers),
                delivery,
                render,
            }),
        }
    }

    /// Give the rendering of a task event's `data` (the node passes the gateway's); until
    /// then, an event's data holds only the task id.
    pub fn set_event_render(&self, render: outbox::Render) {
        self.inner.render.set(render);
    }

    /// The operator's webhooks, then the clients' subscriptions (as this node's replicas hold
    /// them: every shard holds them all), with this node's deliveries to each.
    pub fn webhooks(&self) -> Vec<outbox::WebhookStatus> {
        let Some(d) = self.inner.delivery.as_ref() else {
            return Vec::new();
        };
        let mut all = d.status();
        if let Some((replica, _)) = self.nudges().into_iter().next() {
            all.extend(replica.read_local(|s| d.client_status(s.subscriptions())));
        }
        all
    }

    /// Take a live-task slot for a task of `owner`: within `max_live_tasks` and
    /// `max_live_tasks_per_principal` when `admit` (a new task), regardless of them when not (a
    /// task admitted earlier that is resumed here). A refusal takes nothing.
    pub(crate) fn take_slot(&self, owner: &str, admit: bool) -> Result<(), HostError> {
        self.inner
            .slots
            .lock()
            .take(owner, admit)
            .map_err(|refused| HostError::Capacity {
                limit: refused.limit(),
            })
    }

    /// Give back a slot [`Host::take_slot`] took for a task of `owner`.
    pub(crate) fn give_slot(&self, owner: &str) {
        if !self.inner.slots.lock().give(owner) {
            tracing::error!(principal = %owner, "a live-task slot was given back that was not held");
        }
    }

    /// The settings this host runs with.
    pub fn config(&self) -> &HostConfig {
        &self.inner.cfg
    }

    /// This node's id (`HostConfig::node_id`), as audit events name it.
    pub fn node_id(&self) -> u64 {
        self.inner.cfg.node_id
    }

    /// The tools this node serves.
    pub fn tools(&self) -> &Arc<ToolRegistry> {
        &self.inner.tools
    }

    /// The shard count of the cluster; shard ids are `0..shard_count`.
    pub fn shard_count(&self) -> u32 {
        self.inner.shard_count
    }

    /// A new receiver of the host's events, from now on. The channel holds `event_buffer` events
    /// (at least 16); a receiver that falls further behind misses the oldest.
    pub fn subscribe(&self) -> broadcast::Receiver<HostEvent> {
        self.inner.events.subscribe()
    }

    /// Number of live task actors on this node.
    pub fn live_tasks(&self) -> usize {
        self.inner.slots.lock().live()
    }

    /// The local replica of `shard`; a shard this node does not host answers `NotLeader`
    /// without a hint, so a router looks for its leader elsewhere.
    fn shard(&self, shard: u32) -> Result<ShardReplica, HostError> {
        self.replica(shard).ok_or_else(|| not_hosted(shard))
    }

    /// `tasks/cancel`: `cancelled` is committed before this returns, then the execution is
    /// stopped.
    pub async fn cancel(
        &self,
        shard_id: u32,
        task_id: &str,
        owner: &str,
    ) -> Result<TaskView, HostError> {
        // Ownership first, so another principal learns nothing.
        let status = self
            .read_task(shard_id, task_id, owner, |r| r.status)
            .await?;
        if status.is_terminal() {
            return Err(HostError::Terminal(status));
        }
        let shard = self.shard(shard_id)?;
        let applied = shard
            .propose(Command::Cancel {
                task_id: task_id.to_string(),
                message: "The task was cancelled by request.".into(),
                at_ms: now_ms(),
            })
            .await
            .map_err(|e| HostError::from_shard(shard_id, e))?;
        match applied {
            Applied::Updated { record } => {
                self.stop_actor(task_id);
                Ok(TaskView::from(&record))
            }
            Applied::Rejected(Rejection::Terminal(s)) => Err(HostError::Terminal(s)),
            Applied::Rejected(Rejection::NotFound) => Err(HostError::NotFound),
            other => Err(HostError::Internal(format!(
                "unexpected cancel result {other:?}"
            ))),
        }
    }

    pub(crate) fn actor(&self, task_id: &str) -> Option<ActorRef<TaskMsg>> {
        self.inner
            .actors
            .lock()
            .get(task_id)
            .map(|r| r.actor.clone())
    }

    pub(crate) fn stop_actor(&self, task_id: &str) {
        if let Some(a) = self.actor(task_id) {
            let _ = a.cast(TaskMsg::Stop);
        }
    }

    /// Stop every actor and wait briefly for them to end (drain on shutdown).
    pub async fn stop_all(&self, wait: Duration) {
        let actors: Vec<_> = self
            .inner
            .actors
            .lock()
            .values()
            .map(|r| r.actor.clone())
            .collect();
        for a in &actors {
            a.stop(Some("node stopping".into()));
        }
        let deadline = tokio::time::Instant::now() + wait;
        while self.live_tasks() > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(STOP_CHECK_INTERVAL).await;
        }
    }
}

/// Audit event for a task that reached a terminal status on this node (the shard's leader);
/// no request caused it, so its `method` and `request_id` are empty and its `outcome` is the
/// status. The fields are those of every audit event (docs/security.md).
pub(crate) fn audit_terminal(host: &Host, record: &TaskRecord, how: &'static str) {
    taskmesh_metrics::metrics::counter!(
        taskmesh_metrics::names::TASKS_TERMINAL,
        "status" => record.status.to_string()
    )
    .increment(1);
    tracing::info!(
        target: "audit",
        event = "task_terminal",
        principal = %record.owner,
        issuer = "",
        node = host.inner.cfg.node_id,
        method = "",
        request_id = "",
        task_id = %record.task_id,
        outcome = %record.status,
        "{how}"
    );
}

/// What a call for a shard this node holds no replica of answers: not the leader, no hint.
fn not_hosted(shard: u32) -> HostError {
    HostError::NotLeader {
        shard,
        leader_hint: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use taskmesh_mcp::ErrorObject;
    use taskmesh_task::{Outcome, TaskStatus};

    #[test]
    fn ttl_grants_default_and_cap() {
        let with_ttls = |default_ttl_ms, max_ttl_ms| {
            TaskSettings {
                default_ttl_ms,
                max_ttl_ms,
                ..TaskSettings::default()
            }
            .host_config(1)
        };
        let c = with_ttls(1_000, 5_000);
        assert_eq!(c.grant_ttl(None), Some(1_000));
        assert_eq!(c.grant_ttl(Some(9_000)), Some(5_000));
        assert_eq!(c.grant_ttl(Some(2_000)), Some(2_000));
        assert_eq!(with_ttls(0, 0).grant_ttl(None), None, "0: unlimited");
        assert_eq!(with_ttls(0, 7).grant_ttl(None), Some(7));
    }

    #[test]
    fn tool_outcomes_map_to_terminal_statuses() {
        let max = HostConfig::default().tasks.max_result_bytes;
        let (s, m, o) = actor::finish_of(
            &Ok(json!({"content":[{"type":"text","text":"ok"}],"isError":false})),
            max,
        );
        assert_eq!(s, TaskStatus::Completed);
        assert!(matches!(o, Outcome::Result { .. }));
        assert!(!m.is_empty());
        let (s, m, _) = actor::finish_of(
            &Ok(json!({"content":[{"type":"text","text":"disk full"}],"isError":true})),
            max,
        );
        assert_eq!(s, TaskStatus::Failed);
        assert!(m.contains("disk full"));
        let (s, m, o) = actor::finish_of(&Err(ErrorObject::new(-32603, "boom")), max);
        assert_eq!(s, TaskStatus::Failed);
        assert!(m.contains("-32603") && m.contains("boom"));
        assert_eq!(
            o,
            Outcome::Error {
                code: -32603,
                message: "boom".into(),
                data_json: None
            }
        );
    }

    #[test]
    fn an_outcome_over_the_result_limit_fails_the_task_and_names_the_limit() {
        let big = json!({"content":[{"type":"text","text":"x".repeat(200)}]});
        let (s, m, o) = actor::finish_of(&Ok(big.clone()), 100);
        assert_eq!(s, TaskStatus::Failed);
        assert!(m.contains("tasks.max_result_bytes"), "{m}");
        assert!(matches!(o, Outcome::Error { code: -32603, .. }));
        let (s, _, _) = actor::finish_of(&Ok(big), 10_000);
        assert_eq!(s, TaskStatus::Completed);
    }
}
