//! The Raft log and vote of one shard: openraft's `RaftLogStorage` over two sled trees.

use std::fmt::Debug;
use std::io;
use std::ops::{Bound, RangeBounds};

use openraft::storage::{IOFlushed, LogState, RaftLogReader, RaftLogStorage};
use openraft::OptionalSend;

use super::{decode, encode, read_json, tree_name};
use std::marker::PhantomData;

use taskmesh_task::ShardState;

use crate::group::{Group, GroupState};
use crate::types::{Entry, LogId, Vote};

const KEY_VOTE: &[u8] = b"vote";
const KEY_COMMITTED: &[u8] = b"committed";
const KEY_LAST_PURGED: &[u8] = b"last_purged";

fn index_key(index: u64) -> [u8; 8] {
    index.to_be_bytes()
}

fn key_index(key: &[u8]) -> io::Result<u64> {
    let bytes: [u8; 8] = key.try_into().map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("log key of {} bytes, expected 8", key.len()),
        )
    })?;
    Ok(u64::from_be_bytes(bytes))
}

/// The log store of one shard. Cheap to clone: the clones share the same trees, and a clone is
/// also the log reader handed to replication.
pub struct LogStore<S: GroupState = ShardState> {
    db: sled::Db,
    log: sled::Tree,
    raft: sled::Tree,
    state: PhantomData<fn() -> S>,
}

impl<S: GroupState> Clone for LogStore<S> {
    fn clone(&self) -> Self {
        Self {
            db: self.db.clone(),
            log: self.log.clone(),
            raft: self.raft.clone(),
            state: PhantomData,
        }
    }
}

impl<S: GroupState> LogStore<S> {
    /// Open (or create) the log trees of `shard_id` in `db`.
    pub fn open(db: &sled::Db, shard_id: u32) -> io::Result<Self> {
        let store = Self {
            db: db.clone(),
            log: db.open_tree(tree_name(shard_id, "log"))?,
            raft: db.open_tree(tree_name(shard_id, "raft"))?,
            state: PhantomData,
        };
        store.drop_purged_leftovers()?;
        Ok(store)
    }

    /// A purge records the purged id first and then deletes the entries; if a crash came in
    /// between, finish the deletion so the log starts right after the purged id.
    fn drop_purged_leftovers(&self) -> io::Result<()> {
        let Some(purged) = read_json::<LogId>(&self.raft, KEY_LAST_PURGED)? else {
            return Ok(());
        };
        self.remove_up_to(purged.index)
    }

    fn remove_up_to(&self, index: u64) -> io::Result<()> {
        let mut batch = sled::Batch::default();
        for key in self.log.range(..=index_key(index)).keys() {
            batch.remove(key?);
        }
        self.log.apply_batch(batch)?;
        Ok(())
    }

    /// The first and last index present in the log (`None` when it is empty).
    pub fn index_range(&self) -> io::Result<(Option<u64>, Option<u64>)> {
        let first = match self.log.first()? {
            Some((k, _)) => Some(key_index(&k)?),
            None => None,
        };
        let last = match self.log.last()? {
            Some((k, _)) => Some(key_index(&k)?),
            None => None,
        };
        Ok((first, last))
    }

    fn write_json<T: serde::Serialize>(&self, key: &[u8], value: &T) -> io::Result<()> {
        self.raft.insert(key, encode(value)?)?;
        Ok(())
    }

    async fn flush(&self) -> io::Result<()> {
        super::flush(&self.db).await?;
        Ok(())
    }
}

