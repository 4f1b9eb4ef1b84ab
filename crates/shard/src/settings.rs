//! [`RaftSettings`]: the `[raft]` section of the node's TOML file, the one definition of its
//! keys, defaults and checks. The shard groups read most of it ([`RaftSettings::shard_config`]);
//! the write-ahead log its segment size ([`RaftSettings::wal_config`]); the transport the
//! snapshot transfer sizes, the node beat and the heartbeat batches (`taskmesh-transport`
//! converts them itself).

use serde::Deserialize;

use crate::config::ShardConfig;
use crate::storage::WalConfig;

/// The most `raft.log_cache_bytes` may be (64 MiB): it is held by every busy group.
pub const MAX_LOG_CACHE_BYTES: usize = 64 << 20;

/// `[raft]`: the Raft settings shared by every group on the node (task shards and the
/// metadata group), and the size limits of snapshot transfers. Every field is documented in
/// docs/configuration.md.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RaftSettings {
    /// Interval of leader heartbeats, in ms. Default 100; must be below
    /// `election_timeout_min_ms`.
    pub heartbeat_interval_ms: u64,
    /// Lower bound of the randomised election timeout, in ms. Default 300; must exceed
    /// `heartbeat_interval_ms`.
    pub election_timeout_min_ms: u64,
    /// Upper bound of the randomised election timeout, in ms (also how long the leader lease
    /// lasts). Default 600; must exceed `election_timeout_min_ms`.
    pub election_timeout_max_ms: u64,
    /// A group with nothing to do for this long quiesces: it stops its heartbeats and election
    /// timers, and the node's one beat per peer and heartbeat interval stands in for them until
    /// a proposal, a read or a failure wakes it. In ms; default 1000; 0 turns quiescence off.
    /// Otherwise at least twice `heartbeat_interval_ms`.
    pub quiesce_after_ms: u64,
    /// How often the node beats to each peer for its quiescent groups (and checks its groups'
    /// quiescence), in ms. Default 150; at least 1 and at most half of
    /// `election_timeout_min_ms`, so that a quiescent follower hears at least two beats before
    /// it would tick again.
    pub beat_interval_ms: u64,
    /// How often the node checks again that each group it leads quiescently is still settled,
    /// in ms. A leader that stopped leading while quiet is normally found sooner: the first
    /// beat a member answers from a newer term wakes the group. Default 10000; at least
    /// `beat_interval_ms`.
    pub quiet_recheck_ms: u64,
    /// The most heartbeats (AppendEntries without entries, of any group) one call to a peer
    /// carries; while 4 calls are under way the next ones queue, up to 16 calls' worth, and a
    /// heartbeat past that fails at once like an unreachable peer's. 1: every heartbeat is its
    /// own call. Default 1024; at least 1.
    pub heartbeat_batch_max: usize,
    /// A group builds a snapshot after this many entries were applied since the last one
    /// (the log before it is then purged). Default 10000.
    pub snapshot_logs_since_last: u64,
    /// Log entries already covered by a snapshot that are kept for followers lagging a little.
    /// Default 1000.
    pub max_in_snapshot_log_to_keep: u64,
    /// Time for sending one snapshot chunk to a follower and for its final install, in ms.
    /// Default 30000; at least 1 in a cluster.
    pub install_snapshot_timeout_ms: u64,
    /// Bytes of snapshot data per message. Default 1048576 (1 MiB); at least 1 in a cluster.
    pub snapshot_chunk_bytes: usize,
    /// The largest snapshot a node accepts from a leader, in bytes (held in memory while it
    /// arrives). Default 1073741824 (1 GiB).
    pub max_snapshot_bytes: u64,
    /// The size at which a segment of the node's write-ahead log (every group's Raft log) is
    /// closed and the next one begun, in bytes; dead segments are deleted whole. Default
    /// 67108864 (64 MiB); between 4096 and 1073741824.
    pub log_segment_bytes: u64,
    /// Per group: how many bytes (encoded) of the latest entries appended to its log are also
    /// kept in memory, so that replication to the followers and the apply take them from
    /// there instead of reading and decoding the log again. Let go when the group quiesces.
    /// Default 65536; 0: none are kept; at most [`MAX_LOG_CACHE_BYTES`].
    pub log_cache_bytes: usize,
}

impl Default for RaftSettings {
    fn default() -> Self {
        Self {
            heartbeat_interval_ms: 100,
            election_timeout_min_ms: 300,
            election_timeout_max_ms: 600,
            quiesce_after_ms: 1_000,
            beat_interval_ms: 150,
            quiet_recheck_ms: 10_000,
            heartbeat_batch_max: 1024,
            snapshot_logs_since_last: 10_000,
            max_in_snapshot_log_to_keep: 1_000,
            install_snapshot_timeout_ms: 30_000,
            snapshot_chunk_bytes: 1 << 20,
            max_snapshot_bytes: 1 << 30,
            log_segment_bytes: taskmesh_wal::DEFAULT_SEGMENT_BYTES,
            log_cache_bytes: 64 * 1024,
        }
    }
}

