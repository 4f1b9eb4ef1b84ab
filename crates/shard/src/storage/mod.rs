//! Durable storage of a group replica (a task shard or the metadata group): the node's
//! write-ahead log, its snapshot directory and its sled database, together a [`Store`].
//!
//! - The Raft log of every group, its vote, its last committed id and its last purged id are
//!   records of the node's one write-ahead log ([`taskmesh_wal`]), keyed by the group's id:
//!   the appends of all groups share one `fdatasync`. Each entry is stored as its JSON.
//! - The state of each group lives in memory; its durable form is its latest snapshot, one
//!   file per group in the snapshot directory ([`SnapshotDir`]: `snapshots/{id}.snap`,
//!   replaced whole by each new snapshot), plus the log after it. A snapshot's bytes are the
//!   JSON of the state's snapshot: the log position and the state side by side
//!   ([`tasks::TaskSnapshot`]: `records`; [`meta::MetaSnapshot`]: `cluster`).
//! - The sled database keeps what is not a group's: the cluster identity and the sessions.
//!
//! Durability: an append is reported durable once the log has synced it; a vote is synced
//! before it is acted on. An apply changes memory only and answers the proposers once the
//! log holds the committed id durably (saved before the apply began). Opening a group
//! restores its snapshot, and openraft re-applies the committed entries after it. A snapshot
//! file is durable (synced, renamed into place, directory synced) before the log is purged up
//! to it, so the log always holds what the snapshot lacks.
//!
//! Disk follows what the groups hold, not their history: a new snapshot takes the place of
//! the old one's file, and the log's segments are deleted once the snapshots cover their
//! entries (see [`crate::ShardReplica`]'s compaction of idle groups, which lets go of the log
//! of a group that went quiet).
//!
//! Earlier versions kept each group's log in two sled trees (`shard/{id}/log`,
//! `shard/{id}/raft`), its state key by key in the state machine tree `shard/{id}/sm`, and
//! later its snapshot in that tree (`snap/meta`, `snap/data`). Opening such a group moves the
//! log into the write-ahead log ([`LogStore::open`]) and the state or snapshot into its
//! snapshot file, then drops the tree ([`StateMachineStore::open`]).

mod log_store;
pub mod meta;
mod snapshots;
mod state_machine;
pub mod tasks;

use std::io;

use serde::{de::DeserializeOwned, Serialize};
pub use taskmesh_wal::{Wal, WalConfig};

pub use log_store::LogStore;
pub use snapshots::SnapshotDir;
pub use state_machine::{ShardSnapshotBuilder, StateMachineStore};

/// Where a node keeps its groups: the write-ahead log (every group's Raft log), the snapshot
/// directory (every group's latest snapshot) and the sled database (what is not a group's,
/// and what earlier versions kept there). Cheap to clone.
#[derive(Clone, Debug)]
pub struct Store {
    db: sled::Db,
    wal: Wal,
    snapshots: SnapshotDir,
}

impl Store {
    /// The store over an opened database, log and snapshot directory.
    pub fn new(db: sled::Db, wal: Wal, snapshots: SnapshotDir) -> Self {
        Self { db, wal, snapshots }
    }

    /// The snapshot directory.
    pub fn snapshots(&self) -> &SnapshotDir {
        &self.snapshots
    }

    /// The sled database.
    pub fn db(&self) -> &sled::Db {
        &self.db
    }

    /// The write-ahead log.
    pub fn wal(&self) -> &Wal {
        &self.wal
    }

    /// Make everything written to the database and the log so far durable.
    pub async fn flush(&self) -> io::Result<()> {
        flush(&self.db).await?;
        self.wal.sync(self.wal.position()).await
    }
}

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

/// Make everything written to `db` so far durable.
///
/// Flushes go through one flusher thread per process instead of sled's `flush_async`, which can
/// leave futures un-woken when several flushes of one database race (sled 0.34). The thread
/// takes every request that queued up while the previous flush ran and serves them with one
/// flush per database (group commit): each request's writes were made before it was sent, so
/// a flush that starts after it was taken covers them. Concurrent appends of all the node's
/// groups share one fsync.
pub(crate) async fn flush(db: &sled::Db) -> io::Result<()> {
    use std::sync::mpsc;
    use std::sync::OnceLock;
    type Request = (sled::Db, tokio::sync::oneshot::Sender<io::Result<()>>);
    static FLUSHER: OnceLock<Option<mpsc::Sender<Request>>> = OnceLock::new();
    let tx = FLUSHER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Request>();
        std::thread::Builder::new()
            .name("sled-flush".into())
            .spawn(move || {
                let fsync =
                    taskmesh_metrics::metrics::histogram!(taskmesh_metrics::names::STORAGE_FSYNC);
                while let Ok(first) = rx.recv() {
                    let mut batch = vec![first];
                    batch.extend(rx.try_iter());
                    // Each database's flush result, by database (a handful at most: one per
                    // node, more only in tests that open several).
                    let mut flushed: Vec<(usize, FlushResult)> = Vec::new();
                    for (db, reply) in batch {
                        let id = db_identity(&db);
                        let result = match flushed.iter().find(|(d, _)| *d == id) {
                            Some((_, result)) => result.clone(),
                            None => {
                                let started = std::time::Instant::now();
                                let result = db.flush().map(|_| ()).map_err(|e| {
                                    let e = io::Error::from(e);
                                    (e.kind(), e.to_string())
                                });
                                fsync.record(started.elapsed().as_secs_f64());
                                flushed.push((id, result.clone()));
                                result
                            }
                        };
                        let _ = reply.send(result.map_err(|(kind, msg)| io::Error::new(kind, msg)));
                    }
                }
            })
            .ok()
            .map(|_| tx)
    });
    let Some(tx) = tx else {
        return Err(io::Error::other("could not start the flusher thread"));
    };
    let (reply, done) = tokio::sync::oneshot::channel();
    tx.send((db.clone(), reply))
        .map_err(|_| io::Error::other("the flusher thread stopped"))?;
    done.await
        .map_err(|_| io::Error::other("the flusher thread stopped"))?
}

/// A flush's outcome, shared by every request it served (`io::Error` is not `Clone`).
type FlushResult = Result<(), (io::ErrorKind, String)>;

/// Which database `db` is: the address of its default tree's shared state, the same for
/// every clone of one opened database (and distinct between open ones).
fn db_identity(db: &sled::Db) -> usize {
    let tree: &sled::Tree = db;
    std::ptr::from_ref(&**tree).cast::<()>() as usize
}

/// The groups that have a log in `store` (whose replica was opened here before and not
/// destroyed), in ascending order.
pub fn stored_groups(store: &Store) -> Vec<u32> {
    let mut ids = store.wal.groups();
    ids.extend(legacy_groups(&store.db));
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// The groups whose log is still in trees of `db`, where earlier versions kept it.
fn legacy_groups(db: &sled::Db) -> Vec<u32> {
    let mut ids: Vec<u32> = db
        .tree_names()
        .iter()
        .filter_map(|name| {
            let name = std::str::from_utf8(name).ok()?;
            let id = name.strip_prefix("shard/")?.strip_suffix("/log")?;
            id.parse().ok()
        })
        .collect();
    ids.sort_unstable();
    ids
}
