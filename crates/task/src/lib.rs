//! The task domain.
//!
//! A task is a deferred `tools/call`. Its durable form is a [`TaskRecord`] with a
//! [`TaskStatus`]; everything that changes a record is a [`Command`] carried by a shard's Raft
//! log and applied by [`ShardState::apply`] (in [`state`], where the lifecycle's transitions are
//! decided: terminal statuses are sticky, `cancelled` beats a late completion, an older
//! execution term cannot change a record), a pure function of (state, command, log index). Time is always passed in, never read here, so that every replica
//! applying the same log reaches the same state.

pub mod changes;
pub mod command;
pub mod outbox;
pub mod record;
pub mod state;
pub mod status;
pub mod subscription;
pub mod worker;

pub use changes::{Change, ChangeLog, ChangePage, ChangeQuery};
pub use command::{Applied, Command, Rejection};
pub use outbox::{Outbox, OutboxEvent, Settlement, Watcher};
pub use record::{ClientCaps, ClientTask, Outcome, TaskRecord, TaskView, ToolRequest};
pub use state::ShardState;
pub use status::TaskStatus;
pub use subscription::Subscription;
pub use worker::{Lease, WorkerJob};

/// A task id: at least 128 bits from the OS CSPRNG, rendered as lowercase hex.
pub type TaskId = String;

/// The stable hash that places a task id on a shard: 64-bit FNV-1a over the id's UTF-8 bytes.
/// It is part of the cluster's identity (recorded at cluster creation) and must never change.
pub fn stable_hash(task_id: &str) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    task_id
        .as_bytes()
        .iter()
        .fold(OFFSET, |h, b| (h ^ u64::from(*b)).wrapping_mul(PRIME))
}

/// The shard of a task id: `stable_hash(task_id) mod shards` (`shards` a power of two > 0).
pub fn shard_of(task_id: &str, shards: u32) -> u32 {
    debug_assert!(shards.is_power_of_two());
    (stable_hash(task_id) % u64::from(shards.max(1))) as u32
}

#[cfg(test)]
mod hash_tests {
    use super::*;

    #[test]
    fn fnv1a_reference_values_and_spread() {
        assert_eq!(stable_hash(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(stable_hash("a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(stable_hash("foobar"), 0x85944171f73967e8);
        let mut counts = [0u32; 32];
        for i in 0..32_000 {
            counts[shard_of(&format!("{i:032x}"), 32) as usize] += 1;
        }
        assert!(counts.iter().all(|c| (700..1300).contains(c)), "{counts:?}");
    }
}
