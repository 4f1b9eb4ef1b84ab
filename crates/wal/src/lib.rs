//! One write-ahead log per node for the Raft logs of all the groups it holds.
//!
//! Every group's entries, votes, committed ids, truncations and purges are records of one
//! append-only log, a directory of segment files (`{id}.wal`, 20 digits). A write goes to the
//! end of the current segment at once (readable as soon as the call returns) and becomes
//! durable with the next sync: one thread makes every write that queued up while it was busy
//! durable with one `fdatasync` of the segment, so the appends of all groups share a sync
//! (group commit). A caller learns that its write is durable through [`Wal::sync`] or
//! [`Wal::when_durable`] with the [`Position`] the write returned.
//!
//! The log keeps in memory, per group, where each of its entries lies (segment, offset,
//! length) and its small values (vote, committed id, last purged id); entries are read back
//! from the files. When a segment reaches [`WalConfig::segment_bytes`], the next write starts
//! a new one, which begins with a checkpoint: every group's small values and where its log
//! ends, and which groups exist. Replaying from any segment on, the checkpoints put right what
//! the records of deleted segments did. A closed segment is deleted once no group has a live
//! entry in it (all purged or truncated), after the writes that made them dead are durable:
//! one group that stays idle holds on to the few segments with its entries, not to those
//! written after them. The purge, truncation or drop that kills a segment asks the sync thread
//! for that sync itself, so an idle node lets go of it without waiting for another write. The
//! active segment is closed early when nothing in it lives any more and it has grown well
//! past its checkpoint ([`IDLE_ROLL_MIN_BYTES`]): once every group has let go of its
//! entries, the log is one segment holding a checkpoint. [`Wal::held_bytes`] tells a group
//! what its entries keep on disk, for deciding when compacting its log pays.
//!
//! Opening the log reads every segment in order and replays its records. A record cut short
//! or failing its CRC at the end of the last segment is a write that did not finish before a
//! crash: the segment is cut there. Anywhere else it is corruption and opening fails. Any
//! failed write or sync stops the log: every later call fails, as the file's state after a
//! failed `fdatasync` is unknown.

mod record;
mod replay;
mod state;
mod sync;

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};

use parking_lot::{Mutex, MutexGuard};

use record::{Record, ENTRY_PREFIX_LEN, HEADER_LEN};
#[cfg(test)]
use state::segment_path;
use state::{corrupt, GroupLog, Loc, State};
use sync::{sync_loop, Waiter};

pub use state::IDLE_ROLL_MIN_BYTES;

/// The small values a group keeps besides its entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetaKey {
    /// The group's vote (must be durable before the vote is acted on).
    Vote,
    /// The group's last known committed log id.
    Committed,
}

const META_KEYS: usize = 2;

impl MetaKey {
    fn byte(self) -> u8 {
        match self {
            MetaKey::Vote => 0,
            MetaKey::Committed => 1,
        }
    }

    fn from_byte(b: u8) -> Option<Self> {
        match b {
            0 => Some(MetaKey::Vote),
            1 => Some(MetaKey::Committed),
            _ => None,
        }
    }
}

/// The log's settings.
#[derive(Debug, Clone)]
pub struct WalConfig {
    /// A segment that reached this size is closed and the next write starts a new one. Dead
    /// segments are deleted whole, so this is also the granularity of reclaiming disk.
    pub segment_bytes: u64,
}

/// The default segment size: 64 MiB.
pub const DEFAULT_SEGMENT_BYTES: u64 = 64 << 20;
/// The smallest segment size accepted.
pub const MIN_SEGMENT_BYTES: u64 = 4 << 10;
/// The largest segment size accepted (offsets within a segment are 32-bit).
pub const MAX_SEGMENT_BYTES: u64 = 1 << 30;

impl Default for WalConfig {
    fn default() -> Self {
        Self {
            segment_bytes: DEFAULT_SEGMENT_BYTES,
        }
    }
}

