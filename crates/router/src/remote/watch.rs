//! The status-event watch: what the other nodes announce, merged into this node's stream.
//!
//! For every peer the router spawns [`watch`] (`Router::watch_peer` in `lib.rs`); it
//! follows that node's `WatchStatus` stream of status changes and session messages and
//! publishes each one as a [`HostEvent`] on the router's broadcast channel, which the gateway
//! fans out to sessions' GET streams.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use taskmesh_host::HostEvent;
use taskmesh_rpc::v1;
use tokio::sync::broadcast;

use super::Peers;
use crate::convert::view_from_pb;

/// How long the watch of a peer waits before it opens the peer's stream again after it ended
/// or could not be opened (the peer restarting, or cut off).
const WATCH_RETRY_PAUSE: Duration = Duration::from_millis(500);

/// Follow one peer's stream of status changes and session messages (reconnecting while the
/// process runs) and publish them on `out`.
/// Ends when the peer is forgotten ([`Peers::remove`]).
pub(crate) async fn watch(peers: Arc<Peers>, id: u64, out: broadcast::Sender<HostEvent>) {
    use v1::watch_status_event::Event;
    {
        loop {
            let Ok(mut client) = peers.client(id) else {
                return;
            };
            let req = v1::WatchStatusRequest {
                shard: 0,
                owner: String::new(),
                all_sessions: true,
                sessions: vec![],
            };
            if let Ok(resp) = client.watch_status(req).await {
                let mut stream = resp.into_inner();
                while let Some(Ok(ev)) = stream.next().await {
                    let at_us = ev.at_unix_us;
                    let ev = match ev.event {
                        Some(Event::Status(v)) => match view_from_pb(v) {
                            Some(task) => HostEvent::Status {
                                task,
                                session: ev.session,
                                at_us,
                            },
                            None => continue,
                        },
                        Some(Event::Message(m)) => HostEvent::SessionMessage {
                            session: m.session,
                            task_id: m.task_id,
                            request_id: (!m.request_id.is_empty()).then_some(m.request_id),
                            json: Arc::new(m.message_json),
                            at_us,
                        },
                        None => continue,
                    };
                    let _ = out.send(ev);
                }
            }
            tokio::time::sleep(WATCH_RETRY_PAUSE).await;
        }
    }
}
