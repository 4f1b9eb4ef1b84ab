//! Cluster membership and placement on a node.
//!
//! The cluster metadata ([`ClusterMeta`]: identity, nodes, placement) is the state of the
//! metadata Raft group, which every node holds a replica of (up to `replication` voters, the
//! other nodes as learners). [`Membership`] is this node's handle on it: it reads the local copy
//! and proposes changes, on the metadata leader wherever that is ([`Membership::propose`],
//! served to other nodes by [`ClusterGrpc`]).
//!
//! [`Reconciler`] is the loop that makes the node match the metadata, every
//! `cluster.reconcile_interval_ms`:
//!
//! - it creates the cluster (`--bootstrap`) or joins it (a node that is not a member yet);
//! - it keeps the router's peers and placement current;
//! - on the metadata leader, it keeps the metadata group's own membership in line with the
//!   nodes;
//! - for each shard: it opens the replicas placed here (the first node of a new shard's
//!   placement initialises the group), and on a shard it leads it moves the group's membership
//!   to the placement (new replicas join as learners and become voters once caught up; a leader
//!   that is being removed hands its leadership to a staying voter first), hands leadership to
//!   the preferred leader once that replica is caught up, and records new groups as created;
//! - replicas the placement moved away are deleted once the group's leader no longer lists
//!   this node.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;
use taskmesh_host::Host;
use taskmesh_meta::{ClusterMeta, MetaApplied, MetaCommand, MetaRejection};
use taskmesh_router::Router;
use taskmesh_rpc::v1::{self, cluster_service_client::ClusterServiceClient};
use taskmesh_shard::{GroupState, MetaReplica, Retry, ShardError, ShardReplica};
use tonic::transport::Endpoint;
use tonic::{Request, Response, Status};

/// Why a metadata change did not happen.
#[derive(Debug, Clone, thiserror::Error)]
pub enum MetaError {
    /// The metadata refused the change (the rejection says why); nothing changed.
    #[error(transparent)]
    Refused(MetaRejection),
    /// No metadata leader could be reached in time.
    #[error("cluster metadata unavailable: {0}")]
    Unavailable(String),
}

/// This node's handle on the cluster metadata.
pub struct Membership {
    node_id: u64,
    /// The metadata group's replica on this node.
    meta: MetaReplica,
    /// Configured peers (id -> gRPC address): where to look before the metadata is known.
    seeds: BTreeMap<u64, String>,
    /// How long [`Membership::propose`] keeps trying.
    retry_budget: Duration,
    /// The channel to each peer address proposals went to, kept for the next ones.
    channels: parking_lot::Mutex<HashMap<String, tonic::transport::Channel>>,
}

impl Membership {
    pub fn new(
        node_id: u64,
        meta: MetaReplica,
        seeds: BTreeMap<u64, String>,
        retry_budget: Duration,
    ) -> Self {
        Self {
            node_id,
            meta,
            seeds,
            retry_budget,
            channels: parking_lot::Mutex::new(HashMap::new()),
        }
    }

    /// The metadata service of the peer at `addr`, through the channel kept for it.
    fn client(
        &self,
        addr: &str,
    ) -> Result<ClusterServiceClient<tonic::transport::Channel>, String> {
        let mut channels = self.channels.lock();
        let channel = match channels.get(addr) {
            Some(c) => c.clone(),
            None => {
                let c = cluster_endpoint(addr)?.connect_lazy();
                channels.insert(addr.to_string(), c.clone());
                c
            }
        };
        Ok(ClusterServiceClient::new(channel))
    }

    /// The metadata as this node has applied it.
    pub fn current(&self) -> ClusterMeta {
        self.meta.read_local(|m| m.clone())
    }

    pub fn replica(&self) -> &MetaReplica {
        &self.meta
    }

    /// The gRPC address of node `id`: from the metadata, else from the configured peers.
    pub fn address(&self, id: u64) -> Option<String> {
        self.meta
            .read_local(|m| m.nodes.get(&id).cloned())
            .or_else(|| self.seeds.get(&id).cloned())
    }

