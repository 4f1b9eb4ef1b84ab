//! The Raft log and vote of one group: openraft's `RaftLogStorage` over the group's part of
//! the node's write-ahead log.

use std::collections::VecDeque;
use std::fmt::Debug;
use std::io;
use std::marker::PhantomData;
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

use openraft::storage::{IOFlushed, LogState, RaftLogReader, RaftLogStorage};
use openraft::OptionalSend;
use parking_lot::Mutex;
use taskmesh_task::ShardState;
use taskmesh_wal::{MetaKey, Wal};

use super::{decode, encode, read_json, tree_name, Store};
use crate::group::{Group, GroupState};
use crate::types::{Entry, EntryPayload, LogId, Vote};

/// How many entries of a group's old log are moved into the write-ahead log per write.
const MIGRATE_BATCH: usize = 1024;

/// The log store of one group. Cheap to clone: the clones share the log and its recent
/// entries, and a clone is also the log reader handed to replication.
pub struct LogStore<S: GroupState = ShardState> {
    wal: Wal,
    group: u32,
    recent: Arc<Mutex<Recent<S>>>,
    state: PhantomData<fn() -> S>,
}

impl<S: GroupState> Clone for LogStore<S> {
    fn clone(&self) -> Self {
        Self {
            wal: self.wal.clone(),
            group: self.group,
            recent: self.recent.clone(),
            state: PhantomData,
        }
    }
}

/// The latest entries appended to a group's log, as appended: replication to the followers
/// and the apply read them back soon after, and take a copy from here instead of reading and
/// decoding the log's bytes again.
///
/// Invariants: the entries are consecutive, and the last one is the last entry of the log
/// (an append adds to both, a truncation cuts both, a purge trims both); their encoded sizes
/// sum to `bytes`, which stays at most `cap` (the oldest go first). Every change removes
/// entries from here before it changes the log and adds them after, so a reader that finds
/// an entry here finds the same entry in the log.
struct Recent<S: GroupState> {
    entries: VecDeque<(Entry<S::Command>, usize)>,
    bytes: usize,
    cap: usize,
}

impl<S: GroupState> Recent<S> {
    fn new(cap: usize) -> Self {
        Self {
            entries: VecDeque::new(),
            bytes: 0,
            cap,
        }
    }

    /// Add entries just appended to the log (each with its encoded size).
    fn extend(&mut self, appended: Vec<(Entry<S::Command>, usize)>) {
        for (entry, size) in appended {
            let follows = self
                .entries
                .back()
                .is_none_or(|(last, _)| last.log_id.index + 1 == entry.log_id.index);
            if !follows {
                self.clear();
            }
            self.bytes += size;
            self.entries.push_back((entry, size));
        }
        while self.bytes > self.cap {
            let Some((_, size)) = self.entries.pop_front() else {
                break;
            };
            self.bytes -= size;
        }
    }

    /// Drop the entries from index `from` on.
    fn truncate(&mut self, from: u64) {
        while self
            .entries
            .back()
            .is_some_and(|(e, _)| e.log_id.index >= from)
        {
            let (_, size) = self.entries.pop_back().expect("checked");
            self.bytes -= size;
        }
    }

    /// Drop the entries up to index `upto`.
    fn purge(&mut self, upto: u64) {
        while self
            .entries
            .front()
            .is_some_and(|(e, _)| e.log_id.index <= upto)
        {
            let (_, size) = self.entries.pop_front().expect("checked");
            self.bytes -= size;
        }
    }

    fn clear(&mut self) {
        self.entries.clear();
        self.entries.shrink_to_fit();
        self.bytes = 0;
    }

