//! The sending side: the openraft network of one shard group over the node's peer channels.
//!
//! openraft asks the group's [`GrpcNetwork`] for a [`GrpcPeer`] per target node and calls it to
//! replicate, vote, pre-vote, send snapshots and hand over leadership. Each call serialises
//! openraft's request, tags it with the group's shard and the target's node id, sends it over
//! the target's pooled channel with the deadline openraft allows (`RPCOption::soft_ttl`), and
//! deserialises the answer. Failures become the errors openraft acts on: a gRPC status or a
//! connection failure is [`Unreachable`] (openraft backs off before retrying that peer), an
//! expired deadline is a [`Timeout`].
//!
//! A member's address is looked up at every call, in the group's current membership when the
//! network follows the replica (see [`GrpcNetwork::follow`]; [`open_replica`] does it), because
//! openraft keeps the connection it made to a member when only the member's address changes.

use std::collections::BTreeMap;
use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use openraft::errors::{
    NetworkError, RPCError, ReplicationClosed, StreamingError, Timeout, Unreachable,
};
use openraft::network::{RPCOption, RPCTypes, RaftNetworkFactory, RaftNetworkV2};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, TransferLeaderRequest,
    TransferLeaderResponse, VoteRequest, VoteResponse,
};
use openraft::OptionalSend;
use parking_lot::RwLock;
use serde::de::DeserializeOwned;
use serde::Serialize;
use taskmesh_rpc::v1 as pb;
use taskmesh_rpc::v1::raft_transport_client::RaftTransportClient;
use taskmesh_shard::types::{Node, NodeId, Snapshot, SnapshotData, Vote};
use taskmesh_shard::{Group, GroupState, ShardConfig, ShardError, ShardReplica};
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;

use crate::channels::PeerChannels;
use crate::config::TransportConfig;

/// The group's membership as the replica sees it (member id to address), once followed.
type Members = Arc<RwLock<Option<watch::Receiver<BTreeMap<u64, String>>>>>;

/// The openraft network factory of one shard group: it makes the [`GrpcPeer`] that carries the
/// group's messages to each member, over the node's shared [`PeerChannels`]. Clones share the
/// membership they follow.
#[derive(Clone)]
pub struct GrpcNetwork {
    node_id: NodeId,
    shard: u32,
    pool: PeerChannels,
    snapshot_chunk_bytes: usize,
    members: Members,
}

impl GrpcNetwork {
    /// The network of group `shard` on node `node_id`, sending through `pool`, with the default
    /// snapshot chunk size.
    pub fn new(node_id: u64, pool: PeerChannels, shard: u32) -> Self {
        Self {
            node_id,
            shard,
            pool,
            snapshot_chunk_bytes: TransportConfig::default().snapshot_chunk_bytes,
            members: Arc::new(RwLock::new(None)),
        }
    }

    /// Take the snapshot chunk size from `cfg`.
    pub fn with_config(self, cfg: &TransportConfig) -> Self {
        self.with_snapshot_chunk_bytes(cfg.snapshot_chunk_bytes)
    }

    /// Send snapshots in chunks of `bytes` bytes of data (at least 1).
    pub fn with_snapshot_chunk_bytes(mut self, bytes: usize) -> Self {
        self.snapshot_chunk_bytes = bytes.max(1);
        self
    }

    /// Resolve member addresses through `members` (the replica's
    /// [`ShardReplica::members_watch`]) from now on, for the peers already made too. Without
    /// it, a peer keeps the address openraft gave when it was made.
    pub fn follow(&self, members: watch::Receiver<BTreeMap<u64, String>>) {
        *self.members.write() = Some(members);
    }

    /// The id of the group (shard) whose messages this network carries.
    pub fn shard(&self) -> u32 {
        self.shard
    }
}

/// Open the replica of `cfg.shard_id` on `store` with a [`GrpcNetwork`] over `pool` that follows
/// the replica's membership. The caller registers it in its
/// [`ReplicaRegistry`](crate::ReplicaRegistry) to receive its peers' messages.
pub async fn open_replica<S: GroupState>(
    store: taskmesh_shard::Store,
    cfg: ShardConfig,
    pool: &PeerChannels,
    transport: &TransportConfig,
) -> Result<ShardReplica<S>, ShardError> {
    let network = GrpcNetwork::new(cfg.node_id, pool.clone(), cfg.shard_id).with_config(transport);
    let replica = ShardReplica::<S>::open_with_network(store, cfg, network.clone()).await?;
    network.follow(replica.members_watch());
    Ok(replica)
}

impl<S: GroupState> RaftNetworkFactory<Group<S>> for GrpcNetwork {
    type Network = GrpcPeer<S>;

    async fn new_client(&mut self, target: NodeId, node: &Node) -> Self::Network {
        GrpcPeer {
            from: self.node_id,
            target,
            shard: self.shard,
            addr: node.addr.clone(),
            members: self.members.clone(),
            pool: self.pool.clone(),
            snapshot_chunk_bytes: self.snapshot_chunk_bytes,
            state: PhantomData,
        }
    }
}

