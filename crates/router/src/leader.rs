//! How a task operation reaches its shard's leader, and what that leader answers.
//!
//! [`Router`]'s task operations (create, get, cancel, attach, deliver, members, list) each make
//! one call through `on_leader`, the one loop that finds a shard's leader and retries: it picks
//! a [`Target`] (this node's [`Host`] in-process, or another node reached through [`Peers`],
//! `taskmesh.v1.TaskService`) and calls [`ShardLeader`] on it. A new task operation is written
//! once here and once on each side, never per route.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use taskmesh_host::{Attachment, Created, Host, HostError, NewTask};
use taskmesh_mcp::ErrorObject;
use taskmesh_task::{TaskRecord, TaskView};

use crate::remote::Peers;
use crate::Router;

/// The first pause before asking again for a shard without a reachable leader; pauses double
/// up to [`RETRY_PAUSE_MAX`] within the retry budget. Short: an election takes a few hundred
/// milliseconds, and a request should see the new leader soon after.
const RETRY_PAUSE_FIRST: Duration = Duration::from_millis(50);
/// The longest pause between two attempts on one request.
const RETRY_PAUSE_MAX: Duration = Duration::from_millis(400);
/// Leader hints followed in a row before asking the placement instead: replicas that a
/// membership change left behind may name each other as leader.
const MAX_HINT_HOPS: usize = 3;
/// Hint-less `NotLeader` answers tried in a row (each at another replica) before a pause.
const MISSES_BEFORE_PAUSE: usize = 3;
/// The least time one attempt at a remote leader gets.
const MIN_ATTEMPT: Duration = Duration::from_millis(200);

/// Where a request for a shard goes.
enum Route {
    /// This node leads the shard, or the router has no peers.
    Local,
    /// Node `id` leads it, as far as this node knows.
    Remote(u64),
    /// No leader known yet.
    Unknown,
}

impl Router {
    /// Create a task on its shard's leader (retries return the task the first try created).
    pub async fn create(&self, new: NewTask) -> Result<Created, HostError> {
        let shard = self.shard_of(&new.task_id);
        let new = &new;
        self.on_leader(shard, |t| async move { t.create(shard, new).await })
            .await
    }

    /// Read `owner`'s task on its shard's leader. An empty id, or one longer than
    /// [`MAX_TASK_ID_LEN`], is [`HostError::NotFound`] without asking any node.
    pub async fn get(&self, task_id: &str, owner: &str) -> Result<TaskView, HostError> {
        Self::check_id(task_id)?;
        let shard = self.shard_of(task_id);
        self.on_leader(shard, |t| async move { t.get(shard, task_id, owner).await })
            .await
    }

    /// Cancel `owner`'s task on its shard's leader and return the task as cancelled. Ids are
    /// checked as by [`Router::get`].
    pub async fn cancel(&self, task_id: &str, owner: &str) -> Result<TaskView, HostError> {
        Self::check_id(task_id)?;
        let shard = self.shard_of(task_id);
        self.on_leader(
            shard,
            |t| async move { t.cancel(shard, task_id, owner).await },
        )
        .await
    }

    /// Attach a `tasks/result` reader to `owner`'s task on its shard's leader, here or on a
    /// peer. Ids are checked as by [`Router::get`].
    pub async fn attach(&self, task_id: &str, owner: &str) -> Result<Attachment, HostError> {
        Self::check_id(task_id)?;
        let shard = self.shard_of(task_id);
        self.on_leader(
            shard,
            |t| async move { t.attach(shard, task_id, owner).await },
        )
        .await
    }

    /// Route a client's answer to the task that asked. Returns whether a live task took it.
    pub async fn deliver_response(
        &self,
        task_id: &str,
        owner: &str,
        request_id: String,
        outcome: Result<Value, ErrorObject>,
    ) -> bool {
        if Self::check_id(task_id).is_err() {
            return false;
        }
        let shard = self.shard_of(task_id);
        let (request_id, outcome) = (&request_id, &outcome);
        self.on_leader(shard, |t| async move {
            t.deliver_response(shard, task_id, owner, request_id, outcome.clone())
                .await
        })
        .await
        .unwrap_or(false)
    }

