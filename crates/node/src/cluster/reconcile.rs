//! The reconciler: the loop that moves this node towards the cluster metadata (see the
//! parent module's docs for what one pass does).
//!
//! A pass visits every shard only when something it acts on may have changed: the metadata
//! (its version), or the leadership of any group on this node
//! ([`taskmesh_shard::leadership_changes`]), and in any case every [`FULL_PASS_TICKS`]-th
//! pass. Otherwise it visits only the shards whose last step left work (a replica just opened,
//! a membership change or hand-over under way, a replica to delete, an error): an idle
//! cluster's pass costs nothing per shard.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use parking_lot::RwLock;
use taskmesh_host::Host;
use taskmesh_meta::{ClusterMeta, MetaCommand};
use taskmesh_router::Router;
use taskmesh_shard::{GroupState, ShardError, ShardReplica};

use super::{Membership, MetaError};

/// How long the reconciler waits for a shard's member list before it deletes a replica that
/// was placed elsewhere (no answer: it asks again on a later pass).
const MEMBERS_CALL_TIMEOUT: Duration = Duration::from_secs(2);

/// Every this many passes, every shard is visited whatever changed (a safety net: 10 s at the
/// default `cluster.reconcile_interval_ms`).
const FULL_PASS_TICKS: u64 = 20;

/// Opens this node's replica of a shard group (over the node's Raft transport) and registers
/// it where peers' Raft messages find it.
pub type OpenGroup = Arc<
    dyn Fn(u32) -> futures::future::BoxFuture<'static, Result<ShardReplica, ShardError>>
        + Send
        + Sync,
>;

/// Settings of the reconciler.
#[derive(Debug, Clone)]
pub struct ReconcileConfig {
    /// This node's id in the cluster (`node.id`).
    pub node_id: u64,
    /// The address peers reach this node's gRPC at; joining records it in the metadata.
    pub grpc_addr: String,
    /// Create the cluster with this identity (`--bootstrap`): shards, hash, replication and
    /// the configured nodes.
    pub create: Option<MetaCommand>,
    /// The shard count this node was configured with.
    pub shards: u32,
    /// The pause between two passes (`cluster.reconcile_interval_ms`).
    pub interval: Duration,
    /// A learner becomes a voter once it is at most this many entries behind the leader.
    pub catch_up_entries: u64,
    /// A leader hands a shard to its preferred leader only after leading it this long.
    pub leader_settle: Duration,
    /// How many shards a pass works on at once (`cluster.reconcile_shards_in_flight`).
    pub shards_in_flight: usize,
}

/// What the reconciler acts through: this node's metadata handle, host and router, the
/// registry that peers' Raft messages find replicas in, how to open a shard's replica, and the
/// metadata view the router's placement reads.
pub struct NodeHandles {
    /// This node's handle on the cluster metadata group.
    pub membership: Arc<Membership>,
    /// The node's task host.
    pub host: Host,
    /// The node's router.
    pub router: Router,
    /// Where peers' Raft messages find this node's replicas.
    pub registry: taskmesh_transport::ReplicaRegistry,
    /// How to open a replica of a shard on this node.
    pub open: OpenGroup,
    /// The metadata the router's placement reads.
    pub view: Arc<RwLock<ClusterMeta>>,
}

/// The loop that moves this node towards the cluster metadata (see the module docs).
pub struct Reconciler {
    cfg: ReconcileConfig,
    node: NodeHandles,
    /// Per shard: since when this node leads it.
    leading_since: parking_lot::Mutex<HashMap<u32, tokio::time::Instant>>,
    ticks: u64,
    /// The metadata as last read, reused while its version is the same.
    meta: Option<Arc<ClusterMeta>>,
    /// The metadata version and the node's leadership changes when every shard was last
    /// visited.
    visited: Option<(u64, u64)>,
    /// The shards whose last step left something to do; visited on every pass.
    unsettled: parking_lot::Mutex<BTreeSet<u32>>,
}

