//! The shards a host serves: adding and removing replicas, starting their loops
//! (`events.rs`), and what the host knows of each one's group (leader, members, status).
//!
//! The node adds a replica for every shard it is a member of and removes it when it leaves
//! the group; the router asks [`Host::leads`] and [`Host::shard_leader`] to pick a target, and
//! `GET /status` reads [`Host::shard_status`].

use std::sync::atomic::Ordering;
use std::sync::Arc;

use taskmesh_shard::ShardReplica;
use tokio::sync::Notify;

use crate::{events, Host, HostError, ShardStatus};

/// A replica this node hosts and the loops the host runs for it.
pub(crate) struct Hosted {
    replica: ShardReplica,
    loops: Vec<tokio::task::JoinHandle<()>>,
    /// Wakes the shard's reconciler (the housekeeping does).
    nudge: Arc<Notify>,
}

impl Host {
    /// Start the per-shard loops: leadership (resume tasks when this node becomes leader, stop
    /// actors when it stops being one), event fan-out and expiry.
    pub fn start(&self) {
        if self.inner.started.swap(true, Ordering::SeqCst) {
            return;
        }
        events::spawn_housekeeping(self);
        let mut shards = self.inner.shards.write();
        for hosted in shards.iter_mut().flatten() {
            if hosted.loops.is_empty() {
                hosted.loops = events::spawn_shard_loops(
                    self.clone(),
                    hosted.replica.clone(),
                    hosted.nudge.clone(),
                );
            }
        }
    }

    /// Every hosted replica with the nudge of its reconciler.
    pub(crate) fn nudges(&self) -> Vec<(ShardReplica, Arc<Notify>)> {
        self.inner
            .shards
            .read()
            .iter()
            .flatten()
            .map(|h| (h.replica.clone(), h.nudge.clone()))
            .collect()
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
        let nudge = Arc::new(Notify::new());
        let loops = if self.inner.started.load(Ordering::SeqCst) {
            events::spawn_shard_loops(self.clone(), replica.clone(), nudge.clone())
        } else {
            Vec::new()
        };
        *slot = Some(Hosted {
            replica,
            loops,
            nudge,
        });
        Ok(())
    }

    /// Stop hosting shard `id`: end its loops and task actors and release waiters on its
    /// tasks. Returns the replica (still running: the caller shuts it down).
    pub fn remove_shard(&self, id: u32) -> Option<ShardReplica> {
        let hosted = self.inner.shards.write().get_mut(id as usize)?.take()?;
        for h in &hosted.loops {
            h.abort();
        }
        crate::reconcile::stop_shard_actors(self, id);
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
        self.with_replica(shard_id, |r| r.leader_now()).flatten()
    }

    /// `f` of the local replica of `id`, if there is one, without a clone of it: the routing of
    /// every request asks, and a clone is two writes to memory that every core shares.
    pub(crate) fn with_replica<R>(&self, id: u32, f: impl FnOnce(&ShardReplica) -> R) -> Option<R> {
        let shards = self.inner.shards.read();
        shards.get(id as usize)?.as_ref().map(|h| f(&h.replica))
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
                    committed_index: s.committed_index(),
                    proposals_in_flight: s.proposals_in_flight(),
                    leader_silence_ms: (!lead.is_leader)
                        .then(|| s.since_leader_contact().map(|d| d.as_millis() as u64))
                        .flatten(),
                    follower_lag: s
                        .replication()
                        .map(|(last, matched)| {
                            matched
                                .into_iter()
                                .filter(|(id, _)| *id != s.node_id())
                                .map(|(id, m)| (id, last.saturating_sub(m.unwrap_or(0))))
                                .collect()
                        })
                        .unwrap_or_default(),
                    quiet: s.quiet(),
                }
            })
            .collect()
    }

    /// Whether this node leads `shard` now.
    pub fn leads(&self, shard_id: u32) -> bool {
        self.with_replica(shard_id, |r| r.leads_now()) == Some(true)
    }
}
