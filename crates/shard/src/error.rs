//! The errors a shard replica reports, and their translation from openraft's errors.

use openraft::errors::{
    ClientWriteError, Fatal, ForwardToLeader, InitializeError, LinearizableReadError, RaftError,
};

use crate::types::TypeConfig;

#[derive(Debug, Clone, thiserror::Error)]
pub enum ShardError {
    /// This replica is not the leader of its group; `leader_hint` is the leader it knows of.
    #[error("not the shard leader (leader hint: {leader_hint:?})")]
    NotLeader { leader_hint: Option<u64> },
    /// The group cannot serve the request now (no quorum, timed out, shutting down, ...).
    #[error("shard unavailable: {0}")]
    Unavailable(String),
    /// Reading or writing the replica's storage failed.
    #[error("shard storage error: {0}")]
    Storage(String),
    /// The replica is broken and must be restarted.
    #[error("shard fatal error: {0}")]
    Fatal(String),
}

impl From<Fatal<TypeConfig>> for ShardError {
    fn from(f: Fatal<TypeConfig>) -> Self {
        match f {
            Fatal::StorageError(e) => ShardError::Storage(e.to_string()),
            Fatal::Stopped => ShardError::Unavailable("the shard's raft has stopped".into()),
            Fatal::Panicked => ShardError::Fatal("the shard's raft core panicked".into()),
        }
    }
}

impl From<sled::Error> for ShardError {
    fn from(e: sled::Error) -> Self {
        ShardError::Storage(e.to_string())
    }
}

impl From<std::io::Error> for ShardError {
    fn from(e: std::io::Error) -> Self {
        ShardError::Storage(e.to_string())
    }
}

fn not_leader(f: ForwardToLeader<TypeConfig>) -> ShardError {
    ShardError::NotLeader {
        leader_hint: f.leader_id,
    }
}

impl From<RaftError<TypeConfig, ClientWriteError<TypeConfig>>> for ShardError {
    fn from(e: RaftError<TypeConfig, ClientWriteError<TypeConfig>>) -> Self {
        match e {
            RaftError::Fatal(f) => f.into(),
            RaftError::APIError(ClientWriteError::ForwardToLeader(f)) => not_leader(f),
            RaftError::APIError(ClientWriteError::LogEntryDiscarded(f)) => {
                ShardError::Unavailable(format!(
                    "the proposal was discarded on a leader change and may or may not commit \
                     (leader hint: {:?})",
                    f.leader_id
                ))
            }
            RaftError::APIError(other) => ShardError::Unavailable(other.to_string()),
        }
    }
}

impl From<RaftError<TypeConfig, LinearizableReadError<TypeConfig>>> for ShardError {
    fn from(e: RaftError<TypeConfig, LinearizableReadError<TypeConfig>>) -> Self {
        match e {
            RaftError::Fatal(f) => f.into(),
            RaftError::APIError(LinearizableReadError::ForwardToLeader(f)) => not_leader(f),
            RaftError::APIError(LinearizableReadError::QuorumNotEnough(q)) => {
                ShardError::Unavailable(q.to_string())
            }
        }
    }
}

impl From<RaftError<TypeConfig, InitializeError<TypeConfig>>> for ShardError {
    fn from(e: RaftError<TypeConfig, InitializeError<TypeConfig>>) -> Self {
        match e {
            RaftError::Fatal(f) => f.into(),
            RaftError::APIError(api) => ShardError::Fatal(api.to_string()),
        }
    }
}
