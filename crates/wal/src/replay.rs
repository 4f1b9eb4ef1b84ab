//! Opening the log: every segment is read in order and its records replayed, which rebuilds
//! what the log knows in memory ([`State`]).

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::fs::OpenOptions;
use std::io;
use std::path::Path;
use std::sync::Arc;

use crate::record::{self, Read, Record, ENTRY_PREFIX_LEN, HEADER_LEN};
use crate::state::{corrupt, lock_dir, segment_path, sync_dir, GroupLog, Loc, Segment, State};
use crate::{MetaKey, WalConfig, META_KEYS};

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
    checkpoint: Option<HashSet<u32>>,
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

/// Read the log in `dir` (created if missing) and rebuild its state, holding the directory's
/// lock. Fails if another process has it open, if a segment is corrupt before its end, or if
/// a group's log has a hole.
pub(crate) fn load(dir: &Path, cfg: &WalConfig) -> io::Result<State> {
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
    let mut active_checkpoint = 0;
    for (n, &id) in ids.iter().enumerate() {
        let last = n + 1 == ids.len();
        let path = segment_path(dir, id);
        let file = OpenOptions::new().read(true).write(true).open(&path)?;
        let bytes = std::fs::read(&path)?;
        let mut at = 0;
        let mut checkpoint = 0;
        loop {
            match record::read_at(&bytes, at) {
                Read::Record(record, next) => {
                    if record == Record::CheckpointEnd {
                        checkpoint = next as u64;
                    }
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
        active_checkpoint = checkpoint;
        segments.insert(
            id,
            Segment {
                file: Arc::new(file),
                len: at as u64,
            },
        );
    }
    let (active_id, active) = match segments.iter().next_back() {
        Some((id, segment)) => (*id, segment.file.clone()),
        None => {
            let file = Arc::new(
                OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create_new(true)
                    .open(segment_path(dir, 1))?,
            );
            sync_dir(dir)?;
            segments.insert(
                1,
                Segment {
                    file: file.clone(),
                    len: 0,
                },
            );
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
    Ok(State {
        dir: dir.to_path_buf(),
        segment_bytes: cfg.segment_bytes,
        segments,
        active_id,
        active,
        active_len,
        active_checkpoint,
        written: 0,
        groups,
        live,
        failed: None,
        scratch: Vec::new(),
        _lock: lock,
    })
}
