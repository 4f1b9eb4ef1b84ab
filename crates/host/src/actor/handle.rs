//! What a task actor does with each of its messages ([`TaskMsg`]): the host's (a reader
//! attaching, a GET stream claiming a request, a client's answer, stop), its tool's (a request
//! to the client, progress, a log message, an upstream task to follow, the outcome) and its own
//! (a write retry). Ractor hands each message to [`super::TaskActor`], whose `handle` runs
//! [`handle_msg`] in a boxed future; a status change it needs goes through `write.rs`.

use std::sync::Arc;
use std::time::Duration;

use ractor::{ActorProcessingErr, ActorRef};
use serde_json::{json, Map, Value};
use taskmesh_mcp::jsonrpc::{self, RequestId};
use taskmesh_mcp::{notify, ServerRequestId, META_RELATED_TASK};
use taskmesh_task::{Applied, ClientTask, Command, TaskStatus};
use taskmesh_tools::ToolResult;
use tokio::sync::oneshot;

use super::write::{again, deliver, request_seq, send_request, write};
use super::{client, finish_of, AfterWrite, Carrier, Pending, State, TaskMsg};
use crate::now_ms;

/// The status message of a task whose call an upstream server runs as its own task.
const FOLLOWING: &str = "The upstream server runs the call as a task; following it.";

/// The id of the task's next request to the client (`tm-<taskId>-<n>`).
fn next_request_id(st: &mut State) -> String {
    let id = ServerRequestId::Task {
        task_id: st.task_id.clone(),
        seq: st.next_request,
    }
    .to_string();
    st.next_request += 1;
    id
}

/// The status message of a task whose execution waits on a client task.
fn waiting_message(c: &ClientTask) -> String {
    format!(
        "Waiting for the client's task {} ({}) to end.",
        c.task_id, c.method
    )
}

/// The client's answer to one of the task's requests is in: back to `working` when nothing
/// else is asked, then the answer to whoever asked.
async fn answered(
    myself: &ActorRef<TaskMsg>,
    st: &mut State,
    reply: oneshot::Sender<ToolResult>,
    outcome: ToolResult,
) {
    let still_asking = !st.pending.is_empty()
        || st.following.is_some()
        || st
            .after_write
            .iter()
            .any(|a| matches!(a, AfterWrite::Deliver { .. } | AfterWrite::Follow { .. }));
    if !still_asking && st.wanted.0 == TaskStatus::InputRequired {
        st.wanted = (
            TaskStatus::Working,
            Some("The task is in progress.".to_string()),
        );
        if let Some(since) = st.asked_at.take() {
            taskmesh_metrics::metrics::histogram!(taskmesh_metrics::names::INPUT_REQUIRED_WAIT)
                .record(since.elapsed().as_secs_f64());
        }
    }
    st.after_write.push(AfterWrite::Reply { reply, outcome });
    write(myself, st, false).await;
}

/// Record with the task the client task its execution waits on (or, with `None`, that it no
/// longer waits on one), with the status message that says so; whether it was written. An
/// execution that is superseded stops; a write the shard cannot make now is left out (a
/// failover then applies the tool's resume policy without it).
async fn record_client_task(
    myself: &ActorRef<TaskMsg>,
    st: &mut State,
    client_task: Option<&ClientTask>,
) -> bool {
    let message = match client_task {
        Some(c) => Some(waiting_message(c)),
        None => st.wanted.1.clone().filter(|_| st.wanted.0 == st.recorded),
    };
    if client_task.is_some() && st.wanted.0 == st.recorded {
        st.wanted.1.clone_from(&message);
    }
    let cmd = Command::FollowClient {
        task_id: st.task_id.clone(),
        term: st.term,
        client_task: client_task.cloned(),
        message,
        at_ms: now_ms(),
    };
    let Ok(shard) = st.host.shard(st.shard) else {
        st.cancel.cancel();
        myself.stop(None);
        return false;
    };
    match shard.propose(cmd).await {
        Ok(Applied::Updated { .. }) => true,
        Ok(other) => {
            tracing::debug!(task_id = %st.task_id, result = ?other, "client task not recorded: the execution is superseded; stopping");
            st.cancel.cancel();
            myself.stop(None);
            false
        }
        Err(e) => {
            tracing::warn!(task_id = %st.task_id, shard = st.shard, error = %e,
                "the client task could not be recorded; following it anyway");
            true
        }
    }
}

