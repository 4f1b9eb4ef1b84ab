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
//! A session's GET stream is opened on its home node by `open_get_reader` (`get.rs`), for
//! this node's `GET /mcp` and for a peer's (`StreamService.OpenStream`).

mod get;

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use base64::Engine as _;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use taskmesh_mcp::jsonrpc::RequestId;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::session::JsonMessage;

pub(crate) use get::{open_get_reader, primes};

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

struct State {
    /// Position of `events[0]`.
    first: u64,
    events: VecDeque<JsonMessage>,
    /// The next position the current reader sends.
    read: u64,
    /// When the current reader attached, µs since the epoch: a message that came to be before
    /// then waited for a reader, or is sent again, and its delay is not the stream's (its
    /// stamp is dropped).
    attached_us: u64,
    /// The producer ended: nothing follows the last event.
    finished: bool,
    /// Generation of the current reader; a reader of another generation ends.
    reader: u64,
    attached: bool,
    /// The position at which the connection reading the stream is closed on purpose (a
    /// [`JsonMessage::close_here`] came there), once; only for a stream that primes.
    close_at: Option<u64>,
}

impl State {
    fn next(&self) -> u64 {
        self.first + self.events.len() as u64
    }
}

/// One stream of the hub.
struct Stream {
    id: u64,
    session: String,
    /// `NODE.STREAM.` of every event id.
    prefix: String,
    /// `.ORIGIN` of every event id, or empty.
    suffix: String,
    /// The session's version has priming events and on-purpose closes.
    primes: bool,
    state: Mutex<State>,
    /// Wakes the pump and the reader after every change of `state`.
    changed: watch::Sender<()>,
    /// Cancelled when the hub lets the stream go: the pump stops and drops the producer's
    /// receiver.
    gone: CancellationToken,
    /// Shared with whoever routes messages to the stream: whether a client reads it now.
    presence: Option<Arc<AtomicBool>>,
    /// The task a `tasks/result` stream answers for.
    task: Option<String>,
    /// Cancelled by the producer once it has let go of what it held (see [`Opening::released`]).
    released: Option<CancellationToken>,
}

impl Stream {
    fn event_id(&self, seq: u64) -> String {
        format!("{}{seq}{}", self.prefix, self.suffix)
    }

    fn set_attached(&self, st: &mut State, attached: bool) {
        st.attached = attached;
        if attached {
            st.attached_us = taskmesh_host::now_us();
        }
        if let Some(p) = &self.presence {
            p.store(attached, Ordering::Relaxed);
        }
    }
}

/// This node's SSE streams, by stream id.
pub struct Hub {
    node: u64,
    settings: StreamSettings,
    streams: Mutex<HashMap<u64, Arc<Stream>>>,
    /// The gateway whose streams these are, for GET streams other nodes open here.
    gateway: std::sync::OnceLock<Weak<crate::Gateway>>,
}

/// What a new stream is: its session, whether it primes, what it answers, and who learns
/// whether a client reads it.
pub struct Opening<'a> {
    /// The session the stream belongs to; only it may resume the stream.
    pub session: &'a str,
    /// Send a priming event and close on purpose after `max_connected` (2025-11-25 sessions).
    pub primes: bool,
    /// The `tasks/result` request the stream answers, if any.
    pub origin: Option<ResultOrigin>,
    /// Set while a client reads the stream.
    pub presence: Option<Arc<AtomicBool>>,
    /// Cancelled by the caller to end the stream (a new token when `None`).
    pub gone: Option<CancellationToken>,
    /// Cancelled by the producer when it has ended and let go of its task attachment, so that
    /// [`Hub::take_over`] knows when the task's requests are free again.
    pub released: Option<CancellationToken>,
}

impl Hub {
    /// The hub of node `node` (the first part of every event id).
    pub fn new(node: u64, mut settings: StreamSettings) -> Arc<Self> {
        settings.buffer = settings.buffer.max(1);
        Arc::new(Self {
            node,
            settings,
            streams: Mutex::new(HashMap::new()),
            gateway: std::sync::OnceLock::new(),
        })
    }

    /// Tie the hub to its gateway (once, when the gateway is made).
    pub(crate) fn set_gateway(&self, gw: &Arc<crate::Gateway>) {
        let _ = self.gateway.set(Arc::downgrade(gw));
    }

    /// The gateway whose streams these are, once it runs.
    pub(crate) fn gateway(&self) -> Option<Arc<crate::Gateway>> {
        self.gateway.get().and_then(Weak::upgrade)
    }

    /// The node whose streams these are.
    pub fn node(&self) -> u64 {
        self.node
    }

    /// The settings streams are kept by.
    pub fn settings(&self) -> &StreamSettings {
        &self.settings
    }

