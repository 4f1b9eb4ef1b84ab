//! The bytes of one log record and how they are read back.
//!
//! A record is a header of 8 bytes, its body's length and the CRC-32 of its body (both
//! little-endian `u32`), and the body: the kind (one byte), the group (`u32`, little-endian)
//! and what the kind carries:
//!
//! | kind | carries |
//! |---|---|
//! | `Register` | nothing: the group has a log here from now on |
//! | `Entry` | the entry's index (`u64`) and its bytes |
//! | `Truncate` | the first index removed (`u64`): the entries from it on are gone |
//! | `Purge` | the last index removed (`u64`) and that entry's id (bytes): the entries up to it are gone |
//! | `Meta` | a key (one byte) and its value (bytes): the group's vote or committed id |
//! | `Drop` | nothing: the group's log is deleted |
//! | `CheckpointBegin`, `CheckpointEnd` | nothing (group 0): between them, every group's state when a segment began; a group not in it had no log then |

/// The header's length: the body's length and its CRC-32.
pub(crate) const HEADER_LEN: usize = 8;
/// The bytes of an `Entry` body before the entry's own bytes: kind, group, index.
pub(crate) const ENTRY_PREFIX_LEN: usize = 1 + 4 + 8;
/// The largest body a record may have.
pub(crate) const MAX_BODY_LEN: usize = u32::MAX as usize;

const REGISTER: u8 = 1;
const ENTRY: u8 = 2;
const TRUNCATE: u8 = 3;
const PURGE: u8 = 4;
const META: u8 = 5;
const DROP: u8 = 6;
const CHECKPOINT_BEGIN: u8 = 7;
const CHECKPOINT_END: u8 = 8;

/// One record, borrowing its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Record<'a> {
    Register {
        group: u32,
    },
    Entry {
        group: u32,
        index: u64,
        data: &'a [u8],
    },
    Truncate {
        group: u32,
        from: u64,
    },
    Purge {
        group: u32,
        upto: u64,
        id: &'a [u8],
    },
    Meta {
        group: u32,
        key: u8,
        data: &'a [u8],
    },
    Drop {
        group: u32,
    },
    CheckpointBegin,
    CheckpointEnd,
}

impl Record<'_> {
    fn body_len(&self) -> usize {
        match self {
            Record::Register { .. }
            | Record::Drop { .. }
            | Record::CheckpointBegin
            | Record::CheckpointEnd => 5,
            Record::Entry { data, .. } => ENTRY_PREFIX_LEN + data.len(),
            Record::Truncate { .. } => 5 + 8,
            Record::Purge { id, .. } => 5 + 8 + id.len(),
            Record::Meta { data, .. } => 5 + 1 + data.len(),
        }
    }

    /// Append the record's bytes to `buf`. Fails (writing nothing) when the body is longer
    /// than [`MAX_BODY_LEN`].
    pub(crate) fn encode(&self, buf: &mut Vec<u8>) -> std::io::Result<()> {
        let body_len = self.body_len();
        if body_len > MAX_BODY_LEN {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!(
                    "a log record of {body_len} bytes is longer than the limit of {MAX_BODY_LEN}"
                ),
            ));
        }
        let start = buf.len();
        buf.reserve(HEADER_LEN + body_len);
        buf.extend_from_slice(&[0; HEADER_LEN]);
        let (kind, group) = match *self {
            Record::Register { group } => (REGISTER, group),
            Record::Entry { group, .. } => (ENTRY, group),
            Record::Truncate { group, .. } => (TRUNCATE, group),
            Record::Purge { group, .. } => (PURGE, group),
            Record::Meta { group, .. } => (META, group),
            Record::Drop { group } => (DROP, group),
            Record::CheckpointBegin => (CHECKPOINT_BEGIN, 0),
            Record::CheckpointEnd => (CHECKPOINT_END, 0),
        };
        buf.push(kind);
        buf.extend_from_slice(&group.to_le_bytes());
        match *self {
            Record::Register { .. }
            | Record::Drop { .. }
            | Record::CheckpointBegin
            | Record::CheckpointEnd => {}
            Record::Entry { index, data, .. } => {
                buf.extend_from_slice(&index.to_le_bytes());
                buf.extend_from_slice(data);
            }
            Record::Truncate { from, .. } => buf.extend_from_slice(&from.to_le_bytes()),
            Record::Purge { upto, id, .. } => {
                buf.extend_from_slice(&upto.to_le_bytes());
                buf.extend_from_slice(id);
            }
            Record::Meta { key, data, .. } => {
                buf.push(key);
                buf.extend_from_slice(data);
            }
        }
        let body = &buf[start + HEADER_LEN..];
        debug_assert_eq!(body.len(), body_len);
        let crc = crc32fast::hash(body);
        // Fits: checked against MAX_BODY_LEN above.
        let len = body_len as u32;
        buf[start..start + 4].copy_from_slice(&len.to_le_bytes());
        buf[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
        Ok(())
    }
}

