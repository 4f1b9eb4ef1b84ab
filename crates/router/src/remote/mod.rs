//! The client half of the router: `taskmesh.v1.TaskService` calls to the node that leads a
//! shard. One lazily connected channel per peer, shared by every request to it; forwarded polls
//! travel in batches on one long-lived `ReadTasks` stream per peer.
//!
//! The router reaches this module through `RemoteNode` (`leader.rs`), which calls [`Peers`]
//! for a shard whose leader is another node:
//!
//! - `peers`: the channel per node and the calls made on it (create, get, cancel, list,
//!   attach, deliver a client's answer, members).
//! - `reads`: how forwarded polls are queued per node and sent in batches on its `ReadTasks`
//!   stream ([`GetBatching`]).
//! - `watch`: the stream of status changes and session messages followed on every peer.

mod peers;
mod reads;
mod watch;

use taskmesh_host::HostError;
use taskmesh_rpc::v1;
use taskmesh_task::{TaskRecord, TaskView};

use crate::convert::{record_from_pb, view_from_pb};

pub use peers::{PeerAddressError, Peers};
pub use reads::{GetBatching, MAX_GET_BATCH};
pub(crate) use watch::watch;

fn record_of(r: Option<v1::TaskRecord>) -> Result<TaskRecord, HostError> {
    r.and_then(record_from_pb)
        .ok_or_else(|| HostError::Internal("malformed task record from a peer".into()))
}

fn view_of(v: Option<v1::TaskView>) -> Result<TaskView, HostError> {
    v.and_then(view_from_pb)
        .ok_or_else(|| HostError::Internal("malformed task from a peer".into()))
}
