//! Each group's latest snapshot, kept as one file per group in the node's snapshot directory
//! (`snapshots/{group}.snap`).
//!
//! A snapshot replaces the one before it as a whole: it is written to `{group}.snap.tmp`,
//! synced, renamed over `{group}.snap`, and the directory synced. So the file is always a
//! complete snapshot (the old one or the new one, never a mix), and the space of the one it
//! replaced is free as soon as the rename is. A `.tmp` file left by a crash is deleted when the
//! directory is opened.
//!
//! A file is a header, the snapshot's meta, its bytes and a checksum:
//!
//! | bytes | what |
//! |---|---|
//! | 8 | [`MAGIC`] |
//! | 4 | length of the meta (`u32`, little-endian) |
//! | 8 | length of the snapshot's bytes (`u64`, little-endian) |
//! | meta length | the meta (JSON of the openraft `SnapshotMeta`: last log id, membership) |
//! | bytes length | the snapshot's bytes (see [`super`]) |
//! | 4 | CRC-32 of everything before it (`u32`, little-endian) |
//!
//! Reading checks every part; a file that fails is reported as corrupt (with its path), never
//! read as an empty state.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use super::{decode, encode};
use crate::types::SnapshotMeta;

/// The first bytes of every snapshot file (the last one is the format's version).
pub const MAGIC: &[u8; 8] = b"TMSNAP\x00\x01";
const HEADER_LEN: usize = 8 + 4 + 8;
const CRC_LEN: usize = 4;
const SUFFIX: &str = ".snap";
const TEMP_SUFFIX: &str = ".snap.tmp";

/// The directory where a node keeps its groups' latest snapshots. Cheap to clone.
#[derive(Debug, Clone)]
pub struct SnapshotDir {
    dir: PathBuf,
}

fn corrupt(path: &Path, why: impl std::fmt::Display) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("snapshot file {}: {why}", path.display()),
    )
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