    /// Whether this node's GET stream of the task's session is the one to send the task's
    /// request `request_id` (asked of the shard's leader; false when it cannot be reached).
    /// With `release`, a granted claim is given back.
    pub async fn claim(&self, task_id: &str, request_id: &str, release: bool) -> bool {
        if Self::check_id(task_id).is_err() {
            return false;
        }
        let shard = self.shard_of(task_id);
        self.on_leader(shard, |t| async move {
            t.claim(shard, task_id, request_id, release).await
        })
        .await
        .unwrap_or(false)
    }

    /// The requests to the client that `owner`'s live task `task_id` waits on (serialised
    /// JSON-RPC requests, in the order sent), from the shard's leader.
    pub async fn pending_requests(
        &self,
        task_id: &str,
        owner: &str,
    ) -> Result<Vec<Arc<Vec<u8>>>, HostError> {
        Self::check_id(task_id)?;
        let shard = self.shard_of(task_id);
        self.on_leader(shard, |t| async move {
            t.pending_requests(shard, task_id, owner).await
        })
        .await
    }

    /// The voters and learners of `shard`'s group, from its leader.
    pub async fn members(&self, shard: u32) -> Result<(Vec<u64>, Vec<u64>), HostError> {
        self.on_leader(shard, |t| async move { t.members(shard).await })
            .await
    }

    /// A page of `shard`'s records for a backup, read on its leader: in (owner, task id) order
    /// after `after`, at most `max_records`; the flag says whether it is the last page.
    pub async fn export_page(
        &self,
        shard: u32,
        after: Option<(&str, &str)>,
        max_records: usize,
    ) -> Result<(Vec<TaskRecord>, bool), HostError> {
        self.check_shard(shard)?;
        self.on_leader(shard, |t| async move {
            t.export_page(shard, after, max_records).await
        })
        .await
    }

    /// Write backed-up `records` into `shard` through its leader; returns how many were
    /// inserted. Every record's task id must hash to `shard` and be a valid id, or nothing is
    /// written.
    pub async fn import(&self, shard: u32, records: Vec<TaskRecord>) -> Result<u64, HostError> {
        self.check_shard(shard)?;
        for r in &records {
            if r.task_id.is_empty() || r.task_id.len() > crate::MAX_TASK_ID_LEN {
                return Err(HostError::Invalid(format!(
                    "task id of {} characters: ids are 1 to {}",
                    r.task_id.len(),
                    crate::MAX_TASK_ID_LEN
                )));
            }
            if self.shard_of(&r.task_id) != shard {
                return Err(HostError::Invalid(format!(
                    "task {} belongs to shard {}, not {shard}: was the backup taken from a \
                     cluster with another shard count?",
                    r.task_id,
                    self.shard_of(&r.task_id)
                )));
            }
            if r.owner.is_empty() {
                return Err(HostError::Invalid(format!(
                    "task {} has no owner",
                    r.task_id
                )));
            }
        }
        let records = &records;
        self.on_leader(shard, |t| async move { t.import(shard, records).await })
            .await
    }

    fn check_shard(&self, shard: u32) -> Result<(), HostError> {
        if shard >= self.shards {
            return Err(HostError::Invalid(format!(
                "shard {shard} does not exist: shards are 0 to {}",
                self.shards.saturating_sub(1)
            )));
        }
        Ok(())
    }

