//! The internal gRPC API of taskmesh, generated from the workspace's `proto/` directory.
//!
//! Three services make up the API of package `taskmesh.v1`:
//!
//! * [`v1::raft_transport_server::RaftTransport`]: the Raft traffic between nodes. One channel
//!   per pair of nodes carries the messages of every Raft group; each message names its group
//!   (a shard index, or [`METADATA_GROUP`]). openraft's own structures travel as serde_json
//!   bytes.
//! * [`v1::task_service_server::TaskService`]: what a gateway asks the leader of a shard
//!   (create, get, list, cancel, attach to a result, watch status changes, deliver a client's
//!   answer to an elicitation or sampling request).
//! * [`v1::cluster_service_server::ClusterService`]: the cluster metadata (membership and
//!   placement): read it, and change it through the metadata group's leader.
//!
//! Every internal connection is mutual TLS unless a node runs with `cluster.insecure`: [`dial`]
//! makes the channels a node dials with, [`peer`] accepts connections and tells each call who
//! made it.
//!
//! Errors a router must act on travel as a [`v1::TaskError`] in the metadata of the failing
//! gRPC status; [`v1::TaskError::into_status`] and [`v1::TaskError::from_status`] convert in
//! both directions.

use prost::Message;

pub mod dial;
pub mod peer;
pub mod trace;

/// The messages, clients and servers of package `taskmesh.v1`.
#[allow(
    missing_docs,
    unreachable_pub,
    clippy::all,
    clippy::pedantic,
    clippy::nursery,
    rustdoc::bare_urls,
    rustdoc::broken_intra_doc_links,
    rustdoc::invalid_html_tags
)]
pub mod v1 {
    tonic::include_proto!("taskmesh.v1");
}

/// The Raft group id of the cluster metadata group in the `shard` field of Raft messages.
/// Shard groups use their index, which is always smaller.
pub const METADATA_GROUP: u32 = u32::MAX;

/// The binary gRPC metadata key under which a failed task call carries its prost-encoded
/// [`v1::TaskError`].
pub const TASK_ERROR_METADATA_KEY: &str = "taskmesh-task-error-bin";

impl v1::TaskError {
    /// The task does not exist (or is not visible to the asking principal).
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::of_kind(v1::TaskErrorKind::NotFound, message)
    }

    /// The task is already in the terminal `status`.
    pub fn terminal(status: v1::TaskStatus, message: impl Into<String>) -> Self {
        let mut e = Self::of_kind(v1::TaskErrorKind::Terminal, message);
        e.set_terminal_status(status);
        e
    }

    /// The answering node does not lead the shard; `leader` is the leader when known.
    pub fn not_leader(leader: Option<v1::LeaderHint>, message: impl Into<String>) -> Self {
        let mut e = Self::of_kind(v1::TaskErrorKind::NotLeader, message);
        e.leader = leader;
        e
    }

    /// The node runs as many live tasks as it may: `limit`.
    pub fn capacity(limit: u64, message: impl Into<String>) -> Self {
        let mut e = Self::of_kind(v1::TaskErrorKind::Capacity, message);
        e.limit = Some(limit);
        e
    }

    /// The shard cannot serve right now.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::of_kind(v1::TaskErrorKind::Unavailable, message)
    }

    /// An error of `kind` with no further detail (for the kinds without a constructor of
    /// their own: invalid, misconfigured, internal).
    pub fn of_kind(kind: v1::TaskErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind: kind as i32,
            message: message.into(),
            terminal_status: None,
            leader: None,
            limit: None,
        }
    }

    /// The gRPC code a status carrying this error has.
    pub fn code(&self) -> tonic::Code {
        match self.kind() {
            v1::TaskErrorKind::NotFound => tonic::Code::NotFound,
            v1::TaskErrorKind::Terminal | v1::TaskErrorKind::NotLeader => {
                tonic::Code::FailedPrecondition
            }
            v1::TaskErrorKind::Capacity | v1::TaskErrorKind::QueueFull => {
                tonic::Code::ResourceExhausted
            }
            v1::TaskErrorKind::StaleLease => tonic::Code::FailedPrecondition,
            v1::TaskErrorKind::Invalid => tonic::Code::InvalidArgument,
            v1::TaskErrorKind::Misconfigured => tonic::Code::FailedPrecondition,
            v1::TaskErrorKind::Internal => tonic::Code::Internal,
            v1::TaskErrorKind::Unavailable | v1::TaskErrorKind::Unspecified => {
                tonic::Code::Unavailable
            }
        }
    }

    /// A gRPC status with this error's code and message, carrying the error itself under
    /// [`TASK_ERROR_METADATA_KEY`].
    pub fn into_status(self) -> tonic::Status {
        let mut status = tonic::Status::new(self.code(), self.message.clone());
        status.metadata_mut().insert_bin(
            TASK_ERROR_METADATA_KEY,
            tonic::metadata::MetadataValue::from_bytes(&self.encode_to_vec()),
        );
        status
    }

    /// The task error a gRPC status carries, if any. `None` for a status without one (from the
    /// gRPC layer: a transport failure, a deadline, a request that does not decode) or with an
    /// undecodable one.
    pub fn from_status(status: &tonic::Status) -> Option<Self> {
        let value = status.metadata().get_bin(TASK_ERROR_METADATA_KEY)?;
        let bytes = value.to_bytes().ok()?;
        Self::decode(bytes).ok()
    }

    /// The task error a gRPC status stands for: the one it carries, or for a status of the
    /// gRPC layer the kind its code means (see the error encoding in `tasks.proto`).
    pub fn of_status(status: &tonic::Status) -> Self {
        if let Some(e) = Self::from_status(status) {
            return e;
        }
        use tonic::Code;
        let kind = match status.code() {
            Code::InvalidArgument | Code::OutOfRange => v1::TaskErrorKind::Invalid,
            Code::Internal | Code::DataLoss => v1::TaskErrorKind::Internal,
            Code::FailedPrecondition
            | Code::Unimplemented
            | Code::PermissionDenied
            | Code::Unauthenticated => v1::TaskErrorKind::Misconfigured,
            _ => v1::TaskErrorKind::Unavailable,
        };
        Self::of_kind(kind, format!("peer: {}", status.message()))
    }
}

impl From<v1::TaskError> for tonic::Status {
    fn from(e: v1::TaskError) -> Self {
        e.into_status()
    }
}
