//! Durable storage of a shard replica in the node's sled database.
//!
//! Each shard uses three trees of the one per-node `sled::Db`:
//!
//! - `shard/{id}/log`: the Raft log, keyed by the entry index as 8 big-endian bytes, each value
//!   an entry as JSON;
//! - `shard/{id}/raft`: the vote, the last committed log id and the last purged log id;
//! - `shard/{id}/sm`: the state machine: one key per task record (`rec/{task id}`), the last
//!   applied log id and the last membership (`meta/...`), and the current snapshot
//!   (`snap/meta`, `snap/data`).
//!
//! A snapshot's bytes are the JSON of [`SnapshotPayload`].

mod log_store;
mod state_machine;

use std::io;

use serde::{de::DeserializeOwned, Serialize};

pub use log_store::LogStore;
pub use state_machine::{ShardSnapshotBuilder, SnapshotPayload, StateMachineStore};

/// The name of one of a shard's trees.
pub(crate) fn tree_name(shard_id: u32, kind: &str) -> String {
    format!("shard/{shard_id}/{kind}")
}

pub(crate) fn encode<T: Serialize>(value: &T) -> io::Result<Vec<u8>> {
    serde_json::to_vec(value).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

pub(crate) fn decode<T: DeserializeOwned>(bytes: &[u8]) -> io::Result<T> {
    serde_json::from_slice(bytes).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// Read and decode one key of a tree.
pub(crate) fn read_json<T: DeserializeOwned>(
    tree: &sled::Tree,
    key: &[u8],
) -> io::Result<Option<T>> {
    match tree.get(key)? {
        Some(v) => decode(&v).map(Some),
        None => Ok(None),
    }
}