/// How far into the log a write went: it is durable once the log has synced up to here.
/// Positions count the bytes written since the log was opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Position(u64);

struct Shared {
    state: Arc<Mutex<State>>,
    synced: Arc<AtomicU64>,
    requests: mpsc::Sender<Waiter>,
}

/// The node's write-ahead log. Cheap to clone: clones share the log. The log's sync thread
/// ends when the last clone is dropped.
#[derive(Clone)]
pub struct Wal {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Wal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wal").finish_non_exhaustive()
    }
}

impl Wal {
    /// Open the log in `dir` (created if missing), replaying what it holds, and start its sync
    /// thread. Fails if another process has it open, if a segment is corrupt before its end,
    /// or if a group's log has a hole.
    pub fn open(dir: &Path, cfg: WalConfig) -> io::Result<Wal> {
        if !(MIN_SEGMENT_BYTES..=MAX_SEGMENT_BYTES).contains(&cfg.segment_bytes) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "segment_bytes {} is outside {MIN_SEGMENT_BYTES}..={MAX_SEGMENT_BYTES}",
                    cfg.segment_bytes
                ),
            ));
        }
        let state = Arc::new(Mutex::new(replay::load(dir, &cfg)?));
        let synced = Arc::new(AtomicU64::new(0));
        let (requests, rx) = mpsc::channel();
        {
            let state = state.clone();
            let synced = synced.clone();
            std::thread::Builder::new()
                .name("wal-sync".into())
                .spawn(move || sync_loop(&state, &synced, &rx))?;
        }
        Ok(Wal {
            shared: Arc::new(Shared {
                state,
                synced,
                requests,
            }),
        })
    }

    /// The groups that have a log here, in ascending order.
    pub fn groups(&self) -> Vec<u32> {
        let mut ids: Vec<u32> = self.shared.state.lock().groups.keys().copied().collect();
        ids.sort_unstable();
        ids
    }

    /// Whether `group` has a log here.
    pub fn contains(&self, group: u32) -> bool {
        self.shared.state.lock().groups.contains_key(&group)
    }

    /// Give `group` a log here (nothing is written if it has one).
    pub fn register(&self, group: u32) -> io::Result<Position> {
        let mut st = self.shared.state.lock();
        if st.groups.contains_key(&group) {
            return Ok(Position(st.written));
        }
        st.scratch.clear();
        Record::Register { group }.encode(&mut st.scratch)?;
        st.write_scratch()?;
        st.groups.insert(group, GroupLog::default());
        Ok(Position(st.written))
    }

    /// Delete `group`'s log (its entries' space is reclaimed with their segments).
    pub fn drop_group(&self, group: u32) -> io::Result<Position> {
        let mut st = self.shared.state.lock();
        if !st.groups.contains_key(&group) {
            return Ok(Position(st.written));
        }
        st.scratch.clear();
        Record::Drop { group }.encode(&mut st.scratch)?;
        st.write_scratch()?;
        let removed: Vec<Loc> = st
            .groups
            .remove(&group)
            .map(|log| log.locs.into_iter().collect())
            .unwrap_or_default();
        self.let_go(st, &removed)
    }

    /// Append entries, given as (index, bytes), to `group`'s log. The indexes must follow one
    /// another and the log's last one (or its last purged one); the entries are readable when
    /// this returns and durable once the log has synced up to the returned position.
    pub fn append<B: AsRef<[u8]>>(
        &self,
        group: u32,
        entries: impl IntoIterator<Item = (u64, B)>,
    ) -> io::Result<Position> {
        let mut guard = self.shared.state.lock();
        let st = &mut *guard;
        st.check()?;
        let mut next = st.group(group)?.next_index();
        let mut scratch = std::mem::take(&mut st.scratch);
        scratch.clear();
        // (index, offset of its bytes within the records, length)
        let mut placed: Vec<(u64, usize, usize)> = Vec::new();
        let encoded = entries.into_iter().try_for_each(|(index, data)| {
            if next.is_some_and(|n| n != index) {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "group {group}: appending index {index} where the log expects {}",
                        next.unwrap_or_default()
                    ),
                ));
            }
            let data = data.as_ref();
            let start = scratch.len();
            Record::Entry { group, index, data }.encode(&mut scratch)?;
            placed.push((index, start + HEADER_LEN + ENTRY_PREFIX_LEN, data.len()));
            next = Some(index + 1);
            Ok(())
        });
        st.scratch = scratch;
        encoded?;
        let Some(&(first_index, ..)) = placed.first() else {
            return Ok(Position(st.written));
        };
        let at = st.write_scratch()?;
        let segment = st.active_id;
        *st.live.entry(segment).or_default() += placed.len() as u64;
        let log = st.group(group)?;
        if log.locs.is_empty() {
            log.first = first_index;
        }
        for (_, offset, len) in placed {
            log.locs.push_back(Loc {
                segment,
                offset: (at as usize + offset) as u32,
                len: len as u32,
            });
        }
        Ok(Position(st.written))
    }

    /// Remove `group`'s entries from index `from` on.
    pub fn truncate(&self, group: u32, from: u64) -> io::Result<Position> {
        self.write_record(group, Record::Truncate { group, from }, |st| {
            st.group(group)
                .map(|g| g.truncate(from))
                .unwrap_or_default()
        })
    }

    /// Remove `group`'s entries up to index `upto` (which may lie past the last one), and
    /// keep `id`, the purged entry's id, as the log's last purged id.
    pub fn purge(&self, group: u32, upto: u64, id: &[u8]) -> io::Result<Position> {
        self.write_record(group, Record::Purge { group, upto, id }, |st| {
            st.group(group)
                .map(|g| g.purge(upto, id))
                .unwrap_or_default()
        })
    }

    /// Set one of `group`'s small values.
    pub fn set_meta(&self, group: u32, key: MetaKey, data: &[u8]) -> io::Result<Position> {
        let record = Record::Meta {
            group,
            key: key.byte(),
            data,
        };
        self.write_record(group, record, |st| {
            if let Ok(g) = st.group(group) {
                g.meta[key.byte() as usize] = Some(data.into());
            }
            Vec::new()
        })
    }

    /// Write one record about `group`, which must have a log here, then let `apply` make its
    /// change to what the log keeps in memory; it returns where the entries it removed were.
    fn write_record(
        &self,
        group: u32,
        record: Record<'_>,
        apply: impl FnOnce(&mut State) -> Vec<Loc>,
    ) -> io::Result<Position> {
        let mut st = self.shared.state.lock();
        st.group(group)?;
        st.scratch.clear();
        record.encode(&mut st.scratch)?;
        st.write_scratch()?;
        let removed = apply(&mut st);
        self.let_go(st, &removed)
    }

    /// After a write that removed entries (`removed`: where they were), with the log's lock
    /// held: count them out of their segments, close the active segment if nothing in it lives
    /// any more ([`State::roll_if_idle`]), and if a segment died, ask the sync thread for a
    /// sync, after which it deletes it. The sync thread only runs when asked, and on an idle
    /// node nothing else may ask for a long time.
    fn let_go(&self, mut st: MutexGuard<'_, State>, removed: &[Loc]) -> io::Result<Position> {
        if removed.is_empty() {
            return Ok(Position(st.written));
        }
        let died = st.forget(removed);
        let rolled = st.roll_if_idle()?;
        let at = Position(st.written);
        drop(st);
        if died || rolled {
            self.when_durable(at, |_| {});
        }
        Ok(at)
    }

    /// One of `group`'s small values.
    pub fn meta(&self, group: u32, key: MetaKey) -> Option<Vec<u8>> {
        let st = self.shared.state.lock();
        st.groups.get(&group)?.meta[key.byte() as usize]
            .as_ref()
            .map(|v| v.to_vec())
    }

    /// `group`'s last purged index and that entry's id.
    pub fn purged(&self, group: u32) -> Option<(u64, Vec<u8>)> {
        let st = self.shared.state.lock();
        let (index, id) = st.groups.get(&group)?.purged.as_ref()?;
        Some((*index, id.to_vec()))
    }

    /// The first and last index of `group`'s entries, when it has any.
    pub fn bounds(&self, group: u32) -> Option<(u64, u64)> {
        let st = self.shared.state.lock();
        let log = st.groups.get(&group)?;
        (!log.locs.is_empty()).then(|| (log.first, log.first + log.locs.len() as u64 - 1))
    }

    /// The disk that `group`'s entries from index `from` on keep from being reclaimed: the
    /// whole of every closed segment that holds one of them (a segment is deleted only once
    /// none of its entries lives), and their own bytes in the active segment. 0 when the group
    /// has none.
    pub fn held_bytes(&self, group: u32, from: u64) -> u64 {
        self.shared.state.lock().held_bytes(group, from)
    }

    /// The entries of `group` with an index in `from..to`, as (index, bytes), in order; the
    /// part of the range the log does not hold is left out.
    pub fn read(&self, group: u32, from: u64, to: u64) -> io::Result<Vec<(u64, Vec<u8>)>> {
        let (first, wanted) = {
            let st = self.shared.state.lock();
            st.check()?;
            let Some(log) = st.groups.get(&group) else {
                return Ok(Vec::new());
            };
            let start = from.max(log.first);
            let end = to.min(log.first + log.locs.len() as u64);
            if start >= end {
                return Ok(Vec::new());
            }
            let skip = (start - log.first) as usize;
            let wanted: Vec<(Loc, Arc<File>)> = log
                .locs
                .range(skip..skip + (end - start) as usize)
                .map(|loc| {
                    st.segments
                        .get(&loc.segment)
                        .map(|segment| (*loc, segment.file.clone()))
                        .ok_or_else(|| {
                            corrupt(format!(
                                "group {group}: an entry in segment {}, which is gone",
                                loc.segment
                            ))
                        })
                })
                .collect::<io::Result<_>>()?;
            (start, wanted)
        };
        // Outside the lock: the files are append-only, and a segment deleted meanwhile stays
        // readable through its open handle.
        let mut out = Vec::with_capacity(wanted.len());
        for (i, (loc, file)) in wanted.into_iter().enumerate() {
            let mut data = vec![0; loc.len as usize];
            file.read_exact_at(&mut data, u64::from(loc.offset))?;
            out.push((first + i as u64, data));
        }
        Ok(out)
    }

    /// The position of the last write so far.
    pub fn position(&self) -> Position {
        Position(self.shared.state.lock().written)
    }

    /// Wait until everything up to `upto` is durable.
    pub async fn sync(&self, upto: Position) -> io::Result<()> {
        if self.shared.synced.load(Ordering::Acquire) >= upto.0 {
            return Ok(());
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.when_durable(upto, move |r| {
            let _ = tx.send(r);
        });
        rx.await
            .map_err(|_| io::Error::other("the write-ahead log's sync thread stopped"))?
    }

    /// Call `done` (on the log's sync thread, or here if it is durable already) once
    /// everything up to `upto` is durable, or with the error that stopped the log.
    pub fn when_durable(&self, upto: Position, done: impl FnOnce(io::Result<()>) + Send + 'static) {
        if self.shared.synced.load(Ordering::Acquire) >= upto.0 {
            return done(Ok(()));
        }
        let waiter = Waiter {
            upto: upto.0,
            done: Box::new(done),
        };
        if let Err(mpsc::SendError(w)) = self.shared.requests.send(waiter) {
            (w.done)(Err(io::Error::other(
                "the write-ahead log's sync thread stopped",
            )));
        }
    }

    /// How many segment files the log has now.
    pub fn segment_count(&self) -> usize {
        self.shared.state.lock().segments.len()
    }
}

/// The sync thread: serve every request that queued up with one sync of the active segment,
#[cfg(test)]
mod tests;
