//! The task actor: one per live task, on the leader of the task's shard.
//!
//! The actor owns the execution of its task. It runs the tool in a child tokio task, turns
//! what the tool asks for into task messages (`elicitation/create`, `sampling/createMessage`
//! with the related-task `_meta`, progress notifications on the original token), proposes the
//! status changes that follow (`input_required` while a request is unanswered, `working` after,
//! `completed`/`failed` at the end), and stops when the task is terminal, cancelled, expired or
//! when its shard's leadership moves. Every change it proposes carries the term it was spawned
//! under; the shard rejects it once a newer term has taken the execution over.
//!
//! A write the shard refuses while this node still leads it (the group lost its quorum: the
//! leader keeps its term but cannot commit) is not dropped: the actor keeps what it has to
//! write (the outcome, or the status the execution is in) and tries again with a growing
//! pause, until the write commits, is rejected for good (terminal, newer term), or another node
//! leads the shard (whose reconciler then decides by the tool's resume policy). Meanwhile the
//! actor keeps its live-task slot, so the outcomes held on a node are bounded by
//! `tasks.max_live_tasks`, each by `tasks.max_result_bytes`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use serde_json::{json, Map, Value};
use taskmesh_mcp::jsonrpc::{self, ErrorObject, RequestId};
use taskmesh_mcp::{ServerRequestId, META_RELATED_TASK};
use taskmesh_task::{Applied, Command, Outcome, TaskRecord, TaskStatus};
use taskmesh_tools::{first_text, Tool, ToolContext, ToolIo, ToolResult};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::{now_ms, now_us, Host, HostEvent, Stamped};

/// The messages a task actor handles: from the host (attach, a client's answer, stop), from
/// its running tool (requests, progress, the outcome) and from itself (a write retry).
pub enum TaskMsg {
    /// A `tasks/result` reader attached: it gets the pending requests no open stream carries
    /// (see `Carrier`) and the task's messages from now on.
    Attach(mpsc::Sender<Stamped>),
    /// A GET stream of the task's session asks to carry request `request_id` (or, with
    /// `release`, gives its claim back); `reply` gets whether it is the one to send it.
    Claim {
        /// Id of the task's request, as the session message carried it.
        request_id: String,
        /// Give a granted claim back: the stream could not send the request after all.
        release: bool,
        /// True for the first claim of a request no stream carries yet.
        reply: oneshot::Sender<bool>,
    },
    /// The client answered request `request_id`.
    Response {
        /// Id of the task's request being answered, as it was sent to the client.
        request_id: String,
        /// The client's `result`, or the JSON-RPC error it answered with.
        outcome: Result<Value, ErrorObject>,
    },
    /// The tool asks the client something.
    Outbound {
        /// JSON-RPC method of the request (`elicitation/create`, `sampling/createMessage`).
        method: &'static str,
        /// Its params; anything but an object is sent as an empty object, with the related-task
        /// `_meta` added.
        params: Value,
        /// Gets the client's answer; the tool gets an error instead when the task stops first
        /// or the tool has already finished.
        reply: oneshot::Sender<ToolResult>,
    },
    /// The tool reports progress.
    Progress {
        /// Progress so far, in the tool's own unit.
        progress: f64,
        /// The amount progress goes up to, when the tool knows it.
        total: Option<f64>,
        /// Text for the client describing the progress.
        message: Option<String>,
    },
    /// The tool handed the call to an upstream server that runs it as its task
    /// `upstream_task`: recorded with the task (a later execution follows it); `reply` gets
    /// whether that was written.
    Follow {
        /// The upstream's task id.
        upstream_task: String,
        /// Gets `Ok` once the log holds it, or why it does not.
        reply: oneshot::Sender<Result<(), String>>,
    },
    /// The tool logs a message for the client (`notifications/message`).
    Log {
        /// Its severity.
        level: taskmesh_mcp::LogLevel,
        /// Who logged it.
        logger: Option<String>,
        /// The message (any JSON).
        data: Value,
    },
    /// Which requests to the client the execution waits on (their JSON-RPC requests, in the
    /// order sent).
    Pending(oneshot::Sender<Vec<Arc<Vec<u8>>>>),
    /// The tool finished.
    Done(ToolResult),
    /// Try again the write that the shard refused.
    Retry,
    /// Stop the execution: the task ended (cancelled, expired, terminal). An execution stopped
    /// for another to take over (leadership moved, shutdown) is stopped without it.
    Stop,
}

