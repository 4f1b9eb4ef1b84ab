//! One attempt of an upstream tool's call, as [`UpstreamTool`](crate::UpstreamTool)'s `call`
//! makes it on a connection of the pool: a plain `tools/call` (`attempt`), or on an upstream
//! that runs the tool as a task, the task-augmented call or the task an earlier execution
//! made, followed to its outcome (`attempt_task`). What the upstream sends about the call is
//! relayed to the task as it comes (`relay`): progress, its requests to the client with the
//! answers sent back, its log messages. Each ends with an outcome (the upstream's answer, or
//! the call cancelled or timed out) or with how the connection was lost.

use std::time::Duration;

use serde_json::{Map, Value};
use taskmesh_client::{
    CallEvent, ClientError, HeaderName, HeaderValue, Polling, Step, TaskCall, ToolCall,
};
use taskmesh_mcp::notify::LogMessage;
use taskmesh_mcp::{ErrorObject, LogLevel};
use taskmesh_tools::{ToolContext, ToolResult};

use crate::Upstream;

/// What every attempt of one call of an upstream tool shares.
pub(crate) struct Call<'a> {
    /// The tool's name on the upstream.
    pub(crate) remote: &'a str,
    /// The task's context: its cancellation and its side channel to the client.
    pub(crate) ctx: &'a ToolContext,
    /// How long one attempt may wait for its outcome.
    pub(crate) timeout: Duration,
    /// Headers every request of the call carries (the trace context).
    pub(crate) headers: &'a [(HeaderName, HeaderValue)],
}

impl Upstream {
    /// One call of the tool: its outcome (the upstream's answer, or the call cancelled or timed
    /// out), or how it was lost before the upstream answered.
    pub(crate) async fn attempt(
        &self,
        c: &Call<'_>,
        args: Map<String, Value>,
    ) -> Result<ToolResult, ClientError> {
        let (remote, timeout) = (c.remote, c.timeout);
        let lease = self.lease().await?;
        let mut call = lease
            .client
            .call_tool_with(remote, args, None, c.headers)
            .await?;
        match self.follow(&mut call, c).await {
            Followed::Done(Ok(r)) => Ok(Ok(r)),
            Followed::Done(Err(ClientError::Rpc(e))) => Ok(Err(e)),
            Followed::Done(Err(lost)) => Err(lost),
            Followed::Cancelled => {
                call.cancel("the task was cancelled").await;
                Ok(Err(cancelled()))
            }
            Followed::TimedOut => {
                call.cancel("the call timed out").await;
                Ok(Err(self.timed_out("no answer from", remote, timeout)))
            }
        }
    }

    /// Follow `call` (its events relayed to the task as they come) until its outcome, the
    /// task's cancellation or `timeout`, whichever comes first.
    async fn follow(&self, call: &mut impl Steps, c: &Call<'_>) -> Followed {
        let deadline = tokio::time::sleep(c.timeout);
        tokio::pin!(deadline);
        loop {
            tokio::select! {
                step = call.step() => match step {
                    Step::Event(ev) => self.relay(ev, c.ctx, c.remote).await,
                    Step::Done(outcome) => return Followed::Done(outcome),
                },
                _ = c.ctx.cancel.cancelled() => return Followed::Cancelled,
                _ = &mut deadline => return Followed::TimedOut,
            }
        }
    }

    /// The outcome of a call past its timeout: `what` (`no answer from`, `no result of`) the
    /// tool within it.
    fn timed_out(&self, what: &str, remote: &str, timeout: Duration) -> ErrorObject {
        ErrorObject::internal(format!(
            "upstream {}: {what} tool {remote} within {} ms",
            self.name(),
            timeout.as_millis()
        ))
    }

    /// Pass on what the upstream sent about a call: progress to the task's token, its
    /// requests to the client (the answer sent back), log messages to the client (at the
    /// level its session asked for) and to this node's log.
    async fn relay(&self, ev: CallEvent, ctx: &ToolContext, remote: &str) {
        match ev {
            CallEvent::Progress {
                progress,
                total,
                message,
            } => ctx.io.progress(progress, total, message),
            CallEvent::Request {
                method,
                params,
                reply,
            } => match relayed_method(&method) {
                Some(m) => {
                    let answer = ctx.io.request(m, params);
                    tokio::spawn(async move {
                        let _ = reply.send(answer.await);
                    });
                }
                None => {
                    let _ = reply.send(Err(ErrorObject::method_not_found(&method)));
                }
            },
            CallEvent::Log(p) => {
                tracing::debug!(upstream = %self.name(), tool = %remote, message = %p, "upstream log message");
                // A level that is not one of MCP's is taken as `info`.
                let level = p["level"]
                    .as_str()
                    .and_then(LogLevel::parse)
                    .unwrap_or(LogLevel::Info);
                let message = LogMessage {
                    level,
                    logger: p["logger"].as_str().map(str::to_string),
                    data: p.get("data").cloned().unwrap_or(Value::Null),
                };
                ctx.io.log(message).await;
            }
            CallEvent::Status { .. } => {}
        }
    }