/// The connection of one group (whose state is `S`) to one member of the group.
pub struct GrpcPeer<S> {
    from: NodeId,
    target: NodeId,
    shard: u32,
    /// The member's address when openraft made this peer.
    addr: String,
    members: Members,
    pool: PeerChannels,
    snapshot_chunk_bytes: usize,
    state: PhantomData<fn() -> S>,
}

/// How a snapshot transfer ended, short of a normal answer.
enum Transfer {
    /// The call ended (with the follower's answer or a failure).
    Ended(Result<tonic::Response<pb::InstallSnapshotResponse>, tonic::Status>),
    /// The call made no progress within the deadline.
    Stalled,
}

fn encode<S: GroupState, T: Serialize>(value: &T) -> Result<Vec<u8>, NetworkError<Group<S>>> {
    serde_json::to_vec(value).map_err(|e| NetworkError::new(&e))
}

impl<S: GroupState> GrpcPeer<S> {
    /// The member's current address.
    fn addr(&self) -> String {
        self.members
            .read()
            .as_ref()
            .and_then(|m| m.borrow().get(&self.target).cloned())
            .unwrap_or_else(|| self.addr.clone())
    }

    /// A client over the pooled channel to the member's current address.
    fn client(&self) -> Result<RaftTransportClient<Channel>, Unreachable<Group<S>>> {
        let addr = self.addr();
        match self.pool.channel(self.target, &addr) {
            Ok(channel) => Ok(RaftTransportClient::new(channel)),
            Err(e) => Err(Unreachable::from_string(format!(
                "node {} of shard {}: {e}",
                self.target, self.shard
            ))),
        }
    }

    fn timeout(&self, action: RPCTypes, after: Duration) -> Timeout<Group<S>> {
        Timeout {
            action,
            id: self.from,
            target: self.target,
            timeout: after,
        }
    }

    /// A failed call: a passed deadline is a timeout, anything else makes the peer unreachable
    /// for now (it is down, restarting, does not host the shard yet, or cannot understand us).
    fn status_error(
        &self,
        action: RPCTypes,
        ttl: Duration,
        status: &tonic::Status,
    ) -> RPCError<Group<S>> {
        if status.code() == tonic::Code::DeadlineExceeded {
            return RPCError::Timeout(self.timeout(action, ttl));
        }
        RPCError::Unreachable(Unreachable::from_string(format!(
            "{action} to node {} of shard {}: {}: {}",
            self.target,
            self.shard,
            status.code(),
            status.message()
        )))
    }

    fn decode<T: DeserializeOwned>(
        &self,
        action: RPCTypes,
        payload: &[u8],
    ) -> Result<T, Unreachable<Group<S>>> {
        serde_json::from_slice(payload).map_err(|e| {
            Unreachable::from_string(format!(
                "undecodable {action} answer from node {} of shard {}: {e}",
                self.target, self.shard
            ))
        })
    }

    fn request<T>(&self, message: T, ttl: Duration) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        request.set_timeout(ttl);
        request
    }

    /// Run one unary call within `ttl`.
    async fn unary<T>(
        &self,
        action: RPCTypes,
        ttl: Duration,
        call: impl Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    ) -> Result<T, RPCError<Group<S>>> {
        match tokio::time::timeout(ttl, call).await {
            Err(_) => Err(RPCError::Timeout(self.timeout(action, ttl))),
            Ok(Err(status)) => Err(self.status_error(action, ttl, &status)),
            Ok(Ok(response)) => Ok(response.into_inner()),
        }
    }

    async fn send_vote(
        &mut self,
        rpc: VoteRequest<Group<S>>,
        pre_vote: bool,
        option: RPCOption,
    ) -> Result<VoteResponse<Group<S>>, RPCError<Group<S>>> {
        let ttl = option.soft_ttl();
        let message = pb::VoteRequest {
            shard: self.shard,
            target: self.target,
            pre_vote,
            payload: encode::<S, _>(&rpc)?,
        };
        let mut client = self.client()?;
        let request = self.request(message, ttl);
        let answer = self
            .unary(RPCTypes::Vote, ttl, client.vote(request))
            .await?;
        Ok(self.decode(RPCTypes::Vote, &answer.payload)?)
    }
}

impl<S: GroupState> RaftNetworkV2<Group<S>> for GrpcPeer<S> {
    type SnapshotData = SnapshotData;

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<Group<S>>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<Group<S>>, RPCError<Group<S>>> {
        let ttl = option.soft_ttl();
        let heartbeat = rpc.entries.is_empty();
        let message = pb::AppendEntriesRequest {
            shard: self.shard,
            target: self.target,
            payload: encode::<S, _>(&rpc)?,
        };
        if heartbeat && self.pool.heartbeat_batch() > 1 {
            // Coalesced with the other groups' heartbeats to this node (`heartbeats.rs`).
            let answer = self
                .pool
                .heartbeat(self.target, &self.addr(), message, ttl)
                .await
                .map_err(|status| self.status_error(RPCTypes::AppendEntries, ttl, &status))?;
            return Ok(self.decode(RPCTypes::AppendEntries, &answer)?);
        }
        let mut client = self.client()?;
        let request = self.request(message, ttl);
        let answer = self
            .unary(RPCTypes::AppendEntries, ttl, client.append_entries(request))
            .await?;
        Ok(self.decode(RPCTypes::AppendEntries, &answer.payload)?)
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<Group<S>>,
        option: RPCOption,
    ) -> Result<VoteResponse<Group<S>>, RPCError<Group<S>>> {
        self.send_vote(rpc, false, option).await
    }