impl SnapshotDir {
    /// Open the directory `dir`, creating it if missing, and delete the temporary files of
    /// snapshots whose writing a crash cut short.
    pub fn open(dir: &Path) -> io::Result<Self> {
        if !dir.is_dir() {
            std::fs::create_dir_all(dir)?;
            if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
                sync_dir(parent)?;
            }
        }
        let mut removed = false;
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            if entry.file_name().to_string_lossy().ends_with(TEMP_SUFFIX) {
                std::fs::remove_file(entry.path())?;
                removed = true;
            }
        }
        if removed {
            sync_dir(dir)?;
        }
        Ok(Self {
            dir: dir.to_path_buf(),
        })
    }

    /// Where the snapshots are.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    fn file(&self, group: u32) -> PathBuf {
        self.dir.join(format!("{group}{SUFFIX}"))
    }

    /// Group `group`'s snapshot: its meta and its bytes (`None`: it has none here).
    pub fn read(&self, group: u32) -> io::Result<Option<(SnapshotMeta, Vec<u8>)>> {
        let path = self.file(group);
        let mut bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        if bytes.len() < HEADER_LEN + CRC_LEN {
            return Err(corrupt(
                &path,
                format!("{} bytes is too short", bytes.len()),
            ));
        }
        if &bytes[..8] != MAGIC {
            return Err(corrupt(&path, "not a snapshot file of this format"));
        }
        let meta_len = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes")) as u64;
        let data_len = u64::from_le_bytes(bytes[12..20].try_into().expect("8 bytes"));
        let expected = (HEADER_LEN + CRC_LEN) as u64 + meta_len + data_len;
        if expected != bytes.len() as u64 {
            return Err(corrupt(
                &path,
                format!("{} bytes where its header says {expected}", bytes.len()),
            ));
        }
        let body_end = bytes.len() - CRC_LEN;
        let crc = u32::from_le_bytes(bytes[body_end..].try_into().expect("4 bytes"));
        if crc32fast::hash(&bytes[..body_end]) != crc {
            return Err(corrupt(&path, "checksum mismatch"));
        }
        let meta_end = HEADER_LEN + meta_len as usize;
        let meta: SnapshotMeta =
            decode(&bytes[HEADER_LEN..meta_end]).map_err(|e| corrupt(&path, e))?;
        bytes.truncate(body_end);
        bytes.drain(..meta_end);
        Ok(Some((meta, bytes)))
    }

    /// Make `meta` and `data` group `group`'s snapshot, durably, in place of the one it had.
    /// Returns the file's size.
    pub fn write(&self, group: u32, meta: &SnapshotMeta, data: &[u8]) -> io::Result<u64> {
        let meta = encode(meta)?;
        let meta_len = u32::try_from(meta.len()).map_err(|_| {
            io::Error::new(io::ErrorKind::InvalidInput, "a snapshot meta over 4 GiB")
        })?;
        let mut header = Vec::with_capacity(HEADER_LEN);
        header.extend_from_slice(MAGIC);
        header.extend_from_slice(&meta_len.to_le_bytes());
        header.extend_from_slice(&(data.len() as u64).to_le_bytes());
        let mut crc = crc32fast::Hasher::new();
        for part in [&header[..], &meta, data] {
            crc.update(part);
        }
        let temp = self.dir.join(format!("{group}{TEMP_SUFFIX}"));
        let written = (|| {
            let mut file = OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .open(&temp)?;
            file.write_all(&header)?;
            file.write_all(&meta)?;
            file.write_all(data)?;
            file.write_all(&crc.finalize().to_le_bytes())?;
            file.sync_all()
        })();
        if let Err(e) = written {
            let _ = std::fs::remove_file(&temp);
            return Err(e);
        }
        std::fs::rename(&temp, self.file(group))?;
        sync_dir(&self.dir)?;
        Ok((HEADER_LEN + meta.len() + data.len() + CRC_LEN) as u64)
    }

    /// Delete group `group`'s snapshot, durably (nothing happens if it has none).
    pub fn remove(&self, group: u32) -> io::Result<()> {
        match std::fs::remove_file(self.file(group)) {
            Ok(()) => sync_dir(&self.dir),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::StoredMembership;

    fn meta(index: u64) -> SnapshotMeta {
        SnapshotMeta {
            last_log_id: Some(openraft::testing::log_id::<crate::TypeConfig>(1, 1, index)),
            last_membership: StoredMembership::default(),
        }
    }

    #[test]
    fn a_snapshot_reads_back_and_replaces_the_one_before() {
        let dir = tempfile::tempdir().expect("tempdir");
        let snaps = SnapshotDir::open(&dir.path().join("snapshots")).expect("open");
        assert!(snaps.read(1).expect("read").is_none());
        let size = snaps.write(1, &meta(5), b"first").expect("write");
        assert_eq!(std::fs::metadata(snaps.file(1)).expect("stat").len(), size);
        snaps.write(1, &meta(9), b"second, longer").expect("write");
        snaps.write(2, &meta(3), b"").expect("write");
        let (m, data) = snaps.read(1).expect("read").expect("a snapshot");
        assert_eq!(m, meta(9));
        assert_eq!(data, b"second, longer");
        assert_eq!(snaps.read(2).expect("read"), Some((meta(3), Vec::new())));
        let names: Vec<String> = std::fs::read_dir(snaps.path())
            .expect("ls")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
        snaps.remove(1).expect("remove");
        snaps.remove(1).expect("remove again");
        assert!(snaps.read(1).expect("read").is_none());
    }

    #[test]
    fn a_damaged_file_is_refused_and_a_leftover_temp_file_goes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let snaps = SnapshotDir::open(dir.path()).expect("open");
        snaps.write(4, &meta(7), b"the state").expect("write");
        let path = snaps.file(4);
        let good = std::fs::read(&path).expect("read");
        let damaged = [
            // A flipped bit in the bytes.
            {
                let mut b = good.clone();
                let at = b.len() - 6;
                b[at] ^= 1;
                b
            },
            // Cut short.
            good[..good.len() - 1].to_vec(),
            // Another format.
            {
                let mut b = good.clone();
                b[7] = 9;
                b
            },
            b"TMS".to_vec(),
        ];
        for bytes in damaged {
            std::fs::write(&path, &bytes).expect("write");
            let err = snaps.read(4).expect_err("damaged");
            assert_eq!(err.kind(), io::ErrorKind::InvalidData);
            assert!(err.to_string().contains("4.snap"), "{err}");
        }
        std::fs::write(dir.path().join("4.snap.tmp"), b"half").expect("write");
        SnapshotDir::open(dir.path()).expect("reopen");
        assert!(!dir.path().join("4.snap.tmp").exists());
    }
}
