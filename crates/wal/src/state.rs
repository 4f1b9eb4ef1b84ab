//! What the log knows in memory (where each group's entries lie, its small values, which
//! segments exist and how many live entries each holds) and the writes at its end: a record,
//! a new segment and its checkpoint.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::record::Record;
use crate::META_KEYS;

/// An active segment that holds no live entry any more is closed early, so that it can be
/// deleted, once it holds at least this many bytes past the checkpoint it begins with (and at
/// least as many as that checkpoint: rolling writes a new one).
pub const IDLE_ROLL_MIN_BYTES: u64 = 64 << 10;

/// Where an entry's bytes lie.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Loc {
    pub(crate) segment: u64,
    pub(crate) offset: u32,
    pub(crate) len: u32,
}

/// What the log holds for one group.
#[derive(Debug, Default)]
pub(crate) struct GroupLog {
    pub(crate) meta: [Option<Box<[u8]>>; META_KEYS],
    /// The last purged index and its entry's id.
    pub(crate) purged: Option<(u64, Box<[u8]>)>,
    /// The index of `locs[0]`.
    pub(crate) first: u64,
    pub(crate) locs: VecDeque<Loc>,
}

impl GroupLog {
    /// The index the next appended entry must have, when the log constrains it.
    pub(crate) fn next_index(&self) -> Option<u64> {
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
    pub(crate) fn truncate(&mut self, from: u64) -> Vec<Loc> {
        if self.locs.is_empty() || from >= self.first + self.locs.len() as u64 {
            return Vec::new();
        }
        let keep = from.saturating_sub(self.first) as usize;
        self.locs.drain(keep..).collect()
    }

    /// Remove the entries up to `upto` and remember it as purged; returns where they were.
    pub(crate) fn purge(&mut self, upto: u64, id: &[u8]) -> Vec<Loc> {
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

/// A segment file, and how long it is once closed.
pub(crate) struct Segment {
    pub(crate) file: Arc<File>,
    /// The file's length when it was closed (the active segment's is `State::active_len`).
    pub(crate) len: u64,
}

pub(crate) struct State {
    pub(crate) dir: PathBuf,
    pub(crate) segment_bytes: u64,
    pub(crate) segments: BTreeMap<u64, Segment>,
    pub(crate) active_id: u64,
    pub(crate) active: Arc<File>,
    pub(crate) active_len: u64,
    /// The length of the checkpoint the active segment begins with (0: none).
    pub(crate) active_checkpoint: u64,
    /// Bytes written since the log was opened: the position of the last write's end.
    pub(crate) written: u64,
    pub(crate) groups: HashMap<u32, GroupLog>,
    /// How many live entries each segment holds (absent: none).
    pub(crate) live: HashMap<u64, u64>,
    /// Why the log stopped, after a failed write or sync.
    pub(crate) failed: Option<String>,
    /// Records being written, reused between writes.
    pub(crate) scratch: Vec<u8>,
    /// Holds the directory's lock while the log is open.
    pub(crate) _lock: File,
}

/// Count bytes written to the log in the node's metrics.
pub(crate) fn count_written(bytes: u64) {
    static WRITTEN: std::sync::LazyLock<taskmesh_metrics::metrics::Counter> =
        std::sync::LazyLock::new(|| {
            taskmesh_metrics::metrics::counter!(taskmesh_metrics::names::WAL_WRITTEN_BYTES)
        });
    WRITTEN.increment(bytes);
}

pub(crate) fn segment_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("{id:020}.wal"))
}

pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

pub(crate) fn stopped(why: &str) -> io::Error {
    io::Error::other(format!(
        "the write-ahead log stopped after an earlier failure: {why}"
    ))
}

impl State {
    pub(crate) fn check(&self) -> io::Result<()> {
        match &self.failed {
            Some(why) => Err(stopped(why)),
            None => Ok(()),
        }
    }

    /// Count entries that are no longer live out of their segments. Returns whether a closed
    /// segment lost its last live entry (it can be deleted once the change is durable).
    pub(crate) fn forget(&mut self, removed: &[Loc]) -> bool {
        let mut died = false;
        for loc in removed {
            if let Some(n) = self.live.get_mut(&loc.segment) {
                *n -= 1;
                if *n == 0 {
                    self.live.remove(&loc.segment);
                    died |= loc.segment != self.active_id;
                }
            }
        }
        died
    }

    pub(crate) fn group(&mut self, group: u32) -> io::Result<&mut GroupLog> {
        self.groups.get_mut(&group).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("group {group} has no log here"),
            )
        })
    }

    /// Write the records in `self.scratch` at the end of the log (starting a new segment
    /// first if this one is full) and return the offset they start at in the active segment.
    pub(crate) fn write_scratch(&mut self) -> io::Result<u64> {
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
            if let Some(closed) = self.segments.get_mut(&self.active_id) {
                closed.len = self.active_len;
            }
            self.segments.insert(
                id,
                Segment {
                    file: file.clone(),
                    len: 0,
                },
            );
            self.active_id = id;
            self.active = file;
            self.active_len = checkpoint.len() as u64;
            self.active_checkpoint = self.active_len;
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
    pub(crate) fn dead_segments(&self) -> Vec<u64> {
        self.segments
            .range(..self.active_id)
            .map(|(id, _)| *id)
            .filter(|id| !self.live.contains_key(id))
            .collect()
    }

    /// After a change that removed entries: if the active segment holds no live entry and has
    /// grown past its checkpoint by at least [`IDLE_ROLL_MIN_BYTES`] (and by at least the
    /// checkpoint's own length), close it and start the next one. It is then dead, and goes
    /// with the next sync, instead of staying until writes fill it: an idle log keeps no more
    /// than a checkpoint. Under load the active segment always holds live entries, so this
    /// happens when the groups have let go of their logs. Returns whether it rolled.
    pub(crate) fn roll_if_idle(&mut self) -> io::Result<bool> {
        if self.live.contains_key(&self.active_id) {
            return Ok(false);
        }
        let past = self.active_len.saturating_sub(self.active_checkpoint);
        if past < IDLE_ROLL_MIN_BYTES.max(self.active_checkpoint) {
            return Ok(false);
        }
        self.roll()?;
        Ok(true)
    }

    /// The disk that `group`'s entries from index `from` on keep: the whole of every closed
    /// segment holding one of them (a segment is deleted only once none of its entries
    /// lives), and their own bytes in the active segment.
    pub(crate) fn held_bytes(&self, group: u32, from: u64) -> u64 {
        let Some(log) = self.groups.get(&group) else {
            return 0;
        };
        let skip = from.saturating_sub(log.first).min(log.locs.len() as u64) as usize;
        let mut held = 0;
        let mut last_closed = None;
        // Entries lie in the order of their segments: appends go to the active one.
        for loc in log.locs.range(skip..) {
            if loc.segment == self.active_id {
                held += u64::from(loc.len);
            } else if last_closed != Some(loc.segment) {
                last_closed = Some(loc.segment);
                held += self.segments.get(&loc.segment).map_or(0, |s| s.len);
            }
        }
        held
    }
}

/// Take the lock that keeps a second process from opening the log in `dir`.
pub(crate) fn lock_dir(dir: &Path) -> io::Result<File> {
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

pub(crate) fn corrupt(why: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, why)
}
