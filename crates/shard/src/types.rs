//! Short names for the openraft types a group instantiates (see [`crate::group`] for the type
//! configuration itself). Most do not depend on the group's state.

use taskmesh_task::ShardState;

pub use crate::group::{Group, LeaderId};

/// The type configuration of a task shard.
pub type TypeConfig = Group<ShardState>;

/// A node's Raft id.
pub type NodeId = u64;
/// What a node is known by in the membership: its address.
pub type Node = openraft::BasicNode;
/// The leader id part of a log id.
pub type CommittedLeaderId = <LeaderId as openraft::vote::RaftLeaderId>::Committed;
/// A log id: the leader that proposed an entry and the entry's index.
pub type LogId = openraft::LogId<CommittedLeaderId>;
/// A vote, as saved by the log store.
pub type Vote = openraft::impls::Vote<LeaderId>;
/// A log entry of a group whose commands are `C`.
pub type Entry<C> = openraft::Entry<CommittedLeaderId, EntryPayload<C>>;
/// The payload of a log entry of a group whose commands are `C`.
pub type EntryPayload<C> = openraft::EntryPayload<C, NodeId, Node>;
/// A membership configuration together with the log id it was committed at.
pub type StoredMembership = openraft::StoredMembership<CommittedLeaderId, NodeId, Node>;
/// What describes a snapshot: the last log id and membership it covers.
pub type SnapshotMeta = openraft::SnapshotMeta<CommittedLeaderId, NodeId, Node>;
/// The bytes of a serialised snapshot (see [`crate::storage`] for the format).
pub type SnapshotData = Vec<u8>;
/// A snapshot with its metadata.
pub type Snapshot = openraft::Snapshot<CommittedLeaderId, NodeId, Node, SnapshotData>;
/// The Raft handle of a group whose state is `S`.
pub type ShardRaft<S = ShardState> = openraft::Raft<Group<S>, crate::storage::StateMachineStore<S>>;
