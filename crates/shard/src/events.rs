//! What a replica tells its observers: applied changes and leadership.

use taskmesh_task::TaskRecord;

/// A change made by an applied command, emitted after the apply is durable, in log order.
///
/// Installing a snapshot (a follower catching up) replaces the whole state and emits no events:
/// [`crate::ShardReplica::snapshot_installs`] tells when that happened, so that whoever keeps
/// state derived from the events rebuilds it from [`crate::ShardReplica::read_local`].
// The record is kept inline (not boxed) so that subscribers match on it directly.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug)]
pub enum ShardEvent {
    /// A record was created or changed by an applied command.
    Changed {
        /// Log index of the entry whose apply made the change.
        index: u64,
        /// The record as it is after the change.
        record: TaskRecord,
    },
    /// Records deleted by expiry.
    Expired {
        /// Log index of the `Expire` entry that deleted them.
        index: u64,
        /// Ids of the deleted records; never empty.
        task_ids: Vec<String>,
    },
}

/// This replica's view of its group's leadership.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Leadership {
    /// Whether this replica is the leader.
    pub is_leader: bool,
    /// The current Raft term.
    pub term: u64,
    /// The leader this replica knows of, if any.
    pub leader: Option<u64>,
}
