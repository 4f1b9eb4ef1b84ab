//! The errors of the transport's own operations (not the Raft RPCs: those report openraft's
//! errors to openraft).

/// Why an operation of the transport failed: an unusable peer address, settings that do
/// not fit together, or the gRPC server failing.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// A peer's address cannot be dialled.
    #[error("invalid address {addr:?} for node {node_id}: {reason}")]
    InvalidAddress {
        /// The node the address was given for.
        node_id: u64,
        /// The address as it was given.
        addr: String,
        /// Why it cannot be dialled, as text.
        reason: String,
    },
    /// The transport's settings do not fit together.
    #[error("invalid transport configuration: {0}")]
    Config(String),
    /// The gRPC server failed.
    #[error("raft transport server failed: {0}")]
    Serve(#[from] tonic::transport::Error),
}
