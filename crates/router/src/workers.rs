//! Workers across nodes: a worker polls the node it is connected to, and is served the tasks
//! of every shard. The tasks of a worker tool wait in the queues of their shards' leaders;
//! each node tells every other, in its worker digest, which tools have tasks queued on it
//! (`TaskService.ExchangeWorkers`, sent when a queue goes from empty to not, and every second
//! with its registrations' tools). A poll takes from this node's queues first, then from the
//! nodes whose digests say they have work for its tools (`TaskService.TakeWork`, which answers
//! at once), and otherwise waits for either to change. Taking is always immediate and from one
//! node at a time, so a poll never gets more leases than it asked for.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use taskmesh_host::workers::Leased;
use taskmesh_host::WorkerError;
use tokio::time::Instant;

use crate::convert::{leased_from_pb, worker_tool_from_pb, worker_tool_to_pb};
use crate::Router;

/// How often a node sends its whole worker digest to every peer.
pub const WORKER_DIGEST_INTERVAL: Duration = Duration::from_secs(1);
/// The longest a digest or a take may take to reach a peer.
const PEER_CALL_TIMEOUT: Duration = Duration::from_secs(2);

/// Where the next poll starts among the peers with work, so that polls spread over them.
static NEXT_PEER: AtomicUsize = AtomicUsize::new(0);

impl Router {
    /// Wait up to `wait` (capped at `workers.poll_wait_max_ms`) for tasks of the tools of
    /// `identity`'s registration `worker_id` here, on any node, and lease up to `max_tasks`.
    pub async fn poll_workers(
        &self,
        identity: &str,
        worker_id: &str,
        max_tasks: u32,
        wait: Duration,
    ) -> Result<Vec<Leased>, WorkerError> {
        let host = self.host();
        let (tools, max) = host.worker_poll_grant(identity, worker_id, max_tasks)?;
        let wait_max = Duration::from_millis(host.worker_settings().poll_wait_max_ms);
        let until = Instant::now() + wait.min(wait_max);
        loop {
            let woken = host.work_queued();
            tokio::pin!(woken);
            woken.as_mut().enable();
            let got = self.take_anywhere(identity, worker_id, &tools, max).await;
            if !got.is_empty() || Instant::now() >= until {
                // Seen at the end of its wait too: a worker that long-polls is not idle.
                let _ = host.worker_poll_grant(identity, worker_id, 1);
                return Ok(got);
            }
            tokio::select! {
                () = &mut woken => {}
                () = tokio::time::sleep_until(until) => {}
            }
        }
    }

    /// Up to `max` leases, from this node's queues or else from one peer with work at a time.
    async fn take_anywhere(
        &self,
        identity: &str,
        worker_id: &str,
        tools: &[String],
        max: usize,
    ) -> Vec<Leased> {
        let host = self.host();
        let got = host.take_work(identity, worker_id, tools, max).await;
        if !got.is_empty() {
            return got;
        }
        let Some(peers) = &self.peers else {
            return got;
        };
        let with_work = host.peers_with_work(tools);
        if with_work.is_empty() {
            return got;
        }
        let start = NEXT_PEER.fetch_add(1, Ordering::Relaxed);
        for i in 0..with_work.len() {
            let id = with_work[(start + i) % with_work.len()];
            let req = taskmesh_rpc::v1::TakeWorkRequest {
                holder: identity.to_string(),
                worker_id: worker_id.to_string(),
                tools: tools.to_vec(),
                max_tasks: max as u32,
            };
            let taken = tokio::time::timeout(PEER_CALL_TIMEOUT, peers.take_work(id, req)).await;
            match taken {
                Ok(Ok(leases)) => {
                    if leases.len() < max {
                        host.no_work_at(id, tools);
                    }
                    if !leases.is_empty() {
                        return leases.into_iter().map(leased_from_pb).collect();
                    }
                }
                _ => host.no_work_at(id, tools),
            }
        }
        Vec::new()
    }

    /// Send this node's worker digest to every peer when it changes and every
    /// [`WORKER_DIGEST_INTERVAL`], until the router is dropped. A cluster node runs it once.
    pub fn spawn_worker_exchange(&self) {
        let Some(peers) = self.peers.clone() else {
            return;
        };
        let host = self.host().clone();
        let node_id = self.node_id;
        tokio::spawn(async move {
            let mut changes = host.worker_changes();
            let mut tick = tokio::time::interval(WORKER_DIGEST_INTERVAL);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                let whole = tokio::select! {
                    _ = tick.tick() => true,
                    changed = changes.changed() => {
                        if changed.is_err() {
                            return;
                        }
                        false
                    }
                };
                let digest = host.worker_digest();
                let msg = taskmesh_rpc::v1::WorkerDigest {
                    node_id,
                    has_tools: whole,
                    tools: if whole {
                        digest.tools.iter().map(worker_tool_to_pb).collect()
                    } else {
                        Vec::new()
                    },
                    queued_tools: digest.queued,
                    registrations: if whole {
                        digest
                            .registrations
                            .into_iter()
                            .map(|r| taskmesh_rpc::v1::WorkerRegistration {
                                worker_id: r.worker_id,
                                identity: r.identity,
                                label: r.label,
                                tools: r.tools,
                                max_concurrent_tasks: r.max_concurrent_tasks,
                                registered_at_ms: r.registered_at_ms,
                            })
                            .collect()
                    } else {
                        Vec::new()
                    },
                };
                let sends = peers.ids().into_iter().map(|id| {
                    let (peers, msg) = (peers.clone(), msg.clone());
                    async move {
                        let sent =
                            tokio::time::timeout(PEER_CALL_TIMEOUT, peers.exchange_workers(id, msg))
                                .await;
                        if let Ok(Err(e)) = sent {
                            tracing::debug!(node_id = id, error = %e, "worker digest not delivered");
                        }
                    }
                });
                futures::future::join_all(sends).await;
            }
        });
    }
}

/// Take in a peer's digest (the server side of `ExchangeWorkers`); a malformed tool is left out
/// (and logged), the others are served.
pub(crate) fn digest_received(host: &taskmesh_host::Host, d: taskmesh_rpc::v1::WorkerDigest) {
    let node_id = d.node_id;
    let tools = d.has_tools.then(|| {
        let tools = d
            .tools
            .into_iter()
            .filter_map(|t| match worker_tool_from_pb(t) {
                Ok(spec) => Some(spec),
                Err(e) => {
                    tracing::warn!(node_id, error = %e, "a peer's worker tool left out");
                    None
                }
            })
            .collect();
        let registrations = d
            .registrations
            .into_iter()
            .map(|r| taskmesh_host::WorkerInfo {
                worker_id: r.worker_id,
                identity: r.identity,
                label: r.label,
                tools: r.tools,
                max_concurrent_tasks: r.max_concurrent_tasks,
                node_id,
                registered_at_ms: r.registered_at_ms,
            })
            .collect();
        (tools, registrations)
    });
    host.peer_workers(d.node_id, tools, d.queued_tools);
}
