//! The errors of the host: what a shard leader answers when a task operation does not succeed,
//! with what the caller should do about it ([`HostError::retryable`]).

use taskmesh_shard::ShardError;
use taskmesh_task::TaskStatus;

/// Why a task operation on the host failed; [`HostError::retryable`] says whether the same
/// request may succeed later.
#[derive(Debug, Clone, thiserror::Error)]
pub enum HostError {
    /// The task does not exist, has expired, or belongs to another principal (all read alike).
    #[error("task not found")]
    NotFound,
    /// The task is already in a terminal status, so the operation (cancel) does not apply.
    #[error("task is already in terminal status '{0}'")]
    Terminal(TaskStatus),
    /// The node runs as many live tasks as it may, or as many of the requestor's as it may;
    /// nothing was created.
    #[error("too many live tasks: a limit of {limit} is reached (tasks.max_live_tasks or tasks.max_live_tasks_per_principal); retry later")]
    Capacity {
        /// The live-task limit in force (`tasks.max_live_tasks` or
        /// `tasks.max_live_tasks_per_principal`).
        limit: usize,
    },
    /// This node does not lead the shard; `leader_hint` is the leader it knows of. Nothing
    /// changed: retry at the leader.
    #[error("shard {shard} is led elsewhere")]
    NotLeader {
        /// Shard the request was for.
        shard: u32,
        /// Node id of the shard's leader as the answering node knows it; `None` when it knows
        /// none (as for a shard it does not host).
        leader_hint: Option<u64>,
    },
    /// The shard cannot serve right now (no quorum, an election, starting or stopping). Nothing
    /// changed: retry after a pause.
    #[error("shard unavailable: {0}")]
    Unavailable(String),
    /// The request can never succeed as asked (malformed arguments, a shard that does not fit
    /// the task id). Nothing changed.
    #[error("invalid request: {0}")]
    Invalid(String),
    /// A worker's lease is not the task's current one (it ran out, or the task was leased again
    /// since), or is another worker identity's. Nothing changed.
    #[error(
        "the lease is not the task's current one: it ran out, or the task was leased again since"
    )]
    StaleLease,
    /// As many tasks of the tool wait for a worker as `workers.max_queued_per_tool` allows; the
    /// text says which tool. Nothing changed.
    #[error("{0}")]
    QueueFull(String),
    /// This node's configuration does not fit the request (a tool it does not serve, a shard
    /// outside its cluster). Nothing changed; an operator must act.
    #[error("misconfigured: {0}")]
    Misconfigured(String),
    /// The shard's replica failed (its storage, or its Raft core): the request may or may not
    /// have taken effect.
    #[error("shard {shard} failed")]
    Shard {
        /// Shard whose replica failed.
        shard: u32,
        /// The replica's error: a storage failure or a fatal one.
        #[source]
        source: ShardError,
    },
    /// A bug (an answer that cannot happen, a malformed message from a peer).
    #[error("internal error: {0}")]
    Internal(String),
}

impl HostError {
    /// The host's error for a replica's error on `shard`.
    pub fn from_shard(shard: u32, e: ShardError) -> Self {
        match e {
            ShardError::NotLeader { leader_hint } => HostError::NotLeader { shard, leader_hint },
            ShardError::Unavailable(m) => HostError::Unavailable(m),
            ShardError::Invalid(m) => HostError::Invalid(m),
            source @ (ShardError::Storage(_) | ShardError::Fatal(_)) => {
                HostError::Shard { shard, source }
            }
        }
    }

    /// Whether the same request may succeed later, unchanged, elsewhere or after a pause: a
    /// router retries these (and only these) within its budget.
    pub fn retryable(&self) -> bool {
        matches!(
            self,
            HostError::NotLeader { .. } | HostError::Unavailable(_)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_leadership_and_availability_errors_are_retryable() {
        let shard = |e| HostError::from_shard(3, e);
        assert!(shard(ShardError::NotLeader { leader_hint: None }).retryable());
        assert!(shard(ShardError::Unavailable("election".into())).retryable());
        let storage = shard(ShardError::storage(std::io::Error::other("disk")));
        assert!(!storage.retryable());
        assert!(
            std::error::Error::source(&storage).is_some(),
            "the cause is kept"
        );
        assert!(!shard(ShardError::Invalid("x".into())).retryable());
        assert!(!shard(ShardError::Fatal("x".into())).retryable());
        for e in [
            HostError::NotFound,
            HostError::Terminal(TaskStatus::Completed),
            HostError::Capacity { limit: 5 },
            HostError::Invalid("x".into()),
            HostError::Misconfigured("x".into()),
            HostError::Internal("x".into()),
        ] {
            assert!(!e.retryable(), "{e:?}");
        }
    }
}