    /// Streams held now (connected or waiting for a reconnection).
    pub fn len(&self) -> usize {
        self.streams.lock().len()
    }

    /// Whether no stream is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A new stream carrying `first` (when given) and then what `rx` yields, read from its
    /// beginning by the returned reader.
    pub fn open(
        self: &Arc<Self>,
        how: Opening<'_>,
        first: Option<JsonMessage>,
        rx: mpsc::Receiver<JsonMessage>,
    ) -> Reader {
        let id = loop {
            let id = random_id();
            if !self.streams.lock().contains_key(&id) {
                break id;
            }
        };
        let suffix = match &how.origin {
            None => String::new(),
            Some(o) => match serde_json::to_vec(o) {
                Ok(json) => format!(".{}", B64.encode(json)),
                Err(_) => String::new(),
            },
        };
        let (changed, _) = watch::channel(());
        let stream = Arc::new(Stream {
            id,
            session: how.session.to_string(),
            prefix: format!("{:x}.{id:x}.", self.node),
            suffix,
            primes: how.primes,
            state: Mutex::new(State {
                first: 1,
                close_at: first
                    .as_ref()
                    .is_some_and(|m| m.close && how.primes)
                    .then_some(1),
                events: first.into_iter().filter(|m| !m.close).collect(),
                read: 1,
                attached_us: 0,
                finished: false,
                reader: 0,
                attached: false,
            }),
            changed,
            gone: how.gone.unwrap_or_default(),
            presence: how.presence,
            task: how.origin.as_ref().map(|o| o.task_id.clone()),
            released: how.released,
        });
        self.streams.lock().insert(id, stream.clone());
        tokio::spawn(pump(stream.clone(), rx, self.settings.buffer));
        self.attach(&stream, 1, how.primes)
    }

    /// A reader of the stream `id` names, from the event after it, for `session`.
    pub fn resume(self: &Arc<Self>, session: &str, id: &EventId) -> Result<Reader, ResumeError> {
        let stream = self
            .streams
            .lock()
            .get(&id.stream)
            .filter(|s| s.session == session && id.node == self.node && !s.gone.is_cancelled())
            .cloned()
            .ok_or(ResumeError::Unknown)?;
        let from = id.seq.saturating_add(1);
        {
            let st = stream.state.lock();
            if from > st.next() {
                // A position the stream never sent.
                return Err(ResumeError::Unknown);
            }
            if from < st.first {
                return Err(ResumeError::TooOld);
            }
        }
        Ok(self.attach(&stream, from, false))
    }

    /// A new `tasks/result` of `session` for `task` takes the place of the session's streams of
    /// that task that no client reads (they wait for a reconnection): they are let go, and this
    /// returns once their producers have let go of the task, so that the requests they carried
    /// go to the new stream. Waits at most `bound` for a producer.
    pub async fn take_over(&self, session: &str, task: &str, bound: Duration) {
        let idle: Vec<Arc<Stream>> = {
            let mut streams = self.streams.lock();
            let ids: Vec<u64> = streams
                .values()
                .filter(|s| {
                    s.session == session
                        && s.task.as_deref() == Some(task)
                        && !s.state.lock().attached
                })
                .map(|s| s.id)
                .collect();
            ids.iter().filter_map(|id| streams.remove(id)).collect()
        };
        for s in idle {
            s.gone.cancel();
            if let Some(released) = &s.released {
                let _ = tokio::time::timeout(bound, released.cancelled()).await;
            }
        }
    }

    /// Let the stream `id` go now (a reconnection found it unusable).
    pub fn drop_stream(&self, id: u64) {
        if let Some(s) = self.streams.lock().remove(&id) {
            s.gone.cancel();
        }
    }

    fn attach(self: &Arc<Self>, stream: &Arc<Stream>, from: u64, prime: bool) -> Reader {
        let gen = {
            let mut st = stream.state.lock();
            st.reader += 1;
            st.read = from;
            stream.set_attached(&mut st, true);
            st.reader
        };
        stream.changed.send_replace(());
        let deadline = (stream.primes && !self.settings.max_connected.is_zero())
            .then(|| Instant::now() + self.settings.max_connected);
        Reader {
            changes: stream.changed.subscribe(),
            stream: stream.clone(),
            hub: Arc::downgrade(self),
            gen,
            pos: from,
            prime,
            deadline,
            closing_sent: false,
        }
    }