    /// Propose `change` on the metadata leader (this node or another) and return the metadata
    /// after it, with whether it changed anything.
    pub async fn propose(&self, change: MetaCommand) -> Result<(ClusterMeta, bool), MetaError> {
        let mut retry = Retry::new(self.retry_budget, META_PAUSE_FIRST, META_PAUSE_MAX);
        let mut hint: Option<(u64, String)> = None;
        let mut turn = 0usize;
        let mut last = String::from("no metadata leader known");
        loop {
            if self.meta.is_leader() {
                match self.meta.propose(change.clone()).await {
                    Ok(MetaApplied {
                        result: Ok(meta),
                        changed,
                    }) => return Ok((*meta, changed)),
                    Ok(MetaApplied { result: Err(r), .. }) => return Err(MetaError::Refused(r)),
                    Err(e) => last = e.to_string(),
                }
            } else {
                let target = hint.take().or_else(|| {
                    let leader = self.meta.leadership().borrow().leader?;
                    (leader != self.node_id).then(|| Some((leader, self.address(leader)?)))?
                });
                let target = target.or_else(|| {
                    let mut all: BTreeMap<u64, String> = self.seeds.clone();
                    all.extend(self.current().nodes);
                    all.remove(&self.node_id);
                    let list: Vec<(u64, String)> = all.into_iter().collect();
                    turn += 1;
                    (!list.is_empty()).then(|| list[turn % list.len()].clone())
                });
                if let Some((id, addr)) = target {
                    let sent = match self.client(&addr) {
                        Ok(client) => propose_remote(client, &change).await,
                        Err(m) => Err(RemoteError::Failed(m)),
                    };
                    match sent {
                        Ok(done) => return Ok(done),
                        Err(RemoteError::Refused(m)) => return Err(MetaError::Refused(m)),
                        Err(RemoteError::NotLeader(Some(h))) if h.0 != id => {
                            hint = Some(h);
                            retry.reset();
                        }
                        Err(RemoteError::NotLeader(_)) => last = format!("node {id} has no leader"),
                        Err(RemoteError::Failed(m)) => last = format!("node {id}: {m}"),
                    }
                }
            }
            if retry.expired() || (hint.is_none() && !retry.pause().await) {
                return Err(MetaError::Unavailable(last));
            }
        }
    }
}

enum RemoteError {
    Refused(MetaRejection),
    NotLeader(Option<(u64, String)>),
    Failed(String),
}

/// The first pause before a metadata proposal asks again when no leader is known; pauses double
/// up to [`META_PAUSE_MAX`] (see [`Retry`]).
const META_PAUSE_FIRST: Duration = Duration::from_millis(100);
/// The longest pause between two attempts of a metadata proposal.
const META_PAUSE_MAX: Duration = Duration::from_secs(1);
/// How long a `taskmesh cluster` command looks for the metadata leader.
const PROPOSE_VIA_BUDGET: Duration = Duration::from_secs(10);

/// How long the reconciler waits for a shard's member list before it deletes a replica that
/// was placed elsewhere (no answer: it asks again on a later pass).
const MEMBERS_CALL_TIMEOUT: Duration = Duration::from_secs(2);

/// How long one call to a peer's metadata service may take.
const CLUSTER_CALL_TIMEOUT: Duration = Duration::from_secs(5);

fn cluster_endpoint(addr: &str) -> Result<Endpoint, String> {
    Ok(taskmesh_rpc::dial::endpoint(addr)
        .map_err(|e| e.to_string())?
        .timeout(CLUSTER_CALL_TIMEOUT))
}

fn cluster_client(addr: &str) -> Result<ClusterServiceClient<tonic::transport::Channel>, String> {
    Ok(ClusterServiceClient::new(
        cluster_endpoint(addr)?.connect_lazy(),
    ))
}