/// Which stream carries a pending request to the client: each request goes out on exactly one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Carrier {
    /// Sent to the session's GET streams, and no stream has claimed it yet (a gateway claims it
    /// before it sends it, so that one GET stream at most sends it).
    Unclaimed,
    /// A GET stream of the session claimed and sent it.
    GetStream,
    /// The attached `tasks/result` stream with this number took it.
    Sink(u64),
}

/// A request delivered to the client and not answered yet.
struct Pending {
    json: Arc<Vec<u8>>,
    reply: oneshot::Sender<ToolResult>,
    carrier: Carrier,
}

/// What waits until the log holds the status the execution is in.
enum AfterWrite {
    /// A request to the client: delivered once `input_required` is recorded.
    Deliver {
        id: String,
        json: Arc<Vec<u8>>,
        reply: oneshot::Sender<ToolResult>,
    },
    /// The client's answer: handed to the tool once `working` is recorded again.
    Reply {
        reply: oneshot::Sender<ToolResult>,
        outcome: ToolResult,
    },
}

/// The ractor actor that runs one live task on its shard's leader (see the module doc).
pub struct TaskActor;

/// What a task actor starts from: the host, the task's shard and record, the term its
/// execution belongs to and the tool to run.
pub struct Args {
    host: Host,
    shard: u32,
    record: TaskRecord,
    term: u64,
    tool: Arc<dyn Tool>,
}

/// A task actor's state while it runs: the status recorded and the status wanted, the outcome
/// not yet written, the client requests still unanswered and the attached readers.
pub struct State {
    host: Host,
    shard: u32,
    task_id: String,
    /// The principal the task belongs to (its live-task slot is counted for it).
    owner: String,
    session: Option<String>,
    term: u64,
    progress_token: Option<Value>,
    /// The status the shard's log holds, as far as this execution knows.
    recorded: TaskStatus,
    /// The status the execution is in, with its message; ahead of `recorded` while the change
    /// is not written yet.
    wanted: (TaskStatus, Option<String>),
    /// Since when the execution waits for the client's answers (`input_required`), on this
    /// node.
    asked_at: Option<std::time::Instant>,
    /// The tool's outcome once it finished, until the shard has recorded it.
    outcome: Option<Command>,
    /// What waits for `wanted` to be recorded, in order.
    after_write: Vec<AfterWrite>,
    /// The pause before the next try of a refused write; `Some` while a retry is scheduled.
    retry_pause: Option<Duration>,
    cancel: CancellationToken,
    /// Fired before `cancel` when the task itself ended ([`TaskMsg::Stop`]), not when its
    /// execution stops for another to take over.
    ended: CancellationToken,
    /// The attached `tasks/result` streams, by number.
    sinks: Vec<(u64, mpsc::Sender<Stamped>)>,
    /// The number the next attached stream gets.
    next_sink: u64,
    /// Requests delivered to the client and not answered yet.
    pending: HashMap<String, Pending>,
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
    let owner = record.owner.clone();
    if !reserved {
        // Admitted when it was created: resumed here whatever the limits.
        let _ = host.take_slot(&owner, false);
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
            let running = Running { shard, term, actor };
            let old = host.inner.actors.lock().insert(task_id, running);
            if let Some(old) = old {
                old.actor.stop(Some("replaced".into()));
            }
        }
        Err(e) => {
            host.give_slot(&owner);
            tracing::error!(task_id = %task_id, error = %e, "could not spawn task actor");
        }
    }
}

/// A task actor this node runs: the shard of its task and the term its execution belongs to.
pub(crate) struct Running {
    pub(crate) shard: u32,
    pub(crate) term: u64,
    pub(crate) actor: ActorRef<TaskMsg>,
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

    fn log(
        &self,
        level: taskmesh_mcp::LogLevel,
        logger: Option<String>,
        data: Value,
    ) -> BoxFuture<'static, ()> {
        let _ = self.actor.cast(TaskMsg::Log {
            level,
            logger,
            data,
        });
        Box::pin(async {})
    }

    fn record_upstream_task(
        &self,
        upstream_task: String,
    ) -> BoxFuture<'static, Result<(), String>> {
        let (reply, rx) = oneshot::channel();
        let sent = self
            .actor
            .cast(TaskMsg::Follow {
                upstream_task,
                reply,
            })
            .is_ok();
        async move {
            if !sent {
                return Err("the task stopped".to_string());
            }
            rx.await
                .unwrap_or_else(|_| Err("the task stopped".to_string()))
        }
        .boxed()
    }
}