impl Reconciler {
    /// A reconciler for the node `node` reaches.
    pub fn new(cfg: ReconcileConfig, node: NodeHandles) -> Self {
        Self {
            cfg,
            node,
            leading_since: parking_lot::Mutex::new(HashMap::new()),
            ticks: 0,
            meta: None,
            visited: None,
            unsettled: parking_lot::Mutex::new(BTreeSet::new()),
        }
    }

    /// Run until the task is aborted; returns an error only for a condition the node must not
    /// run with (a cluster of another shard count).
    pub async fn run(mut self) -> anyhow::Result<()> {
        let mut tick = tokio::time::interval(self.cfg.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            self.ticks += 1;
            self.step().await?;
        }
    }

    /// The metadata as this node has applied it; read again only when its version moved.
    fn current_meta(&mut self) -> Arc<ClusterMeta> {
        let version = self.node.membership.version();
        match &self.meta {
            Some(m) if m.version == version && m.is_created() => m.clone(),
            _ => {
                let m = Arc::new(self.node.membership.current());
                self.meta = Some(m.clone());
                m
            }
        }
    }

    async fn step(&mut self) -> anyhow::Result<()> {
        let me = self.cfg.node_id;
        let mut meta = self.current_meta();
        if !meta.is_created() {
            if let Some(create) = self.cfg.create.clone() {
                match self.node.membership.propose(create).await {
                    Ok((m, _)) => meta = Arc::new(m),
                    Err(MetaError::Refused(m)) => anyhow::bail!("creating the cluster: {m}"),
                    Err(e) => {
                        tracing::info!(error = %e, "cluster not created yet");
                        return Ok(());
                    }
                }
            }
        }
        if meta.is_created() {
            self.check_shards(meta.shards)?;
        }
        if meta.nodes.get(&me) != Some(&self.cfg.grpc_addr) {
            // Not a member (as far as this node has seen), or at another address: ask to join.
            // A member whose copy of the metadata lags gets "no change" back.
            let join = MetaCommand::Join {
                node_id: me,
                addr: self.cfg.grpc_addr.clone(),
            };
            match self.node.membership.propose(join).await {
                Ok((m, changed)) => {
                    if changed {
                        tracing::info!(node = me, "joined the cluster");
                    }
                    self.check_shards(m.shards)?;
                    if !meta.is_created() {
                        // Wait for the local copy to catch up before acting on it.
                        return Ok(());
                    }
                }
                Err(e) => {
                    tracing::debug!(error = %e, "joining the cluster");
                    if !meta.is_created() {
                        return Ok(());
                    }
                }
            }
        }
        self.publish(&meta);
        if meta.removed.contains(&me) && self.ticks.is_multiple_of(4) {
            self.forget_all_if_refused(&meta).await?;
        }
        if self.node.membership.meta.is_leader() {
            let voters = meta.meta_voters(&self.node.membership.meta.voters());
            let everyone: BTreeSet<u64> = meta.nodes.keys().copied().collect();
            if let Err(e) = self
                .converge(
                    &self.node.membership.meta.clone(),
                    &meta,
                    &voters,
                    &everyone,
                )
                .await
            {
                tracing::debug!(error = %e, "metadata group membership");
            }
        }
        // Read before the pass: a change during it makes the next pass a full one.
        let seen = (meta.version, taskmesh_shard::leadership_changes());
        let full = self.visited != Some(seen) || self.ticks.is_multiple_of(FULL_PASS_TICKS);
        let shards: Vec<u32> = if full {
            self.visited = Some(seen);
            (0..meta.shards).collect()
        } else {
            self.unsettled.lock().iter().copied().collect()
        };
        let this = &*self;
        let meta = &*meta;
        futures::stream::iter(shards)
            .for_each_concurrent(self.cfg.shards_in_flight.max(1), |shard| async move {
                let settled = match this.shard_step(meta, shard).await {
                    Ok(settled) => settled,
                    Err(e) => {
                        tracing::debug!(shard, error = %e, "placement step");
                        false
                    }
                };
                let mut unsettled = this.unsettled.lock();
                if settled {
                    unsettled.remove(&shard);
                } else {
                    unsettled.insert(shard);
                }
            })
            .await;
        Ok(())
    }

