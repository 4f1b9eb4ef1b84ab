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
//! written after them.
//!
//! Opening the log reads every segment in order and replays its records. A record cut short
//! or failing its CRC at the end of the last segment is a write that did not finish before a
//! crash: the segment is cut there. Anywhere else it is corruption and opening fails. Any
//! failed write or sync stops the log: every later call fails, as the file's state after a
//! failed `fdatasync` is unknown.

mod record;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};

use parking_lot::Mutex;

use record::{Read, Record, ENTRY_PREFIX_LEN, HEADER_LEN};

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

/// Where an entry's bytes lie.
#[derive(Debug, Clone, Copy)]
struct Loc {
    segment: u64,
    offset: u32,
    len: u32,
}

/// What the log holds for one group.
#[derive(Debug, Default)]
struct GroupLog {
    meta: [Option<Box<[u8]>>; META_KEYS],
    /// The last purged index and its entry's id.
    purged: Option<(u64, Box<[u8]>)>,
    /// The index of `locs[0]`.
    first: u64,
    locs: VecDeque<Loc>,
}

impl GroupLog {
    /// The index the next appended entry must have, when the log constrains it.
    fn next_index(&self) -> Option<u64> {
        if !self.locs.is_empty() {
            Some(self.first + self.locs.len() as u64)
        } else {
            self.purged.as_ref().map(|(p, _)| p + 1)
        }
    }

    /// The index right after the log's end: the next entry's, or where the next would go.
    fn end(&self) -> u64 {
        self.next_index().unwrap_or(0)
    }

    /// Remove the entries from `from` on; returns where they were.
    fn truncate(&mut self, from: u64) -> Vec<Loc> {
        if self.locs.is_empty() || from >= self.first + self.locs.len() as u64 {
            return Vec::new();
        }
        let keep = from.saturating_sub(self.first) as usize;
        self.locs.drain(keep..).collect()
    }

    /// Remove the entries up to `upto` and remember it as purged; returns where they were.
    fn purge(&mut self, upto: u64, id: &[u8]) -> Vec<Loc> {
        if self.purged.as_ref().is_some_and(|(p, _)| *p >= upto) {
            return Vec::new();
        }
        let drop = (upto + 1)
            .saturating_sub(self.first)
            .min(self.locs.len() as u64);
        let removed = self.locs.drain(..drop as usize).collect();
        // A log that starts past `upto + 1` keeps its first index.
        self.first = if self.locs.is_empty() {
            upto + 1
        } else {
            self.first + drop
        };
        self.purged = Some((upto, id.into()));
        removed
    }
}

struct State {
    dir: PathBuf,
    segment_bytes: u64,
    segments: BTreeMap<u64, Arc<File>>,
    active_id: u64,
    active: Arc<File>,
    active_len: u64,
    /// Bytes written since the log was opened: the position of the last write's end.
    written: u64,
    groups: HashMap<u32, GroupLog>,
    /// How many live entries each segment holds (absent: none).
    live: HashMap<u64, u64>,
    /// Why the log stopped, after a failed write or sync.
    failed: Option<String>,
    /// Records being written, reused between writes.
    scratch: Vec<u8>,
    /// Holds the directory's lock while the log is open.
    _lock: File,
}

/// Count bytes written to the log in the node's metrics.
fn count_written(bytes: u64) {
    static WRITTEN: std::sync::LazyLock<taskmesh_metrics::metrics::Counter> =
        std::sync::LazyLock::new(|| {
            taskmesh_metrics::metrics::counter!(taskmesh_metrics::names::WAL_WRITTEN_BYTES)
        });
    WRITTEN.increment(bytes);
}

fn segment_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("{id:020}.wal"))
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

fn stopped(why: &str) -> io::Error {
    io::Error::other(format!(
        "the write-ahead log stopped after an earlier failure: {why}"
    ))
}

impl State {
    fn check(&self) -> io::Result<()> {
        match &self.failed {
            Some(why) => Err(stopped(why)),
            None => Ok(()),
        }
    }

    /// Count entries that are no longer live out of their segments.
    fn forget(&mut self, removed: &[Loc]) {
        for loc in removed {
            if let Some(n) = self.live.get_mut(&loc.segment) {
                *n -= 1;
                if *n == 0 {
                    self.live.remove(&loc.segment);
                }
            }
        }
    }

