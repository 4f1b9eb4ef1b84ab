//! Test support for crates that run replicas over real storage (cargo feature `fixtures`;
//! never part of a node).

use std::path::Path;
use std::time::Duration;

use crate::storage::{SnapshotDir, Store, Wal, WalConfig};

/// How long [`open_db`] keeps trying to open a database that is still locked: the file lock of
/// a dropped handle (a stopped node, a restarted replica) may stay held for a moment after the
/// drop, while sled's background threads end. Generous, as the machine may be busy.
pub const OPEN_DB_WAIT: Duration = Duration::from_secs(60);
/// The pause between two attempts of [`open_db`], while the lock of a dropped handle is still
/// held.
pub const OPEN_DB_PAUSE: Duration = Duration::from_millis(50);

/// Open the sled database at `path`, with the settings `configure` adds, retrying while the
/// open fails: a test that drops a database and opens it again (a restart) may find the
/// file lock still held for a moment, until sled's background threads of the dropped handle
/// have ended. Panics with the error once [`OPEN_DB_WAIT`] has passed.
pub async fn open_db(path: &Path, configure: impl Fn(sled::Config) -> sled::Config) -> sled::Db {
    let deadline = tokio::time::Instant::now() + OPEN_DB_WAIT;
    loop {
        match configure(sled::Config::new().path(path)).open() {
            Ok(db) => return db,
            Err(_) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(OPEN_DB_PAUSE).await;
            }
            Err(e) => panic!("cannot open the database at {}: {e}", path.display()),
        }
    }
}

/// Open a node's storage under `dir`: the sled database in `dir/db` (with the settings
/// `configure` adds, waiting as [`open_db`] does), the write-ahead log in `dir/wal`
/// (waiting the same way while a dropped log's thread still holds its lock) and the snapshot
/// directory `dir/snapshots`.
pub async fn open_store(dir: &Path, configure: impl Fn(sled::Config) -> sled::Config) -> Store {
    open_store_with(dir, configure, WalConfig::default()).await
}

/// [`open_store`] with the write-ahead log's settings given (small segments, say, so that a
/// test sees them filled, closed and deleted).
pub async fn open_store_with(
    dir: &Path,
    configure: impl Fn(sled::Config) -> sled::Config,
    wal_config: WalConfig,
) -> Store {
    let db = open_db(&dir.join("db"), configure).await;
    let deadline = tokio::time::Instant::now() + OPEN_DB_WAIT;
    let wal = loop {
        match Wal::open(&dir.join("wal"), wal_config.clone()) {
            Ok(wal) => break wal,
            Err(_) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(OPEN_DB_PAUSE).await;
            }
            Err(e) => panic!("cannot open the log in {}: {e}", dir.display()),
        }
    };
    let snapshots = SnapshotDir::open(&dir.join("snapshots")).unwrap_or_else(|e| {
        panic!(
            "cannot open the snapshot directory in {}: {e}",
            dir.display()
        )
    });
    Store::new(db, wal, snapshots)
}
