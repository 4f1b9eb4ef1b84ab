//! MCP sessions.
//!
//! `Mcp-Session-Id` is minted at `initialize` as a signed token carrying the negotiated
//! protocol version, the principal it belongs to and what the client can answer, so any node
//! with the session secret can validate it without shared state. `DELETE /mcp` ends a session:
//! its id goes into the ended-session tree (durable on the node) and is answered 404 from then
//! on. A session's open GET streams are registered here so that task messages and status
//! notifications reach them. The log level a session set (`logging/setLevel`) is kept by its
//! home node, durably, until the session ends. [`Cx`] is who asks in a request and in which
//! session: [`crate::http`] makes it, dispatch and the log filter (`logging.rs`) read it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::sign::Signer;

/// Header carrying the signed session id (`Mcp-Session-Id`), in lower case. Every request
/// but `initialize` must send it; the `initialize` answer carries the new one.
pub const SESSION_HEADER: &str = "mcp-session-id";

const DOMAIN: &str = "mcp-session";

pub use crate::delivery::JsonMessage;
type StreamSender = mpsc::Sender<JsonMessage>;

/// The server requests a GET stream sent, by (task id, request id): claims its gateway gives
/// back when the stream ends, so that a `tasks/result` stream carries them instead.
pub type Carried = Arc<Mutex<Vec<(String, String)>>>;

/// A GET stream just opened.
pub struct OpenedStream {
    /// Its messages.
    pub rx: mpsc::Receiver<JsonMessage>,
    /// A sender whose `closed()` tells when the stream has ended.
    pub tx: mpsc::Sender<JsonMessage>,
    /// The requests it carried.
    pub carried: Carried,
    /// Whether a client reads it, kept by its SSE stream.
    pub present: Arc<AtomicBool>,
    /// Cancelled when the session lets the stream go (ended, or its place taken while no
    /// client read it): its SSE stream ends.
    pub gone: CancellationToken,
}

/// One open GET stream: where its messages go, the requests it carried and whether a client
/// reads it now (a stream waiting for its client to reconnect takes a message only when no
/// read stream does).
struct GetStream {
    tx: StreamSender,
    carried: Carried,
    present: Arc<AtomicBool>,
    gone: CancellationToken,
}