    /// One page of `owner`'s tasks with ids after `after`, merged over all shards in id order;
    /// the flag says whether more follow.
    pub async fn list(
        &self,
        owner: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<(Vec<TaskView>, bool), HostError> {
        let limit = limit.max(1);
        let mut merged = Vec::new();
        for shard in 0..self.shards {
            let page = self
                .on_leader(shard, |t| async move {
                    t.list(shard, owner, after, limit + 1).await
                })
                .await?;
            merged.extend(page);
        }
        merged.sort_by(|a, b| a.task_id.cmp(&b.task_id));
        let more = merged.len() > limit;
        merged.truncate(limit);
        Ok((merged, more))
    }

    /// Run `op` against the shard's leader, following hints and retrying while the shard has
    /// no reachable leader, within the retry budget: the one place a request finds its leader.
    async fn on_leader<'a, T, F, Fut>(&'a self, shard: u32, op: F) -> Result<T, HostError>
    where
        F: Fn(Target<'a>) -> Fut,
        Fut: std::future::Future<Output = Result<T, HostError>>,
    {
        let mut retry =
            taskmesh_shard::Retry::new(self.retry_budget, RETRY_PAUSE_FIRST, RETRY_PAUSE_MAX);
        let mut hint = None;
        let misses = AtomicUsize::new(0);
        let mut hops = 0usize;
        let mut unpaused = 0usize;
        loop {
            let route = self.route(shard, hint.take(), misses.load(Ordering::Relaxed));
            let remote_id = match route {
                Route::Remote(id) => Some(id),
                _ => None,
            };
            let result = match (route, self.peers.as_deref()) {
                (Route::Remote(id), Some(peers)) => {
                    tracing::debug!(shard, node = id, "forwarding to the shard's leader");
                    // One attempt gets at most half of what is left of the retry budget: a
                    // leader that stopped answering (cut off, or dead before its connection
                    // noticed) must neither hold the request for the transport's full
                    // timeout nor spend the whole budget, so that a retry can still reach the
                    // leader elected meanwhile.
                    let attempt = (retry.left() / 2).max(MIN_ATTEMPT);
                    tokio::time::timeout(attempt, op(Target::Remote(RemoteNode { peers, id })))
                        .await
                        .unwrap_or_else(|_| {
                            Err(HostError::Unavailable(format!(
                                "node {id} did not answer for shard {shard}"
                            )))
                        })
                }
                (Route::Local, _) | (Route::Remote(_), None) => {
                    tracing::debug!(shard, "this node leads the shard");
                    op(Target::Local(&self.host)).await
                }
                (Route::Unknown, _) => Err(HostError::Unavailable(format!(
                    "shard {shard} has no leader"
                ))),
            };
            if let Some(id) = remote_id {
                self.forwarded.count(id, &result);
            }
            match result {
                // Only errors that say "nothing changed, ask again" are retried: a peer's
                // internal or configuration error is final, and reported as it is.
                Err(e) if e.retryable() && !retry.expired() => match e {
                    HostError::NotLeader { leader_hint, .. } => {
                        hint = leader_hint
                            .filter(|h| Some(*h) != Some(self.node_id) || self.host.leads(shard));
                        hops += 1;
                        if hops > MAX_HINT_HOPS {
                            hops = 0;
                            hint = None;
                        }
                        if let Some(h) = hint {
                            self.remember_leader(shard, h);
                            retry.reset();
                        } else {
                            self.remember_leader(shard, 0);
                            misses.fetch_add(1, Ordering::Relaxed);
                            unpaused += 1;
                            if unpaused == MISSES_BEFORE_PAUSE {
                                unpaused = 0;
                                retry.pause().await;
                            }
                        }
                    }
                    // Unavailable: a single node has nowhere else to ask.
                    e if self.peers.is_none() => return Err(e),
                    _ => {
                        self.remember_leader(shard, 0);
                        misses.fetch_add(1, Ordering::Relaxed);
                        retry.pause().await;
                    }
                },
                other => {
                    if let (Some(id), Ok(_)) = (remote_id, &other) {
                        self.remember_leader(shard, id);
                    }
                    return other;
                }
            }
        }
    }

    /// Where to send a request for `shard`: here when this node leads it; else the hinted
    /// node, the leader this node's replica knows, the last leader seen, or (after `misses`
    /// answers that named no leader) the shard's replicas from the placement in turn.
    fn route(&self, shard: u32, hint: Option<u64>, misses: usize) -> Route {
        if self.peers.is_none() || self.host.leads(shard) {
            return Route::Local;
        }
        let known = hint.or_else(|| self.host.shard_leader(shard)).or_else(|| {
            let cached = self.leaders.get(shard as usize)?.load(Ordering::Relaxed);
            (cached != 0).then_some(cached)
        });
        match known {
            Some(id) if id == self.node_id => Route::Local,
            Some(id) if misses == 0 => Route::Remote(id),
            _ => {
                let replicas: Vec<u64> = self
                    .placement
                    .read()
                    .as_ref()
                    .map(|p| p(shard))
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|id| *id != self.node_id)
                    .collect();
                match (known, replicas.is_empty()) {
                    (_, false) => Route::Remote(replicas[misses % replicas.len()]),
                    (Some(id), true) => Route::Remote(id),
                    (None, true) => Route::Unknown,
                }
            }
        }
    }
}

