//! The router: task id -> shard -> the node that leads it.
//!
//! The shard of a task is `stable_hash(taskId) mod shards` (see `taskmesh_task::shard_of`).
//! When this node leads the shard, the [`Host`] answers in-process with no network hop.
//! Otherwise the request goes over gRPC (`taskmesh.v1.TaskService`, see [`remote`]) to the
//! node this node believes leads it; a `NotLeader` answer carries a hint that is followed, and
//! an unreachable or leaderless shard is retried until `retry_budget` runs out (an election
//! takes about a second). Every write is idempotent by task id, so a retry never creates or
//! applies twice. `tasks/list` asks every shard in turn and merges the pages in task-id order.
//!
//! This file holds the router's state (peers, known leaders, placement, the merged event
//! stream); the task operations and the leader-finding loop are in [`leader`].

pub mod convert;
mod forwarded;
pub mod leader;
pub mod remote;
pub mod service;
pub mod traced;
mod workers;

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Mutex, RwLock};
use taskmesh_host::{Host, HostError, HostEvent};
use taskmesh_task::shard_of;
use tokio::sync::broadcast;

pub use leader::Target;
pub use remote::{GetBatching, PeerAddressError, Peers, MAX_GET_BATCH};
pub use taskmesh_host::ops::MAX_TASK_ID_LEN;
pub use traced::Traced;
pub use workers::WORKER_DIGEST_INTERVAL;

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

/// The retry budget of a single-node router (`cluster.request_retry_ms` sets a cluster's).
pub const DEFAULT_RETRY_BUDGET: Duration = Duration::from_secs(5);
/// Status changes and session messages waiting for the slowest subscriber of the merged
/// event stream; one that falls further behind skips the events it missed.
const EVENT_BUFFER: usize = 8192;

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
    /// The counters of forwarded requests.
    forwarded: Arc<forwarded::Forwarded>,
}

/// 128 bits from the OS CSPRNG, as 32 lowercase hex digits.
pub fn mint_task_id() -> Result<String, HostError> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes)
        .map_err(|e| HostError::Internal(format!("OS random source failed: {e}")))?;
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut id = String::with_capacity(32);
    for b in bytes {
        id.push(char::from(HEX[usize::from(b >> 4)]));
        id.push(char::from(HEX[usize::from(b & 0x0f)]));
    }
    Ok(id)
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
            forwarded: Arc::default(),
        };
        router.spawn_event_merge();
        router
    }

    /// This node's id (0 for the single-node router).
    pub fn node_id(&self) -> u64 {
        self.node_id
    }

    /// The gRPC channel to node `id` (with the peers' endpoint settings); `None` for a
    /// single-node router or a node it has no address for.
    pub fn peer_channel(&self, id: u64) -> Option<tonic::transport::Channel> {
        self.peers.as_ref()?.channel(id)
    }

    /// The status of every replica this node hosts (for `GET /status` and readiness).
    pub fn shard_status(&self) -> Vec<taskmesh_host::ShardStatus> {
        self.host.shard_status()
    }

    /// The cluster's shard count; shard ids are `0..shard_count`.
    pub fn shard_count(&self) -> u32 {
        self.shards
    }

    /// The live task actors this node runs.
    pub fn live_tasks(&self) -> usize {
        self.host.live_tasks()
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

    /// The nodes the cluster metadata places `shard` on; empty on a single node and before the
    /// metadata is known.
    pub fn placed(&self, shard: u32) -> Vec<u64> {
        self.placement
            .read()
            .as_ref()
            .map(|p| p(shard))
            .unwrap_or_default()
    }

    fn remember_leader(&self, shard: u32, id: u64) {
        if let Some(l) = self.leaders.get(shard as usize) {
            l.store(id, Ordering::Relaxed);
        }
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