/// What a session id says about its session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
/// (The JSON keys are one letter: the claims travel in every request's `Mcp-Session-Id`.)
pub struct SessionClaims {
    /// Negotiated protocol version.
    #[serde(rename = "v")]
    pub version: String,
    /// Principal.
    #[serde(rename = "p")]
    pub principal: String,
    /// Client declared `elicitation`.
    #[serde(rename = "e", default)]
    pub elicitation: bool,
    /// Client declared `sampling`.
    #[serde(rename = "s", default)]
    pub sampling: bool,
    /// Client declared `tasks` (in ids minted before the claim existed: taken as declared, so
    /// that their plain calls keep running as they did, never handed off).
    #[serde(rename = "k", default = "declared")]
    pub tasks: bool,
    /// Client declared `tasks.requests.elicitation.create`: it runs elicitations as tasks.
    #[serde(rename = "te", default, skip_serializing_if = "is_false")]
    pub elicitation_tasks: bool,
    /// Client declared `tasks.requests.sampling.createMessage`.
    #[serde(rename = "ts", default, skip_serializing_if = "is_false")]
    pub sampling_tasks: bool,
    /// 128-bit nonce (hex).
    #[serde(rename = "n")]
    pub nonce: String,
    /// Issued at, ms since the epoch.
    #[serde(rename = "t")]
    pub issued_at_ms: u64,
    /// The session's home: the node that issued it, whose gateway holds all its GET streams
    /// (0, in ids issued before homes existed: each node holds its own).
    #[serde(rename = "h", default, skip_serializing_if = "is_zero")]
    pub home: u64,
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn declared() -> bool {
    true
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Who is asking, in which session.
pub struct Cx {
    /// Principal of the caller, from its bearer token (`anonymous` when authentication is off).
    /// The session must belong to it, and the tasks it creates are owned by it.
    pub principal: String,
    /// (session id, its claims); `None` only for `initialize`.
    pub session: Option<(String, SessionClaims)>,
}

impl Cx {
    pub(crate) fn version(&self) -> &str {
        self.session
            .as_ref()
            .map(|(_, c)| c.version.as_str())
            .unwrap_or(taskmesh_mcp::V2025_11_25)
    }
    pub(crate) fn tasks_enabled(&self) -> bool {
        taskmesh_mcp::version_has_tasks(self.version())
    }
    /// Whether the session's client speaks tasks: its version has them and it declared the
    /// `tasks` capability. The plain calls of a session that does not are handed off
    /// (`tasks.handoff_after_ms`), and it is offered the hand-off tools.
    pub(crate) fn speaks_tasks(&self) -> bool {
        self.tasks_enabled() && self.session.as_ref().is_some_and(|(_, c)| c.tasks)
    }
    pub(crate) fn session_id(&self) -> Option<&str> {
        self.session.as_ref().map(|(id, _)| id.as_str())
    }
    pub(crate) fn nonce(&self) -> &str {
        self.session
            .as_ref()
            .map(|(_, c)| c.nonce.as_str())
            .unwrap_or("")
    }
}

/// The sessions seen by this node: mints and checks signed session ids, records ended ones
/// and holds each session's open GET streams.
pub struct Sessions {
    signer: Signer,
    /// Session ids whose signature verified, with their claims: a later request with the same
    /// id skips the HMAC and the decoding. Emptied when full (a miss only costs one
    /// verification). The ended check is not cached: it is made on every request.
    verified: Mutex<HashMap<String, SessionClaims>>,
    verified_cap: usize,
    ended: sled::Tree,
    /// The log level of each session that set one, by nonce (its home keeps it).
    levels: sled::Tree,
    streams: Mutex<HashMap<String, Vec<GetStream>>>,
    stream_buffer: usize,
    /// Open GET streams per session, at most.
    max_streams: usize,
}

impl Sessions {
    /// `ended` is the durable tree of ended sessions, `levels` that of their log levels;
    /// `stream_buffer` is the queue length of one
    /// GET stream and `max_streams` the open GET streams allowed per session (both raised to at
    /// least 1); `verified_cap` bounds the cache of verified ids (0: no cache).
    pub fn new(
        signer: Signer,
        ended: sled::Tree,
        levels: sled::Tree,
        stream_buffer: usize,
        verified_cap: usize,
        max_streams: usize,
    ) -> Self {
        Self {
            signer,
            verified: Mutex::new(HashMap::new()),
            verified_cap,
            ended,
            levels,
            streams: Mutex::new(HashMap::new()),
            stream_buffer: stream_buffer.max(1),
            max_streams: max_streams.max(1),
        }
    }

    /// A new session id: `claims` signed with the session secret.
    pub fn mint(&self, claims: &SessionClaims) -> String {
        self.signer.sign(DOMAIN, claims)
    }

    /// The claims of a live session, or `None` for a forged, malformed or ended one.
    pub fn check(&self, id: &str) -> Option<SessionClaims> {
        let claims = self.verified_claims(id)?;
        match self.ended.contains_key(claims.nonce.as_bytes()) {
            Ok(false) => Some(claims),
            _ => None,
        }
    }

    /// The claims of a correctly signed session id (ended or not).
    fn verified_claims(&self, id: &str) -> Option<SessionClaims> {
        if self.verified_cap == 0 {
            return self.signer.verify(DOMAIN, id);
        }
        if let Some(c) = self.verified.lock().get(id) {
            return Some(c.clone());
        }
        let claims: SessionClaims = self.signer.verify(DOMAIN, id)?;
        let mut cache = self.verified.lock();
        if cache.len() >= self.verified_cap {
            cache.clear();
        }
        cache.insert(id.to_string(), claims.clone());
        Some(claims)
    }

    /// Record the log level the session set.
    pub fn set_level(
        &self,
        claims: &SessionClaims,
        level: taskmesh_mcp::LogLevel,
    ) -> Result<(), sled::Error> {
        self.levels
            .insert(claims.nonce.as_bytes(), level.as_str().as_bytes())?;
        Ok(())
    }

    /// The log level the session set here, if it did.
    pub fn level(&self, claims: &SessionClaims) -> Option<taskmesh_mcp::LogLevel> {
        let v = self.levels.get(claims.nonce.as_bytes()).ok()??;
        taskmesh_mcp::LogLevel::parse(std::str::from_utf8(&v).ok()?)
    }

    /// End a session: later requests with its id get 404; its streams close.
    pub fn end(&self, id: &str, claims: &SessionClaims) -> Result<(), sled::Error> {
        self.ended
            .insert(claims.nonce.as_bytes(), &claims.issued_at_ms.to_be_bytes())?;
        self.levels.remove(claims.nonce.as_bytes())?;
        for s in self.streams.lock().remove(id).unwrap_or_default() {
            s.gone.cancel();
        }
        self.verified.lock().remove(id);
        Ok(())
    }

    /// Open a GET stream for the session. At the session's limit of open streams (closed ones
    /// do not count), the oldest one no client reads (it waits for a reconnection) is let go
    /// to make room; `None` when every one is read.
    pub fn open_stream(&self, id: &str) -> Option<OpenedStream> {
        let mut streams = self.streams.lock();
        let list = streams.entry(id.to_string()).or_default();
        list.retain(|s| !s.tx.is_closed() && !s.gone.is_cancelled());
        if list.len() >= self.max_streams {
            let idle = list
                .iter()
                .position(|s| !s.present.load(Ordering::Relaxed))?;
            list.remove(idle).gone.cancel();
        }
        let (tx, rx) = mpsc::channel(self.stream_buffer);
        let carried = Carried::default();
        let present = Arc::new(AtomicBool::new(true));
        let gone = CancellationToken::new();
        list.push(GetStream {
            tx: tx.clone(),
            carried: carried.clone(),
            present: present.clone(),
            gone: gone.clone(),
        });
        Some(OpenedStream {
            rx,
            tx,
            carried,
            present,
            gone,
        })
    }

    /// The most GET streams a session may hold open.
    pub fn max_streams(&self) -> usize {
        self.max_streams
    }

    /// Send a message on one open GET stream of the session (the oldest read one that has room,
    /// else the oldest waiting for its client to reconnect: a message goes out on one stream
    /// only, never on all of them). Returns whether one took it.
    pub fn push(&self, id: &str, json: JsonMessage) -> bool {
        self.push_carrying(id, json, None)
    }

    /// [`Sessions::push`] for a server request `(task id, request id)` whose claim this
    /// gateway holds: the stream that sends it records it among the requests it carried.
    pub fn push_request(&self, id: &str, json: JsonMessage, request: (String, String)) -> bool {
        self.push_carrying(id, json, Some(request))
    }

    fn push_carrying(
        &self,
        id: &str,
        json: JsonMessage,
        request: Option<(String, String)>,
    ) -> bool {
        let mut streams = self.streams.lock();
        let Some(list) = streams.get_mut(id) else {
            return false;
        };
        list.retain(|s| !s.tx.is_closed());
        let present = |s: &&GetStream| s.present.load(Ordering::Relaxed);
        let taker = list
            .iter()
            .filter(present)
            .chain(list.iter().filter(|s| !present(s)))
            .find(|s| s.tx.try_send(json.clone()).is_ok());
        if let (Some(s), Some(request)) = (taker, request) {
            s.carried.lock().push(request);
        }
        let sent = taker.is_some();
        if list.is_empty() {
            streams.remove(id);
        }
        sent
    }

    /// Send a message to every session that has an open GET stream on this node, on one of
    /// its streams each (as [`Sessions::push`]). Returns how many sessions took it.
    pub fn push_all(&self, json: JsonMessage) -> usize {
        let ids: Vec<String> = self.streams.lock().keys().cloned().collect();
        ids.iter().filter(|id| self.push(id, json.clone())).count()
    }

    /// How many sessions hold an open GET stream on this node (sessions hold no other state
    /// on a node: this is what "open sessions" means here).
    pub fn with_streams(&self) -> usize {
        self.streams
            .lock()
            .values()
            .filter(|list| list.iter().any(|s| !s.tx.is_closed()))
            .count()
    }

    /// Whether the session has an open GET stream on this node.
    pub fn has_stream(&self, id: &str) -> bool {
        self.streams
            .lock()
            .get(id)
            .is_some_and(|list| list.iter().any(|s| !s.tx.is_closed()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claims(n: &str) -> SessionClaims {
        SessionClaims {
            version: "2025-11-25".into(),
            principal: "alice".into(),
            elicitation: false,
            sampling: false,
            tasks: true,
            elicitation_tasks: false,
            sampling_tasks: false,
            nonce: n.into(),
            issued_at_ms: 1,
            home: 0,
        }
    }

    /// Session ids minted before the fields had their long names still read the same.
    #[test]
    fn claims_keep_their_one_letter_json_keys() {
        let json = serde_json::to_value(claims("a1")).unwrap();
        let mut keys: Vec<&str> = json
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        keys.sort_unstable();
        assert_eq!(keys, ["e", "k", "n", "p", "s", "t", "v"]);
        // An id minted before `k` existed reads as a client that declared tasks.
        let mut old = json;
        old.as_object_mut().unwrap().remove("k");
        let read: SessionClaims = serde_json::from_value(old).unwrap();
        assert!(read.tasks);
    }

    fn sessions(cap: usize) -> Sessions {
        let db = sled::Config::new().temporary(true).open().unwrap();
        Sessions::new(
            Signer::new(b"0123456789abcdef"),
            db.open_tree("ended").unwrap(),
            db.open_tree("levels").unwrap(),
            4,
            cap,
            8,
        )
    }

    #[test]
    fn verified_ids_are_remembered_but_ending_and_forgery_still_count() {
        for cap in [0, 2] {
            let s = sessions(cap);
            let ids: Vec<String> = ["a1", "b2", "c3"]
                .iter()
                .map(|n| s.mint(&claims(n)))
                .collect();
            // Twice each, past the capacity of the cache: every answer is right.
            for _ in 0..2 {
                for (id, n) in ids.iter().zip(["a1", "b2", "c3"]) {
                    assert_eq!(s.check(id), Some(claims(n)), "cap {cap}");
                }
            }
            let mut forged = ids[0].clone();
            forged.insert(3, 'x');
            assert_eq!(s.check(&forged), None);
            let other = Signer::new(b"fedcba9876543210").sign(DOMAIN, &claims("a1"));
            assert_eq!(s.check(&other), None);
            // Ended: refused even though it was verified (and cached) before.
            s.end(&ids[1], &claims("b2")).unwrap();
            assert_eq!(s.check(&ids[1]), None);
            assert_eq!(s.check(&ids[2]), Some(claims("c3")));
        }
    }
}
