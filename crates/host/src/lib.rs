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

pub mod actor;
mod config;
mod error;
mod events;
mod types;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use parking_lot::{Mutex, RwLock};
use ractor::ActorRef;
use serde_json::Value;
use taskmesh_mcp::ErrorObject;
use taskmesh_shard::ShardReplica;
use taskmesh_task::{Applied, Command, Rejection, TaskRecord, TaskStatus, TaskView, ToolRequest};
use taskmesh_tools::ToolRegistry;
use tokio::sync::{broadcast, mpsc, oneshot};

pub use actor::TaskMsg;
pub use config::HostConfig;
pub use error::HostError;
pub use types::{Attachment, Created, HostEvent, NewTask, ShardStatus};

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

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
    pub(crate) live: AtomicUsize,
    pub(crate) waiters: Mutex<HashMap<String, Vec<oneshot::Sender<TaskRecord>>>>,
    pub(crate) events: broadcast::Sender<HostEvent>,
}

/// A replica this node hosts and the loops the host runs for it.
pub(crate) struct Hosted {
    replica: ShardReplica,
    loops: Vec<tokio::task::JoinHandle<()>>,
}

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
        Self {
            inner: Arc::new(Inner {
                cfg,
                tools,
                shard_count,
                shards: RwLock::new((0..shard_count).map(|_| None).collect()),
                started: std::sync::atomic::AtomicBool::new(false),
                actors: Mutex::new(HashMap::new()),
                starting: Mutex::new(HashSet::new()),
                live: AtomicUsize::new(0),
                waiters: Mutex::new(HashMap::new()),
                events,
            }),
        }
    }

    /// Start the per-shard loops: leadership (resume tasks when this node becomes leader, stop
    /// actors when it stops being one), event fan-out and expiry.
    pub fn start(&self) {
        self.inner.started.store(true, Ordering::SeqCst);
        let mut shards = self.inner.shards.write();
        for hosted in shards.iter_mut().flatten() {
            if hosted.loops.is_empty() {
                hosted.loops = events::spawn_shard_loops(self.clone(), hosted.replica.clone());
            }
        }
    }

    /// Host `replica` (its loops start now if the host is started). Fails when its shard id is
    /// out of range or another replica of it is hosted.
    pub fn add_shard(&self, replica: ShardReplica) -> Result<(), HostError> {
        let id = replica.shard_id();
        let mut shards = self.inner.shards.write();
        let slot = shards.get_mut(id as usize).ok_or_else(|| {
            HostError::Misconfigured(format!(
                "no shard {id} in a cluster of {} shards",
                self.inner.shard_count
            ))
        })?;
        if slot.is_some() {
            return Err(HostError::Invalid(format!("shard {id} is hosted already")));
        }
        let loops = if self.inner.started.load(Ordering::SeqCst) {
            events::spawn_shard_loops(self.clone(), replica.clone())
        } else {
            Vec::new()
        };
        *slot = Some(Hosted { replica, loops });
        Ok(())
    }

    /// Stop hosting shard `id`: end its loops and task actors and release waiters on its
    /// tasks. Returns the replica (still running: the caller shuts it down).
    pub fn remove_shard(&self, id: u32) -> Option<ShardReplica> {
        let hosted = self.inner.shards.write().get_mut(id as usize)?.take()?;
        for h in &hosted.loops {
            h.abort();
        }
        events::stop_shard_actors(self, id);
        let count = self.inner.shard_count;
        self.inner
            .waiters
            .lock()
            .retain(|task, _| taskmesh_task::shard_of(task, count) != id);
        Some(hosted.replica)
    }

    /// The replicas this node hosts, by ascending shard id.
    pub fn replicas(&self) -> Vec<ShardReplica> {
        self.inner
            .shards
            .read()
            .iter()
            .flatten()
            .map(|h| h.replica.clone())
            .collect()
    }

    /// The replica of shard `id`, if this node hosts one.
    pub fn replica(&self, id: u32) -> Option<ShardReplica> {
        self.inner
            .shards
            .read()
            .get(id as usize)?
            .as_ref()
            .map(|h| h.replica.clone())
    }

    pub fn config(&self) -> &HostConfig {
        &self.inner.cfg
    }

    pub fn tools(&self) -> &Arc<ToolRegistry> {
        &self.inner.tools
    }

    pub fn shard_count(&self) -> u32 {
        self.inner.shard_count
    }

    pub fn subscribe(&self) -> broadcast::Receiver<HostEvent> {
        self.inner.events.subscribe()
    }

    /// Number of live task actors on this node.
    pub fn live_tasks(&self) -> usize {
        self.inner.live.load(Ordering::Relaxed)
    }

    /// The local replica of `shard`; a shard this node does not host answers `NotLeader`
    /// without a hint, so a router looks for its leader elsewhere.
    fn shard(&self, shard: u32) -> Result<ShardReplica, HostError> {
        self.replica(shard).ok_or(HostError::NotLeader {
            shard,
            leader_hint: None,
        })
    }

    /// Create a task: durable (committed and flushed) before this returns, then its actor
    /// runs. A repeated create with the same id returns the existing record.
    pub async fn create(&self, shard_id: u32, new: NewTask) -> Result<Created, HostError> {
        let shard = self.shard(shard_id)?;
        if !shard.is_leader() {
            return Err(HostError::NotLeader {
                shard: shard_id,
                leader_hint: shard.leadership().borrow().leader,
            });
        }
        let tool = self
            .inner
            .tools
            .get(&new.tool)
            .ok_or_else(|| {
                HostError::Misconfigured(format!("tool '{}' is not served by this node", new.tool))
            })?
            .clone();
        // Reserve a live-task slot before anything is written.
        let limit = self.inner.cfg.max_live_tasks;
        if self
            .inner
            .live
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < limit).then_some(n + 1)
            })
            .is_err()
        {
            return Err(HostError::Capacity { limit });
        }
        // From here until its actor runs the task is this create's: the reconciler leaves it
        // alone. Whatever ends this future (an error, or the caller dropping it), the guard
        // gives the slot back unless an actor took it, and a committed task without an actor
        // is then the reconciler's to run.
        let starting = Starting::new(self, &new.task_id);
        let now = now_ms();
        let term = shard.current_term();
        let record = TaskRecord {
            task_id: new.task_id.clone(),
            owner: new.owner,
            session: new.session,
            status: TaskStatus::Working,
            status_message: Some("The task is in progress.".into()),
            created_at_ms: now,
            last_updated_at_ms: now,
            ttl_ms: self.inner.cfg.grant_ttl(new.ttl_ms),
            poll_interval_ms: self.inner.cfg.poll_interval_ms,
            request: ToolRequest {
                tool: new.tool,
                arguments_json: new.arguments_json,
                progress_token_json: new.progress_token.map(|t| t.to_string()),
                client: new.client,
            },
            outcome: None,
            exec_term: term,
            updated_index: 0,
        };
        let applied = shard.propose(Command::Create { record }).await;
        match applied {
            Ok(Applied::Created {
                record,
                fresh: true,
            }) => {
                tracing::info!(
                    target: "audit",
                    event = "task_created",
                    task_id = %record.task_id,
                    principal = %record.owner,
                    tool = %record.request.tool,
                    shard = shard_id,
                    "task created"
                );
                let task = TaskView::from(&record);
                actor::spawn(self.clone(), shard_id, record, term, tool, true).await;
                starting.slot_taken();
                Ok(Created { task, fresh: true })
            }
            Ok(Applied::Created {
                record,
                fresh: false,
            }) => Ok(Created {
                task: TaskView::from(&record),
                fresh: false,
            }),
            Ok(other) => Err(HostError::Internal(format!(
                "unexpected create result {other:?}"
            ))),
            Err(e) => Err(HostError::from_shard(shard_id, e)),
        }
    }

    /// A linearizable read of one of `owner`'s tasks. Another owner's task, an expired one and
    /// an unknown id all answer [`HostError::NotFound`].
    pub async fn get(
        &self,
        shard_id: u32,
        task_id: &str,
        owner: &str,
    ) -> Result<TaskView, HostError> {
        self.read_task(shard_id, task_id, owner, |r| TaskView::from(r))
            .await
    }

    /// A linearizable read of one of `owner`'s tasks through `f` (which sees the whole record
    /// and keeps what it needs).
    async fn read_task<R>(
        &self,
        shard_id: u32,
        task_id: &str,
        owner: &str,
        f: impl FnOnce(&TaskRecord) -> R,
    ) -> Result<R, HostError> {
        let shard = self.shard(shard_id)?;
        let now = now_ms();
        shard
            .read(|s| visible(s.get(task_id), owner, now).map(f))
            .await
            .map_err(|e| HostError::from_shard(shard_id, e))?
            .ok_or(HostError::NotFound)
    }

    /// Up to `limit` of `owner`'s tasks on one shard with ids after `after`, in id order.
    pub async fn list(
        &self,
        shard_id: u32,
        owner: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<TaskView>, HostError> {
        let shard = self.shard(shard_id)?;
        let now = now_ms();
        shard
            .read(|s| {
                s.list(owner, after, limit, now)
                    .into_iter()
                    .map(TaskView::from)
                    .collect()
            })
            .await
            .map_err(|e| HostError::from_shard(shard_id, e))
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
                tracing::info!(
                    target: "audit",
                    event = "task_cancelled",
                    task_id = %record.task_id,
                    principal = %record.owner,
                    "task cancelled"
                );
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

    /// Attach a `tasks/result` reader to a task.
    pub async fn attach(
        &self,
        shard_id: u32,
        task_id: &str,
        owner: &str,
    ) -> Result<Attachment, HostError> {
        // Register the waiter before reading, so a completion between the two is not missed.
        let (done_tx, done_rx) = oneshot::channel();
        self.inner
            .waiters
            .lock()
            .entry(task_id.to_string())
            .or_default()
            .push(done_tx);
        // Only a terminal record is copied whole (its outcome is the answer).
        enum Seen {
            Live(TaskView),
            Terminal(Box<TaskRecord>),
        }
        let read = self
            .read_task(shard_id, task_id, owner, |r| {
                if r.status.is_terminal() {
                    Seen::Terminal(Box::new(r.clone()))
                } else {
                    Seen::Live(TaskView::from(r))
                }
            })
            .await;
        let task = match read {
            Ok(Seen::Live(task)) => task,
            Ok(Seen::Terminal(terminal)) => {
                drop(done_rx);
                self.drop_closed_waiters(task_id);
                return Ok(Attachment::Terminal(*terminal));
            }
            Err(e) => {
                drop(done_rx);
                self.drop_closed_waiters(task_id);
                return Err(e);
            }
        };
        // Readers that went away earlier leave closed waiters behind: sweep them.
        self.drop_closed_waiters(task_id);
        let (tx, messages) = mpsc::channel(self.inner.cfg.attach_buffer.max(1));
        if let Some(actor) = self.actor(task_id) {
            let _ = actor.cast(TaskMsg::Attach(tx));
        }
        Ok(Attachment::Live {
            task,
            messages,
            done: done_rx,
        })
    }

    /// Route a client's answer to an elicitation or sampling request to the task waiting on it.
    /// Only the task's owner may answer. Returns whether a live task took it.
    pub fn deliver_response(
        &self,
        shard_id: u32,
        task_id: &str,
        owner: &str,
        request_id: String,
        outcome: Result<Value, ErrorObject>,
    ) -> bool {
        let owned = self
            .shard(shard_id)
            .map(|s| s.read_local(|st| st.get(task_id).is_some_and(|r| r.owner == owner)))
            .unwrap_or(false);
        if !owned {
            return false;
        }
        match self.actor(task_id) {
            Some(actor) => actor
                .cast(TaskMsg::Response {
                    request_id,
                    outcome,
                })
                .is_ok(),
            None => false,
        }
    }

    /// The voters and learners of `shard`'s group, as its leader (this node) knows them.
    pub fn members(&self, shard_id: u32) -> Result<(Vec<u64>, Vec<u64>), HostError> {
        let shard = self.shard(shard_id)?;
        if !shard.is_leader() {
            return Err(HostError::NotLeader {
                shard: shard_id,
                leader_hint: shard.leadership().borrow().leader,
            });
        }
        let voters = shard.voters();
        let learners = shard
            .members()
            .into_keys()
            .filter(|id| !voters.contains(id))
            .collect();
        Ok((voters, learners))
    }

    /// The node this node believes leads `shard` (itself included), if any.
    pub fn shard_leader(&self, shard_id: u32) -> Option<u64> {
        self.shard(shard_id).ok()?.leadership().borrow().leader
    }

    /// Every local replica's leadership, log and state sizes.
    pub fn shard_status(&self) -> Vec<ShardStatus> {
        self.replicas()
            .iter()
            .map(|s| {
                let lead = s.leadership().borrow().clone();
                let (first, last) = s.log_index_range().unwrap_or((None, None));
                let (tasks, live_tasks) = s.read_local(|st| (st.len(), st.live_count()));
                ShardStatus {
                    shard: s.shard_id(),
                    node: s.node_id(),
                    is_leader: lead.is_leader,
                    leader: lead.leader,
                    term: lead.term,
                    last_applied_index: s.last_applied().map(|l| l.index),
                    first_log_index: first,
                    last_log_index: last,
                    tasks,
                    live_tasks,
                    voters: s.voters(),
                }
            })
            .collect()
    }

    /// Whether this node leads `shard` now.
    pub fn leads(&self, shard_id: u32) -> bool {
        self.shard(shard_id).is_ok_and(|s| s.is_leader())
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

    fn drop_closed_waiters(&self, task_id: &str) {
        let mut w = self.inner.waiters.lock();
        if let Some(list) = w.get_mut(task_id) {
            list.retain(|s| !s.is_closed());
            if list.is_empty() {
                w.remove(task_id);
            }
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
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// A task being created on this node, from its proposal until its actor runs (see
/// [`Inner::starting`]); holds the live-task slot reserved for it until an actor takes it.
struct Starting<'a> {
    host: &'a Host,
    task_id: String,
    holds_slot: bool,
}

impl<'a> Starting<'a> {
    fn new(host: &'a Host, task_id: &str) -> Self {
        host.inner.starting.lock().insert(task_id.to_string());
        Self {
            host,
            task_id: task_id.to_string(),
            holds_slot: true,
        }
    }

    /// The task's actor was spawned with the slot (or gave it back when it could not start).
    fn slot_taken(mut self) {
        self.holds_slot = false;
    }
}

impl Drop for Starting<'_> {
    fn drop(&mut self) {
        self.host.inner.starting.lock().remove(&self.task_id);
        if self.holds_slot {
            self.host.inner.live.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// Audit event for a task that reached a terminal status.
pub(crate) fn audit_terminal(record: &TaskRecord, how: &'static str) {
    tracing::info!(
        target: "audit",
        event = "task_terminal",
        task_id = %record.task_id,
        principal = %record.owner,
        status = %record.status,
        "{how}"
    );
}

/// The record as `owner` may see it at `now`.
fn visible<'a>(r: Option<&'a TaskRecord>, owner: &str, now: u64) -> Option<&'a TaskRecord> {
    r.filter(|r| r.owner == owner && !r.is_expired(now))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use taskmesh_task::Outcome;

    #[test]
    fn ttl_grants_default_and_cap() {
        let c = HostConfig {
            default_ttl_ms: Some(1_000),
            max_ttl_ms: Some(5_000),
            ..HostConfig::default()
        };
        assert_eq!(c.grant_ttl(None), Some(1_000));
        assert_eq!(c.grant_ttl(Some(9_000)), Some(5_000));
        assert_eq!(c.grant_ttl(Some(2_000)), Some(2_000));
        let unlimited = HostConfig {
            default_ttl_ms: None,
            max_ttl_ms: None,
            ..HostConfig::default()
        };
        assert_eq!(unlimited.grant_ttl(None), None);
        let capped_only = HostConfig {
            default_ttl_ms: None,
            max_ttl_ms: Some(7),
            ..HostConfig::default()
        };
        assert_eq!(capped_only.grant_ttl(None), Some(7));
    }

    #[test]
    fn tool_outcomes_map_to_terminal_statuses() {
        let max = HostConfig::default().max_result_bytes;
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