impl<S: GroupState> RaftLogReader<Group<S>> for LogStore<S> {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<S::Command>>, io::Error> {
        let start = match range.start_bound() {
            Bound::Included(s) => *s,
            Bound::Excluded(s) => match s.checked_add(1) {
                Some(s) => s,
                None => return Ok(Vec::new()),
            },
            Bound::Unbounded => 0,
        };
        let end = match range.end_bound() {
            Bound::Included(e) => e.checked_add(1),
            Bound::Excluded(e) => Some(*e),
            Bound::Unbounded => None,
        };
        let iter = match end {
            Some(end) if end <= start => return Ok(Vec::new()),
            Some(end) => self.log.range(index_key(start)..index_key(end)),
            None => self.log.range(index_key(start)..),
        };
        let mut entries: Vec<Entry<S::Command>> = Vec::new();
        for item in iter {
            let (key, value) = item?;
            let entry: Entry<S::Command> = decode(&value)?;
            let index = key_index(&key)?;
            if entry.log_id.index != index {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("log key {index} holds entry {}", entry.log_id),
                ));
            }
            if let Some(prev) = entries.last() {
                if prev.log_id.index + 1 != index {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("hole in the log between {} and {index}", prev.log_id.index),
                    ));
                }
            }
            entries.push(entry);
        }
        Ok(entries)
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, io::Error> {
        read_json(&self.raft, KEY_VOTE)
    }
}

impl<S: GroupState> RaftLogStorage<Group<S>> for LogStore<S> {
    type LogReader = LogStore<S>;

    async fn get_log_state(&mut self) -> Result<LogState<Group<S>>, io::Error> {
        let last_purged: Option<LogId> = read_json(&self.raft, KEY_LAST_PURGED)?;
        let last = match self.log.last()? {
            Some((_, value)) => Some(decode::<Entry<S::Command>>(&value)?.log_id),
            None => None,
        };
        let last_log_id = match (last, &last_purged) {
            (Some(last), Some(purged)) if last.index <= purged.index => Some(*purged),
            (Some(last), _) => Some(last),
            (None, purged) => *purged,
        };
        Ok(LogState {
            last_purged_log_id: last_purged,
            last_log_id,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), io::Error> {
        self.write_json(KEY_VOTE, vote)?;
        self.flush().await
    }

    /// Written without a flush of its own: the state machine flushes after every apply, and
    /// every append flushes too, so the committed id becomes durable with them. If it is lost,
    /// openraft re-learns it (a single voter commits its whole durable log again).
    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), io::Error> {
        match committed {
            Some(c) => self.write_json(KEY_COMMITTED, &c),
            None => {
                self.raft.remove(KEY_COMMITTED)?;
                Ok(())
            }
        }
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, io::Error> {
        read_json(&self.raft, KEY_COMMITTED)
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: IOFlushed<Group<S>>,
    ) -> Result<(), io::Error>
    where
        I: IntoIterator<Item = Entry<S::Command>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        static APPEND: std::sync::LazyLock<taskmesh_metrics::metrics::Histogram> =
            std::sync::LazyLock::new(|| {
                taskmesh_metrics::metrics::histogram!(taskmesh_metrics::names::RAFT_LOG_APPEND)
            });
        let started = std::time::Instant::now();
        let mut batch = sled::Batch::default();
        for entry in entries {
            batch.insert(&index_key(entry.log_id.index)[..], encode(&entry)?);
        }
        self.log.apply_batch(batch)?;
        // The entries are readable now; they are reported persisted only once on disk.
        match self.flush().await {
            Ok(()) => {
                APPEND.record(started.elapsed().as_secs_f64());
                callback.io_completed(Ok(()))
            }
            Err(e) => callback.io_completed(Err(e)),
        }
        Ok(())
    }

    async fn truncate_after(&mut self, last_log_id: Option<LogId>) -> Result<(), io::Error> {
        let from = match last_log_id {
            Some(l) => l.index + 1,
            None => 0,
        };
        let mut batch = sled::Batch::default();
        for key in self.log.range(index_key(from)..).keys() {
            batch.remove(key?);
        }
        self.log.apply_batch(batch)?;
        self.flush().await
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), io::Error> {
        self.write_json(KEY_LAST_PURGED, &log_id)?;
        self.remove_up_to(log_id.index)?;
        self.flush().await
    }
}