    fn group(&mut self, group: u32) -> io::Result<&mut GroupLog> {
        self.groups.get_mut(&group).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("group {group} has no log here"),
            )
        })
    }

    /// Write the records in `self.scratch` at the end of the log (starting a new segment
    /// first if this one is full) and return the offset they start at in the active segment.
    fn write_scratch(&mut self) -> io::Result<u64> {
        self.check()?;
        let len = self.scratch.len() as u64;
        if self.active_len > 0 && self.active_len + len > self.segment_bytes {
            let records = std::mem::take(&mut self.scratch);
            let rolled = self.roll();
            self.scratch = records;
            rolled?;
        }
        let at = self.active_len;
        if let Err(e) = self.active.write_all_at(&self.scratch, at) {
            self.failed = Some(format!("writing segment {}: {e}", self.active_id));
            return Err(e);
        }
        self.active_len += len;
        self.written += len;
        count_written(len);
        Ok(at)
    }

    /// Close the active segment (made durable first, so that the log on disk stays a prefix
    /// of what was written) and start the next one with a checkpoint: every group, its small
    /// values and where its log ends.
    fn roll(&mut self) -> io::Result<()> {
        let result = (|| {
            self.active.sync_data()?;
            let id = self.active_id + 1;
            let file = Arc::new(
                OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create_new(true)
                    .open(segment_path(&self.dir, id))?,
            );
            sync_dir(&self.dir)?;
            let mut checkpoint = Vec::new();
            Record::CheckpointBegin.encode(&mut checkpoint)?;
            let mut groups: Vec<_> = self.groups.iter().collect();
            groups.sort_by_key(|(g, _)| **g);
            for (&group, log) in groups {
                Record::Register { group }.encode(&mut checkpoint)?;
                for (i, value) in log.meta.iter().enumerate() {
                    if let Some(data) = value {
                        Record::Meta {
                            group,
                            key: i as u8,
                            data,
                        }
                        .encode(&mut checkpoint)?;
                    }
                }
                if let Some((upto, id)) = &log.purged {
                    Record::Purge {
                        group,
                        upto: *upto,
                        id,
                    }
                    .encode(&mut checkpoint)?;
                }
                // What a deleted segment truncated stays truncated when an older one is
                // replayed before this.
                Record::Truncate {
                    group,
                    from: log.end(),
                }
                .encode(&mut checkpoint)?;
            }
            Record::CheckpointEnd.encode(&mut checkpoint)?;
            file.write_all_at(&checkpoint, 0)?;
            self.segments.insert(id, file.clone());
            self.active_id = id;
            self.active = file;
            self.active_len = checkpoint.len() as u64;
            self.written += checkpoint.len() as u64;
            count_written(checkpoint.len() as u64);
            Ok(())
        })();
        if let Err(e) = &result {
            self.failed = Some(format!("starting segment {}: {e}", self.active_id + 1));
        }
        result
    }

    /// The closed segments that hold no live entry of any group.
    fn dead_segments(&self) -> Vec<u64> {
        self.segments
            .range(..self.active_id)
            .map(|(id, _)| *id)
            .filter(|id| !self.live.contains_key(id))
            .collect()
    }
}

/// A request to learn when the log is durable up to a position.
struct Waiter {
    upto: u64,
    done: Box<dyn FnOnce(io::Result<()>) + Send>,
}

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

fn lock_dir(dir: &Path) -> io::Result<File> {
    use std::os::fd::AsRawFd;
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(dir.join("LOCK"))?;
    // SAFETY: flock on a file descriptor this function owns; it only reads the descriptor.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc != 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(
            e.kind(),
            format!(
                "the write-ahead log in {} is in use by another process ({e})",
                dir.display()
            ),
        ));
    }
    Ok(file)
}

fn corrupt(why: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, why)
}

/// A group's log as read back from the segments, before it is checked for holes.
#[derive(Default)]
struct Replayed {
    meta: [Option<Box<[u8]>>; META_KEYS],
    purged: Option<(u64, Box<[u8]>)>,
    entries: BTreeMap<u64, Loc>,
}

impl Replayed {
    fn into_log(self, group: u32) -> io::Result<GroupLog> {
        let mut entries = self.entries;
        if let Some((p, _)) = &self.purged {
            entries = entries.split_off(&(p + 1));
        }
        let first = match (entries.keys().next(), &self.purged) {
            (Some(first), _) => *first,
            (None, Some((p, _))) => p + 1,
            (None, None) => 0,
        };
        let mut locs = VecDeque::with_capacity(entries.len());
        for (i, (index, loc)) in entries.into_iter().enumerate() {
            if index != first + i as u64 {
                return Err(corrupt(format!(
                    "group {group}: a hole in the log before index {index}"
                )));
            }
            locs.push_back(loc);
        }
        Ok(GroupLog {
            meta: self.meta,
            purged: self.purged,
            first,
            locs,
        })
    }
}

