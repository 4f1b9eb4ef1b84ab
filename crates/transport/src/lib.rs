//! The Raft transport between taskmesh nodes.
//!
//! Every shard is its own openraft group, and a node holds replicas of many groups. Their Raft
//! traffic travels as the `taskmesh.v1.RaftTransport` gRPC service, each message naming its
//! group, over one HTTP/2 channel per pair of nodes:
//!
//! - sending: each group's Raft gets a [`GrpcNetwork`] (its openraft network factory) when the
//!   node opens the replica ([`open_replica`]). Every group of the node shares one
//!   [`PeerChannels`] pool, which holds a single lazily connected channel per peer node,
//!   dialled at the address the group's membership records for it.
//! - receiving: the node serves [`RaftService`] (see [`serve`], or add
//!   [`RaftService::into_server`] to its own tonic server). It looks the group up in a
//!   [`ReplicaRegistry`] the node fills with its replicas and hands each message to that
//!   replica's Raft.
//!
//! - idle groups: a group with nothing to do quiesces, and the node's [`beat`] (one message per
//!   node pair and heartbeat interval) stands in for the heartbeats of all its quiescent groups.
//!
//! openraft's own request and response structures travel as serde_json bytes; both ends must
//! run the same openraft version. A call that never reached a live group fails with a gRPC
//! status, which the sender reports to openraft as an unreachable peer (so it backs off), or as
//! a timeout when the deadline openraft gave it passed.

pub mod beat;
pub mod channels;
pub mod config;
pub mod error;
mod heartbeat_queues;
mod heartbeats;
mod listings;
pub mod network;
pub mod registry;
pub mod server;

pub use beat::BeatConfig;
pub use channels::PeerChannels;
pub use config::TransportConfig;
pub use error::TransportError;
pub use network::{open_replica, GrpcNetwork, GrpcPeer};
pub use registry::{HostedGroup, ReplicaRegistry};
pub use server::{serve, RaftService};
