//! The requests of each session that `notifications/cancelled` may still cancel: plain
//! (non-task) `tools/call`s and `tasks/result` reads held open, by (session, request id).
//!
//! Bounded per session by `limits.max_inflight_per_session`: a request that would go beyond
//! is refused before it starts (`-32001`, naming the setting), so one session cannot grow
//! the map (and the work behind it) without limit.

use std::collections::HashMap;

use parking_lot::Mutex;
use taskmesh_mcp::jsonrpc::RequestId;
use tokio_util::sync::CancellationToken;

/// The cancellable requests in flight, per session nonce.
pub(crate) struct Inflight {
    per_session: usize,
    map: Mutex<HashMap<String, HashMap<RequestId, CancellationToken>>>,
}

impl Inflight {
    /// At most `per_session` requests in flight per session (at least 1).
    pub(crate) fn new(per_session: usize) -> Self {
        Self {
            per_session: per_session.max(1),
            map: Mutex::new(HashMap::new()),
        }
    }

    /// The requests in flight, all sessions together.
    pub(crate) fn total(&self) -> usize {
        self.map.lock().values().map(HashMap::len).sum()
    }

    /// The limit per session.
    pub(crate) fn per_session(&self) -> usize {
        self.per_session
    }

    /// Register request `id` of session `nonce`; `false` (nothing registered) when the
    /// session already has its limit in flight. A repeated id replaces the earlier entry.
    pub(crate) fn begin(&self, nonce: &str, id: &RequestId, token: CancellationToken) -> bool {
        let mut map = self.map.lock();
        let session = map.entry(nonce.to_string()).or_default();
        if session.len() >= self.per_session && !session.contains_key(id) {
            if session.is_empty() {
                map.remove(nonce);
            }
            return false;
        }
        session.insert(id.clone(), token);
        true
    }

    /// Forget request `id` of session `nonce` (it ended).
    pub(crate) fn end(&self, nonce: &str, id: &RequestId) {
        let mut map = self.map.lock();
        if let Some(session) = map.get_mut(nonce) {
            session.remove(id);
            if session.is_empty() {
                map.remove(nonce);
            }
        }
    }

    /// Cancel request `id` of session `nonce`, if it is in flight.
    pub(crate) fn cancel(&self, nonce: &str, id: &RequestId) {
        let token = {
            let mut map = self.map.lock();
            let Some(session) = map.get_mut(nonce) else {
                return;
            };
            let token = session.remove(id);
            if session.is_empty() {
                map.remove(nonce);
            }
            token
        };
        if let Some(t) = token {
            t.cancel();
        }
    }

    /// Sessions with a request in flight (for tests).
    #[cfg(test)]
    fn sessions(&self) -> usize {
        self.map.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_holds_at_most_its_limit_and_ended_requests_free_their_place() {
        let f = Inflight::new(2);
        let (a, b, c) = (
            RequestId::Number(1),
            RequestId::Number(2),
            RequestId::Number(3),
        );
        assert!(f.begin("s1", &a, CancellationToken::new()));
        assert!(f.begin("s1", &b, CancellationToken::new()));
        assert!(!f.begin("s1", &c, CancellationToken::new()));
        assert!(
            f.begin("s1", &a, CancellationToken::new()),
            "a repeated id replaces"
        );
        assert!(
            f.begin("s2", &c, CancellationToken::new()),
            "other sessions are apart"
        );
        f.end("s1", &a);
        assert!(f.begin("s1", &c, CancellationToken::new()));
        let t = CancellationToken::new();
        f.end("s2", &c);
        assert!(f.begin("s2", &a, t.clone()));
        f.cancel("s2", &a);
        assert!(t.is_cancelled());
        f.end("s1", &b);
        f.end("s1", &c);
        assert_eq!(f.sessions(), 0, "empty sessions leave no entry");
    }
}
