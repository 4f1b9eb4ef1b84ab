//! Runs openraft's own storage conformance suite against the log store (over the write-ahead
//! log) and the state machine (over its snapshot file): with the log's latest entries kept in
//! memory, with so few kept that most reads miss them, and with none.

// A test binary: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used)]

use openraft::testing::log::{StoreBuilder, Suite};
use openraft::type_config::TypeConfigExt;
use openraft::StorageError;
use taskmesh_shard::storage::{LogStore, SnapshotDir, StateMachineStore, Store, Wal, WalConfig};
use taskmesh_shard::TypeConfig;
use tempfile::TempDir;

/// A store whose log keeps `recent_bytes` of its latest entries in memory.
struct SledBuilder {
    recent_bytes: usize,
}

impl StoreBuilder<TypeConfig, LogStore, StateMachineStore, TempDir> for SledBuilder {
    async fn build(
        &self,
    ) -> Result<(TempDir, LogStore, StateMachineStore), StorageError<TypeConfig>> {
        let fail = |e: std::io::Error| StorageError::write(TypeConfig::err_from_error(&e));
        let dir = TempDir::new().map_err(fail)?;
        let db = sled::open(dir.path().join("db")).map_err(|e| fail(e.into()))?;
        let wal = Wal::open(&dir.path().join("wal"), WalConfig::default()).map_err(fail)?;
        let snapshots = SnapshotDir::open(&dir.path().join("snapshots")).map_err(fail)?;
        let store = Store::new(db, wal, snapshots);
        let (log, _) = <LogStore>::open(&store, 7, self.recent_bytes)
            .await
            .map_err(fail)?;
        let sm = <StateMachineStore>::open(&store, 7, 16)
            .await
            .map_err(fail)?;
        Ok((dir, log, sm))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openraft_storage_suite() -> Result<(), StorageError<TypeConfig>> {
    Suite::test_all(SledBuilder {
        recent_bytes: 64 * 1024,
    })
    .await
}

/// An entry of the suite encodes to about 100 bytes: this keeps two or three.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openraft_storage_suite_keeping_few_entries() -> Result<(), StorageError<TypeConfig>> {
    Suite::test_all(SledBuilder { recent_bytes: 256 }).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openraft_storage_suite_keeping_none() -> Result<(), StorageError<TypeConfig>> {
    Suite::test_all(SledBuilder { recent_bytes: 0 }).await
}