/// The status message of a task whose call an upstream server runs as its own task.
const FOLLOWING: &str = "The upstream server runs the call as a task; following it.";

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
        let ended = CancellationToken::new();
        let progress_token = record
            .request
            .progress_token_json
            .as_deref()
            .and_then(|t| serde_json::from_str::<Value>(t).ok());
        // Validated by the gateway that accepted the call; a record that still does not hold a
        // JSON object fails its task rather than run the tool on something else.
        let arguments = serde_json::from_str::<Map<String, Value>>(&record.request.arguments_json)
            .map_err(|e| {
                ErrorObject::invalid_params(format!(
                    "Invalid params: the task's stored arguments are not a JSON object: {e}"
                ))
            });
        // A traced task's execution is a span under the one that created it (kept in the
        // record, so an execution after a failover joins the same trace).
        let mut span = taskmesh_telemetry::Span::start_under(
            taskmesh_telemetry::SpanKind::Internal,
            record.request.traceparent.as_deref(),
            || {
                use taskmesh_telemetry::KeyValue;
                let tool = &record.request.tool;
                (
                    format!("execute_tool {tool}"),
                    vec![
                        KeyValue::new("gen_ai.tool.name", tool.clone()),
                        KeyValue::new("taskmesh.task_id", record.task_id.to_string()),
                        KeyValue::new("taskmesh.shard", i64::from(shard)),
                        KeyValue::new("taskmesh.term", term as i64),
                    ],
                )
            },
        );
        let ctx = ToolContext {
            cancel: cancel.clone(),
            ended: ended.clone(),
            io: Arc::new(ActorIo {
                actor: myself.clone(),
            }),
            has_progress_token: progress_token.is_some(),
            client_elicitation: record.request.client.elicitation,
            client_sampling: record.request.client.sampling,
            principal: record.owner.clone(),
            upstream_task: record.upstream_task.clone(),
            answers: Arc::new(
                record
                    .request
                    .answers_json
                    .as_deref()
                    .and_then(|a| serde_json::from_str(a).ok())
                    .unwrap_or_default(),
            ),
            traceparent: span.as_ref().map(taskmesh_telemetry::Span::traceparent),
        };
        let me = myself.clone();
        match arguments {
            Ok(arguments) => {
                let run = tool.call(arguments, ctx);
                tokio::spawn(async move {
                    let result = std::panic::AssertUnwindSafe(run)
                        .catch_unwind()
                        .await
                        .unwrap_or_else(|_| Err(ErrorObject::internal("the tool panicked")));
                    if let (Some(span), Err(e)) = (span.as_mut(), &result) {
                        span.fail(e.message.clone());
                    }
                    drop(span);
                    let _ = me.cast(TaskMsg::Done(result));
                });
            }
            Err(e) => {
                let _ = me.cast(TaskMsg::Done(Err(e)));
            }
        }
        Ok(State {
            host,
            shard,
            owner: record.owner.clone(),
            task_id: record.task_id,
            session: record.session,
            term,
            progress_token,
            recorded: record.status,
            wanted: (record.status, record.status_message),
            asked_at: None,
            outcome: None,
            after_write: Vec::new(),
            retry_pause: None,
            cancel,
            ended,
            sinks: Vec::new(),
            next_sink: 0,
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
        for (_, Pending { reply, .. }) in st.pending.drain() {
            let _ = reply.send(Err(ErrorObject::internal("the task stopped")));
        }
        let mut actors = st.host.inner.actors.lock();
        if actors
            .get(&st.task_id)
            .is_some_and(|r| r.actor.get_id() == myself.get_id())
        {
            actors.remove(&st.task_id);
        }
        drop(actors);
        st.host.give_slot(&st.owner);
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
            method,
            params,
            reply,
        } => {
            if st.outcome.is_some() {
                return Ok(()); // the tool finished: `reply` drops, the request fails
            }
            let id = ServerRequestId::Task {
                task_id: st.task_id.clone(),
                seq: st.next_request,
            }
            .to_string();
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
            if st.wanted.0 != TaskStatus::InputRequired {
                let msg = format!("Waiting for the client to answer {method}.");
                st.wanted = (TaskStatus::InputRequired, Some(msg));
                st.asked_at = Some(std::time::Instant::now());
            }
            st.after_write.push(AfterWrite::Deliver { id, json, reply });
            write(&myself, st, false).await;
        }
        TaskMsg::Response {
            request_id,
            outcome,
        } => {
            let Some(Pending { reply, .. }) = st.pending.remove(&request_id) else {
                tracing::debug!(task_id = %st.task_id, request_id = %request_id, "answer to no pending request");
                return Ok(());
            };
            let still_asking = !st.pending.is_empty()
                || st
                    .after_write
                    .iter()
                    .any(|a| matches!(a, AfterWrite::Deliver { .. }));
            if !still_asking && st.wanted.0 == TaskStatus::InputRequired {
                st.wanted = (
                    TaskStatus::Working,
                    Some("The task is in progress.".to_string()),
                );
                if let Some(since) = st.asked_at.take() {
                    taskmesh_metrics::metrics::histogram!(
                        taskmesh_metrics::names::INPUT_REQUIRED_WAIT
                    )
                    .record(since.elapsed().as_secs_f64());
                }
            }
            st.after_write.push(AfterWrite::Reply { reply, outcome });
            write(&myself, st, false).await;
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
                deliver(st, json, None);
            }
        }
        TaskMsg::Log {
            level,
            logger,
            data,
        } => {
            // Filtered by the session's level where it is framed for the client.
            let mut params = json!({ "level": level.as_str(), "data": data });
            if let Some(l) = logger {
                params["logger"] = json!(l);
            }
            params["_meta"] = json!({ META_RELATED_TASK: { "taskId": st.task_id } });
            let json = Arc::new(jsonrpc::notification("notifications/message", &params));
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
            let max = st.host.inner.cfg.max_result_bytes;
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
            st.ended.cancel();
            st.cancel.cancel();
            myself.stop(None);
        }
    }
    Ok(())
}

