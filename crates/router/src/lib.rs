//! The router: task id -> shard -> the node that leads it.
//!
//! The shard of a task is `stable_hash(taskId) mod shards` (see `taskmesh_task::shard_of`).
//! When this node leads the shard, the [`Host`] answers in-process with no network hop.
//! Otherwise the request goes over gRPC (`taskmesh.v1.TaskService`, see [`remote`]) to the
//! node this node believes leads it; a `NotLeader` answer carries a hint that is followed, and
//! an unreachable or leaderless shard is retried until `retry_budget` runs out (an election
//! takes about a second). Every write is idempotent by task id, so a retry never creates or
//! applies twice. `tasks/list` asks every shard in turn and merges the pages in task-id order.

pub mod convert;
pub mod leader;
pub mod remote;
pub mod service;
pub mod traced;

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Mutex, RwLock};

use serde_json::Value;
use taskmesh_host::{Attachment, Created, Host, HostError, HostEvent, NewTask};
use taskmesh_mcp::ErrorObject;
use taskmesh_task::{shard_of, TaskView};
use tokio::sync::broadcast;

pub use leader::{RemoteNode, ShardLeader, Target};
pub use remote::{GetBatching, PeerAddressError, Peers, MAX_GET_BATCH};
pub use traced::TraceLayer;

/// Why a peer could not be added.
#[derive(Debug, thiserror::Error)]
pub enum AddPeerError {
    /// A single-node router has no peers.
    #[error("a single-node router has no peers")]
    NotACluster,
    /// The peer's gRPC address is not a usable `host:port`.
    #[error(transparent)]
    Address(#[from] PeerAddressError),
}

/// Where a shard's replicas are placed (preferred leader first), from the cluster metadata.
pub type Placement = Arc<dyn Fn(u32) -> Vec<u64> + Send + Sync>;

/// Longest task id the router looks up; anything longer cannot be one of ours.
pub const MAX_TASK_ID_LEN: usize = 128;

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
/// The retry budget of a single-node router (`cluster.request_retry_ms` sets a cluster's).
pub const DEFAULT_RETRY_BUDGET: Duration = Duration::from_secs(5);
/// Status changes and session messages waiting for the slowest subscriber of the merged
/// event stream; one that falls further behind skips the events it missed.
const EVENT_BUFFER: usize = 8192;
/// The least time one attempt at a remote leader gets.
const MIN_ATTEMPT: Duration = Duration::from_millis(200);

/// Sends each task operation to the leader of the task's shard: this node's [`Host`] when
/// it leads the shard, else a peer over gRPC, retrying within the retry budget. Clones
/// share the known leaders, the placement and the merged event stream.
#[derive(Clone)]
pub struct Router {
    host: Host,
    shards: u32,
    node_id: u64,
    peers: Option<Arc<Peers>>,
    retry_budget: Duration,
    events: broadcast::Sender<HostEvent>,
    /// Per shard: the node last seen leading it (0: unknown), kept fresh by `NotLeader` hints
    /// and successful calls.
    leaders: Arc<Vec<AtomicU64>>,
    /// Where to look for a shard's leader when nothing better is known.
    placement: Arc<RwLock<Option<Placement>>>,
    /// Peers whose status stream is followed.
    watched: Arc<Mutex<HashSet<u64>>>,
}

/// 128 bits from the OS CSPRNG, as 32 lowercase hex digits.
pub fn mint_task_id() -> Result<String, HostError> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes)
        .map_err(|e| HostError::Internal(format!("OS random source failed: {e}")))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Where a request for a shard goes.
enum Route {
    Local,
    Remote(u64),
    /// No leader known yet.
    Unknown,
}

impl Router {
    /// A single-node router: every shard is local.
    pub fn new(host: Host) -> Self {
        Self::with_peers(host, 0, None, DEFAULT_RETRY_BUDGET)
    }