/// Follow `client_task` for the tool's request that `reply` answers.
pub(super) fn follow(
    myself: &ActorRef<TaskMsg>,
    st: &mut State,
    client_task: ClientTask,
    reply: oneshot::Sender<ToolResult>,
    first_poll_ms: Option<u64>,
) {
    let t = &st.host.inner.cfg.tasks;
    let bounds = client::Bounds {
        min: Duration::from_millis(t.client_poll_min_ms),
        max: Duration::from_millis(t.client_poll_max_ms),
        answer_timeout: Duration::from_millis(t.client_answer_timeout_ms),
    };
    tracing::debug!(task_id = %st.task_id, client_task = %client_task.task_id, method = %client_task.method, "following the client's task");
    if let Some(old) = st.following.replace(client::Following::start(
        myself.clone(),
        client_task,
        reply,
        first_poll_ms,
        bounds,
    )) {
        old.stop();
    }
}

/// Handle one message of a task actor.
pub(super) async fn handle_msg(
    myself: ActorRef<TaskMsg>,
    msg: TaskMsg,
    st: &mut State,
) -> Result<(), ActorProcessingErr> {
    match msg {
        TaskMsg::Attach(sink) => {
            // Exactly once per stream: a request goes to the new stream unless an open stream
            // carries it (a GET stream that claimed it, or a `tasks/result` stream still open).
            st.sinks.retain(|(_, s)| !s.is_closed());
            let number = st.next_sink;
            st.next_sink += 1;
            let open: Vec<u64> = st.sinks.iter().map(|(n, _)| *n).collect();
            // In the order they were sent (the map has none).
            let mut pending: Vec<(&String, &mut Pending)> = st.pending.iter_mut().collect();
            pending.sort_by_key(|(id, _)| request_seq(id));
            for (_, p) in pending {
                let carried = match p.carrier {
                    Carrier::GetStream => true,
                    Carrier::Sink(n) => open.contains(&n),
                    Carrier::Unclaimed => false,
                };
                if !carried && sink.try_send(again(&p.json)).is_ok() {
                    p.carrier = Carrier::Sink(number);
                }
            }
            st.sinks.push((number, sink));
        }
        TaskMsg::Claim {
            request_id,
            release,
            reply,
        } => {
            st.sinks.retain(|(_, s)| !s.is_closed());
            let claimed = match st.pending.get_mut(&request_id) {
                Some(p) if release && p.carrier == Carrier::GetStream => {
                    // The GET stream ended: an attached `tasks/result` stream takes it now,
                    // or the next one to attach.
                    p.carrier = Carrier::Unclaimed;
                    for (number, s) in &st.sinks {
                        if s.try_send(again(&p.json)).is_ok() {
                            p.carrier = Carrier::Sink(*number);
                            break;
                        }
                    }
                    false
                }
                Some(p) if !release && p.carrier == Carrier::Unclaimed => {
                    p.carrier = Carrier::GetStream;
                    true
                }
                _ => false,
            };
            let _ = reply.send(claimed);
        }
        TaskMsg::Outbound {
            key,
            method,
            params,
            reply,
        } => {
            if st.outcome.is_some() {
                return Ok(()); // the tool finished: `reply` drops, the request fails
            }
            let key = key.unwrap_or_else(|| {
                let n = st.unkeyed.entry(method).or_insert(0);
                *n += 1;
                format!("{method}#{n}")
            });
            if st.wanted.0 != TaskStatus::InputRequired {
                let msg = format!("Waiting for the client to answer {method}.");
                st.wanted = (TaskStatus::InputRequired, Some(msg));
                st.asked_at = Some(std::time::Instant::now());
            }
            // The request an earlier execution's client task answers: follow that task.
            if let Some(client_task) = st
                .recorded_client_task
                .take_if(|c| c.key == key && c.method == method)
            {
                st.wanted.1 = Some(waiting_message(&client_task));
                st.after_write
                    .push(AfterWrite::Follow { client_task, reply });
                write(&myself, st, false).await;
                return Ok(());
            }
            let id = next_request_id(st);
            let mut params = match params {
                Value::Object(m) => m,
                _ => Map::new(),
            };
            jsonrpc::put_meta(
                &mut params,
                META_RELATED_TASK,
                json!({ "taskId": st.task_id }),
            );
            // A client that runs such requests as tasks gets it task-augmented.
            let augmented = st.client.runs_as_task(method).then(|| {
                let ttl = st.host.inner.cfg.tasks.client_task_ttl_ms;
                params.insert("task".into(), json!({ "ttl": ttl }));
                (key, method)
            });
            let json = Arc::new(jsonrpc::request(
                &RequestId::String(id.clone()),
                method,
                &Value::Object(params),
            ));
            st.after_write.push(AfterWrite::Deliver {
                id,
                json,
                reply,
                augmented,
            });
            write(&myself, st, false).await;
        }
        TaskMsg::ToClient {
            method,
            params,
            reply,
        } => {
            if st.outcome.is_some() {
                return Ok(());
            }
            let id = next_request_id(st);
            let json = Arc::new(jsonrpc::request(
                &RequestId::String(id.clone()),
                method,
                &params,
            ));
            send_request(st, id, json, reply, None);
        }
        TaskMsg::Response {
            request_id,
            outcome,
        } => {
            let Some(Pending {
                reply, augmented, ..
            }) = st.pending.remove(&request_id)
            else {
                tracing::debug!(task_id = %st.task_id, request_id = %request_id, "answer to no pending request");
                return Ok(());
            };
            // The client runs the request as its task: record it, then follow it.
            if let (Some((key, method)), Ok(answer)) = (augmented, &outcome) {
                if let Some((client_id, first_poll)) = client::created_task(answer) {
                    let client_task = ClientTask {
                        key,
                        method: method.to_string(),
                        task_id: client_id,
                    };
                    client::count("created");
                    if record_client_task(&myself, st, Some(&client_task)).await {
                        follow(&myself, st, client_task, reply, first_poll);
                    }
                    return Ok(());
                }
            }
            answered(&myself, st, reply, outcome).await;
        }
        TaskMsg::ClientTaskEnded { key, outcome } => {
            let Some(f) = st.following.take_if(|f| f.client_task.key == key) else {
                return Ok(());
            };
            let reply = f.reply;
            // Its answer is in: a later execution asks again rather than follow it.
            if record_client_task(&myself, st, None).await {
                answered(&myself, st, reply, outcome).await;
            }
        }
        TaskMsg::Progress {
            progress,
            total,
            message,
        } => {
            if let Some(token) = &st.progress_token {
                let json = taskmesh_mcp::notify::progress(
                    token,
                    progress,
                    total,
                    message.as_deref(),
                    Some(&st.task_id),
                );
                deliver(st, Arc::new(json), None);
            }
        }
        TaskMsg::Log(message) => {
            // Filtered by the session's level where it is framed for the client.
            let json = Arc::new(notify::message(&message, Some(&st.task_id)));
            deliver(st, json, None);
        }
        TaskMsg::Pending(reply) => {
            let mut pending: Vec<(&String, &Pending)> = st.pending.iter().collect();
            pending.sort_by_key(|(id, _)| request_seq(id));
            let _ = reply.send(pending.into_iter().map(|(_, p)| p.json.clone()).collect());
        }
        TaskMsg::Follow {
            upstream_task,
            reply,
        } => {
            // The status stays; while it is `working` its message says the task is followed
            // upstream. (Otherwise the message is the one wanted, if the log holds that
            // status, else none until the status write that follows.)
            if st.recorded == TaskStatus::Working && st.wanted.0 == TaskStatus::Working {
                st.wanted.1 = Some(FOLLOWING.to_string());
            }
            let message = if st.wanted.0 == st.recorded {
                st.wanted.1.clone()
            } else {
                None
            };
            let cmd = Command::Follow {
                task_id: st.task_id.clone(),
                term: st.term,
                upstream_task,
                message,
                at_ms: now_ms(),
            };
            let answer = match st.host.shard(st.shard) {
                Ok(shard) => match shard.propose(cmd).await {
                    Ok(Applied::Updated { .. }) => Ok(()),
                    Ok(other) => {
                        tracing::debug!(task_id = %st.task_id, result = ?other, "upstream task not recorded: the execution is superseded; stopping");
                        st.cancel.cancel();
                        myself.stop(None);
                        Err(format!("not recorded: {other:?}"))
                    }
                    Err(e) => {
                        tracing::warn!(task_id = %st.task_id, shard = st.shard, error = %e,
                            "the upstream task could not be recorded; a failover now applies the resume policy");
                        Err(e.to_string())
                    }
                },
                Err(_) => Err("the task's shard is no longer hosted here".to_string()),
            };
            let _ = reply.send(answer);
        }
        TaskMsg::Done(result) => {
            let max = st.host.inner.cfg.tasks.max_result_bytes;
            let (status, message, outcome) = finish_of(&result, max);
            st.outcome = Some(Command::Finish {
                task_id: st.task_id.clone(),
                term: st.term,
                status,
                message: Some(message),
                outcome,
                at_ms: now_ms(),
            });
            // The tool has ended: nothing waits for a status change any more.
            st.after_write.clear();
            write(&myself, st, false).await;
        }
        TaskMsg::Retry => {
            if st.retry_pause.is_some() {
                write(&myself, st, true).await;
            }
        }
        TaskMsg::Stop => {
            // The task ended while it waited on a client task: the client is told to cancel it
            // (a requestor that gives up cancels with tasks/cancel). Nothing waits for the
            // answer, so it goes out as a message no stream needs to claim.
            if let Some(f) = st.following.take() {
                let id = next_request_id(st);
                let json = Arc::new(jsonrpc::request(
                    &RequestId::String(id),
                    "tasks/cancel",
                    &json!({ "taskId": f.client_task.task_id }),
                ));
                deliver(st, json, None);
                f.stop();
            }
            st.ended.cancel();
            st.cancel.cancel();
            myself.stop(None);
        }
    }
    Ok(())
}