    /// The stream ended by its reader going away: keep it for the window, then let it go
    /// unless a new reader came.
    fn detached(self: &Arc<Self>, stream: Arc<Stream>, gen: u64) {
        let window = self.settings.window;
        let hub = Arc::downgrade(self);
        let expire = move || {
            let unread = {
                let st = stream.state.lock();
                st.reader == gen && !st.attached
            };
            if unread {
                if let Some(hub) = hub.upgrade() {
                    hub.streams.lock().remove(&stream.id);
                }
                stream.gone.cancel();
            }
        };
        match tokio::runtime::Handle::try_current() {
            Ok(rt) if !window.is_zero() => {
                rt.spawn(async move {
                    tokio::time::sleep(window).await;
                    expire();
                });
            }
            _ => expire(),
        }
    }
}

fn random_id() -> u64 {
    let mut b = [0u8; 8];
    if getrandom::fill(&mut b).is_err() {
        // No entropy source: the time still makes ids unique enough on one node.
        return std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1);
    }
    u64::from_le_bytes(b)
}

/// Move the producer's messages into the stream's ring, holding the producer back while
/// `cap` events wait unread; ends when the producer does or the hub lets the stream go.
async fn pump(stream: Arc<Stream>, mut rx: mpsc::Receiver<JsonMessage>, cap: usize) {
    let mut changes = stream.changed.subscribe();
    loop {
        loop {
            changes.borrow_and_update();
            {
                let st = stream.state.lock();
                if st.next() - st.read < cap as u64 {
                    break;
                }
            }
            tokio::select! {
                _ = changes.changed() => {}
                _ = stream.gone.cancelled() => return,
            }
        }
        let msg = tokio::select! {
            m = rx.recv() => m,
            _ = stream.gone.cancelled() => return,
        };
        let finished = msg.is_none();
        {
            let mut st = stream.state.lock();
            match msg {
                Some(m) if m.close => {
                    if stream.primes {
                        st.close_at = Some(st.next());
                    }
                }
                Some(m) => {
                    st.events.push_back(m);
                    if st.events.len() > cap {
                        st.events.pop_front();
                        st.first += 1;
                    }
                }
                None => st.finished = true,
            }
        }
        stream.changed.send_replace(());
        if finished {
            return;
        }
    }
}

/// One connection's view of a stream: the events from a position on. Dropping it (the
/// connection ended) starts the stream's reconnection window.
pub struct Reader {
    stream: Arc<Stream>,
    hub: Weak<Hub>,
    gen: u64,
    pos: u64,
    prime: bool,
    changes: watch::Receiver<()>,
    deadline: Option<Instant>,
    closing_sent: bool,
}

impl Reader {
    /// The next item, waiting for it; `None` when the stream is over for this connection (it
    /// ended, another reader took it over, or the on-purpose close was sent). Cancel-safe.
    pub async fn next(&mut self) -> Option<Out> {
        if self.prime {
            self.prime = false;
            return Some(Out::Prime(self.stream.event_id(self.pos - 1)));
        }
        loop {
            if self.closing_sent || self.stream.gone.is_cancelled() {
                return None;
            }
            if self.deadline.is_some_and(|d| Instant::now() >= d) {
                self.closing_sent = true;
                return Some(Out::Closing);
            }
            self.changes.borrow_and_update();
            {
                let mut st = self.stream.state.lock();
                if st.reader != self.gen || self.pos < st.first {
                    return None;
                }
                if st.close_at.is_some_and(|at| self.pos >= at) {
                    st.close_at = None;
                    self.closing_sent = true;
                    return Some(Out::Closing);
                }
                if self.pos < st.next() {
                    let seq = self.pos;
                    let m = &st.events[(seq - st.first) as usize];
                    let m = match m.stamp {
                        Some(s) if s.at_us >= st.attached_us => m.clone(),
                        _ => m.unstamped(),
                    };
                    self.pos += 1;
                    st.read = self.pos;
                    drop(st);
                    self.stream.changed.send_replace(());
                    return Some(Out::Message(self.stream.event_id(seq), m));
                }
                if st.finished {
                    return None;
                }
            }
            match self.deadline {
                Some(d) => tokio::select! {
                    _ = self.changes.changed() => {}
                    _ = tokio::time::sleep_until(d) => {
                        self.closing_sent = true;
                        return Some(Out::Closing);
                    }
                    _ = self.stream.gone.cancelled() => return None,
                },
                None => tokio::select! {
                    _ = self.changes.changed() => {}
                    _ = self.stream.gone.cancelled() => return None,
                },
            }
        }
    }

    /// The stream's id on its node.
    pub fn stream_id(&self) -> u64 {
        self.stream.id
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        {
            let mut st = self.stream.state.lock();
            if st.reader != self.gen {
                return;
            }
            self.stream.set_attached(&mut st, false);
        }
        if let Some(hub) = self.hub.upgrade() {
            hub.detached(self.stream.clone(), self.gen);
        }
    }
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
            taskmesh_host::now_us(),
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