/// Bring the shard's record up to what the execution knows: the outcome once the tool finished,
/// else the status the execution is in; then release what waited for that write. A refused
/// write is tried again after a pause while this node leads the shard (see the module doc);
/// a write rejected for good (terminal, newer term) or a leadership that moved stops the actor.
///
/// `retry` says whether this is the scheduled retry; any other call while a retry is scheduled
/// leaves the write to it.
async fn write(myself: &ActorRef<TaskMsg>, st: &mut State, retry: bool) {
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
                        AfterWrite::Deliver { id, json, reply } => {
                            let carrier = deliver(st, json.clone(), Some(&id));
                            st.pending.insert(
                                id,
                                Pending {
                                    json,
                                    reply,
                                    carrier,
                                },
                            );
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
                        Duration::from_millis(cfg.write_retry_min_ms)
                    }
                    Some(p) => (p * 2).min(Duration::from_millis(cfg.write_retry_max_ms)),
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
fn request_seq(id: &str) -> u64 {
    match id.parse::<ServerRequestId>() {
        Ok(ServerRequestId::Task { seq, .. } | ServerRequestId::Plain { seq, .. }) => seq,
        Err(_) => u64::MAX,
    }
}

/// Send a task message to one attached `tasks/result` stream, or, when none takes it, to the
/// session's GET streams (a request with its `request_id`, which a GET stream must claim
/// first). Returns what carries it.
fn deliver(st: &mut State, json: Arc<Vec<u8>>, request_id: Option<&str>) -> Carrier {
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

/// A pending request sent again, to a stream that was not there when it was first handed out.
fn again(json: &Arc<Vec<u8>>) -> Stamped {
    Stamped {
        json: json.clone(),
        at_us: 0,
    }
}

/// The terminal status, status message and stored outcome of a tool run. An outcome of more than
/// `max_result_bytes` (its stored JSON) is not kept: the task fails with a message that says so.
pub fn finish_of(result: &ToolResult, max_result_bytes: usize) -> (TaskStatus, String, Outcome) {
    let (status, message, outcome) = outcome_of(result);
    let size = match &outcome {
        Outcome::Result { json } => json.len(),
        Outcome::Error {
            message, data_json, ..
        } => message.len() + data_json.as_ref().map_or(0, String::len),
    };
    if size <= max_result_bytes {
        return (status, message, outcome);
    }
    let why = format!(
        "The tool's result of {size} bytes exceeds the limit of {max_result_bytes} bytes \
         (setting tasks.max_result_bytes)."
    );
    (
        TaskStatus::Failed,
        why.clone(),
        Outcome::Error {
            code: jsonrpc::INTERNAL_ERROR,
            message: why,
            data_json: None,
        },
    )
}

fn outcome_of(result: &ToolResult) -> (TaskStatus, String, Outcome) {
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
