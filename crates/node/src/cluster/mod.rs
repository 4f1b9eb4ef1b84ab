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
//!
//! The metadata client is here, its gRPC server in `grpc.rs`, the loop in `reconcile.rs`.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use taskmesh_meta::{ClusterMeta, MetaApplied, MetaCommand, MetaRejection};
use taskmesh_rpc::dial::{DialError, Dialer};
use taskmesh_rpc::v1::{self, cluster_service_client::ClusterServiceClient};
use taskmesh_shard::{MetaReplica, Retry};
use tonic::transport::Endpoint;

mod grpc;
mod reconcile;

pub use grpc::ClusterGrpc;
pub use reconcile::{NodeHandles, OpenGroup, ReconcileConfig, Reconciler};

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
    /// How peers are dialled (mutual TLS or plain TCP).
    dialer: Dialer,
    /// The channel to each peer address proposals went to, kept for the next ones.
    channels: parking_lot::Mutex<HashMap<String, tonic::transport::Channel>>,
}

impl Membership {
    /// The handle of node `node_id` on its metadata replica `meta`. `seeds` are the configured
    /// peers, asked for the metadata leader until the local copy knows the nodes; a proposal
    /// keeps trying for `retry_budget`; peers are dialled through `dialer`.
    pub fn new(
        node_id: u64,
        meta: MetaReplica,
        seeds: BTreeMap<u64, String>,
        retry_budget: Duration,
        dialer: Dialer,
    ) -> Self {
        Self {
            node_id,
            meta,
            seeds,
            retry_budget,
            dialer,
            channels: parking_lot::Mutex::new(HashMap::new()),
        }
    }

    /// The metadata service of the peer at `addr`, through the channel kept for it.
    fn client(
        &self,
        addr: &str,
    ) -> Result<ClusterServiceClient<tonic::transport::Channel>, DialError> {
        let mut channels = self.channels.lock();
        let channel = match channels.get(addr) {
            Some(c) => c.clone(),
            None => {
                let c = self.dialer.connect_lazy(&cluster_endpoint(addr)?);
                channels.insert(addr.to_string(), c.clone());
                c
            }
        };
        Ok(ClusterServiceClient::new(channel))
    }

    /// Whether every other member node in `meta` refuses this node's certificate at the
    /// handshake (a removed node that no Raft group lists any more). `false` when any answers,
    /// fails some other way, or there is no other node to ask.
    pub async fn refused_by_every_member(&self, meta: &ClusterMeta) -> bool {
        let mut asked = 0;
        for (id, addr) in &meta.nodes {
            if *id == self.node_id {
                continue;
            }
            if !self.dialer.refused_by(addr).await {
                return false;
            }
            asked += 1;
        }
        asked > 0
    }

    /// The metadata as this node has applied it.
    pub fn current(&self) -> ClusterMeta {
        self.meta.read_local(|m| m.clone())
    }

    /// The version of the metadata as this node has applied it (every change bumps it).
    pub fn version(&self) -> u64 {
        self.meta.read_local(|m| m.version)
    }