    fn polling(&self) -> Polling {
        let min = Duration::from_millis(self.cfg.task_poll_min_ms);
        let max = Duration::from_millis(self.cfg.task_poll_max_ms);
        Polling {
            min,
            max,
            default: Duration::from_secs(1).clamp(min, max),
        }
    }

    /// One call of `remote` by an upstream that runs it as a task: the task-augmented call
    /// (its task id recorded with the taskmesh task), or, when `follow` names a task made
    /// earlier, that task, followed to its outcome. The call's timeout counts from here. A
    /// task the upstream no longer knows clears `follow`.
    pub(crate) async fn attempt_task(
        &self,
        c: &Call<'_>,
        args: Map<String, Value>,
        follow: &mut Option<String>,
    ) -> Result<ToolResult, ClientError> {
        let (remote, ctx, timeout) = (c.remote, c.ctx, c.timeout);
        let lease = self.lease().await?;
        let mut task: TaskCall = match follow.as_deref() {
            Some(id) => lease.client.follow_task(id, self.polling()),
            None => {
                let t = lease
                    .client
                    .call_tool_as_task(remote, args, None, c.headers, self.polling())
                    .await?;
                if !t.task_id().is_empty() {
                    *follow = Some(t.task_id().to_string());
                    if let Err(why) = ctx.io.record_upstream_task(t.task_id().to_string()).await {
                        tracing::warn!(upstream = %self.name(), tool = %remote, upstream_task = %t.task_id(),
                            error = %why, "the upstream task is not recorded with the task");
                    }
                }
                t
            }
        };
        match self.follow(&mut task, c).await {
            Followed::Done(Ok(r)) => Ok(Ok(r)),
            Followed::Done(Err(ClientError::Rpc(e))) => Ok(Err(e)),
            Followed::Done(Err(ClientError::TaskCancelled(why))) => Ok(Err(ErrorObject::internal(
                format!("upstream {}: {why}", self.name()),
            ))),
            Followed::Done(Err(lost @ ClientError::TaskLost(_))) => {
                *follow = None;
                Err(lost)
            }
            Followed::Done(Err(lost)) => Err(lost),
            Followed::Cancelled => {
                if ctx.ended.is_cancelled() {
                    task.cancel("the task was cancelled").await;
                } else {
                    // Handed over: the next execution follows the upstream task.
                    tracing::info!(upstream = %self.name(), tool = %remote, upstream_task = %task.task_id(),
                        "execution handed over; the upstream task runs on");
                }
                Ok(Err(cancelled()))
            }
            Followed::TimedOut => {
                task.cancel("the call timed out").await;
                Ok(Err(self.timed_out("no result of", remote, timeout)))
            }
        }
    }
}

/// How following a call ended.
enum Followed {
    /// The call's outcome came.
    Done(Result<Value, ClientError>),
    /// The task was cancelled (or its execution stopped) first.
    Cancelled,
    /// The call's timeout passed first.
    TimedOut,
}

/// A call whose steps are followed: a plain call, or a task followed by polling.
trait Steps {
    /// What the upstream sent next about the call, or its outcome.
    fn step(&mut self) -> impl std::future::Future<Output = Step> + Send;
}

impl Steps for ToolCall {
    fn step(&mut self) -> impl std::future::Future<Output = Step> + Send {
        self.next()
    }
}

impl Steps for TaskCall {
    fn step(&mut self) -> impl std::future::Future<Output = Step> + Send {
        self.next()
    }
}

/// The methods an upstream may ask the client, as the static names the tool side channel takes.
fn relayed_method(method: &str) -> Option<&'static str> {
    match method {
        "elicitation/create" => Some("elicitation/create"),
        "sampling/createMessage" => Some("sampling/createMessage"),
        _ => None,
    }
}

/// The outcome of a call or task cancelled while it waited on the upstream.
pub(crate) fn cancelled() -> ErrorObject {
    ErrorObject::new(taskmesh_mcp::jsonrpc::REQUEST_CANCELLED, "cancelled")
}
