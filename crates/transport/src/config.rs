//! The limits of the Raft transport: message and snapshot sizes, on both ends.

use taskmesh_shard::RaftSettings;

use crate::error::TransportError;

/// One MiB.
const MIB: usize = 1024 * 1024;

/// Sizes that bound what a node sends to and accepts from its peers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransportConfig {
    /// How many bytes of snapshot data each `InstallSnapshotChunk` carries.
    pub snapshot_chunk_bytes: usize,
    /// The largest gRPC message a node accepts from a peer: an AppendEntries batch (openraft
    /// sends at most `max_payload_entries` entries per request) or a snapshot chunk.
    pub max_message_bytes: usize,
    /// The largest snapshot a node accepts (it is held in memory while it arrives).
    pub max_snapshot_bytes: u64,
}

impl Default for TransportConfig {
    /// The sizes of [`RaftSettings::default`].
    fn default() -> Self {
        Self::from_settings(&RaftSettings::default())
    }
}

impl TransportConfig {
    /// The sizes `[raft]` sets (`snapshot_chunk_bytes`, `max_snapshot_bytes`); the message
    /// bound has no key.
    pub fn from_settings(raft: &RaftSettings) -> Self {
        Self {
            snapshot_chunk_bytes: raft.snapshot_chunk_bytes,
            max_message_bytes: 64 * MIB,
            max_snapshot_bytes: raft.max_snapshot_bytes,
        }
    }

    /// Check that the limits fit together: a chunk must be non-empty and, with its header,
    /// fit in a message.
    pub fn validate(&self) -> Result<(), TransportError> {
        if self.snapshot_chunk_bytes == 0 {
            return Err(TransportError::Config(
                "snapshot_chunk_bytes must be at least 1".into(),
            ));
        }
        // Room for the chunk's other fields and the header (vote and snapshot metadata).
        let headroom = 64 * 1024;
        if self.snapshot_chunk_bytes.saturating_add(headroom) > self.max_message_bytes {
            return Err(TransportError::Config(format!(
                "snapshot_chunk_bytes ({}) plus {headroom} bytes of headroom must fit in \
                 max_message_bytes ({})",
                self.snapshot_chunk_bytes, self.max_message_bytes
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        let cfg = TransportConfig::default();
        assert!(cfg.validate().is_ok());
        assert_eq!(cfg.snapshot_chunk_bytes, MIB);
    }

    #[test]
    fn a_chunk_larger_than_a_message_is_rejected() {
        let cfg = TransportConfig {
            snapshot_chunk_bytes: 8 * MIB,
            max_message_bytes: 8 * MIB,
            ..TransportConfig::default()
        };
        assert!(matches!(cfg.validate(), Err(TransportError::Config(_))));
        let empty = TransportConfig {
            snapshot_chunk_bytes: 0,
            ..TransportConfig::default()
        };
        assert!(matches!(empty.validate(), Err(TransportError::Config(_))));
    }
}