    /// Copies of the entries `start..end` if this holds all of the log's part of that range:
    /// `start` is one of its entries (an `end` past the log's end stops at it).
    fn get(&self, start: u64, end: u64) -> Option<Vec<Entry<S::Command>>> {
        let first = self.entries.front()?.0.log_id.index;
        let last = self.entries.back()?.0.log_id.index;
        if start < first || start > last {
            return None;
        }
        let from = (start - first) as usize;
        let to = (end.min(last + 1).max(start) - first) as usize;
        Some(
            self.entries
                .range(from..to)
                .map(|(e, _)| e.clone())
                .collect(),
        )
    }
}

impl<S: GroupState> LogStore<S> {
    /// Open (or create) the log of group `shard_id` in `store`'s write-ahead log, first moving
    /// it there from the database trees where earlier versions kept it, if it is still there.
    /// Also says whether the log was created now (the group is new to this node).
    ///
    /// The latest entries appended, up to `recent_bytes` of their encoded size, are also kept
    /// in memory for the reads that follow an append (0: none are).
    pub async fn open(
        store: &Store,
        shard_id: u32,
        recent_bytes: usize,
    ) -> io::Result<(Self, bool)> {
        migrate_from_trees(store, shard_id).await?;
        let created = !store.wal().contains(shard_id);
        store.wal().register(shard_id)?;
        let log = Self {
            wal: store.wal().clone(),
            group: shard_id,
            recent: Arc::new(Mutex::new(Recent::new(recent_bytes))),
            state: PhantomData,
        };
        Ok((log, created))
    }

    /// The first and last index present in the log (`None` when it is empty).
    pub fn index_range(&self) -> io::Result<(Option<u64>, Option<u64>)> {
        Ok(match self.wal.bounds(self.group) {
            Some((first, last)) => (Some(first), Some(last)),
            None => (None, None),
        })
    }

    /// Let go of the entries kept in memory: the group is idle, every member holds and has
    /// applied them, and whoever reads them later reads the log.
    pub fn forget_recent(&self) {
        self.recent.lock().clear();
    }

    /// How many entries are kept in memory, and their encoded size.
    pub fn recent_held(&self) -> (usize, usize) {
        let recent = self.recent.lock();
        (recent.entries.len(), recent.bytes)
    }

    fn entries(&self, start: u64, end: u64) -> io::Result<Vec<Entry<S::Command>>> {
        if let Some(entries) = self.recent.lock().get(start, end) {
            return Ok(entries);
        }
        let mut entries: Vec<Entry<S::Command>> = Vec::new();
        for (index, bytes) in self.wal.read(self.group, start, end)? {
            let entry: Entry<S::Command> = decode(&bytes)?;
            if entry.log_id.index != index {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "group {}: log index {index} holds entry {}",
                        self.group, entry.log_id
                    ),
                ));
            }
            entries.push(entry);
        }
        Ok(entries)
    }

    fn read_meta<T: serde::de::DeserializeOwned>(&self, key: MetaKey) -> io::Result<Option<T>> {
        match self.wal.meta(self.group, key) {
            Some(bytes) => decode(&bytes),
            None => Ok(None),
        }
    }
}

