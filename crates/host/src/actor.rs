//! The task actor: one per live task, on the leader of the task's shard.
//!
//! The actor owns the execution of its task. It runs the tool in a child tokio task, turns
//! what the tool asks for into task messages (`elicitation/create`, `sampling/createMessage`
//! with the related-task `_meta`, progress notifications on the original token), proposes the
//! status changes that follow (`input_required` while a request is unanswered, `working` after,
//! `completed`/`failed` at the end), and stops when the task is terminal, cancelled, expired or
//! when its shard's leadership moves. Every change it proposes carries the term it was spawned
//! under; the shard rejects it once a newer term has taken the execution over.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use futures::future::BoxFuture;
use futures::FutureExt;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use serde_json::{json, Map, Value};
use taskmesh_mcp::jsonrpc::{self, ErrorObject, RequestId};
use taskmesh_mcp::META_RELATED_TASK;
use taskmesh_task::{Applied, Command, Outcome, TaskRecord, TaskStatus};
use taskmesh_tools::{first_text, Tool, ToolContext, ToolIo, ToolResult};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::{now_ms, Host, HostEvent};

pub enum TaskMsg {
    /// A `tasks/result` reader attached: replay pending requests to it and relay from now on.
    Attach(mpsc::Sender<Arc<Vec<u8>>>),
    /// The client answered request `request_id`.
    Response {
        request_id: String,
        outcome: Result<Value, ErrorObject>,
    },
    /// The tool asks the client something.
    Outbound {
        method: &'static str,
        params: Value,
        reply: oneshot::Sender<ToolResult>,
    },
    /// The tool reports progress.
    Progress {
        progress: f64,
        total: Option<f64>,
        message: Option<String>,
    },
    /// The tool finished.
    Done(ToolResult),
    /// Stop the execution (cancelled, expired, terminal, or leadership moved).
    Stop,
}

pub struct TaskActor;

pub struct Args {
    host: Host,
    shard: u32,
    record: TaskRecord,
    term: u64,
    tool: Arc<dyn Tool>,
}

pub struct State {
    host: Host,
    shard: u32,
    task_id: String,
    session: Option<String>,
    term: u64,
    progress_token: Option<Value>,
    status: TaskStatus,
    cancel: CancellationToken,
    sinks: Vec<mpsc::Sender<Arc<Vec<u8>>>>,
    pending: HashMap<String, (Arc<Vec<u8>>, oneshot::Sender<ToolResult>)>,
    next_request: u64,
}

/// Spawn the actor of a live task. `reserved` says whether the caller already holds a live-task
/// slot for it.
pub(crate) async fn spawn(
    host: Host,
    shard: u32,
    record: TaskRecord,
    term: u64,
    tool: Arc<dyn Tool>,
    reserved: bool,
) {
    if !reserved {
        host.inner.live.fetch_add(1, Ordering::AcqRel);
    }
    let task_id = record.task_id.clone();
    let args = Args {
        host: host.clone(),
        shard,
        record,
        term,
        tool,
    };
    match Actor::spawn(None, TaskActor, args).await {
        Ok((actor, _join)) => {
            let old = host.inner.actors.lock().insert(task_id, (shard, actor));
            if let Some((_, old)) = old {
                old.stop(Some("replaced".into()));
            }
        }
        Err(e) => {
            host.inner.live.fetch_sub(1, Ordering::AcqRel);
            tracing::error!(task_id = %task_id, error = %e, "could not spawn task actor");
        }
    }
}

struct ActorIo {
    actor: ActorRef<TaskMsg>,
}

impl ToolIo for ActorIo {
    fn progress(&self, progress: f64, total: Option<f64>, message: Option<String>) {
        let _ = self.actor.cast(TaskMsg::Progress {
            progress,
            total,
            message,
        });
    }

    fn request(&self, method: &'static str, params: Value) -> BoxFuture<'static, ToolResult> {
        let (reply, rx) = oneshot::channel();
        let sent = self
            .actor
            .cast(TaskMsg::Outbound {
                method,
                params,
                reply,
            })
            .is_ok();
        async move {
            if !sent {
                return Err(ErrorObject::internal("the task stopped"));
            }
            rx.await
                .unwrap_or_else(|_| Err(ErrorObject::internal("the task stopped")))
        }
        .boxed()
    }
}

impl Actor for TaskActor {
    type Msg = TaskMsg;
    type State = State;
    type Arguments = Args;

