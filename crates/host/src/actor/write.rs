//! A task actor's writes and deliveries: [`write`] brings the shard's record up to what the
//! execution knows (its outcome, else the status it is in), trying a refused write again with
//! a growing pause, and then releases what waited for that write; [`deliver`] hands a task
//! message to an attached `tasks/result` stream or to the session's GET streams (through the
//! host's events). The message handlers (`handle.rs`) call both.

use std::sync::Arc;
use std::time::Duration;

use ractor::ActorRef;
use taskmesh_mcp::ServerRequestId;
use taskmesh_task::{Applied, Command, Rejection};

use super::{AfterWrite, Carrier, Pending, State, TaskMsg};
use crate::{now_ms, now_us, HostEvent, Stamped};

/// Bring the shard's record up to what the execution knows: the outcome once the tool finished,
/// else the status the execution is in; then release what waited for that write. A refused
/// write is tried again after a pause while this node leads the shard (see the module doc);
/// a write rejected for good (terminal, newer term) or a leadership that moved stops the actor.
///
/// `retry` says whether this is the scheduled retry; any other call while a retry is scheduled
/// leaves the write to it.
pub(super) async fn write(myself: &ActorRef<TaskMsg>, st: &mut State, retry: bool) {
    if st.retry_pause.is_some() && !retry {
        return;
    }
    loop {
        let cmd = match &st.outcome {
            Some(finish) => finish.clone(),
            None if st.wanted.0 != st.recorded => Command::SetStatus {
                task_id: st.task_id.clone(),
                term: st.term,
                status: st.wanted.0,
                message: st.wanted.1.clone(),
                at_ms: now_ms(),
            },
            None => {
                for after in std::mem::take(&mut st.after_write) {
                    match after {
                        AfterWrite::Deliver {
                            id,
                            json,
                            reply,
                            augmented,
                        } => send_request(st, id, json, reply, augmented),
                        AfterWrite::Follow { client_task, reply } => {
                            super::handle::follow(myself, st, client_task, reply, Some(0));
                        }
                        AfterWrite::Reply { reply, outcome } => {
                            let _ = reply.send(outcome);
                        }
                    }
                }
                return;
            }
        };
        let Ok(shard) = st.host.shard(st.shard) else {
            tracing::info!(task_id = %st.task_id, shard = st.shard, "task actor's shard is no longer hosted here; stopping");
            st.cancel.cancel();
            myself.stop(None);
            return;
        };
        match shard.propose(cmd).await {
            Ok(Applied::Updated { record }) => {
                if st.retry_pause.take().is_some() {
                    tracing::info!(task_id = %st.task_id, shard = st.shard, "refused write recorded on a later try");
                }
                if st.outcome.is_some() {
                    crate::audit_terminal(&st.host, &record, "task reached a terminal status");
                    myself.stop(None);
                    return;
                }
                st.recorded = record.status;
            }
            Ok(other) => {
                tracing::debug!(task_id = %st.task_id, result = ?other, "write rejected; stopping");
                // A task that ended (terminal, or gone) ended for whatever the tool left running
                // elsewhere too (an upstream's task); a newer term only takes the execution over.
                if matches!(
                    other,
                    Applied::Rejected(Rejection::Terminal(_) | Rejection::NotFound)
                ) {
                    st.ended.cancel();
                }
                st.cancel.cancel();
                myself.stop(None);
                return;
            }
            Err(e) if shard.is_leader() => {
                let cfg = &st.host.inner.cfg;
                let pause = match st.retry_pause {
                    None => {
                        tracing::warn!(task_id = %st.task_id, shard = st.shard, error = %e,
                            "the shard refused the task's write; keeping it and trying again");
                        Duration::from_millis(cfg.tasks.write_retry_min_ms)
                    }
                    Some(p) => (p * 2).min(Duration::from_millis(cfg.tasks.write_retry_max_ms)),
                };
                st.retry_pause = Some(pause);
                myself.send_after(pause, || TaskMsg::Retry);
                return;
            }
            Err(e) => {
                tracing::info!(task_id = %st.task_id, shard = st.shard, error = %e,
                    "the task's write was refused and another node leads the shard; stopping (its reconciler decides by the resume policy)");
                st.cancel.cancel();
                myself.stop(None);
                return;
            }
        }
    }
}

/// The sequence number of one of the task's request ids: the order it was sent in.
pub(super) fn request_seq(id: &str) -> u64 {
    match id.parse::<ServerRequestId>() {
        Ok(ServerRequestId::Task { seq, .. } | ServerRequestId::Plain { seq, .. }) => seq,
        Err(_) => u64::MAX,
    }
}

/// Send a task message to one attached `tasks/result` stream, or, when none takes it, to the
/// session's GET streams (a request with its `request_id`, which a GET stream must claim
/// first). Returns what carries it.
pub(super) fn deliver(st: &mut State, json: Arc<Vec<u8>>, request_id: Option<&str>) -> Carrier {
    st.sinks.retain(|(_, s)| !s.is_closed());
    let at_us = now_us();
    for (number, s) in &st.sinks {
        let m = Stamped {
            json: json.clone(),
            at_us,
        };
        if s.try_send(m).is_ok() {
            return Carrier::Sink(*number);
        }
    }
    if let Some(session) = &st.session {
        let _ = st.host.inner.events.send(HostEvent::SessionMessage {
            session: session.clone(),
            task_id: st.task_id.clone(),
            request_id: request_id.map(str::to_string),
            json,
            at_us,
        });
    }
    Carrier::Unclaimed
}

/// Send request `id` (its JSON-RPC `json`) towards the client and keep it pending until its
/// answer goes to `reply`.
pub(super) fn send_request(
    st: &mut State,
    id: String,
    json: Arc<Vec<u8>>,
    reply: tokio::sync::oneshot::Sender<taskmesh_tools::ToolResult>,
    augmented: Option<(String, &'static str)>,
) {
    let carrier = deliver(st, json.clone(), Some(&id));
    st.pending.insert(
        id,
        Pending {
            json,
            reply,
            carrier,
            augmented,
        },
    );
}

/// A pending request sent again, to a stream that was not there when it was first handed out.
pub(super) fn again(json: &Arc<Vec<u8>>) -> Stamped {
    Stamped {
        json: json.clone(),
        at_us: 0,
    }
}