/// The task operations of a shard's leader. Every error is a [`HostError`] with the same
/// meaning wherever the leader runs (see [`HostError::retryable`]).
pub trait ShardLeader {
    /// Create `new` (idempotent by its task id) and start its execution.
    fn create(
        &self,
        shard: u32,
        new: &NewTask,
    ) -> impl Future<Output = Result<Created, HostError>> + Send;

    /// A linearizable read of one of `owner`'s tasks.
    fn get(
        &self,
        shard: u32,
        task_id: &str,
        owner: &str,
    ) -> impl Future<Output = Result<TaskView, HostError>> + Send;

    /// Cancel one of `owner`'s tasks; `cancelled` is committed before this returns.
    fn cancel(
        &self,
        shard: u32,
        task_id: &str,
        owner: &str,
    ) -> impl Future<Output = Result<TaskView, HostError>> + Send;

    /// Up to `limit` of `owner`'s tasks on `shard` with ids after `after`, in id order.
    fn list(
        &self,
        shard: u32,
        owner: &str,
        after: Option<&str>,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<TaskView>, HostError>> + Send;

    /// Attach a `tasks/result` reader to one of `owner`'s tasks.
    fn attach(
        &self,
        shard: u32,
        task_id: &str,
        owner: &str,
    ) -> impl Future<Output = Result<Attachment, HostError>> + Send;

    /// Hand a client's answer to request `request_id` to the task that asked; whether a live
    /// task took it.
    fn deliver_response(
        &self,
        shard: u32,
        task_id: &str,
        owner: &str,
        request_id: &str,
        outcome: Result<Value, ErrorObject>,
    ) -> impl Future<Output = Result<bool, HostError>> + Send;

    /// Whether a GET stream of the task's session is the one to send the task's request
    /// `request_id`: true for the first claim of a request no other stream carries. With
    /// `release`, a granted claim is given back (false).
    fn claim(
        &self,
        shard: u32,
        task_id: &str,
        request_id: &str,
        release: bool,
    ) -> impl Future<Output = Result<bool, HostError>> + Send;

    /// The requests to the client that `owner`'s live task waits on, as sent, in order.
    fn pending_requests(
        &self,
        shard: u32,
        task_id: &str,
        owner: &str,
    ) -> impl Future<Output = Result<Vec<Arc<Vec<u8>>>, HostError>> + Send;

    /// The voters and learners of `shard`'s group.
    fn members(
        &self,
        shard: u32,
    ) -> impl Future<Output = Result<(Vec<u64>, Vec<u64>), HostError>> + Send;

    /// A page of `shard`'s records for a backup (see [`Host::export_page`]).
    fn export_page(
        &self,
        shard: u32,
        after: Option<(&str, &str)>,
        max_records: usize,
    ) -> impl Future<Output = Result<(Vec<TaskRecord>, bool), HostError>> + Send;

    /// Backed-up records into `shard` (see [`Host::import`]).
    fn import(
        &self,
        shard: u32,
        records: &[TaskRecord],
    ) -> impl Future<Output = Result<u64, HostError>> + Send;
}

impl ShardLeader for Host {
    async fn create(&self, shard: u32, new: &NewTask) -> Result<Created, HostError> {
        Host::create(self, shard, new.clone()).await
    }