/// Move group `id`'s log from the database trees of earlier versions (`shard/{id}/log`,
/// `shard/{id}/raft`) into the write-ahead log, then delete the trees. Whatever the log held
/// of the group before is replaced: the trees are deleted only after the move is durable, so
/// trees that are still there mean any earlier move did not finish.
async fn migrate_from_trees(store: &Store, id: u32) -> io::Result<()> {
    const KEY_VOTE: &[u8] = b"vote";
    const KEY_COMMITTED: &[u8] = b"committed";
    const KEY_LAST_PURGED: &[u8] = b"last_purged";
    let (db, wal) = (store.db(), store.wal());
    let (log_name, raft_name) = (tree_name(id, "log"), tree_name(id, "raft"));
    let names = db.tree_names();
    if !names
        .iter()
        .any(|n| n == log_name.as_bytes() || n == raft_name.as_bytes())
    {
        return Ok(());
    }
    let log = db.open_tree(&log_name)?;
    let raft = db.open_tree(&raft_name)?;
    wal.drop_group(id)?;
    wal.register(id)?;
    if let Some(vote) = raft.get(KEY_VOTE)? {
        wal.set_meta(id, MetaKey::Vote, &vote)?;
    }
    if let Some(committed) = read_json::<LogId>(&raft, KEY_COMMITTED)? {
        wal.set_meta(id, MetaKey::Committed, &encode(&Some(committed))?)?;
    }
    let purged: Option<LogId> = read_json(&raft, KEY_LAST_PURGED)?;
    if let Some(p) = &purged {
        wal.purge(id, p.index, &encode(p)?)?;
    }
    let mut batch: Vec<(u64, sled::IVec)> = Vec::with_capacity(MIGRATE_BATCH);
    let mut moved = 0usize;
    for item in log.iter() {
        let (key, value) = item?;
        let index = u64::from_be_bytes(key.as_ref().try_into().map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("group {id}: a log key of {} bytes, expected 8", key.len()),
            )
        })?);
        if purged.is_some_and(|p| index <= p.index) {
            continue;
        }
        batch.push((index, value));
        moved += 1;
        if batch.len() >= MIGRATE_BATCH {
            wal.append(id, batch.drain(..))?;
        }
    }
    wal.append(id, batch)?;
    wal.sync(wal.position()).await?;
    db.drop_tree(log_name)?;
    db.drop_tree(raft_name)?;
    super::flush(db).await?;
    tracing::info!(
        shard = id,
        entries = moved,
        "moved the group's Raft log from the database into the write-ahead log"
    );
    Ok(())
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
            Bound::Included(e) => e.saturating_add(1),
            Bound::Excluded(e) => *e,
            Bound::Unbounded => u64::MAX,
        };
        self.entries(start, end)
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, io::Error> {
        self.read_meta(MetaKey::Vote)
    }
}

impl<S: GroupState> RaftLogStorage<Group<S>> for LogStore<S> {
    type LogReader = LogStore<S>;