    /// The metadata group's replica on this node.
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
                        Err(e) => Err(RemoteError::Failed(e.to_string())),
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

/// How long one call to a peer's metadata service may take.
const CLUSTER_CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// How long an operator's call that waits for work (a leadership move, a snapshot) may take.
const ADMIN_CALL_TIMEOUT: Duration = Duration::from_secs(120);

/// The cluster service of `addr` for calls that wait for work ([`ADMIN_CALL_TIMEOUT`]).
fn admin_client(
    dialer: &Dialer,
    addr: &str,
) -> Result<ClusterServiceClient<tonic::transport::Channel>, DialError> {
    let endpoint = taskmesh_rpc::dial::endpoint(addr)?.timeout(ADMIN_CALL_TIMEOUT);
    Ok(ClusterServiceClient::new(dialer.connect_lazy(&endpoint)))
}

fn cluster_endpoint(addr: &str) -> Result<Endpoint, DialError> {
    Ok(taskmesh_rpc::dial::endpoint(addr)?.timeout(CLUSTER_CALL_TIMEOUT))
}

fn cluster_client(
    dialer: &Dialer,
    addr: &str,
) -> Result<ClusterServiceClient<tonic::transport::Channel>, DialError> {
    Ok(ClusterServiceClient::new(
        dialer.connect_lazy(&cluster_endpoint(addr)?),
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

/// Ask the node at `addr` (dialled through `dialer`) for its copy of the cluster metadata.
pub async fn fetch_metadata(dialer: &Dialer, addr: &str) -> anyhow::Result<ClusterMeta> {
    let mut client = cluster_client(dialer, addr)?;
    let r = client
        .get_metadata(v1::GetMetadataRequest {})
        .await
        .map_err(|s| anyhow::anyhow!("{addr}: {}", s.message()))?;
    Ok(serde_json::from_str(&r.into_inner().metadata_json)?)
}

/// Propose `change` through the node at `addr` (which forwards it to the metadata leader by
/// following `NotLeader` hints), dialled through `dialer`. For the `taskmesh cluster` commands.
pub async fn propose_via(
    dialer: &Dialer,
    addr: &str,
    change: MetaCommand,
) -> anyhow::Result<(ClusterMeta, bool)> {
    let mut addr = addr.to_string();
    let mut retry = Retry::new(PROPOSE_VIA_BUDGET, META_PAUSE_FIRST, META_PAUSE_MAX);
    while !retry.expired() {
        let client = cluster_client(dialer, &addr)?;
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

/// The shard groups the node at `addr` hosts a replica of, as it sees them.
pub async fn shard_leaders(
    dialer: &Dialer,
    addr: &str,
) -> anyhow::Result<v1::ShardLeadersResponse> {
    let mut client = cluster_client(dialer, addr)?;
    let r = client
        .shard_leaders(v1::ShardLeadersRequest {})
        .await
        .map_err(|s| anyhow::anyhow!("{addr}: {}", s.message()))?;
    Ok(r.into_inner())
}

/// Hand the leadership of `shard` to voter `to`, through the node at `addr` and then the
/// leaders its `NotLeader` hints name. The leader and term once it moved (or the wait ended).
pub async fn move_leader(
    dialer: &Dialer,
    addr: &str,
    shard: u32,
    to: u64,
) -> anyhow::Result<v1::MoveLeaderResponse> {
    let mut addr = addr.to_string();
    let mut retry = Retry::new(PROPOSE_VIA_BUDGET, META_PAUSE_FIRST, META_PAUSE_MAX);
    while !retry.expired() {
        let mut client = admin_client(dialer, &addr)?;
        let request = v1::MoveLeaderRequest { shard, to_node: to };
        match client.move_leader(request).await {
            Ok(r) => return Ok(r.into_inner()),
            Err(s) => match v1::TaskError::from_status(&s) {
                Some(e) if e.kind() == v1::TaskErrorKind::NotLeader => {
                    match e.leader.filter(|l| l.node_id != 0 && !l.address.is_empty()) {
                        Some(l) => {
                            addr = l.address;
                            retry.reset();
                        }
                        None => {
                            retry.pause().await;
                        }
                    }
                }
                _ => anyhow::bail!("{addr}: {}", s.message()),
            },
        }
    }
    anyhow::bail!("no leader of shard {shard} found through {addr} within {PROPOSE_VIA_BUDGET:?}")
}

/// A page of `shard`'s records for a backup, through the node at `addr` (which reads it on
/// the shard's leader). A client connection to reuse for every page: `client_for_backup`.
pub async fn export_page(
    client: &mut ClusterServiceClient<tonic::transport::Channel>,
    shard: u32,
    after: Option<(&str, &str)>,
    max_records: u32,
) -> Result<v1::ExportTasksResponse, tonic::Status> {
    let (after_owner, after_task_id) = after.unwrap_or_default();
    let r = client
        .export_tasks(v1::ExportTasksRequest {
            shard,
            after_owner: after_owner.into(),
            after_task_id: after_task_id.into(),
            max_records,
        })
        .await?;
    Ok(r.into_inner())
}

/// Backed-up records into `shard`, through the node at `client` (which writes them on the
/// shard's leader); how many were inserted.
pub async fn import_page(
    client: &mut ClusterServiceClient<tonic::transport::Channel>,
    shard: u32,
    records: Vec<v1::TaskRecord>,
) -> Result<u64, tonic::Status> {
    let r = client
        .import_tasks(v1::ImportTasksRequest { shard, records })
        .await?;
    Ok(r.into_inner().inserted)
}

/// A cluster-service client of the node at `addr` for backup and restore pages (each call
/// bounded by the admin call timeout).
pub fn client_for_backup(
    dialer: &Dialer,
    addr: &str,
) -> anyhow::Result<ClusterServiceClient<tonic::transport::Channel>> {
    Ok(admin_client(dialer, addr)?)
}

/// Build a snapshot of the replica of `shard` on the node at `addr`.
pub async fn build_snapshot(
    dialer: &Dialer,
    addr: &str,
    shard: u32,
) -> anyhow::Result<v1::BuildSnapshotResponse> {
    let mut client = admin_client(dialer, addr)?;
    let r = client
        .build_snapshot(v1::BuildSnapshotRequest { shard })
        .await
        .map_err(|s| anyhow::anyhow!("{addr}: {}", s.message()))?;
    Ok(r.into_inner())
}