    /// On a node that was removed: once every member refuses it at the handshake (mutual TLS
    /// admits a removed node only while a Raft group still lists it), no group anywhere counts
    /// on its replicas, so they are deleted. (On a plaintext port the removed node keeps
    /// asking each group's leader instead, in `shard_step`.)
    async fn forget_all_if_refused(&mut self, meta: &ClusterMeta) -> anyhow::Result<()> {
        let replicas = self.node.host.replicas();
        if replicas.is_empty() || !self.node.membership.refused_by_every_member(meta).await {
            return Ok(());
        }
        for replica in replicas {
            let shard = replica.shard_id();
            self.node.host.remove_shard(shard);
            self.node.registry.remove(shard);
            replica.destroy().await?;
        }
        tracing::info!(
            "this node was removed and no member admits it any more: its replicas are deleted"
        );
        Ok(())
    }

    /// Hand the metadata to the router (peers and placement).
    fn publish(&self, meta: &ClusterMeta) {
        {
            let view = self.node.view.read();
            if view.version == meta.version && view.is_created() {
                return;
            }
        }
        let old = std::mem::replace(&mut *self.node.view.write(), meta.clone());
        for (id, addr) in &meta.nodes {
            if *id != self.cfg.node_id {
                if let Err(e) = self.node.router.add_peer(*id, addr.clone()) {
                    tracing::warn!(node = id, error = %e, "peer address");
                }
            }
        }
        for id in old.nodes.keys().filter(|id| !meta.nodes.contains_key(id)) {
            self.node.router.remove_peer(*id);
        }
    }

    /// One shard's step; true when it left nothing to do (nothing will until the metadata or
    /// the group's leadership changes).
    async fn shard_step(&self, meta: &ClusterMeta, shard: u32) -> anyhow::Result<bool> {
        let me = self.cfg.node_id;
        let placed = meta.replicas(shard).to_vec();
        let here = placed.contains(&me);
        let (replica, opened) = match self.node.host.replica(shard) {
            Some(replica) => (replica, false),
            None if here => {
                let replica = (self.node.open)(shard).await?;
                self.node.registry.insert(replica.clone());
                self.node
                    .host
                    .add_shard(replica.clone())
                    .map_err(|e| anyhow::anyhow!("{e}"))?;
                tracing::info!(shard, "replica opened");
                (replica, true)
            }
            None => return Ok(true),
        };
        if !meta.created.contains(&shard) && placed.first() == Some(&me) {
            // The first placed node initialises a new group (idempotent on later passes).
            let members = placed
                .iter()
                .map(|id| Ok((*id, self.addr_of(meta, *id)?)))
                .collect::<anyhow::Result<BTreeMap<u64, String>>>()?;
            replica.bootstrap(members).await?;
        }
        if opened {
            // The rest waits for the next pass, once the new replica has seen its group.
            return Ok(false);
        }
        if replica.is_leader() {
            let since = *self
                .leading_since
                .lock()
                .entry(shard)
                .or_insert_with(tokio::time::Instant::now);
            if !meta.created.contains(&shard) {
                self.node
                    .membership
                    .propose(MetaCommand::ShardCreated { shard })
                    .await?;
                return Ok(false);
            }
            let target: BTreeSet<u64> = placed.iter().copied().collect();
            if self.converge(&replica, meta, &target, &target).await? {
                return Ok(false);
            }
            // Membership matches the placement: lead where preferred.
            let preferred = placed.first().copied();
            if let Some(p) = preferred.filter(|p| *p != me) {
                if since.elapsed() >= self.cfg.leader_settle && self.caught_up(&replica, p) {
                    tracing::info!(shard, to = p, "handing leadership to the preferred leader");
                    replica.transfer_leader(p).await?;
                }
                return Ok(false);
            }
            return Ok(true);
        }
        self.leading_since.lock().remove(&shard);
        if !here && meta.is_complete() && self.ticks.is_multiple_of(4) {
            // Placed elsewhere: delete this replica once the group no longer lists this node.
            let asked = self.node.router.run(taskmesh_host::ops::Members { shard });
            if let Ok(Ok(members)) = tokio::time::timeout(MEMBERS_CALL_TIMEOUT, asked).await {
                if !members.voters.contains(&me) && !members.learners.contains(&me) {
                    self.node.host.remove_shard(shard);
                    self.node.registry.remove(shard);
                    replica.destroy().await?;
                    tracing::info!(shard, "replica moved away; deleted here");
                }
            }
        }
        Ok(here)
    }