async fn propose_remote(
    mut client: ClusterServiceClient<tonic::transport::Channel>,
    change: &MetaCommand,
) -> Result<(ClusterMeta, bool), RemoteError> {
    let change_json =
        serde_json::to_string(change).map_err(|e| RemoteError::Failed(e.to_string()))?;
    match client
        .propose_change(v1::ProposeChangeRequest { change_json })
        .await
    {
        Ok(r) => {
            let r = r.into_inner();
            let meta: ClusterMeta = serde_json::from_str(&r.metadata_json)
                .map_err(|e| RemoteError::Failed(format!("malformed metadata: {e}")))?;
            Ok((meta, r.changed))
        }
        Err(s)
            if s.code() == tonic::Code::FailedPrecondition
                && v1::TaskError::from_status(&s).is_none() =>
        {
            // The rejection travels as JSON in the status details; a peer that sends none
            // still has its reason shown.
            let rejection = serde_json::from_slice(s.details())
                .unwrap_or_else(|_| MetaRejection::Invalid(s.message().to_string()));
            Err(RemoteError::Refused(rejection))
        }
        Err(s) => match v1::TaskError::from_status(&s) {
            Some(e) if e.kind() == v1::TaskErrorKind::NotLeader => Err(RemoteError::NotLeader(
                e.leader
                    .filter(|l| l.node_id != 0 && !l.address.is_empty())
                    .map(|l| (l.node_id, l.address)),
            )),
            _ => Err(RemoteError::Failed(s.message().to_string())),
        },
    }
}

/// Ask the node at `addr` for its copy of the cluster metadata.
pub async fn fetch_metadata(addr: &str) -> anyhow::Result<ClusterMeta> {
    let mut client = cluster_client(addr).map_err(anyhow::Error::msg)?;
    let r = client
        .get_metadata(v1::GetMetadataRequest {})
        .await
        .map_err(|s| anyhow::anyhow!("{addr}: {}", s.message()))?;
    Ok(serde_json::from_str(&r.into_inner().metadata_json)?)
}

/// Propose `change` through the node at `addr` (which forwards it to the metadata leader by
/// following `NotLeader` hints). For the `taskmesh cluster` commands.
pub async fn propose_via(addr: &str, change: MetaCommand) -> anyhow::Result<(ClusterMeta, bool)> {
    let mut addr = addr.to_string();
    let mut retry = Retry::new(PROPOSE_VIA_BUDGET, META_PAUSE_FIRST, META_PAUSE_MAX);
    while !retry.expired() {
        let client = cluster_client(&addr).map_err(anyhow::Error::msg)?;
        match propose_remote(client, &change).await {
            Ok(done) => return Ok(done),
            Err(RemoteError::Refused(m)) => anyhow::bail!("refused: {m}"),
            Err(RemoteError::NotLeader(Some((_, a)))) => {
                addr = a;
                retry.reset();
            }
            Err(RemoteError::NotLeader(None)) => {
                retry.pause().await;
            }
            Err(RemoteError::Failed(m)) => anyhow::bail!("{addr}: {m}"),
        }
    }
    anyhow::bail!("no metadata leader found through {addr} within {PROPOSE_VIA_BUDGET:?}")
}

/// The `taskmesh.v1.ClusterService` server.
pub struct ClusterGrpc {
    membership: Arc<Membership>,
}

impl ClusterGrpc {
    pub fn new(membership: Arc<Membership>) -> Self {
        Self { membership }
    }

    pub fn into_server(self) -> v1::cluster_service_server::ClusterServiceServer<Self> {
        v1::cluster_service_server::ClusterServiceServer::new(self)
    }
}

#[tonic::async_trait]
impl v1::cluster_service_server::ClusterService for ClusterGrpc {
    async fn propose_change(
        &self,
        request: Request<v1::ProposeChangeRequest>,
    ) -> Result<Response<v1::ProposeChangeResponse>, Status> {
        let change: MetaCommand = serde_json::from_str(&request.into_inner().change_json)
            .map_err(|e| Status::invalid_argument(format!("change_json: {e}")))?;
        let m = &self.membership;
        if !m.meta.is_leader() {
            let leader = m.meta.leadership().borrow().leader;
            let hint = leader.map(|id| v1::LeaderHint {
                node_id: id,
                address: m.address(id).unwrap_or_default(),
            });
            return Err(v1::TaskError::not_leader(hint, "not the metadata leader").into_status());
        }
        match m.meta.propose(change).await {
            Ok(MetaApplied {
                result: Ok(meta),
                changed,
            }) => Ok(Response::new(v1::ProposeChangeResponse {
                metadata_json: serde_json::to_string(&meta)
                    .map_err(|e| Status::internal(e.to_string()))?,
                changed,
            })),
            Ok(MetaApplied { result: Err(r), .. }) => {
                let details = serde_json::to_vec(&r).unwrap_or_default();
                Err(Status::with_details(
                    tonic::Code::FailedPrecondition,
                    r.to_string(),
                    details.into(),
                ))
            }
            Err(ShardError::NotLeader { leader_hint }) => Err(v1::TaskError::not_leader(
                leader_hint.map(|id| v1::LeaderHint {
                    node_id: id,
                    address: m.address(id).unwrap_or_default(),
                }),
                "not the metadata leader",
            )
            .into_status()),
            Err(e) if e.retryable() => Err(v1::TaskError::unavailable(e.to_string()).into_status()),
            Err(e) => Err(v1::TaskError::of_kind(
                v1::TaskErrorKind::Internal,
                format!("the metadata group failed: {e}"),
            )
            .into_status()),
        }
    }