/// What [`read_at`] found at an offset of a segment.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Read<'a> {
    /// A whole record, and the offset of the next one.
    Record(Record<'a>, usize),
    /// Nothing more: the end of the bytes, or a header of zeros (space the file system
    /// extended the file by, never written).
    End,
    /// A record cut short or whose bytes do not match its CRC: a write that did not finish.
    Torn(&'static str),
}

fn u64_at(body: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(body.get(at..at + 8)?.try_into().ok()?))
}

/// Read the record that starts at `at` in `bytes`.
pub(crate) fn read_at(bytes: &[u8], at: usize) -> Read<'_> {
    let Some(header) = bytes.get(at..at + HEADER_LEN) else {
        return if at >= bytes.len() {
            Read::End
        } else {
            Read::Torn("a header cut short")
        };
    };
    if header.iter().all(|b| *b == 0) {
        return Read::End;
    }
    let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
    let crc = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
    let start = at + HEADER_LEN;
    let Some(body) = bytes.get(start..start + len) else {
        return Read::Torn("a body cut short");
    };
    if crc32fast::hash(body) != crc {
        return Read::Torn("a body that does not match its CRC");
    }
    let next = start + len;
    if body.len() < 5 {
        return Read::Torn("a body too short for its kind");
    }
    let group = u32::from_le_bytes([body[1], body[2], body[3], body[4]]);
    let record = match body[0] {
        REGISTER => Record::Register { group },
        DROP => Record::Drop { group },
        CHECKPOINT_BEGIN => Record::CheckpointBegin,
        CHECKPOINT_END => Record::CheckpointEnd,
        ENTRY => match u64_at(body, 5) {
            Some(index) => Record::Entry {
                group,
                index,
                data: &body[ENTRY_PREFIX_LEN..],
            },
            None => return Read::Torn("an entry record too short"),
        },
        TRUNCATE => match u64_at(body, 5) {
            Some(from) => Record::Truncate { group, from },
            None => return Read::Torn("a truncate record too short"),
        },
        PURGE => match u64_at(body, 5) {
            Some(upto) => Record::Purge {
                group,
                upto,
                id: &body[13..],
            },
            None => return Read::Torn("a purge record too short"),
        },
        META => match body.get(5) {
            Some(key) => Record::Meta {
                group,
                key: *key,
                data: &body[6..],
            },
            None => return Read::Torn("a meta record too short"),
        },
        _ => return Read::Torn("an unknown record kind"),
    };
    Read::Record(record, next)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all() -> Vec<Record<'static>> {
        vec![
            Record::Register { group: 7 },
            Record::Entry {
                group: 7,
                index: 42,
                data: b"{\"x\":1}",
            },
            Record::Entry {
                group: u32::MAX,
                index: 0,
                data: b"",
            },
            Record::Truncate { group: 7, from: 40 },
            Record::Purge {
                group: 7,
                upto: 9,
                id: b"id",
            },
            Record::Meta {
                group: 7,
                key: 1,
                data: b"vote",
            },
            Record::Drop { group: 7 },
            Record::CheckpointBegin,
            Record::CheckpointEnd,
        ]
    }

    #[test]
    fn every_kind_reads_back_as_written() {
        let mut buf = Vec::new();
        for r in all() {
            r.encode(&mut buf).expect("encode");
        }
        let mut at = 0;
        let mut read = Vec::new();
        loop {
            match read_at(&buf, at) {
                Read::Record(r, next) => {
                    read.push(r);
                    at = next;
                }
                Read::End => break,
                Read::Torn(why) => panic!("torn: {why}"),
            }
        }
        assert_eq!(read, all());
    }

    #[test]
    fn a_cut_or_flipped_record_reads_as_torn_and_zeros_as_the_end() {
        let mut buf = Vec::new();
        Record::Entry {
            group: 1,
            index: 5,
            data: b"payload",
        }
        .encode(&mut buf)
        .expect("encode");
        for cut in 1..buf.len() {
            assert!(
                matches!(read_at(&buf[..cut], 0), Read::Torn(_)),
                "cut at {cut}"
            );
        }
        let mut flipped = buf.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 1;
        assert!(matches!(read_at(&flipped, 0), Read::Torn(_)));
        assert_eq!(read_at(&[0u8; 64], 0), Read::End);
        assert_eq!(read_at(&buf, buf.len()), Read::End);
    }
}
