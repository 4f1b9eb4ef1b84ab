//! The errors of the transport's own operations (not the Raft RPCs: those report openraft's
//! errors to openraft).

#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// A peer's address cannot be dialled.
    #[error("invalid address {addr:?} for node {node_id}: {reason}")]
    InvalidAddress {
        node_id: u64,
        addr: String,
        reason: String,
    },
    /// The transport's settings do not fit together.
    #[error("invalid transport configuration: {0}")]
    Config(String),
    /// The gRPC server failed.
    #[error("raft transport server failed: {0}")]
    Serve(#[from] tonic::transport::Error),
}