    async fn get_metadata(
        &self,
        _request: Request<v1::GetMetadataRequest>,
    ) -> Result<Response<v1::GetMetadataResponse>, Status> {
        let meta = self.membership.current();
        Ok(Response::new(v1::GetMetadataResponse {
            metadata_json: serde_json::to_string(&meta)
                .map_err(|e| Status::internal(e.to_string()))?,
        }))
    }
}

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
    pub node_id: u64,
    pub grpc_addr: String,
    /// Create the cluster with this identity (`--bootstrap`): shards, hash, replication and
    /// the configured nodes.
    pub create: Option<MetaCommand>,
    /// The shard count this node was configured with.
    pub shards: u32,
    pub interval: Duration,
    /// A learner becomes a voter once it is at most this many entries behind the leader.
    pub catch_up_entries: u64,
    /// A leader hands a shard to its preferred leader only after leading it this long.
    pub leader_settle: Duration,
}

/// The loop that moves this node towards the cluster metadata (see the module docs).
pub struct Reconciler {
    cfg: ReconcileConfig,
    membership: Arc<Membership>,
    host: Host,
    router: Router,
    registry: taskmesh_transport::ReplicaRegistry,
    open: OpenGroup,
    /// The metadata the router's placement reads.
    view: Arc<RwLock<ClusterMeta>>,
    /// Per shard: since when this node leads it.
    leading_since: HashMap<u32, tokio::time::Instant>,
    ticks: u64,
}

