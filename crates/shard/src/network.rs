//! The Raft network of a shard group.
//!
//! [`ShardReplica::open_with_network`](crate::ShardReplica::open_with_network) accepts any
//! openraft network factory over the group's [`Group`] type configuration whose snapshots are [`SnapshotData`] bytes, so a
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

use crate::group::{Group, GroupState};
use crate::types::{Node, NodeId, Snapshot, SnapshotData, Vote};

/// A network factory whose connections reach nobody.
#[derive(Debug, Clone, Copy, Default)]
pub struct UnreachableNetwork;

/// A connection to a peer that cannot be reached.
#[derive(Debug, Clone)]
pub struct UnreachablePeer {
    target: NodeId,
}

impl UnreachablePeer {
    fn error<S: GroupState>(&self) -> Unreachable<Group<S>> {
        let e = io::Error::new(
            io::ErrorKind::NotConnected,
            format!("no network to reach node {}", self.target),
        );
        Unreachable::new(&e)
    }
}

impl<S: GroupState> RaftNetworkFactory<Group<S>> for UnreachableNetwork {
    type Network = UnreachablePeer;

    async fn new_client(&mut self, target: NodeId, _node: &Node) -> Self::Network {
        UnreachablePeer { target }
    }
}

impl<S: GroupState> RaftNetworkV2<Group<S>> for UnreachablePeer {
    type SnapshotData = SnapshotData;

    async fn append_entries(
        &mut self,
        _rpc: AppendEntriesRequest<Group<S>>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<Group<S>>, RPCError<Group<S>>> {
        Err(RPCError::Unreachable(self.error()))
    }

    async fn vote(
        &mut self,
        _rpc: VoteRequest<Group<S>>,
        _option: RPCOption,
    ) -> Result<VoteResponse<Group<S>>, RPCError<Group<S>>> {
        Err(RPCError::Unreachable(self.error()))
    }

    /// Overridden: the default would count an unreachable peer as granting the Pre-Vote.
    async fn pre_vote(
        &mut self,
        _rpc: VoteRequest<Group<S>>,
        _option: RPCOption,
    ) -> Result<VoteResponse<Group<S>>, RPCError<Group<S>>> {
        Err(RPCError::Unreachable(self.error()))
    }

    async fn full_snapshot(
        &mut self,
        _vote: Vote,
        _snapshot: Snapshot,
        _cancel: impl Future<Output = ReplicationClosed> + OptionalSend + 'static,
        _option: RPCOption,
    ) -> Result<SnapshotResponse<Group<S>>, StreamingError<Group<S>>> {
        Err(StreamingError::Unreachable(self.error()))
    }

    async fn transfer_leader(
        &mut self,
        _req: TransferLeaderRequest<Group<S>>,
        _option: RPCOption,
    ) -> Result<TransferLeaderResponse<Group<S>>, RPCError<Group<S>>> {
        Err(RPCError::Unreachable(self.error()))
    }
}