    /// The shard count is fixed when the cluster is created: a node configured with another
    /// count must not run (its routing hash would send tasks to the wrong shards).
    fn check_shards(&self, cluster_shards: u32) -> anyhow::Result<()> {
        if cluster_shards != self.cfg.shards {
            anyhow::bail!(
                "the cluster has {cluster_shards} shards; this node is configured with shards = {} \
                 (the shard count is fixed at cluster creation)",
                self.cfg.shards
            );
        }
        Ok(())
    }

    fn addr_of(&self, meta: &ClusterMeta, id: u64) -> anyhow::Result<String> {
        meta.nodes
            .get(&id)
            .cloned()
            .ok_or_else(|| anyhow::anyhow!("no address for node {id}"))
    }

    /// Whether member `id` holds (about) everything the leader has.
    fn caught_up<S: GroupState>(&self, replica: &ShardReplica<S>, id: u64) -> bool {
        let Some((last, matched)) = replica.replication() else {
            return false;
        };
        matched
            .get(&id)
            .copied()
            .flatten()
            .is_some_and(|m| m + self.cfg.catch_up_entries >= last)
    }

    /// One step of moving a group this node leads towards `voters` (plus `members` as
    /// learners). Returns whether a change was needed (made or started).
    async fn converge<S: GroupState>(
        &self,
        replica: &ShardReplica<S>,
        meta: &ClusterMeta,
        voters: &BTreeSet<u64>,
        members: &BTreeSet<u64>,
    ) -> anyhow::Result<bool> {
        let me = self.cfg.node_id;
        let shard = replica.shard_id();
        let current = replica.members();
        let wanted: BTreeSet<u64> = voters.union(members).copied().collect();
        let mut changed = false;
        for id in wanted.iter().filter(|id| !current.contains_key(id)) {
            replica.add_learner(*id, self.addr_of(meta, *id)?).await?;
            tracing::info!(shard, node = id, "learner added");
            changed = true;
        }
        if changed {
            return Ok(true);
        }
        let now_voters: BTreeSet<u64> = replica.voters().into_iter().collect();
        if now_voters != *voters {
            if !voters.contains(&me) {
                // Leave the leadership to a voter that stays, then let it finish the change.
                if let Some(next) = voters.iter().find(|v| now_voters.contains(v)) {
                    replica.transfer_leader(*next).await?;
                    return Ok(true);
                }
            }
            if voters
                .iter()
                .filter(|v| !now_voters.contains(v))
                .all(|v| self.caught_up(replica, *v))
            {
                replica.set_voters(voters.clone()).await?;
                tracing::info!(shard, voters = ?voters, "voters changed");
            }
            return Ok(true);
        }
        let extra: BTreeSet<u64> = current
            .keys()
            .filter(|id| !wanted.contains(id))
            .copied()
            .collect();
        if !extra.is_empty() {
            replica.remove_learners(extra.clone()).await?;
            tracing::info!(shard, removed = ?extra, "learners removed");
            return Ok(true);
        }
        Ok(false)
    }
}