    async fn pre_start(
        &self,
        myself: ActorRef<TaskMsg>,
        args: Args,
    ) -> Result<State, ActorProcessingErr> {
        let Args {
            host,
            shard,
            record,
            term,
            tool,
        } = args;
        let cancel = CancellationToken::new();
        let progress_token = record
            .request
            .progress_token_json
            .as_deref()
            .and_then(|t| serde_json::from_str::<Value>(t).ok());
        let arguments: Map<String, Value> =
            serde_json::from_str(&record.request.arguments_json).unwrap_or_default();
        let ctx = ToolContext {
            cancel: cancel.clone(),
            io: Arc::new(ActorIo {
                actor: myself.clone(),
            }),
            has_progress_token: progress_token.is_some(),
            client_elicitation: record.request.client.elicitation,
            client_sampling: record.request.client.sampling,
        };
        let run = tool.call(arguments, ctx);
        let me = myself.clone();
        tokio::spawn(async move {
            let result = std::panic::AssertUnwindSafe(run)
                .catch_unwind()
                .await
                .unwrap_or_else(|_| Err(ErrorObject::internal("the tool panicked")));
            let _ = me.cast(TaskMsg::Done(result));
        });
        Ok(State {
            host,
            shard,
            task_id: record.task_id,
            session: record.session,
            term,
            progress_token,
            status: record.status,
            cancel,
            sinks: Vec::new(),
            pending: HashMap::new(),
            next_request: 1,
        })
    }

    /// The work of a message runs in a future on the heap ([`handle_msg`]). Awaited inline,
    /// it (with a proposal under way through openraft's client write: several KiB) would be
    /// part of the future that ractor keeps in the actor's long-lived task, so every live task
    /// would carry that space for its whole life; boxed, it exists only while a message is
    /// handled.
    async fn handle(
        &self,
        myself: ActorRef<TaskMsg>,
        msg: TaskMsg,
        st: &mut State,
    ) -> Result<(), ActorProcessingErr> {
        Box::pin(handle_msg(myself, msg, st)).await
    }

