//! What nodes tell each other about their workers (`TaskService.ExchangeWorkers`): each node's
//! live registrations' tools, so that every node lists them and runs their tasks, and the tools
//! with tasks queued on it, so that a poll on another node knows where to take work from (see
//! docs/architecture.md, "Workers"). The exchange itself (who sends what, when) is the
//! router's; here is what a node sends and what it keeps of what it receives.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use taskmesh_tools::{Tool, ToolSpec};

use super::{Leased, WorkerInfo, WorkerTool};
use crate::Host;

/// A peer whose digests stop coming for this long has its workers' tools withdrawn here.
pub const WORKER_DIGEST_TTL: Duration = Duration::from_secs(5);

/// This node's worker news for its peers.
#[derive(Debug, Clone)]
pub struct Digest {
    /// The tools this node's live registrations serve, one per name, in name order.
    pub tools: Vec<ToolSpec>,
    /// This node's live registrations.
    pub registrations: Vec<WorkerInfo>,
    /// The tools with tasks queued here, in name order.
    pub queued: Vec<String>,
}

/// What a node keeps of a peer's digests.
pub(crate) struct PeerWorkers {
    pub(crate) seen: Instant,
    pub(crate) tools: Vec<Arc<WorkerTool>>,
    /// Its live registrations, as its last whole digest told.
    pub(crate) registrations: Vec<WorkerInfo>,
    /// The tools with tasks queued on the peer, as far as this node knows: a poll here takes
    /// from it while they do.
    pub(crate) queued: HashSet<String>,
}

impl Host {
    /// This node's worker news: its registrations' tools and its queued tools.
    pub fn worker_digest(&self) -> Digest {
        let w = &self.inner.workers;
        let mut names = HashSet::new();
        let mut tools: Vec<ToolSpec> = w
            .registrations
            .lock()
            .values()
            .flat_map(|r| r.tools.iter())
            .filter(|t| names.insert(t.spec.name.clone()))
            .map(|t| t.spec.clone())
            .collect();
        tools.sort_by(|a, b| a.name.cmp(&b.name));
        let mut queued = w.queues.lock().tools();
        queued.sort();
        Digest {
            tools,
            registrations: self.workers(),
            queued,
        }
    }

    /// Bumped when this node's digest changed: a registration came or went, or a tool's queue
    /// went from empty to not.
    pub fn worker_changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.inner.workers.changes.subscribe()
    }

    /// Take in node `node_id`'s digest: its tools (when `tools` is given) are served here as
    /// the source `workers@<node_id>`, until its digests stop coming; polls waiting here are
    /// woken when it has tasks queued of a tool it did not have before.
    pub fn peer_workers(
        &self,
        node_id: u64,
        tools: Option<(Vec<ToolSpec>, Vec<WorkerInfo>)>,
        queued: Vec<String>,
    ) {
        let w = &self.inner.workers;
        let mut peers = w.peers.lock();
        let entry = peers.entry(node_id).or_insert_with(|| PeerWorkers {
            seen: Instant::now(),
            tools: Vec::new(),
            registrations: Vec::new(),
            queued: HashSet::new(),
        });
        entry.seen = Instant::now();
        let queued: HashSet<String> = queued.into_iter().collect();
        let news = queued.iter().any(|t| !entry.queued.contains(t));
        entry.queued = queued;
        if news {
            w.queued.notify_waiters();
        }
        if let Some((tools, registrations)) = tools {
            entry.registrations = registrations;
            let same = entry.tools.len() == tools.len()
                && entry.tools.iter().zip(&tools).all(|(a, b)| {
                    a.spec.to_wire(true) == b.to_wire(true) && a.spec.resume == b.resume
                });
            if !same {
                entry.tools = tools
                    .into_iter()
                    .map(|spec| Arc::new(WorkerTool { spec }))
                    .collect();
                let list: Vec<Arc<dyn Tool>> = entry
                    .tools
                    .iter()
                    .map(|t| t.clone() as Arc<dyn Tool>)
                    .collect();
                self.inner.tools.set_source(&peer_source(node_id), list);
            }
        }
    }

    /// Withdraw the tools of peers whose digests stopped coming.
    pub(crate) fn sweep_peer_workers(&self) {
        let mut peers = self.inner.workers.peers.lock();
        peers.retain(|node_id, p| {
            let keep = p.seen.elapsed() < WORKER_DIGEST_TTL;
            if !keep {
                self.inner
                    .tools
                    .set_source(&peer_source(*node_id), Vec::new());
                tracing::info!(node_id, "worker tools of a silent node withdrawn");
            }
            keep
        });
    }

    /// Every live registration of the cluster as this node knows it: its own, and those its
    /// peers told in their digests; by node, then oldest first.
    pub fn cluster_workers(&self) -> Vec<WorkerInfo> {
        let mut all = self.workers();
        for p in self.inner.workers.peers.lock().values() {
            all.extend(p.registrations.iter().cloned());
        }
        all.sort_by(|a, b| {
            (a.node_id, a.registered_at_ms, &a.worker_id).cmp(&(
                b.node_id,
                b.registered_at_ms,
                &b.worker_id,
            ))
        });
        all
    }

    /// The peers that have tasks of one of `tools` queued, as far as this node knows, in node
    /// order.
    pub fn peers_with_work(&self, tools: &[String]) -> Vec<u64> {
        let mut ids: Vec<u64> = self
            .inner
            .workers
            .peers
            .lock()
            .iter()
            .filter(|(_, p)| tools.iter().any(|t| p.queued.contains(t)))
            .map(|(id, _)| *id)
            .collect();
        ids.sort_unstable();
        ids
    }

    /// Node `node_id` had no more tasks of `tools` queued than it gave: stop taking from it
    /// until its next digest says otherwise.
    pub fn no_work_at(&self, node_id: u64, tools: &[String]) {
        if let Some(p) = self.inner.workers.peers.lock().get_mut(&node_id) {
            for t in tools {
                p.queued.remove(t);
            }
        }
    }

    /// Done when a task is queued here or a peer tells of new queued work (or at once, for a
    /// waiter created before): a waiting poll looks again.
    pub fn work_queued(&self) -> tokio::sync::futures::Notified<'_> {
        self.inner.workers.queued.notified()
    }

    /// `identity`'s registration `worker_id` here, marked as seen: its tools and how many
    /// tasks one poll of it may take.
    pub fn worker_poll_grant(
        &self,
        identity: &str,
        worker_id: &str,
        max_tasks: u32,
    ) -> Result<(Vec<String>, usize), super::WorkerError> {
        let (tools, max_concurrent) = self.touch_worker(identity, worker_id)?;
        let cap = max_concurrent.min(self.inner.workers.settings.max_tasks_per_poll);
        Ok((tools, max_tasks.clamp(1, cap) as usize))
    }

    /// Lease up to `max` tasks queued here of `tools` to the registration `worker_id` of
    /// `holder` that another node holds (`TaskService.TakeWork`), at once.
    pub async fn take_work(
        &self,
        holder: &str,
        worker_id: &str,
        tools: &[String],
        max: usize,
    ) -> Vec<Leased> {
        let max = max.clamp(1, self.inner.workers.settings.max_tasks_per_poll as usize);
        self.take(holder, worker_id, tools, max).await
    }
}

/// The registry source of node `node_id`'s workers.
fn peer_source(node_id: u64) -> String {
    format!("workers@{node_id}")
}