/// The groups as the records read so far left them.
#[derive(Default)]
struct Replay {
    groups: HashMap<u32, Replayed>,
    /// Inside a checkpoint: the groups it named so far.
    checkpoint: Option<std::collections::HashSet<u32>>,
}

fn replay_record(replay: &mut Replay, record: Record<'_>, loc: Option<Loc>) {
    let groups = &mut replay.groups;
    match record {
        Record::CheckpointBegin => replay.checkpoint = Some(Default::default()),
        Record::CheckpointEnd => {
            // A group the checkpoint does not name had no log when it was written.
            if let Some(named) = replay.checkpoint.take() {
                groups.retain(|g, _| named.contains(g));
            }
        }
        Record::Register { group } => {
            groups.entry(group).or_default();
            if let Some(named) = &mut replay.checkpoint {
                named.insert(group);
            }
        }
        Record::Drop { group } => {
            groups.remove(&group);
        }
        Record::Entry { group, index, .. } => {
            if let (Some(g), Some(loc)) = (groups.get_mut(&group), loc) {
                // Writing an index ends the log there: what followed it was truncated.
                g.entries.split_off(&index);
                g.entries.insert(index, loc);
            }
        }
        Record::Truncate { group, from } => {
            if let Some(g) = groups.get_mut(&group) {
                g.entries.split_off(&from);
            }
        }
        Record::Purge { group, upto, id } => {
            if let Some(g) = groups.get_mut(&group) {
                if g.purged.as_ref().is_none_or(|(p, _)| *p < upto) {
                    g.entries = g.entries.split_off(&(upto + 1));
                    g.purged = Some((upto, id.into()));
                }
            }
        }
        Record::Meta { group, key, data } => {
            if let (Some(g), Some(key)) = (groups.get_mut(&group), MetaKey::from_byte(key)) {
                g.meta[key.byte() as usize] = Some(data.into());
            }
        }
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
        std::fs::create_dir_all(dir)?;
        let lock = lock_dir(dir)?;
        let mut ids: Vec<u64> = std::fs::read_dir(dir)?
            .filter_map(|e| {
                let name = e.ok()?.file_name();
                let id = name.to_str()?.strip_suffix(".wal")?;
                (id.len() == 20).then(|| id.parse().ok()).flatten()
            })
            .collect();
        ids.sort_unstable();
        let mut replay = Replay::default();
        let mut segments = BTreeMap::new();
        let mut active_len = 0;
        for (n, &id) in ids.iter().enumerate() {
            let last = n + 1 == ids.len();
            let path = segment_path(dir, id);
            let file = OpenOptions::new().read(true).write(true).open(&path)?;
            let bytes = std::fs::read(&path)?;
            let mut at = 0;
            loop {
                match record::read_at(&bytes, at) {
                    Read::Record(record, next) => {
                        let loc = match record {
                            Record::Entry { data, .. } => Some(Loc {
                                segment: id,
                                offset: (at + HEADER_LEN + ENTRY_PREFIX_LEN) as u32,
                                len: data.len() as u32,
                            }),
                            _ => None,
                        };
                        replay_record(&mut replay, record, loc);
                        at = next;
                    }
                    Read::End => break,
                    Read::Torn(why) if last => {
                        tracing::warn!(
                            segment = %path.display(),
                            offset = at,
                            why,
                            "the write-ahead log ends in a write that did not finish; cut there"
                        );
                        break;
                    }
                    Read::Torn(why) => {
                        return Err(corrupt(format!(
                            "{}: {why} at offset {at}, before the end of the log",
                            path.display()
                        )))
                    }
                }
            }
            if last && at as u64 != bytes.len() as u64 {
                file.set_len(at as u64)?;
                file.sync_all()?;
            }
            active_len = at as u64;
            segments.insert(id, Arc::new(file));
        }
        let (active_id, active) = match segments.iter().next_back() {
            Some((id, file)) => (*id, file.clone()),
            None => {
                let file = Arc::new(
                    OpenOptions::new()
                        .read(true)
                        .write(true)
                        .create_new(true)
                        .open(segment_path(dir, 1))?,
                );
                sync_dir(dir)?;
                segments.insert(1, file.clone());
                (1, file)
            }
        };
        let groups = replay
            .groups
            .into_iter()
            .map(|(g, r)| r.into_log(g).map(|log| (g, log)))
            .collect::<io::Result<HashMap<_, _>>>()?;
        let mut live: HashMap<u64, u64> = HashMap::new();
        for loc in groups.values().flat_map(|g| g.locs.iter()) {
            *live.entry(loc.segment).or_default() += 1;
        }
        let state = Arc::new(Mutex::new(State {
            dir: dir.to_path_buf(),
            segment_bytes: cfg.segment_bytes,
            segments,
            active_id,
            active,
            active_len,
            written: 0,
            groups,
            live,
            failed: None,
            scratch: Vec::new(),
            _lock: lock,
        }));
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
        if let Some(log) = st.groups.remove(&group) {
            let removed: Vec<Loc> = log.locs.into_iter().collect();
            st.forget(&removed);
        }
        Ok(Position(st.written))
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
            let removed = st
                .group(group)
                .map(|g| g.truncate(from))
                .unwrap_or_default();
            st.forget(&removed);
        })
    }

    /// Remove `group`'s entries up to index `upto` (which may lie past the last one), and
    /// keep `id`, the purged entry's id, as the log's last purged id.
    pub fn purge(&self, group: u32, upto: u64, id: &[u8]) -> io::Result<Position> {
        self.write_record(group, Record::Purge { group, upto, id }, |st| {
            let removed = st
                .group(group)
                .map(|g| g.purge(upto, id))
                .unwrap_or_default();
            st.forget(&removed);
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
        })
    }

    /// Write one record about `group`, which must have a log here, then let `apply` make its
    /// change to what the log keeps in memory.
    fn write_record(
        &self,
        group: u32,
        record: Record<'_>,
        apply: impl FnOnce(&mut State),
    ) -> io::Result<Position> {
        let mut st = self.shared.state.lock();
        st.group(group)?;
        st.scratch.clear();
        record.encode(&mut st.scratch)?;
        st.write_scratch()?;
        apply(&mut st);
        Ok(Position(st.written))
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
                        .map(|file| (*loc, file.clone()))
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
/// then delete the segments that were dead when the sync started.
fn sync_loop(state: &Mutex<State>, synced: &AtomicU64, rx: &mpsc::Receiver<Waiter>) {
    let fsync = taskmesh_metrics::metrics::histogram!(taskmesh_metrics::names::STORAGE_FSYNC);
    let segments = taskmesh_metrics::metrics::gauge!(taskmesh_metrics::names::WAL_SEGMENTS);
    segments.set(state.lock().segments.len() as f64);
    while let Ok(first) = rx.recv() {
        let mut batch = vec![first];
        batch.extend(rx.try_iter());
        let (target, file, dead, failed) = {
            let st = state.lock();
            (
                st.written,
                st.active.clone(),
                st.dead_segments(),
                st.failed.clone(),
            )
        };
        let result: Result<(), (io::ErrorKind, String)> = match failed {
            Some(why) => Err((io::ErrorKind::Other, stopped(&why).to_string())),
            None if synced.load(Ordering::Acquire) >= target => Ok(()),
            None => {
                let started = std::time::Instant::now();
                let r = file.sync_data();
                fsync.record(started.elapsed().as_secs_f64());
                r.map_err(|e| {
                    let why = format!("syncing the log: {e}");
                    state.lock().failed = Some(why.clone());
                    (e.kind(), why)
                })
            }
        };
        if result.is_ok() {
            synced.fetch_max(target, Ordering::AcqRel);
            if !dead.is_empty() {
                delete_segments(state, &dead);
            }
        }
        segments.set(state.lock().segments.len() as f64);
        for w in batch {
            debug_assert!(w.upto <= target);
            (w.done)(
                result
                    .clone()
                    .map_err(|(kind, why)| io::Error::new(kind, why)),
            );
        }
    }
}

fn delete_segments(state: &Mutex<State>, dead: &[u64]) {
    let dir = {
        let mut st = state.lock();
        for id in dead {
            st.segments.remove(id);
        }
        st.dir.clone()
    };
    for id in dead {
        let path = segment_path(&dir, *id);
        if let Err(e) = std::fs::remove_file(&path) {
            tracing::warn!(segment = %path.display(), error = %e, "could not delete a dead log segment");
        }
    }
    if let Err(e) = sync_dir(&dir) {
        tracing::warn!(dir = %dir.display(), error = %e, "could not sync the log directory");
    }
}

#[cfg(test)]
mod tests;