    async fn post_stop(
        &self,
        myself: ActorRef<TaskMsg>,
        st: &mut State,
    ) -> Result<(), ActorProcessingErr> {
        st.cancel.cancel();
        for (_, (_, reply)) in st.pending.drain() {
            let _ = reply.send(Err(ErrorObject::internal("the task stopped")));
        }
        let mut actors = st.host.inner.actors.lock();
        if actors
            .get(&st.task_id)
            .is_some_and(|(_, a)| a.get_id() == myself.get_id())
        {
            actors.remove(&st.task_id);
        }
        drop(actors);
        st.host.inner.live.fetch_sub(1, Ordering::AcqRel);
        Ok(())
    }
}

/// Handle one message of a task actor.
async fn handle_msg(
    myself: ActorRef<TaskMsg>,
    msg: TaskMsg,
    st: &mut State,
) -> Result<(), ActorProcessingErr> {
    match msg {
        TaskMsg::Attach(sink) => {
            for (json, _) in st.pending.values() {
                let _ = sink.try_send(json.clone());
            }
            st.sinks.push(sink);
        }
        TaskMsg::Outbound {
            method,
            params,
            reply,
        } => {
            let id = format!("tm-{}-{}", st.task_id, st.next_request);
            st.next_request += 1;
            let mut params = match params {
                Value::Object(m) => m,
                _ => Map::new(),
            };
            jsonrpc::put_meta(
                &mut params,
                META_RELATED_TASK,
                json!({ "taskId": st.task_id }),
            );
            let json = Arc::new(jsonrpc::request(
                &RequestId::String(id.clone()),
                method,
                &Value::Object(params),
            ));
            st.pending.insert(id, (json.clone(), reply));
            if st.status != TaskStatus::InputRequired {
                let msg = format!("Waiting for the client to answer {method}.");
                if !set_status(&myself, st, TaskStatus::InputRequired, Some(msg)).await {
                    return Ok(());
                }
            }
            deliver(st, json);
        }
        TaskMsg::Response {
            request_id,
            outcome,
        } => {
            let Some((_, reply)) = st.pending.remove(&request_id) else {
                tracing::debug!(task_id = %st.task_id, request_id = %request_id, "answer to no pending request");
                return Ok(());
            };
            if st.pending.is_empty() && st.status == TaskStatus::InputRequired {
                let msg = Some("The task is in progress.".to_string());
                if !set_status(&myself, st, TaskStatus::Working, msg).await {
                    return Ok(());
                }
            }
            let _ = reply.send(outcome);
        }
        TaskMsg::Progress {
            progress,
            total,
            message,
        } => {
            if let Some(token) = &st.progress_token {
                let mut params = json!({ "progressToken": token, "progress": progress });
                if let Some(t) = total {
                    params["total"] = json!(t);
                }
                if let Some(m) = message {
                    params["message"] = json!(m);
                }
                params["_meta"] = json!({ META_RELATED_TASK: { "taskId": st.task_id } });
                let json = Arc::new(jsonrpc::notification("notifications/progress", &params));
                deliver(st, json);
            }
        }
        TaskMsg::Done(result) => {
            let (status, message, outcome) = finish_of(&result);
            let cmd = Command::Finish {
                task_id: st.task_id.clone(),
                term: st.term,
                status,
                message: Some(message),
                outcome,
                at_ms: now_ms(),
            };
            match st.host.shard(st.shard) {
                Ok(shard) => match shard.propose(cmd).await {
                    Ok(Applied::Updated { record }) => {
                        crate::audit_terminal(&record, "task reached a terminal status");
                    }
                    Ok(other) => {
                        tracing::debug!(task_id = %st.task_id, result = ?other, "finish not applied");
                    }
                    Err(e) => {
                        tracing::warn!(task_id = %st.task_id, error = %e, "could not record the task's outcome");
                    }
                },
                Err(e) => tracing::error!(error = %e, "task actor lost its shard"),
            }
            myself.stop(None);
        }
        TaskMsg::Stop => {
            st.cancel.cancel();
            myself.stop(None);
        }
    }
    Ok(())
}

/// Propose a non-terminal status; on failure (terminal, stale term, lost leadership) stop the
/// actor and return false.
async fn set_status(
    myself: &ActorRef<TaskMsg>,
    st: &mut State,
    status: TaskStatus,
    message: Option<String>,
) -> bool {
    let cmd = Command::SetStatus {
        task_id: st.task_id.clone(),
        term: st.term,
        status,
        message,
        at_ms: now_ms(),
    };
    let shard = match st.host.shard(st.shard) {
        Ok(s) => s.clone(),
        Err(_) => {
            myself.stop(None);
            return false;
        }
    };
    match shard.propose(cmd).await {
        Ok(Applied::Updated { .. }) => {
            st.status = status;
            true
        }
        other => {
            tracing::debug!(task_id = %st.task_id, result = ?other.map(|_| ()), "status change refused; stopping");
            st.cancel.cancel();
            myself.stop(None);
            false
        }
    }
}

/// Send a task message to the attached `tasks/result` streams, or to the session's GET stream
/// when none is attached.
fn deliver(st: &mut State, json: Arc<Vec<u8>>) {
    st.sinks.retain(|s| !s.is_closed());
    let mut delivered = false;
    for s in &st.sinks {
        delivered |= s.try_send(json.clone()).is_ok();
    }
    if !delivered {
        if let Some(session) = &st.session {
            let _ = st.host.inner.events.send(HostEvent::SessionMessage {
                session: session.clone(),
                task_id: st.task_id.clone(),
                json,
            });
        }
    }
}

/// The terminal status, status message and stored outcome of a tool run.
pub fn finish_of(result: &ToolResult) -> (TaskStatus, String, Outcome) {
    match result {
        Ok(v) => {
            let is_error = v.get("isError").and_then(Value::as_bool).unwrap_or(false);
            let outcome = Outcome::Result {
                json: v.to_string(),
            };
            if is_error {
                let why = first_text(v).unwrap_or("the tool reported an error");
                (
                    TaskStatus::Failed,
                    format!("The tool failed: {why}"),
                    outcome,
                )
            } else {
                (TaskStatus::Completed, "The task completed.".into(), outcome)
            }
        }
        Err(e) => (
            TaskStatus::Failed,
            format!(
                "The request failed with JSON-RPC error {}: {}",
                e.code, e.message
            ),
            Outcome::Error {
                code: e.code,
                message: e.message.clone(),
                data_json: e.data.as_ref().map(|d| d.to_string()),
            },
        ),
    }
}