    async fn get(&self, shard: u32, task_id: &str, owner: &str) -> Result<TaskView, HostError> {
        Host::get(self, shard, task_id, owner).await
    }

    async fn cancel(&self, shard: u32, task_id: &str, owner: &str) -> Result<TaskView, HostError> {
        Host::cancel(self, shard, task_id, owner).await
    }

    async fn list(
        &self,
        shard: u32,
        owner: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<TaskView>, HostError> {
        Host::list(self, shard, owner, after, limit).await
    }

    async fn attach(
        &self,
        shard: u32,
        task_id: &str,
        owner: &str,
    ) -> Result<Attachment, HostError> {
        Host::attach(self, shard, task_id, owner).await
    }

    async fn deliver_response(
        &self,
        shard: u32,
        task_id: &str,
        owner: &str,
        request_id: &str,
        outcome: Result<Value, ErrorObject>,
    ) -> Result<bool, HostError> {
        Ok(Host::deliver_response(
            self,
            shard,
            task_id,
            owner,
            request_id.to_string(),
            outcome,
        ))
    }

    async fn claim(
        &self,
        _shard: u32,
        task_id: &str,
        request_id: &str,
        release: bool,
    ) -> Result<bool, HostError> {
        Ok(Host::claim(self, task_id, request_id.to_string(), release).await)
    }

    async fn pending_requests(
        &self,
        shard: u32,
        task_id: &str,
        owner: &str,
    ) -> Result<Vec<Arc<Vec<u8>>>, HostError> {
        Host::pending_requests(self, shard, task_id, owner).await
    }

    async fn members(&self, shard: u32) -> Result<(Vec<u64>, Vec<u64>), HostError> {
        Host::members(self, shard)
    }

    async fn export_page(
        &self,
        shard: u32,
        after: Option<(&str, &str)>,
        max_records: usize,
    ) -> Result<(Vec<TaskRecord>, bool), HostError> {
        Host::export_page(self, shard, after, max_records).await
    }

    async fn import(&self, shard: u32, records: &[TaskRecord]) -> Result<u64, HostError> {
        Host::import(self, shard, records.to_vec()).await
    }
}

/// Another node, as a shard's leader: its `TaskService` through `peers`.
#[derive(Clone, Copy)]
pub struct RemoteNode<'a> {
    /// The channels to the other nodes that the calls go through.
    pub peers: &'a Peers,
    /// Id of the node the calls go to (the one believed to lead the shard).
    pub id: u64,
}

impl ShardLeader for RemoteNode<'_> {
    async fn create(&self, shard: u32, new: &NewTask) -> Result<Created, HostError> {
        self.peers.create(self.id, shard, new).await
    }

    async fn get(&self, shard: u32, task_id: &str, owner: &str) -> Result<TaskView, HostError> {
        self.peers.get(self.id, shard, task_id, owner).await
    }

    async fn cancel(&self, shard: u32, task_id: &str, owner: &str) -> Result<TaskView, HostError> {
        self.peers.cancel(self.id, shard, task_id, owner).await
    }

