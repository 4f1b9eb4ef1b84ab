//! The settings of one shard replica and the openraft configuration derived from them.

use openraft::{Config, SnapshotPolicy};

use crate::error::ShardError;
use crate::settings::RaftSettings;

/// The settings of this node's replica of one Raft group: a task shard or the metadata group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardConfig {
    /// The logical shard this group replicates.
    pub shard_id: u32,
    /// This node's Raft id (the same for every shard group on the node).
    pub node_id: u64,
    /// The address other members reach this node at; recorded in the group's membership.
    pub node_addr: String,
    /// `[raft]`: the timings, snapshot policy and log cache every group of the node shares
    /// (the timings must fit together or [`ShardConfig::raft_config`] refuses them).
    pub raft: RaftSettings,
    /// How many [`crate::ShardEvent`]s may wait for one subscriber before newer ones are dropped
    /// for it (it then receives `Lagged`).
    pub event_buffer: usize,
    /// How long a read waits for the state machine to catch up with its read point, and how
    /// long [`crate::ShardReplica::trigger_snapshot`] waits for the snapshot.
    pub wait_timeout_ms: u64,
}

impl Default for ShardConfig {
    /// Group 0 of node 1 with [`RaftSettings::default`].
    fn default() -> Self {
        RaftSettings::default().shard_config(0, 1, String::new())
    }
}

/// Proposal times per lifecycle stage openraft keeps for its statistics (see `raft_config`).
const LOG_STAGE_CAPACITY: u64 = 16;

impl ShardConfig {
    /// The openraft configuration of this group: timings and snapshot policy from the settings,
    /// Pre-Vote on. The leader lease is always on in this openraft version (it lasts
    /// `election_timeout_max_ms`); a restarted leader may restore its leadership without an
    /// election when no other member has moved on (openraft's default `enable_leader_restore`,
    /// safe here because applies are flushed and the committed log id is persisted), which
    /// makes a single-voter group leader again at once.
    pub fn raft_config(&self) -> Result<Config, ShardError> {
        let cfg = Config {
            cluster_name: format!("taskmesh-shard-{}", self.shard_id),
            heartbeat_interval: self.raft.heartbeat_interval_ms,
            election_timeout_min: self.raft.election_timeout_min_ms,
            election_timeout_max: self.raft.election_timeout_max_ms,
            snapshot_policy: SnapshotPolicy::LogsSinceLast(
                self.raft.snapshot_logs_since_last.max(1),
            ),
            max_in_snapshot_log_to_keep: self.raft.max_in_snapshot_log_to_keep,
            install_snapshot_timeout: self.raft.install_snapshot_timeout_ms,
            enable_pre_vote: Some(true),
            // The ring of per-stage proposal times feeds openraft's runtime statistics, which
            // nothing here reads; at the default (1,024 per stage, 6 stages) a busy group holds
            // ~130 KiB of them for good.
            log_stage_capacity: Some(LOG_STAGE_CAPACITY),
            ..Config::default()
        };
        cfg.validate()
            .map_err(|e| ShardError::Invalid(format!("invalid raft configuration: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_make_a_valid_raft_config() {
        let cfg = ShardConfig::default().raft_config().expect("valid");
        assert_eq!(cfg.heartbeat_interval, 100);
        assert_eq!(cfg.election_timeout_min, 300);
        assert_eq!(cfg.election_timeout_max, 600);
        assert_eq!(cfg.snapshot_policy, SnapshotPolicy::LogsSinceLast(10_000));
        assert_eq!(cfg.max_in_snapshot_log_to_keep, 1_000);
        assert_eq!(cfg.enable_pre_vote, Some(true));
        assert_eq!(cfg.install_snapshot_timeout, 30_000);
    }

    #[test]
    fn inconsistent_timings_are_rejected() {
        let mut cfg = ShardConfig::default();
        cfg.raft.election_timeout_min_ms = 50;
        assert!(matches!(cfg.raft_config(), Err(ShardError::Invalid(_))));
    }
}
