//! One Raft group per logical shard.
//!
//! A [`ShardReplica`] is this node's member of one shard's group: an openraft `Raft` whose log
//! carries [`taskmesh_task::Command`]s, whose state machine is a [`taskmesh_task::ShardState`]
//! held in memory for reads and kept durable in the node's sled database, and whose snapshots
//! are the serialised records. See [`storage`] for the on-disk layout and its durability rules,
//! and [`network`] for how a transport between nodes plugs in.

pub mod config;
pub mod error;
pub mod events;
pub mod network;
pub mod replica;
pub mod storage;
pub mod types;

pub use config::ShardConfig;
pub use error::ShardError;
pub use events::{Leadership, ShardEvent};
pub use network::UnreachableNetwork;
pub use replica::ShardReplica;
pub use storage::stored_groups;
pub use types::{ShardRaft, ShardRequest, TypeConfig};
