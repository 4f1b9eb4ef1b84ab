//! The openraft type configuration of a shard group and short names for the openraft types it
//! instantiates.

use std::fmt;

use serde::{Deserialize, Serialize};
use taskmesh_task::{Applied, Command};

/// The application data a shard's log carries: one domain [`Command`].
///
/// A thin wrapper, serialised exactly like the command it holds, because openraft wants its log
/// payload to be printable and `Command` itself has no `Display`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ShardRequest(pub Command);

impl From<Command> for ShardRequest {
    fn from(cmd: Command) -> Self {
        ShardRequest(cmd)
    }
}

impl fmt::Display for ShardRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let op = match &self.0 {
            Command::Create { .. } => "create",
            Command::SetStatus { .. } => "set_status",
            Command::Finish { .. } => "finish",
            Command::Cancel { .. } => "cancel",
            Command::Resume { .. } => "resume",
            Command::Expire { task_ids, .. } => {
                return write!(f, "expire({} tasks)", task_ids.len());
            }
            Command::Cluster { change } => return write!(f, "cluster({change:?})"),
        };
        match self.0.task_id() {
            Some(id) => write!(f, "{op}({id})"),
            None => f.write_str(op),
        }
    }
}

openraft::declare_raft_types!(
    /// The Raft types of one shard group.
    pub TypeConfig:
        D = ShardRequest,
        R = Applied,
        NodeId = u64,
        Node = openraft::BasicNode,
        AsyncRuntime = openraft::TokioRuntime,
);

/// A node's Raft id.
pub type NodeId = u64;
/// What a node is known by in the membership: its address.
pub type Node = openraft::BasicNode;
/// The leader id used by this configuration.
pub type LeaderId = <TypeConfig as openraft::RaftTypeConfig>::LeaderId;
/// The leader id part of a log id.
pub type CommittedLeaderId = <LeaderId as openraft::vote::RaftLeaderId>::Committed;
/// A log id: the leader that proposed an entry and the entry's index.
pub type LogId = openraft::LogId<CommittedLeaderId>;
/// A vote, as saved by the log store.
pub type Vote = <TypeConfig as openraft::RaftTypeConfig>::Vote;
/// A log entry.
pub type Entry = <TypeConfig as openraft::RaftTypeConfig>::Entry;
/// The payload of a log entry.
pub type EntryPayload = openraft::EntryPayload<ShardRequest, NodeId, Node>;
/// A membership configuration together with the log id it was committed at.
pub type StoredMembership = openraft::StoredMembership<CommittedLeaderId, NodeId, Node>;
/// What describes a snapshot: the last log id and membership it covers.
pub type SnapshotMeta = openraft::SnapshotMeta<CommittedLeaderId, NodeId, Node>;
/// The bytes of a serialised snapshot (see [`crate::storage`] for the format).
pub type SnapshotData = Vec<u8>;
/// A snapshot with its metadata.
pub type Snapshot = openraft::Snapshot<CommittedLeaderId, NodeId, Node, SnapshotData>;
/// The Raft handle of a shard group.
pub type ShardRaft = openraft::Raft<TypeConfig, crate::storage::StateMachineStore>;