    /// A cluster router: shards this node does not lead are reached through `peers`.
    pub fn with_peers(
        host: Host,
        node_id: u64,
        peers: Option<Arc<Peers>>,
        retry_budget: Duration,
    ) -> Self {
        let shards = host.shard_count();
        let (events, _) = broadcast::channel(EVENT_BUFFER);
        let router = Self {
            host,
            shards,
            node_id,
            peers,
            retry_budget,
            events,
            leaders: Arc::new((0..shards).map(|_| AtomicU64::new(0)).collect()),
            placement: Arc::new(RwLock::new(None)),
            watched: Arc::new(Mutex::new(HashSet::new())),
        };
        router.spawn_event_merge();
        router
    }

    /// This node's id (0 for the single-node router).
    pub fn node_id(&self) -> u64 {
        self.node_id
    }

    /// This node's host: the task runtime of the shard replicas it holds.
    pub fn host(&self) -> &Host {
        &self.host
    }

    /// The shard of `task_id` among the host's shards.
    pub fn shard_of(&self, task_id: &str) -> u32 {
        shard_of(task_id, self.shards)
    }

    /// Status changes and session messages of every task, wherever its leader runs.
    pub fn subscribe(&self) -> broadcast::Receiver<HostEvent> {
        self.events.subscribe()
    }

    /// Merge local host events with every peer's watch stream into one channel.
    fn spawn_event_merge(&self) {
        let mut local = self.host.subscribe();
        let out = self.events.clone();
        tokio::spawn(async move {
            loop {
                match local.recv().await {
                    Ok(ev) => {
                        let _ = out.send(ev);
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(_) => return,
                }
            }
        });
        if let Some(peers) = &self.peers {
            for id in peers.ids() {
                self.watch_peer(id);
            }
        }
    }

    fn watch_peer(&self, id: u64) {
        let Some(peers) = &self.peers else { return };
        if id != self.node_id && self.watched.lock().insert(id) {
            let watched = self.watched.clone();
            let (peers, out) = (peers.clone(), self.events.clone());
            tokio::spawn(async move {
                remote::watch(peers, id, out).await;
                watched.lock().remove(&id);
            });
        }
    }

    /// Reach node `id` at `addr` (a node joined or moved) and follow its status stream.
    pub fn add_peer(&self, id: u64, addr: String) -> Result<(), AddPeerError> {
        let Some(peers) = &self.peers else {
            return Err(AddPeerError::NotACluster);
        };
        peers.set(id, addr)?;
        self.watch_peer(id);
        Ok(())
    }

    /// Forget node `id` (it left the cluster); its status stream ends.
    pub fn remove_peer(&self, id: u64) {
        if let Some(peers) = &self.peers {
            peers.remove(id);
        }
        for l in self.leaders.iter() {
            let _ = l.compare_exchange(id, 0, Ordering::Relaxed, Ordering::Relaxed);
        }
    }

    /// Where to look for leaders of shards this node holds no replica of.
    pub fn set_placement(&self, placement: Placement) {
        *self.placement.write() = Some(placement);
    }

    fn remember_leader(&self, shard: u32, id: u64) {
        if let Some(l) = self.leaders.get(shard as usize) {
            l.store(id, Ordering::Relaxed);
        }
    }

    fn check_id(task_id: &str) -> Result<(), HostError> {
        if task_id.is_empty() || task_id.len() > MAX_TASK_ID_LEN {
            return Err(HostError::NotFound);
        }
        Ok(())
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

    /// The voters and learners of `shard`'s group, from its leader.
    pub async fn members(&self, shard: u32) -> Result<(Vec<u64>, Vec<u64>), HostError> {
        self.on_leader(shard, |t| async move { t.members(shard).await })
            .await
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minted_ids_are_128_bit_hex_and_distinct() {
        let a = mint_task_id().unwrap();
        let b = mint_task_id().unwrap();
        assert_eq!(a.len(), 32);
        assert!(a
            .chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
        assert_ne!(a, b);
    }
}
