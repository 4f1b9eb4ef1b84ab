//! Runs openraft's own storage conformance suite against the log store (over the write-ahead log) and the state machine (over sled).

// A test binary: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used)]

use openraft::testing::log::{StoreBuilder, Suite};
use openraft::type_config::TypeConfigExt;
use openraft::StorageError;
use taskmesh_shard::storage::{LogStore, StateMachineStore, Store, Wal, WalConfig};
use taskmesh_shard::TypeConfig;
use tempfile::TempDir;

struct SledBuilder;

impl StoreBuilder<TypeConfig, LogStore, StateMachineStore, TempDir> for SledBuilder {
    async fn build(
        &self,
    ) -> Result<(TempDir, LogStore, StateMachineStore), StorageError<TypeConfig>> {
        let fail = |e: std::io::Error| StorageError::write(TypeConfig::err_from_error(&e));
        let dir = TempDir::new().map_err(fail)?;
        let db = sled::open(dir.path().join("db")).map_err(|e| fail(e.into()))?;
        let wal = Wal::open(&dir.path().join("wal"), WalConfig::default()).map_err(fail)?;
        let store = Store::new(db, wal);
        let (log, _) = <LogStore>::open(&store, 7).await.map_err(fail)?;
        let sm = <StateMachineStore>::open(&store, 7, 16)
            .await
            .map_err(fail)?;
        Ok((dir, log, sm))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openraft_storage_suite() -> Result<(), StorageError<TypeConfig>> {
    Suite::test_all(SledBuilder).await
}
