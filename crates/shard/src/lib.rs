//! One Raft group per logical shard, and the metadata group.
//!
//! A [`ShardReplica`] is this node's member of one group: an openraft `Raft` whose state is a
//! [`GroupState`], held in memory for reads and kept durable in the node's [`Store`] (its
//! write-ahead log and its snapshot files). A task shard's log carries
//! [`taskmesh_task::Command`]s and its state is a [`taskmesh_task::ShardState`] (the
//! default); the metadata group's log carries
//! [`taskmesh_meta::MetaCommand`]s and its state is a [`taskmesh_meta::ClusterMeta`]
//! ([`MetaReplica`]). See [`group`] for why the two cannot mix, [`storage`] for the on-disk
//! layout and its durability rules, and [`network`] for how a transport between nodes plugs in.

pub mod config;
pub mod error;
pub mod events;
#[cfg(feature = "fixtures")]
pub mod fixtures;
pub mod group;
pub mod network;
pub mod replica;
pub mod retry;
pub mod settings;
pub mod storage;
pub mod types;

pub use config::ShardConfig;
pub use error::ShardError;
pub use events::{Leadership, ShardEvent};
pub use group::{Group, GroupState};
pub use network::UnreachableNetwork;
pub use replica::{
    clock_ms, leadership_changes, quiet_transitions, Heard, Quiet, QuietLead, ShardReplica, Vouched,
};
pub use retry::Retry;
pub use settings::RaftSettings;
pub use storage::{stored_groups, Store};
pub use types::{ShardRaft, TypeConfig};

/// This node's replica of the metadata group.
pub type MetaReplica = ShardReplica<taskmesh_meta::ClusterMeta>;
