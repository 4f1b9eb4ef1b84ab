//! The ids of the requests the server sends to a client (`elicitation/create`,
//! `sampling/createMessage`).
//!
//! A client's answer carries nothing but the id of the request it answers, so the id says
//! where the answer goes: to a plain (non-task) tool call waiting on the node that holds the
//! POST's stream, or to the task whose actor asked, on whichever node leads its shard. The
//! host's task actor and the gateway's plain calls build these ids with [`Display`]; the
//! gateway reads a client's answer with [`FromStr`].
//!
//! [`Display`]: std::fmt::Display
//! [`FromStr`]: std::str::FromStr

use std::fmt;
use std::str::FromStr;

const PLAIN_PREFIX: &str = "tm-p-";
const TASK_PREFIX: &str = "tm-";

/// The id of a request the server sent to a client, as it travels in the JSON-RPC `id`.
///
/// `tm-p-{nonce}-{seq}` is asked by a plain call; `tm-{task_id}-{seq}` by a task. The plain
/// form is recognised first, which is unambiguous because task ids are lowercase hex (never
/// starting with `p-`). The sequence number is written in decimal without leading zeros and
/// read only in that form, so an id read from a string displays as that same string.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ServerRequestId {
    /// Asked by a plain tool call of the session whose nonce is `nonce`; `seq` counts the
    /// call's requests.
    Plain {
        /// Nonce of the session (hex, from its claims).
        nonce: String,
        /// Number of the request within the call, from 1.
        seq: u64,
    },
    /// Asked by the actor of task `task_id`; `seq` counts the task's requests.
    Task {
        /// Id of the task that asks.
        task_id: String,
        /// Number of the request within the task's execution, from 1.
        seq: u64,
    },
}

/// A string that is not the id of a request this server sends.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not the id of a request this server sends")]
pub struct ParseServerRequestIdError;

impl fmt::Display for ServerRequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServerRequestId::Plain { nonce, seq } => write!(f, "{PLAIN_PREFIX}{nonce}-{seq}"),
            ServerRequestId::Task { task_id, seq } => write!(f, "{TASK_PREFIX}{task_id}-{seq}"),
        }
    }
}

impl FromStr for ServerRequestId {
    type Err = ParseServerRequestIdError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if let Some(rest) = s.strip_prefix(PLAIN_PREFIX) {
            let (nonce, seq) = rest.rsplit_once('-').ok_or(ParseServerRequestIdError)?;
            return Ok(ServerRequestId::Plain {
                nonce: nonce.to_string(),
                seq: seq_of(seq)?,
            });
        }
        let (task_id, seq) = s
            .strip_prefix(TASK_PREFIX)
            .and_then(|rest| rest.rsplit_once('-'))
            .ok_or(ParseServerRequestIdError)?;
        Ok(ServerRequestId::Task {
            task_id: task_id.to_string(),
            seq: seq_of(seq)?,
        })
    }
}

/// A sequence number as [`ServerRequestId`]'s `Display` writes it: decimal digits, no sign,
/// no leading zero.
fn seq_of(s: &str) -> Result<u64, ParseServerRequestIdError> {
    let canonical =
        !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && (s == "0" || !s.starts_with('0'));
    if !canonical {
        return Err(ParseServerRequestIdError);
    }
    s.parse().map_err(|_| ParseServerRequestIdError)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(task_id: &str, seq: u64) -> ServerRequestId {
        ServerRequestId::Task {
            task_id: task_id.into(),
            seq,
        }
    }

    fn plain(nonce: &str, seq: u64) -> ServerRequestId {
        ServerRequestId::Plain {
            nonce: nonce.into(),
            seq,
        }
    }

    #[test]
    fn displays_the_wire_forms() {
        assert_eq!(
            task("0123456789abcdef0123456789abcdef", 1).to_string(),
            "tm-0123456789abcdef0123456789abcdef-1"
        );
        assert_eq!(plain("9f86d081", 12).to_string(), "tm-p-9f86d081-12");
    }

    #[test]
    fn reads_both_forms_and_round_trips() {
        for id in [
            task("0123456789abcdef0123456789abcdef", 1),
            task("unknown", 0),
            task("with-dashes-inside", 7),
            plain("9f86d081", 12),
            plain("", 1),
            plain("a-b", u64::MAX),
        ] {
            let s = id.to_string();
            assert_eq!(s.parse::<ServerRequestId>(), Ok(id.clone()), "{s}");
            assert_eq!(s.parse::<ServerRequestId>().unwrap().to_string(), s);
        }
        assert_eq!("tm-unknown-1".parse(), Ok(task("unknown", 1)));
        assert_eq!("tm-p-n-3".parse(), Ok(plain("n", 3)));
    }

    #[test]
    fn refuses_what_the_server_never_sends() {
        for s in [
            "",
            "1",
            "tm-",
            "tm-abc",
            "tm-abc-",
            "tm-abc-x",
            "tm-abc-01",
            "tm-abc-+1",
            "tm-abc-18446744073709551616",
            "tm-p-",
            "tm-p-abc",
            "tm-p-abc-00",
            "xm-abc-1",
            "TM-abc-1",
        ] {
            assert_eq!(
                s.parse::<ServerRequestId>(),
                Err(ParseServerRequestIdError),
                "{s:?}"
            );
        }
    }
}
