//! The client half of the router: `taskmesh.v1.TaskService` calls to the node that leads a
//! shard. One lazily connected channel per peer, shared by every request to it; forwarded polls
//! travel in batches on one long-lived `ReadTasks` stream per peer.
//!
//! The router reaches this module through `Target::Remote` (`leader.rs`), which calls [`Peers`]
//! for a shard whose leader is another node:
//!
//! - `peers`: the channel per node and the calls made on it: `Apply` for any task operation,
//!   `AttachResult` for a result attachment.
//! - `reads`: how forwarded polls are queued per node and sent in batches on its `ReadTasks`
//!   stream ([`GetBatching`]).
//! - `watch`: the stream of status changes and session messages followed on every peer.

mod peers;
mod reads;
mod watch;

pub use peers::{PeerAddressError, Peers};
pub use reads::{GetBatching, MAX_GET_BATCH};
pub(crate) use watch::watch;
