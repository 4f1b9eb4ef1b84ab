//! The errors a shard replica reports, and their translation from openraft's errors.

use std::sync::Arc;

use openraft::errors::{
    ClientWriteError, Fatal, ForwardToLeader, InitializeError, LinearizableReadError, RaftError,
};

use crate::group::{Group, GroupState};

/// The cause of a storage failure, shared by every waiter the failure is reported to.
pub type StorageCause = Arc<dyn std::error::Error + Send + Sync + 'static>;

/// Why a shard replica could not do what it was asked; [`ShardError::retryable`] tells whether
/// the same request may succeed later.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ShardError {
    /// This replica is not the leader of its group; `leader_hint` is the leader it knows of.
    /// Nothing changed; the request may be retried at the leader.
    #[error("not the shard leader (leader hint: {leader_hint:?})")]
    NotLeader {
        /// Node id of the leader this replica knows of; `None` when it knows of none.
        leader_hint: Option<u64>,
    },
    /// The group cannot serve the request now (no quorum, timed out, shutting down, ...).
    /// Nothing changed (or, for a proposal that may still commit, the message says so); the
    /// request may be retried.
    #[error("shard unavailable: {0}")]
    Unavailable(String),
    /// The caller asked for something this replica can never do as asked (a membership that
    /// leaves out this node, a member without an address, a configuration openraft refuses).
    #[error("invalid shard request: {0}")]
    Invalid(String),
    /// Reading or writing the replica's storage failed.
    #[error("shard storage error")]
    Storage(#[source] StorageCause),
    /// The replica is broken and must be restarted (its Raft core panicked).
    #[error("shard fatal error: {0}")]
    Fatal(String),
}

impl ShardError {
    /// A storage failure with its cause.
    pub fn storage(e: impl std::error::Error + Send + Sync + 'static) -> Self {
        ShardError::Storage(Arc::new(e))
    }

    /// Whether the same request may succeed later without any change by the caller.
    pub fn retryable(&self) -> bool {
        matches!(
            self,
            ShardError::NotLeader { .. } | ShardError::Unavailable(_)
        )
    }
}

impl<S: GroupState> From<Fatal<Group<S>>> for ShardError {
    fn from(f: Fatal<Group<S>>) -> Self {
        match f {
            Fatal::StorageError(e) => ShardError::storage(e),
            Fatal::Stopped => ShardError::Unavailable("the shard's raft has stopped".into()),
            Fatal::Panicked => ShardError::Fatal("the shard's raft core panicked".into()),
        }
    }
}

impl From<sled::Error> for ShardError {
    fn from(e: sled::Error) -> Self {
        ShardError::storage(e)
    }
}

impl From<std::io::Error> for ShardError {
    fn from(e: std::io::Error) -> Self {
        ShardError::storage(e)
    }
}

/// A group's answer to a proposal that did not commit.
type WriteError<S> = RaftError<Group<S>, ClientWriteError<Group<S>>>;
/// A group's answer to a read that could not be confirmed linearizable.
type ReadError<S> = RaftError<Group<S>, LinearizableReadError<Group<S>>>;
/// A group's answer to an initialization it refused.
type InitError<S> = RaftError<Group<S>, InitializeError<Group<S>>>;

fn not_leader<S: GroupState>(f: ForwardToLeader<Group<S>>) -> ShardError {
    ShardError::NotLeader {
        leader_hint: f.leader_id,
    }
}

impl<S: GroupState> From<WriteError<S>> for ShardError {
    fn from(e: WriteError<S>) -> Self {
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

impl<S: GroupState> From<ReadError<S>> for ShardError {
    fn from(e: ReadError<S>) -> Self {
        match e {
            RaftError::Fatal(f) => f.into(),
            RaftError::APIError(LinearizableReadError::ForwardToLeader(f)) => not_leader(f),
            RaftError::APIError(LinearizableReadError::QuorumNotEnough(q)) => {
                ShardError::Unavailable(q.to_string())
            }
        }
    }
}

impl<S: GroupState> From<InitError<S>> for ShardError {
    fn from(e: InitError<S>) -> Self {
        match e {
            RaftError::Fatal(f) => f.into(),
            RaftError::APIError(api) => ShardError::Invalid(api.to_string()),
        }
    }
}
