//! This node's [`Hub`] of SSE streams: each stream's ring of its last events, the pump that
//! fills it from the stream's producer, and the [`Reader`] through which a connection reads it.
//!
//! A producer reaches the hub through [`Hub::open`] (a GET stream, a `tasks/result` held open,
//! a plain call's stream), which returns the first reader; a reconnection comes back through
//! [`Hub::resume`] with the event id it last saw (parsed in [`super::EventId`]), and the
//! connection writes what the reader yields as SSE frames ([`super::frame`]).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use base64::Engine as _;
use parking_lot::Mutex;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{EventId, Out, ResultOrigin, ResumeError, StreamSettings, B64};
use crate::session::JsonMessage;

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
            st.attached_us = taskmesh_mcp::time::now_us();
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