    async fn get_log_state(&mut self) -> Result<LogState<Group<S>>, io::Error> {
        let last_purged: Option<LogId> = match self.wal.purged(self.group) {
            Some((_, id)) => Some(decode(&id)?),
            None => None,
        };
        let last = match self.wal.bounds(self.group) {
            Some((_, last)) => self.entries(last, last + 1)?.pop().map(|e| e.log_id),
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
        let at = self
            .wal
            .set_meta(self.group, MetaKey::Vote, &encode(vote)?)?;
        self.wal.sync(at).await
    }

    /// Written without a sync of its own: it becomes durable with the next sync of the log,
    /// and every apply waits for one before it answers (see the module documentation of
    /// [`super`]).
    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), io::Error> {
        self.wal
            .set_meta(self.group, MetaKey::Committed, &encode(&committed)?)?;
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, io::Error> {
        Ok(self
            .read_meta::<Option<LogId>>(MetaKey::Committed)?
            .flatten())
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
        let mut membership = false;
        let mut kept = Vec::new();
        let encoded = entries
            .into_iter()
            .map(|entry| {
                membership |= matches!(entry.payload, EntryPayload::Membership(_));
                let bytes = encode(&entry)?;
                let index = entry.log_id.index;
                kept.push((entry, bytes.len()));
                Ok((index, bytes))
            })
            .collect::<io::Result<Vec<_>>>()?;
        let at = self.wal.append(self.group, encoded)?;
        self.recent.lock().extend(kept);
        if membership {
            // A membership entry (a group's first entry, or a change of its members) is
            // reported durable before the next IO starts, in order with a vote that may follow
            // at once (a new group's first election): openraft disregards, with a warning, the
            // report of an append made under a vote it no longer holds. They are rare.
            let result = self.wal.sync(at).await;
            if result.is_ok() {
                APPEND.record(started.elapsed().as_secs_f64());
            }
            callback.io_completed(result);
            return Ok(());
        }
        // The entries are readable now; they are reported persisted only once on disk.
        self.wal.when_durable(at, move |result| {
            if result.is_ok() {
                APPEND.record(started.elapsed().as_secs_f64());
            }
            callback.io_completed(result);
        });
        Ok(())
    }

    /// Durable with the next sync, which every later write that depends on it waits for: the
    /// log on disk is always a prefix of what was written.
    async fn truncate_after(&mut self, last_log_id: Option<LogId>) -> Result<(), io::Error> {
        let from = match last_log_id {
            Some(l) => l.index + 1,
            None => 0,
        };
        self.recent.lock().truncate(from);
        self.wal.truncate(self.group, from)?;
        Ok(())
    }

    /// Durable with the next sync, like [`Self::truncate_after`]. The state the purged entries
    /// built is durable already: the database was flushed when the snapshot covering them was
    /// kept.
    async fn purge(&mut self, log_id: LogId) -> Result<(), io::Error> {
        self.recent.lock().purge(log_id.index);
        self.wal
            .purge(self.group, log_id.index, &encode(&log_id)?)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::testing::blank_ent;

    type Held = Recent<ShardState>;

    fn entries(from: u64, to: u64, size: usize) -> Vec<(Entry<taskmesh_task::Command>, usize)> {
        (from..to)
            .map(|i| (blank_ent::<Group<ShardState>>(1, 1, i), size))
            .collect()
    }

    fn indexes(held: &Held) -> Vec<u64> {
        held.entries.iter().map(|(e, _)| e.log_id.index).collect()
    }

    #[test]
    fn the_oldest_entries_go_first_when_the_bound_is_passed() {
        let mut held = Held::new(300);
        held.extend(entries(1, 4, 100));
        assert_eq!(indexes(&held), [1, 2, 3]);
        held.extend(entries(4, 6, 100));
        assert_eq!(indexes(&held), [3, 4, 5]);
        assert_eq!(held.bytes, 300);
        // An entry larger than the bound is not kept at all.
        held.extend(entries(6, 7, 301));
        assert!(held.entries.is_empty());
        assert_eq!(held.bytes, 0);
        // Nothing is kept with a bound of 0.
        let mut none = Held::new(0);
        none.extend(entries(1, 3, 1));
        assert!(none.get(1, 3).is_none());
    }

    #[test]
    fn reads_are_answered_only_from_a_held_start() {
        let mut held = Held::new(1000);
        held.extend(entries(5, 10, 10));
        let got = |s: u64, e: u64| {
            held.get(s, e)
                .map(|v| v.iter().map(|e| e.log_id.index).collect::<Vec<_>>())
        };
        assert_eq!(got(5, 10), Some(vec![5, 6, 7, 8, 9]));
        assert_eq!(got(7, 8), Some(vec![7]));
        assert_eq!(got(7, 7), Some(vec![]));
        assert_eq!(got(8, u64::MAX), Some(vec![8, 9]));
        // Starting before the first held entry, or past the last: the log answers.
        assert_eq!(got(4, 10), None);
        assert_eq!(got(10, 12), None);
    }

    #[test]
    fn truncation_purge_and_a_gap_trim_what_is_held() {
        let mut held = Held::new(1000);
        held.extend(entries(1, 8, 10));
        held.truncate(6);
        assert_eq!(indexes(&held), [1, 2, 3, 4, 5]);
        held.purge(2);
        assert_eq!(indexes(&held), [3, 4, 5]);
        assert_eq!(held.bytes, 30);
        // Entries that do not follow the last held one replace what is held.
        held.extend(entries(9, 11, 10));
        assert_eq!(indexes(&held), [9, 10]);
        assert_eq!(held.bytes, 20);
        held.clear();
        assert_eq!((held.entries.len(), held.bytes), (0, 0));
    }
}