impl RaftSettings {
    /// Refuse values that cannot work, naming the key as it is written (`raft.<key>`).
    pub fn validate(&self) -> Result<(), String> {
        let segments = taskmesh_wal::MIN_SEGMENT_BYTES..=taskmesh_wal::MAX_SEGMENT_BYTES;
        if !segments.contains(&self.log_segment_bytes) {
            return Err(format!(
                "raft.log_segment_bytes must be between {} and {} (got {})",
                segments.start(),
                segments.end(),
                self.log_segment_bytes
            ));
        }
        if self.log_cache_bytes > MAX_LOG_CACHE_BYTES {
            return Err(format!(
                "raft.log_cache_bytes must be at most {MAX_LOG_CACHE_BYTES} (got {}): it is \
                 held per group",
                self.log_cache_bytes
            ));
        }
        if self.election_timeout_min_ms <= self.heartbeat_interval_ms
            || self.election_timeout_max_ms <= self.election_timeout_min_ms
        {
            return Err("raft timeouts must satisfy raft.heartbeat_interval_ms < \
                 raft.election_timeout_min_ms < raft.election_timeout_max_ms"
                .into());
        }
        if self.heartbeat_batch_max == 0 {
            return Err("raft.heartbeat_batch_max must be at least 1".into());
        }
        if self.beat_interval_ms == 0
            || self.beat_interval_ms.saturating_mul(2) > self.election_timeout_min_ms
        {
            return Err(format!(
                "raft.beat_interval_ms ({}) must be at least 1 and at most half of \
                 raft.election_timeout_min_ms ({})",
                self.beat_interval_ms, self.election_timeout_min_ms
            ));
        }
        if self.quiet_recheck_ms < self.beat_interval_ms {
            return Err(format!(
                "raft.quiet_recheck_ms ({}) must be at least raft.beat_interval_ms ({})",
                self.quiet_recheck_ms, self.beat_interval_ms
            ));
        }
        if self.quiesce_after_ms != 0 && self.quiesce_after_ms < 2 * self.heartbeat_interval_ms {
            return Err(format!(
                "raft.quiesce_after_ms ({}) must be 0 (never quiesce) or at least twice \
                 raft.heartbeat_interval_ms ({})",
                self.quiesce_after_ms, self.heartbeat_interval_ms
            ));
        }
        Ok(())
    }

    /// Checks that matter only when snapshots travel between nodes (in a cluster).
    pub fn validate_transfers(&self) -> Result<(), String> {
        if self.snapshot_chunk_bytes == 0 || self.install_snapshot_timeout_ms == 0 {
            return Err(
                "raft.snapshot_chunk_bytes and raft.install_snapshot_timeout_ms must be at \
                 least 1"
                    .into(),
            );
        }
        Ok(())
    }

    /// The settings of node `node_id`'s replica of group `shard_id`, which its peers reach at
    /// `node_addr`: these settings, and the fixed bounds that have no key.
    pub fn shard_config(&self, shard_id: u32, node_id: u64, node_addr: String) -> ShardConfig {
        ShardConfig {
            shard_id,
            node_id,
            node_addr,
            raft: self.clone(),
            event_buffer: 4096,
            wait_timeout_ms: 10_000,
        }
    }

    /// The node's write-ahead log settings.
    pub fn wal_config(&self) -> WalConfig {
        WalConfig {
            segment_bytes: self.log_segment_bytes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_valid_and_make_the_default_shard_config() {
        let raft = RaftSettings::default();
        assert_eq!(
            (raft.validate(), raft.validate_transfers()),
            (Ok(()), Ok(()))
        );
        assert_eq!(
            raft.shard_config(0, 1, String::new()),
            ShardConfig::default()
        );
        assert_eq!(raft.wal_config().segment_bytes, 64 << 20);
    }

    #[test]
    fn a_bad_value_is_refused_naming_its_key() {
        type Edit = fn(&mut RaftSettings);
        let cases: [(Edit, &str); 12] = [
            (|s| s.log_segment_bytes = 4095, "log_segment_bytes"),
            (|s| s.log_segment_bytes = (1 << 30) + 1, "log_segment_bytes"),
            (
                |s| s.log_cache_bytes = MAX_LOG_CACHE_BYTES + 1,
                "log_cache_bytes",
            ),
            (
                |s| s.election_timeout_min_ms = 100,
                "election_timeout_min_ms",
            ),
            (
                |s| s.election_timeout_max_ms = 300,
                "election_timeout_max_ms",
            ),
            (|s| s.heartbeat_batch_max = 0, "heartbeat_batch_max"),
            (|s| s.beat_interval_ms = 0, "beat_interval_ms"),
            (|s| s.beat_interval_ms = 151, "beat_interval_ms"),
            (|s| s.quiet_recheck_ms = 149, "quiet_recheck_ms"),
            (|s| s.quiesce_after_ms = 150, "quiesce_after_ms"),
            (|s| s.snapshot_chunk_bytes = 0, "snapshot_chunk_bytes"),
            (
                |s| s.install_snapshot_timeout_ms = 0,
                "install_snapshot_timeout_ms",
            ),
        ];
        for (edit, key) in cases {
            let mut s = RaftSettings::default();
            edit(&mut s);
            let refusal = s.validate().and_then(|()| s.validate_transfers());
            assert!(
                refusal.is_err_and(|e| e.contains(&format!("raft.{key}"))),
                "{key}"
            );
        }
    }

    #[test]
    fn quiescence_may_be_off() {
        let off = RaftSettings {
            quiesce_after_ms: 0,
            ..RaftSettings::default()
        };
        assert_eq!(off.validate(), Ok(()));
    }
}
