//! What a replica tells its observers: applied changes and leadership.

use taskmesh_task::TaskRecord;

/// A change made by an applied command, emitted after the apply is durable, in log order.
///
/// Installing a snapshot (a follower catching up) replaces the whole state and emits no events:
/// [`crate::ShardReplica::snapshot_installs`] tells when that happened, so that whoever keeps
/// state derived from the events rebuilds it from [`crate::ShardReplica::read_local`].
#[derive(Clone, Debug)]
pub enum ShardEvent {
    /// A record was created or changed by an applied command.
    Changed {
        /// Log index of the entry whose apply made the change.
        index: u64,
        /// The record as it is after the change. Shared: the channel keeps `event_buffer` events
        /// of every replica, and a slot holding a whole record would make each replica's buffer
        /// megabytes before anything happened.
        record: std::sync::Arc<TaskRecord>,
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Every replica's event channel holds `event_buffer` (4,096) slots from its start: an event
    /// must stay a few words, whatever a record holds.
    #[test]
    fn an_event_is_a_few_words_not_a_record() {
        let event = std::mem::size_of::<ShardEvent>();
        let record = std::mem::size_of::<TaskRecord>();
        println!("ShardEvent: {event} bytes, TaskRecord: {record} bytes");
        assert!(event <= 48, "ShardEvent is {event} bytes");
        assert!(
            event * 4 < record,
            "an event ({event}) near a record's size ({record})"
        );
    }
}
