//! A session's GET stream opened on this node, read from its start.
//!
//! `GET /mcp` without `Last-Event-ID` ([`crate::http`]) opens one here when this node is the
//! session's home (or the home cannot be reached), and so does a peer whose client's session
//! has its home here (`StreamService.OpenStream`, [`crate::relay`]). The stream is registered
//! with the session ([`crate::session::Sessions::open_stream`]) so the session's messages reach
//! it, and read through this node's [`Hub`](super::Hub).

use std::sync::Arc;

use crate::session::{OpenedStream, SessionClaims};
use crate::Gateway;

use super::{Opening, Reader};

/// Whether a session's streams start with a priming event and may be closed on purpose: the
/// 2025-11-25 transport has both; a client of an earlier version may not expect an event
/// without data.
pub(crate) fn primes(claims: &SessionClaims) -> bool {
    claims.version.as_str() >= taskmesh_mcp::V2025_11_25
}

/// A new GET stream of the session held by this node, read from its start; `None` when the
/// session holds its limit of them, every one read.
pub(crate) fn open_get_reader(
    gw: &Arc<Gateway>,
    id: &str,
    claims: &SessionClaims,
) -> Option<Reader> {
    let opened: OpenedStream = gw.sessions.open_stream(id)?;
    // When the stream ends, the requests it carried that are still unanswered go to the task's
    // next `tasks/result` stream: the client may not have read them.
    let (gw2, tx, carried) = (gw.clone(), opened.tx, opened.carried);
    tokio::spawn(async move {
        tx.closed().await;
        drop(tx);
        let carried = std::mem::take(&mut *carried.lock());
        for (task_id, request_id) in carried {
            gw2.claim(&task_id, &request_id, true).await;
        }
    });
    let opening = Opening {
        session: id,
        primes: primes(claims),
        origin: None,
        presence: Some(opened.present),
        gone: Some(opened.gone),
        released: None,
    };
    Some(gw.hub.open(opening, None, opened.rx))
}