    /// Sent for real: openraft's default would grant every Pre-Vote without asking, which
    /// would let a node that cannot win (partitioned, restarted, behind) bump its term and
    /// depose a healthy leader.
    async fn pre_vote(
        &mut self,
        rpc: VoteRequest<Group<S>>,
        option: RPCOption,
    ) -> Result<VoteResponse<Group<S>>, RPCError<Group<S>>> {
        self.send_vote(rpc, true, option).await
    }

    /// Stream the snapshot in chunks of the configured size. Every chunk must be taken by the
    /// connection within `soft_ttl`, and the follower must answer within `soft_ttl` of the
    /// last one (that includes installing it), so a big snapshot is not cut short while it
    /// makes progress. `cancel` aborts the transfer; the follower then discards what arrived.
    async fn full_snapshot(
        &mut self,
        vote: Vote,
        snapshot: Snapshot,
        cancel: impl Future<Output = ReplicationClosed> + OptionalSend + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse<Group<S>>, StreamingError<Group<S>>> {
        let ttl = option.soft_ttl();
        let action = RPCTypes::InstallSnapshot;
        let mut client = self.client()?;
        let data = snapshot.snapshot;
        let header = pb::SnapshotHeader {
            vote: encode::<S, _>(&vote)?,
            meta: encode::<S, _>(&snapshot.meta)?,
            size_bytes: data.len() as u64,
        };
        tracing::debug!(
            shard = self.shard,
            target = self.target,
            bytes = data.len(),
            last_log_id = ?snapshot.meta.last_log_id,
            "sending a snapshot"
        );

        // Capacity 1: a send completes once the call has taken the previous chunk, which is
        // the progress the deadline is measured against.
        let (tx, rx) = mpsc::channel::<pb::InstallSnapshotChunk>(1);
        let call = async move {
            client
                .install_snapshot(tonic::Request::new(ReceiverStream::new(rx)))
                .await
        };
        let (shard, target, chunk_bytes) = (self.shard, self.target, self.snapshot_chunk_bytes);
        let feed = async move {
            let mut header = Some(header);
            let mut offset = 0usize;
            loop {
                let end = offset.saturating_add(chunk_bytes).min(data.len());
                let done = end == data.len();
                let chunk = pb::InstallSnapshotChunk {
                    shard,
                    target,
                    header: header.take(),
                    offset: offset as u64,
                    data: data[offset..end].to_vec(),
                    done,
                };
                match tokio::time::timeout(ttl, tx.send(chunk)).await {
                    Err(_) => return false,
                    // The call dropped the stream: it has ended, and says why.
                    Ok(Err(_)) => return true,
                    Ok(Ok(())) => {}
                }
                if done {
                    return true;
                }
                offset = end;
            }
        };
        let transfer = async move {
            tokio::pin!(call);
            tokio::pin!(feed);
            tokio::select! {
                ended = &mut call => return Transfer::Ended(ended),
                progressed = &mut feed => {
                    if !progressed {
                        return Transfer::Stalled;
                    }
                }
            }
            match tokio::time::timeout(ttl, call).await {
                Ok(ended) => Transfer::Ended(ended),
                Err(_) => Transfer::Stalled,
            }
        };

        let ended = tokio::select! {
            ended = transfer => ended,
            closed = cancel => return Err(StreamingError::Closed(closed)),
        };
        match ended {
            Transfer::Stalled => Err(StreamingError::Timeout(self.timeout(action, ttl))),
            Transfer::Ended(Err(status)) => Err(match self.status_error(action, ttl, &status) {
                RPCError::Timeout(t) => StreamingError::Timeout(t),
                RPCError::Unreachable(u) => StreamingError::Unreachable(u),
                RPCError::Network(n) => StreamingError::Network(n),
                RPCError::RemoteError(r) => {
                    StreamingError::Unreachable(Unreachable::from_string(r.to_string()))
                }
            }),
            Transfer::Ended(Ok(answer)) => Ok(self.decode(action, &answer.into_inner().payload)?),
        }
    }

    async fn transfer_leader(
        &mut self,
        req: TransferLeaderRequest<Group<S>>,
        option: RPCOption,
    ) -> Result<TransferLeaderResponse<Group<S>>, RPCError<Group<S>>> {
        let ttl = option.soft_ttl();
        let message = pb::TransferLeaderRequest {
            shard: self.shard,
            target: self.target,
            payload: encode::<S, _>(&req)?,
        };
        let mut client = self.client()?;
        let request = self.request(message, ttl);
        let answer = self
            .unary(
                RPCTypes::TransferLeader,
                ttl,
                client.transfer_leader(request),
            )
            .await?;
        Ok(self.decode(RPCTypes::TransferLeader, &answer.payload)?)
    }
}
