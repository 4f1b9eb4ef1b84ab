//! The cursor of `events/poll` and `events/stream`: the position reached in each shard read
//! (the log index of the last change looked at), written as `e1.` and the base64url (no
//! padding) of (shard, index) pairs as LEB128 varints. It names no node: any node continues
//! it.

use std::collections::BTreeMap;

use base64::Engine;
use taskmesh_mcp::jsonrpc::ErrorObject;

use super::events::bad_argument;

const CURSOR_PREFIX: &str = "e1.";

/// The position reached in each shard read: the log index of the last change looked at.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Cursor(pub(super) BTreeMap<u32, u64>);

impl Cursor {
    /// `e1.` and the base64url (no padding) of the (shard, index) pairs as LEB128 varints.
    pub(super) fn encode(&self) -> String {
        let mut bytes = Vec::with_capacity(self.0.len() * 6);
        for (shard, index) in &self.0 {
            varint(&mut bytes, u64::from(*shard));
            varint(&mut bytes, *index);
        }
        let mut s = String::from(CURSOR_PREFIX);
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode_string(&bytes, &mut s);
        s
    }

    /// A cursor this server issued, for a cluster of `shards` shards.
    pub(super) fn decode(s: &str, shards: u32) -> Result<Self, ErrorObject> {
        let bad = || bad_argument("'cursor' is not a cursor this server issued");
        let body = s.strip_prefix(CURSOR_PREFIX).ok_or_else(bad)?;
        if body.len() > 16 * 1024 {
            return Err(bad());
        }
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(body)
            .map_err(|_| bad())?;
        let mut at = 0;
        let mut positions = BTreeMap::new();
        while at < bytes.len() {
            let shard = read_varint(&bytes, &mut at).ok_or_else(bad)?;
            let index = read_varint(&bytes, &mut at).ok_or_else(bad)?;
            let shard = u32::try_from(shard)
                .ok()
                .filter(|s| *s < shards)
                .ok_or_else(bad)?;
            if positions.insert(shard, index).is_some() {
                return Err(bad());
            }
        }
        Ok(Self(positions))
    }
}

fn varint(out: &mut Vec<u8>, mut v: u64) {
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

fn read_varint(bytes: &[u8], at: &mut usize) -> Option<u64> {
    let mut v: u64 = 0;
    for shift in (0..64).step_by(7) {
        let b = *bytes.get(*at)?;
        *at += 1;
        v |= u64::from(b & 0x7f).checked_shl(shift)?;
        if b & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_round_trips_and_a_foreign_one_is_refused() {
        let c = Cursor(BTreeMap::from([(0, 0), (3, 127), (31, 1 << 40)]));
        let s = c.encode();
        assert!(s.starts_with("e1."), "{s}");
        assert_eq!(Cursor::decode(&s, 32).unwrap(), c);
        assert_eq!(Cursor::decode("e1.", 32).unwrap(), Cursor::default());
        for bad in ["", "x1.AAAA", "e1.!!", "e1.gA"] {
            assert_eq!(Cursor::decode(bad, 32).unwrap_err().code, -32602, "{bad}");
        }
        // A shard the cluster does not have.
        assert!(Cursor::decode(&s, 16).is_err());
        // A shard named twice.
        let mut twice = Vec::new();
        for v in [1u64, 5, 1, 6] {
            varint(&mut twice, v);
        }
        let twice = format!(
            "e1.{}",
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(twice)
        );
        assert!(Cursor::decode(&twice, 32).is_err());
    }
}