impl Reconciler {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        cfg: ReconcileConfig,
        membership: Arc<Membership>,
        host: Host,
        router: Router,
        registry: taskmesh_transport::ReplicaRegistry,
        open: OpenGroup,
        view: Arc<RwLock<ClusterMeta>>,
    ) -> Self {
        Self {
            cfg,
            membership,
            host,
            router,
            registry,
            open,
            view,
            leading_since: HashMap::new(),
            ticks: 0,
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

    async fn step(&mut self) -> anyhow::Result<()> {
        let me = self.cfg.node_id;
        let mut meta = self.membership.current();
        if !meta.is_created() {
            if let Some(create) = self.cfg.create.clone() {
                match self.membership.propose(create).await {
                    Ok((m, _)) => meta = m,
                    Err(MetaError::Refused(m)) => anyhow::bail!("creating the cluster: {m}"),
                    Err(e) => {
                        tracing::info!(error = %e, "cluster not created yet");
                        return Ok(());
                    }
                }
            }
        }
        if meta.is_created() && meta.shards != self.cfg.shards {
            anyhow::bail!(
                "the cluster has {} shards; this node is configured with shards = {} (the shard \
                 count is fixed at cluster creation)",
                meta.shards,
                self.cfg.shards
            );
        }
        if meta.nodes.get(&me) != Some(&self.cfg.grpc_addr) {
            // Not a member (as far as this node has seen), or at another address: ask to join.
            // A member whose copy of the metadata lags gets "no change" back.
            let join = MetaCommand::Join {
                node_id: me,
                addr: self.cfg.grpc_addr.clone(),
            };
            match self.membership.propose(join).await {
                Ok((m, changed)) => {
                    if changed {
                        tracing::info!(node = me, "joined the cluster");
                    }
                    if m.shards != self.cfg.shards {
                        anyhow::bail!(
                            "the cluster has {} shards; this node is configured with shards = {} \
                             (the shard count is fixed at cluster creation)",
                            m.shards,
                            self.cfg.shards
                        );
                    }
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
        if self.membership.meta.is_leader() {
            let voters = meta.meta_voters(&self.membership.meta.voters());
            let everyone: BTreeSet<u64> = meta.nodes.keys().copied().collect();
            if let Err(e) = self
                .converge(&self.membership.meta.clone(), &meta, &voters, &everyone)
                .await
            {
                tracing::debug!(error = %e, "metadata group membership");
            }
        }
        for shard in 0..meta.shards {
            if let Err(e) = self.shard_step(&meta, shard).await {
                tracing::debug!(shard, error = %e, "placement step");
            }
        }
        Ok(())
    }

    /// Hand the metadata to the router (peers and placement).
    fn publish(&self, meta: &ClusterMeta) {
        let old = std::mem::replace(&mut *self.view.write(), meta.clone());
        if old.version == meta.version && old.is_created() {
            return;
        }
        for (id, addr) in &meta.nodes {
            if *id != self.cfg.node_id {
                if let Err(e) = self.router.add_peer(*id, addr.clone()) {
                    tracing::warn!(node = id, error = %e, "peer address");
                }
            }
        }
        for id in old.nodes.keys().filter(|id| !meta.nodes.contains_key(id)) {
            self.router.remove_peer(*id);
        }
    }

    async fn shard_step(&mut self, meta: &ClusterMeta, shard: u32) -> anyhow::Result<()> {
        let me = self.cfg.node_id;
        let placed = meta.replicas(shard).to_vec();
        let here = placed.contains(&me);
        let local = self.host.replica(shard);
        let Some(replica) = local else {
            if here {
                let replica = (self.open)(shard).await?;
                self.registry.insert(replica.clone());
                self.host
                    .add_shard(replica.clone())
                    .map_err(|e| anyhow::anyhow!("{e}"))?;
                tracing::info!(shard, "replica opened");
                if !meta.created.contains(&shard) && placed.first() == Some(&me) {
                    let members = placed
                        .iter()
                        .map(|id| Ok((*id, self.addr_of(meta, *id)?)))
                        .collect::<anyhow::Result<BTreeMap<u64, String>>>()?;
                    replica.bootstrap(members).await?;
                }
            }
            return Ok(());
        };
        if !meta.created.contains(&shard) && placed.first() == Some(&me) {
            let members = placed
                .iter()
                .map(|id| Ok((*id, self.addr_of(meta, *id)?)))
                .collect::<anyhow::Result<BTreeMap<u64, String>>>()?;
            replica.bootstrap(members).await?;
        }
        if replica.is_leader() {
            let since = *self
                .leading_since
                .entry(shard)
                .or_insert_with(tokio::time::Instant::now);
            if !meta.created.contains(&shard) {
                self.membership
                    .propose(MetaCommand::ShardCreated { shard })
                    .await?;
                return Ok(());
            }
            let target: BTreeSet<u64> = placed.iter().copied().collect();
            if self.converge(&replica, meta, &target, &target).await? {
                return Ok(());
            }
            // Membership matches the placement: lead where preferred.
            let preferred = placed.first().copied();
            if let Some(p) = preferred.filter(|p| *p != me) {
                if since.elapsed() >= self.cfg.leader_settle && self.caught_up(&replica, p) {
                    tracing::info!(shard, to = p, "handing leadership to the preferred leader");
                    replica.transfer_leader(p).await?;
                }
            }
            return Ok(());
        }
        self.leading_since.remove(&shard);
        if !here && meta.is_complete() && self.ticks.is_multiple_of(4) {
            // Placed elsewhere: delete this replica once the group no longer lists this node.
            let asked = tokio::time::timeout(MEMBERS_CALL_TIMEOUT, self.router.members(shard));
            if let Ok(Ok((voters, learners))) = asked.await {
                if !voters.contains(&me) && !learners.contains(&me) {
                    self.host.remove_shard(shard);
                    self.registry.remove(shard);
                    replica.destroy().await?;
                    tracing::info!(shard, "replica moved away; deleted here");
                }
            }
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