    async fn list(
        &self,
        shard: u32,
        owner: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<TaskView>, HostError> {
        self.peers.list(self.id, shard, owner, after, limit).await
    }

    async fn attach(
        &self,
        shard: u32,
        task_id: &str,
        owner: &str,
    ) -> Result<Attachment, HostError> {
        self.peers.attach(self.id, shard, task_id, owner).await
    }

    async fn deliver_response(
        &self,
        shard: u32,
        task_id: &str,
        owner: &str,
        request_id: &str,
        outcome: Result<Value, ErrorObject>,
    ) -> Result<bool, HostError> {
        self.peers
            .deliver_response(self.id, shard, task_id, owner, request_id, outcome)
            .await
    }

    async fn claim(
        &self,
        shard: u32,
        task_id: &str,
        request_id: &str,
        release: bool,
    ) -> Result<bool, HostError> {
        self.peers
            .claim(self.id, shard, task_id, request_id, release)
            .await
    }

    async fn pending_requests(
        &self,
        shard: u32,
        task_id: &str,
        owner: &str,
    ) -> Result<Vec<Arc<Vec<u8>>>, HostError> {
        self.peers
            .pending_requests(self.id, shard, task_id, owner)
            .await
    }

    async fn members(&self, shard: u32) -> Result<(Vec<u64>, Vec<u64>), HostError> {
        self.peers.members(self.id, shard).await
    }

    async fn export_page(
        &self,
        shard: u32,
        after: Option<(&str, &str)>,
        max_records: usize,
    ) -> Result<(Vec<TaskRecord>, bool), HostError> {
        self.peers
            .export_page(self.id, shard, after, max_records)
            .await
    }

    async fn import(&self, shard: u32, records: &[TaskRecord]) -> Result<u64, HostError> {
        self.peers.import(self.id, shard, records).await
    }
}

/// Where the router sends one attempt of a request.
#[derive(Clone, Copy)]
pub enum Target<'a> {
    /// This node leads the shard (or the router has no peers).
    Local(&'a Host),
    /// Another node leads it (as far as the router knows).
    Remote(RemoteNode<'a>),
}

/// Calls one [`ShardLeader`] method on whichever leader a [`Target`] names, and awaits it.
macro_rules! on_target {
    ($target:expr, $method:ident($($arg:expr),*)) => {
        match $target {
            Target::Local(host) => ShardLeader::$method(*host, $($arg),*).await,
            Target::Remote(node) => ShardLeader::$method(node, $($arg),*).await,
        }
    };
}

impl ShardLeader for Target<'_> {
    async fn create(&self, shard: u32, new: &NewTask) -> Result<Created, HostError> {
        on_target!(self, create(shard, new))
    }

    async fn get(&self, shard: u32, task_id: &str, owner: &str) -> Result<TaskView, HostError> {
        on_target!(self, get(shard, task_id, owner))
    }

    async fn cancel(&self, shard: u32, task_id: &str, owner: &str) -> Result<TaskView, HostError> {
        on_target!(self, cancel(shard, task_id, owner))
    }

    async fn list(
        &self,
        shard: u32,
        owner: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<TaskView>, HostError> {
        on_target!(self, list(shard, owner, after, limit))
    }

    async fn attach(
        &self,
        shard: u32,
        task_id: &str,
        owner: &str,
    ) -> Result<Attachment, HostError> {
        on_target!(self, attach(shard, task_id, owner))
    }

    async fn deliver_response(
        &self,
        shard: u32,
        task_id: &str,
        owner: &str,
        request_id: &str,
        outcome: Result<Value, ErrorObject>,
    ) -> Result<bool, HostError> {
        on_target!(
            self,
            deliver_response(shard, task_id, owner, request_id, outcome)
        )
    }

    async fn claim(
        &self,
        shard: u32,
        task_id: &str,
        request_id: &str,
        release: bool,
    ) -> Result<bool, HostError> {
        on_target!(self, claim(shard, task_id, request_id, release))
    }

    async fn pending_requests(
        &self,
        shard: u32,
        task_id: &str,
        owner: &str,
    ) -> Result<Vec<Arc<Vec<u8>>>, HostError> {
        on_target!(self, pending_requests(shard, task_id, owner))
    }

    async fn members(&self, shard: u32) -> Result<(Vec<u64>, Vec<u64>), HostError> {
        on_target!(self, members(shard))
    }

    async fn export_page(
        &self,
        shard: u32,
        after: Option<(&str, &str)>,
        max_records: usize,
    ) -> Result<(Vec<TaskRecord>, bool), HostError> {
        on_target!(self, export_page(shard, after, max_records))
    }

    async fn import(&self, shard: u32, records: &[TaskRecord]) -> Result<u64, HostError> {
        on_target!(self, import(shard, records))
    }
}
