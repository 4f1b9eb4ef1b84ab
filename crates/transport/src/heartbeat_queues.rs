//! The queues of a node's coalesced heartbeats, one per peer and address. The channel pool
//! ([`crate::channels`]) keeps them beside its channels; `heartbeats.rs` queues each heartbeat
//! of a group's leader in its peer's queue and sends what has queued as one batch call.

use std::collections::HashMap;
use std::time::Duration;

use parking_lot::Mutex;
use taskmesh_rpc::v1 as pb;
use tokio::sync::{mpsc, oneshot};
use tonic::Status;

/// Heartbeats one call carries at most, unless the pool says otherwise
/// ([`PeerChannels::with_heartbeat_batch`](crate::PeerChannels::with_heartbeat_batch)).
pub const DEFAULT_BATCH: usize = 1024;

/// One heartbeat waiting to be sent.
pub(crate) struct Item {
    pub(crate) request: pb::AppendEntriesRequest,
    pub(crate) ttl: Duration,
    pub(crate) reply: oneshot::Sender<Result<Vec<u8>, Status>>,
}

/// The queues of a node's heartbeats, one per peer and address.
#[derive(Default)]
pub(crate) struct Queues {
    pub(crate) queues: Mutex<HashMap<(u64, String), mpsc::Sender<Item>>>,
}
