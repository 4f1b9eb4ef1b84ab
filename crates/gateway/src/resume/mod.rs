//! Resumable SSE streams: the resumability and redelivery rules of the 2025-11-25 transport.
//!
//! Every SSE stream the gateway serves (a GET stream, a `tasks/result` held open, a plain
//! call's stream) is an entry of this node's [`Hub`]. A pump moves what the stream's producer
//! sends into a ring of the stream's last `buffer` events, and the client's connection reads the
//! ring through a [`Reader`]. Each event's id, `NODE.STREAM.SEQ` (hexadecimal node and stream,
//! decimal position; a `tasks/result` stream adds `.ORIGIN`, the task and request it answers),
//! says which node holds the stream, so a client whose connection dropped can come back with
//! `GET` and `Last-Event-ID` to any node: the node it reaches reads the rest of the stream from
//! the node that holds it (see [`crate::relay`]).
//!
//! A stream whose connection is gone is kept for `window`; its producer is held back once
//! `buffer` events wait unread, so nothing is dropped while the client is away. When the
//! window passes without a reconnection the stream ends as if its client had gone: its
//! producer sees the stream closed. A new reader of a stream replaces the one before it, so one
//! stream is never sent on two connections.
//!
//! This file holds what travels: the settings, event ids, what a reader yields and its SSE
//! frame. The hub, its streams' rings and pumps and their readers are in `hub.rs`. A session's
//! GET stream is opened on its home node by `open_get_reader` (`get.rs`), for this node's
//! `GET /mcp` and for a peer's (`StreamService.OpenStream`).

mod get;
mod hub;

use std::time::Duration;

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use taskmesh_mcp::jsonrpc::RequestId;

use crate::session::JsonMessage;

pub(crate) use get::{open_get_reader, primes};
pub use hub::{Hub, Opening, Reader};

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::URL_SAFE_NO_PAD;

/// How streams are kept, from `[http]` (docs/configuration.md).
#[derive(Debug, Clone)]
pub struct StreamSettings {
    /// Events one stream keeps for a reconnection, and the most that may wait unread before its
    /// producer is held back (at least 1).
    pub buffer: usize,
    /// How long a stream without a connection is kept for a reconnection.
    pub window: Duration,
    /// The reconnection delay sent to clients in the SSE `retry` field.
    pub retry: Duration,
    /// After how long the server closes a connection on purpose (the client reconnects with
    /// `Last-Event-ID`); zero: never. Only for sessions whose version has priming events.
    pub max_connected: Duration,
}

/// The `tasks/result` request a stream answers, carried in its event ids: a reconnection
/// after the stream is gone (its node restarted, its window passed) attaches to the task again
/// and answers the same request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResultOrigin {
    /// The task.
    pub task_id: String,
    /// The JSON-RPC id of the client's `tasks/result` request.
    pub request_id: RequestId,
}

/// A parsed SSE event id: the node holding the stream, the stream, the event's position (0 is
/// the priming event) and, for a `tasks/result` stream, what it answers.
#[derive(Debug, Clone, PartialEq)]
pub struct EventId {
    /// The node whose hub holds the stream.
    pub node: u64,
    /// The stream, unique on that node.
    pub stream: u64,
    /// The event's position in the stream.
    pub seq: u64,
    /// The `tasks/result` request the stream answers, if it is one.
    pub origin: Option<ResultOrigin>,
}

impl EventId {
    /// Parse a `Last-Event-ID`; `None` when it is not an id this server sends.
    pub fn parse(s: &str) -> Option<Self> {
        let mut parts = s.split('.');
        let node = u64::from_str_radix(parts.next()?, 16).ok()?;
        let stream = u64::from_str_radix(parts.next()?, 16).ok()?;
        let seq = parts.next()?.parse().ok()?;
        let origin = match parts.next() {
            None => None,
            Some(o) => {
                let bytes = B64.decode(o).ok()?;
                Some(serde_json::from_slice(&bytes).ok()?)
            }
        };
        if parts.next().is_some() {
            return None;
        }
        Some(Self {
            node,
            stream,
            seq,
            origin,
        })
    }
}

/// One item a [`Reader`] yields.
#[derive(Debug, Clone)]
pub enum Out {
    /// The priming event: its id, no data.
    Prime(String),
    /// A JSON-RPC message and its event id.
    Message(String, JsonMessage),
    /// The server closes the connection on purpose: the client reconnects after `retry`.
    Closing,
}

/// Why a reconnection cannot be served from this node's hub.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ResumeError {
    /// No stream of this session has that id here (never, or no longer: its window passed).
    #[error("no such stream is held")]
    Unknown,
    /// The stream no longer holds the events after that id.
    #[error("the stream no longer holds the events after that id")]
    TooOld,
}

