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
//!
//! The actor's messages, state and lifecycle are here; what it does with each message is in
//! `handle.rs`, its writes to the shard's log and its deliveries to the client's streams in
//! `write.rs`, the tool's side of the conversation ([`ToolIo`](taskmesh_tools::ToolIo)) in
//! `io.rs`, and the status and outcome a tool run ends with in `outcome.rs`.

mod client;
mod handle;
mod io;
mod outcome;
mod write;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use serde_json::{Map, Value};
use taskmesh_mcp::jsonrpc::ErrorObject;
use taskmesh_task::{Command, TaskRecord, TaskStatus};
use taskmesh_tools::{Tool, ToolContext, ToolResult};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::{Host, Stamped};

use handle::handle_msg;
use io::ActorIo;
pub use outcome::finish_of;

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
        /// The key the tool asks under ([`taskmesh_tools::ToolIo::ask`]); `None` for a request
        /// without one.
        key: Option<String>,
        /// JSON-RPC method of the request (`elicitation/create`, `sampling/createMessage`).
        method: &'static str,
        /// Its params; anything but an object is sent as an empty object, with the related-task
        /// `_meta` added.
        params: Value,
        /// Gets the client's answer; the tool gets an error instead when the task stops first
        /// or the tool has already finished.
        reply: oneshot::Sender<ToolResult>,
    },
    /// The follower of a client task asks the client about it (`tasks/get`, `tasks/result`):
    /// sent as the tool's requests are, while the task stays `input_required`.
    ToClient {
        /// `tasks/get` or `tasks/result`.
        method: &'static str,
        /// `{taskId}` of the client's task.
        params: Value,
        /// Gets the client's answer.
        reply: oneshot::Sender<ToolResult>,
    },
    /// The client task the execution followed ended: `outcome` is the answer to the tool's
    /// request it ran (its `tasks/result`), or why there is none.
    ClientTaskEnded {
        /// The tool's request's key.
        key: String,
        /// The answer, or the error the tool's request gets.
        outcome: ToolResult,
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
    Log(taskmesh_mcp::notify::LogMessage),
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
    /// Sent task-augmented: the key and method of the tool's request, should the client answer
    /// with a task of its own.
    augmented: Option<(String, &'static str)>,
}

/// What waits until the log holds the status the execution is in.
enum AfterWrite {
    /// A request to the client: delivered once `input_required` is recorded.
    Deliver {
        id: String,
        json: Arc<Vec<u8>>,
        reply: oneshot::Sender<ToolResult>,
        augmented: Option<(String, &'static str)>,
    },
    /// A client task an earlier execution recorded for the same request: followed once
    /// `input_required` is recorded.
    Follow {
        client_task: taskmesh_task::ClientTask,
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
    /// What the client declared it can answer, and run as its own tasks.
    client: taskmesh_task::ClientCaps,
    /// The client task an earlier execution waited on, until this execution asks the request
    /// it answers (then it is followed rather than asked again).
    recorded_client_task: Option<taskmesh_task::ClientTask>,
    /// The client task this execution follows, with the tool's request it answers.
    following: Option<client::Following>,
    /// How many requests of each method the tool asked without a key (their keys are
    /// `<method>#<n>`).
    unkeyed: HashMap<&'static str, u64>,
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
                let run = if record.worker.is_some() {
                    Box::pin(crate::workers::execute(
                        host.clone(),
                        shard,
                        term,
                        record.task_id.clone(),
                        record.request.tool.clone(),
                        record.owner.clone(),
                        cancel.clone(),
                    ))
                } else {
                    tool.call(arguments, ctx)
                };
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
            client: record.request.client,
            recorded_client_task: record.client_task,
            following: None,
            unkeyed: HashMap::new(),
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
        if let Some(f) = st.following.take() {
            f.stop();
        }
        let mut actors = st.host.inner.actors.lock();
        if actors
            .get(&st.task_id)
            .is_some_and(|r| r.actor.get_id() == myself.get_id())
        {
            actors.remove(&st.task_id);
        }
        drop(actors);
        // Ended with its task, or not: the reconciler looks.
        st.host.suspect(st.shard, &st.task_id);
        st.host.inner.workers.forget_asks(&st.task_id);
        st.host.give_slot(&st.owner);
        Ok(())
    }
}
