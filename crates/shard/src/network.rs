//! The Raft network of a shard group.
//!
//! [`ShardReplica::open_with_network`](crate::ShardReplica::open_with_network) accepts any
//! openraft network factory over [`TypeConfig`] whose snapshots are [`SnapshotData`] bytes, so a
//! transport between nodes plugs in there. [`UnreachableNetwork`] is the network of a node
//! without peers: every RPC fails as unreachable, which is all a single-voter group needs.

use std::future::Future;
use std::io;

use openraft::errors::{RPCError, ReplicationClosed, StreamingError, Unreachable};
use openraft::network::{RPCOption, RaftNetworkFactory, RaftNetworkV2};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, TransferLeaderRequest,
    TransferLeaderResponse, VoteRequest, VoteResponse,
};
use openraft::OptionalSend;

use crate::types::{Node, NodeId, Snapshot, SnapshotData, TypeConfig, Vote};

/// A network factory whose connections reach nobody.
#[derive(Debug, Clone, Copy, Default)]
pub struct UnreachableNetwork;

/// A connection to a peer that cannot be reached.
#[derive(Debug, Clone)]
pub struct UnreachablePeer {
    target: NodeId,
}

impl UnreachablePeer {
    fn error(&self) -> Unreachable<TypeConfig> {
        let e = io::Error::new(
            io::ErrorKind::NotConnected,
            format!("no network to reach node {}", self.target),
        );
        Unreachable::new(&e)
    }
}

impl RaftNetworkFactory<TypeConfig> for UnreachableNetwork {
    type Network = UnreachablePeer;

    async fn new_client(&mut self, target: NodeId, _node: &Node) -> Self::Network {
        UnreachablePeer { target }
    }
}

impl RaftNetworkV2<TypeConfig> for UnreachablePeer {
    type SnapshotData = SnapshotData;

    async fn append_entries(
        &mut self,
        _rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<TypeConfig>, RPCError<TypeConfig>> {
        Err(RPCError::Unreachable(self.error()))
    }

    async fn vote(
        &mut self,
        _rpc: VoteRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        Err(RPCError::Unreachable(self.error()))
    }

    /// Overridden: the default would count an unreachable peer as granting the Pre-Vote.
    async fn pre_vote(
        &mut self,
        _rpc: VoteRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        Err(RPCError::Unreachable(self.error()))
    }

    async fn full_snapshot(
        &mut self,
        _vote: Vote,
        _snapshot: Snapshot,
        _cancel: impl Future<Output = ReplicationClosed> + OptionalSend + 'static,
        _option: RPCOption,
    ) -> Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>> {
        Err(StreamingError::Unreachable(self.error()))
    }

    async fn transfer_leader(
        &mut self,
        _req: TransferLeaderRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<TransferLeaderResponse<TypeConfig>, RPCError<TypeConfig>> {
        Err(RPCError::Unreachable(self.error()))
    }
}