/// An SSE frame of one reader item, with `retry` as the reconnection delay.
pub fn frame(out: &Out, retry: Duration) -> Vec<u8> {
    let mut b = Vec::new();
    match out {
        Out::Prime(id) => {
            b.extend_from_slice(
                format!("id: {id}\nretry: {}\ndata: \n\n", retry.as_millis()).as_bytes(),
            );
        }
        Out::Message(id, m) => {
            b.extend_from_slice(format!("id: {id}\nevent: message\n").as_bytes());
            // A serialised message has no raw line breaks; one that had would be split into
            // data lines, which a client joins back.
            for line in m.json.split(|c| *c == b'\n') {
                b.extend_from_slice(b"data: ");
                b.extend_from_slice(line.strip_suffix(b"\r").unwrap_or(line));
                b.push(b'\n');
            }
            b.push(b'\n');
        }
        Out::Closing => {
            b.extend_from_slice(format!("retry: {}\n\n", retry.as_millis()).as_bytes());
        }
    }
    b
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tokio::sync::mpsc;

    use super::*;

    fn settings(buffer: usize, window_ms: u64) -> StreamSettings {
        StreamSettings {
            buffer,
            window: Duration::from_millis(window_ms),
            retry: Duration::from_millis(1000),
            max_connected: Duration::ZERO,
        }
    }

    fn msg(n: u32) -> JsonMessage {
        let json = Arc::new(format!("{{\"n\":{n}}}").into_bytes());
        JsonMessage::stamped(
            json,
            crate::delivery::Kind::Message,
            taskmesh_mcp::time::now_us(),
        )
    }

    fn opening(session: &str) -> Opening<'_> {
        Opening {
            session,
            primes: true,
            origin: None,
            presence: None,
            gone: None,
            released: None,
        }
    }

    async fn message(r: &mut Reader) -> (String, JsonMessage) {
        match r.next().await {
            Some(Out::Message(id, m)) => (id, m),
            other => panic!("expected a message, got {other:?}"),
        }
    }

    #[test]
    fn event_ids_round_trip_and_foreign_ones_are_refused() {
        let origin = ResultOrigin {
            task_id: "ab12".into(),
            request_id: RequestId::String("r.1".into()),
        };
        let id = format!(
            "2a.ff.7.{}",
            B64.encode(serde_json::to_vec(&origin).unwrap())
        );
        assert_eq!(
            EventId::parse(&id),
            Some(EventId {
                node: 42,
                stream: 255,
                seq: 7,
                origin: Some(origin)
            })
        );
        assert_eq!(EventId::parse("1.2.3").unwrap().origin, None);
        for bad in ["", "1", "1.2", "x.2.3", "1.2.-3", "1.2.3.!!", "1.2.3.e30.x"] {
            assert_eq!(EventId::parse(bad), None, "{bad}");
        }
    }

    #[tokio::test]
    async fn a_reconnection_gets_what_followed_its_last_event_and_nothing_twice() {
        let hub = Hub::new(3, settings(8, 60_000));
        let (tx, rx) = mpsc::channel(4);
        let mut r = hub.open(opening("s"), Some(msg(0)), rx);
        let Some(Out::Prime(prime)) = r.next().await else {
            panic!("no priming event")
        };
        assert!(prime.starts_with("3."), "{prime}");
        let (first, _) = message(&mut r).await;
        for n in 1..=3 {
            tx.send(msg(n)).await.unwrap();
        }
        let (second, m) = message(&mut r).await;
        assert_eq!(&**m.json, br#"{"n":1}"#);
        assert!(m.stamp.is_some(), "a first delivery is measured");
        drop(r);
        // The client saw up to the second event: the third and fourth come again, once each.
        let mut again = hub.resume("s", &EventId::parse(&second).unwrap()).unwrap();
        assert_eq!(&**message(&mut again).await.1.json, br#"{"n":2}"#);
        assert_eq!(&**message(&mut again).await.1.json, br#"{"n":3}"#);
        // A reconnection from the first event replaces this reader.
        let mut third = hub.resume("s", &EventId::parse(&first).unwrap()).unwrap();
        assert!(again.next().await.is_none());
        let m = message(&mut third).await.1;
        assert_eq!(&**m.json, br#"{"n":1}"#);
        assert!(m.stamp.is_none(), "a message sent again is not measured");
        // Another session cannot take the stream over.
        assert_eq!(
            hub.resume("t", &EventId::parse(&first).unwrap()).err(),
            Some(ResumeError::Unknown)
        );
        drop(tx);
        assert_eq!(&**message(&mut third).await.1.json, br#"{"n":2}"#);
        assert_eq!(&**message(&mut third).await.1.json, br#"{"n":3}"#);
        assert!(third.next().await.is_none(), "the producer ended");
    }

    #[tokio::test]
    async fn the_producer_waits_while_the_client_is_away_and_old_ids_are_refused() {
        let hub = Hub::new(1, settings(2, 60_000));
        let (tx, rx) = mpsc::channel(1);
        let mut r = hub.open(opening("s"), None, rx);
        let Some(Out::Prime(prime)) = r.next().await else {
            panic!("no priming event")
        };
        drop(r);
        // Two events wait unread: the third stays with the producer, none is lost.
        for n in 1..=3 {
            tx.send(msg(n)).await.unwrap();
        }
        assert!(tx.try_send(msg(4)).is_err(), "the producer is held back");
        let mut r = hub.resume("s", &EventId::parse(&prime).unwrap()).unwrap();
        let mut ids = Vec::new();
        for n in 1..=3 {
            let (id, m) = message(&mut r).await;
            assert_eq!(&**m.json, format!("{{\"n\":{n}}}").as_bytes());
            assert!(
                m.stamp.is_none(),
                "it waited for the client, not the stream"
            );
            ids.push(id);
        }
        // Two events are kept: the priming id is now too old, the first event's is not.
        assert_eq!(
            hub.resume("s", &EventId::parse(&prime).unwrap()).err(),
            Some(ResumeError::TooOld)
        );
        assert!(hub.resume("s", &EventId::parse(&ids[1]).unwrap()).is_ok());
    }

    #[tokio::test]
    async fn a_stream_left_unread_past_its_window_closes_its_producer() {
        let hub = Hub::new(1, settings(4, 0));
        let (tx, rx) = mpsc::channel(1);
        let r = hub.open(opening("s"), None, rx);
        assert_eq!(hub.len(), 1);
        drop(r);
        tx.closed().await;
        assert!(hub.is_empty());
    }
}
