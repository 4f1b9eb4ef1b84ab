//! Leases: a poll takes queued tasks and grants them ([`Host::take_work`]); a worker's
//! heartbeat, input request and completion are operations on the leader of the task's shard
//! ([`LeaseBeat`], [`LeaseAsk`], [`LeaseComplete`]), each checked against the lease the record
//! holds (token and holder) and written through the log, where the token fences it again.

use std::time::Duration;

use serde_json::Value;
use taskmesh_mcp::ErrorObject;
use taskmesh_task::{Applied, Command, Lease, Rejection, TaskRecord, TaskStatus};
use taskmesh_tools::ToolResult;

use super::{secret, Waiting};
use crate::actor::{finish_of, TaskMsg};
use crate::{now_ms, Host, HostError};

/// Longest key of a worker's input request.
pub const MAX_ASK_KEY: usize = 128;

/// A task leased to a worker by a poll.
#[derive(Debug, Clone, PartialEq)]
pub struct Leased {
    /// The task's id.
    pub task_id: String,
    /// The tool called.
    pub tool: String,
    /// The call's arguments (a JSON object) as JSON text.
    pub arguments_json: String,
    /// The principal that created the task.
    pub principal: String,
    /// The lease's attempt, from 1.
    pub attempt: u32,
    /// The lease's token.
    pub token: String,
    /// When the lease runs out unless renewed, in ms since the Unix epoch.
    pub deadline_ms: u64,
    /// Whether the client sent a progress token.
    pub progress_wanted: bool,
}

/// Which lease a worker presents, and who presents it.
#[derive(Debug, Clone)]
pub struct LeaseRef {
    /// The leased task.
    pub task_id: String,
    /// The lease's token.
    pub token: String,
    /// The worker identity presenting it; must be the lease's holder.
    pub holder: String,
}

/// A worker's heartbeat: renew the lease, relay progress, set the status message.
#[derive(Debug, Clone)]
pub struct LeaseBeat {
    /// The lease.
    pub lease: LeaseRef,
    /// Progress to relay (with its total and message), when the worker reports some.
    pub progress: Option<(f64, Option<f64>, Option<String>)>,
    /// The task's new status message, when given.
    pub status_message: Option<String>,
}

/// What a heartbeat answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Renewed {
    /// The lease's new deadline, in ms since the Unix epoch; 0 when cancelled.
    pub deadline_ms: u64,
    /// The task was cancelled or is gone: the worker stops.
    pub cancelled: bool,
}

/// A worker completes its leased task with the tool call's result or a JSON-RPC error.
#[derive(Debug, Clone)]
pub struct LeaseComplete {
    /// The lease.
    pub lease: LeaseRef,
    /// How the call ended.
    pub result: ToolResult,
}

/// A worker asks the task's client for input and waits, up to `wait`, for its answer. The
/// same key asked again waits for the first ask's answer instead of asking again, so that the
/// operation may be retried and a long wait is a series of bounded ones.
#[derive(Debug, Clone)]
pub struct LeaseAsk {
    /// The lease.
    pub lease: LeaseRef,
    /// `elicitation/create` or `sampling/createMessage`.
    pub method: String,
    /// The request's params (an object).
    pub params: Value,
    /// The request's key, unique within the task.
    pub key: String,
    /// How long to wait for the answer before answering without it.
    pub wait: Duration,
}

/// A worker's input request under way: its answer to come, for every ask of its key.
pub(crate) type Asked = futures::future::Shared<futures::future::BoxFuture<'static, ToolResult>>;

impl Host {
    /// Take up to `max` queued tasks of `tools` (in turn across the tools, each fairly across
    /// principals) and grant them to `worker_id` of `identity`, all at once.
    pub(super) async fn take(
        &self,
        identity: &str,
        worker_id: &str,
        tools: &[String],
        max: usize,
    ) -> Vec<Leased> {
        let mut taken = Vec::new();
        {
            let mut queues = self.inner.workers.queues.lock();
            loop {
                let before = taken.len();
                for tool in tools {
                    if taken.len() >= max {
                        break;
                    }
                    if let Some((task_id, waiting)) = queues.pop(tool) {
                        taken.push((task_id, waiting));
                    }
                }
                if taken.len() >= max || taken.len() == before {
                    break;
                }
            }
            for tool in tools {
                super::metrics::queued(tool, queues.len(tool));
            }
        }
        let grants = taken
            .into_iter()
            .map(|(task_id, waiting)| self.grant(identity, worker_id, task_id, waiting));
        futures::future::join_all(grants)
            .await
            .into_iter()
            .flatten()
            .collect()
    }

    /// Write the lease of queued task `task_id` for `worker_id` through its shard's log, and
    /// tell its execution (which queues it again if this fails).
    async fn grant(
        &self,
        identity: &str,
        worker_id: &str,
        task_id: String,
        waiting: Waiting,
    ) -> Option<Leased> {
        let Waiting {
            shard,
            term,
            tool,
            queued_at,
            granted,
        } = waiting;
        let leased = async {
            let replica = self.shard(shard).ok()?;
            let record = replica.read_local(|s| s.get(&task_id).cloned())?;
            let job = record.worker.as_ref()?;
            let now = now_ms();
            let lease = Lease {
                holder: identity.to_string(),
                worker_id: worker_id.to_string(),
                token: secret().ok()?,
                attempt: job.attempts.saturating_add(1),
                deadline_ms: now + self.inner.workers.settings.lease_ms,
            };
            let cmd = Command::Grant {
                task_id: task_id.clone(),
                term,
                lease,
                at_ms: now,
            };
            match replica.propose(cmd).await {
                Ok(Applied::Updated { record }) => leased_of(&record),
                other => {
                    tracing::debug!(task_id = %task_id, result = ?other, "grant refused");
                    None
                }
            }
        }
        .await;
        let _ = granted.send(leased.is_some());
        if leased.is_some() {
            super::metrics::lease(&tool, "granted");
            super::metrics::dispatched(&tool, queued_at.elapsed());
            tracing::debug!(task_id = %task_id, worker_id, "task leased");
        }
        leased
    }

    /// The record of `lease`'s task on this node, the leader of `shard`, and its lease, after
    /// checking both are the worker's: the token and the holder. A task that ended or is gone
    /// is `Ok(None)`.
    fn leased_record(
        &self,
        shard: u32,
        lease: &LeaseRef,
    ) -> Result<Option<(TaskRecord, Lease)>, HostError> {
        let replica = self.shard(shard)?;
        if !replica.is_leader() {
            return Err(HostError::NotLeader {
                shard,
                leader_hint: replica.leadership().borrow().leader,
            });
        }
        let Some(record) = replica.read_local(|s| s.get(&lease.task_id).cloned()) else {
            return Ok(None);
        };
        if record.status.is_terminal() {
            return Ok(None);
        }
        match record.worker.as_ref().and_then(|w| w.lease.clone()) {
            Some(l) if l.token == lease.token && l.holder == lease.holder => Ok(Some((record, l))),
            _ => {
                super::metrics::lease(&record.request.tool, "stale_refused");
                Err(HostError::StaleLease)
            }
        }
    }

    /// Why a lease operation on `task_id` has no live task: [`HostError::Terminal`] with the
    /// status it ended in, or [`HostError::NotFound`] when it is gone (expired).
    fn ended(&self, shard: u32, task_id: &str) -> Result<HostError, HostError> {
        let replica = self.shard(shard)?;
        Ok(
            match replica.read_local(|s| s.get(task_id).map(|r| r.status)) {
                Some(s) => HostError::Terminal(s),
                None => HostError::NotFound,
            },
        )
    }

    /// A heartbeat on the leader of `shard` (see [`LeaseBeat`]).
    pub(crate) async fn lease_beat(
        &self,
        shard: u32,
        beat: LeaseBeat,
    ) -> Result<Renewed, HostError> {
        let cancelled = Renewed {
            deadline_ms: 0,
            cancelled: true,
        };
        if self.leased_record(shard, &beat.lease)?.is_none() {
            // Gone (expired) or cancelled: stop. Ended otherwise: the worker is told how.
            return match self.ended(shard, &beat.lease.task_id)? {
                HostError::Terminal(s) if s != TaskStatus::Cancelled => Err(HostError::Terminal(s)),
                _ => Ok(cancelled),
            };
        }
        if let (Some((progress, total, message)), Some(actor)) =
            (beat.progress, self.actor(&beat.lease.task_id))
        {
            let _ = actor.cast(TaskMsg::Progress {
                progress,
                total,
                message,
            });
        }
        let now = now_ms();
        let cmd = Command::Renew {
            task_id: beat.lease.task_id.clone(),
            token: beat.lease.token.clone(),
            deadline_ms: now + self.inner.workers.settings.lease_ms,
            message: beat.status_message,
            at_ms: now,
        };
        match self.propose_lease(shard, cmd).await? {
            Some(record) => Ok(Renewed {
                deadline_ms: record
                    .worker
                    .and_then(|w| w.lease)
                    .map_or(0, |l| l.deadline_ms),
                cancelled: false,
            }),
            None => Ok(cancelled),
        }
    }

    /// A completion on the leader of `shard` (see [`LeaseComplete`]): the status the task
    /// ended in.
    pub(crate) async fn lease_complete(
        &self,
        shard: u32,
        done: LeaseComplete,
    ) -> Result<TaskStatus, HostError> {
        let max = self.inner.cfg.tasks.max_result_bytes;
        let (status, message, outcome) = finish_of(&done.result, usize::MAX);
        let size = match &outcome {
            taskmesh_task::Outcome::Result { json } => json.len(),
            taskmesh_task::Outcome::Error {
                message, data_json, ..
            } => message.len() + data_json.as_ref().map_or(0, String::len),
        };
        if size > max {
            return Err(HostError::Invalid(format!(
                "the result of {size} bytes exceeds the limit of {max} bytes (tasks.max_result_bytes); complete with a smaller result or an error"
            )));
        }
        if self.leased_record(shard, &done.lease)?.is_none() {
            return Err(self.ended(shard, &done.lease.task_id)?);
        }
        let cmd = Command::Complete {
            task_id: done.lease.task_id.clone(),
            token: done.lease.token.clone(),
            status,
            message: Some(message),
            outcome,
            at_ms: now_ms(),
        };
        match self.propose_lease(shard, cmd).await? {
            Some(record) => {
                self.stop_actor(&record.task_id);
                super::metrics::lease(&record.request.tool, "completed");
                crate::audit_terminal(self, &record, "task completed by its worker");
                Ok(record.status)
            }
            None => Err(HostError::NotFound),
        }
    }

    /// An input request on the leader of `shard` (see [`LeaseAsk`]): the client's answer (or
    /// the error the request got), or `None` when it has not come within the wait.
    pub(crate) async fn lease_ask(
        &self,
        shard: u32,
        ask: LeaseAsk,
    ) -> Result<Option<ToolResult>, HostError> {
        let method: &'static str = match ask.method.as_str() {
            "elicitation/create" => "elicitation/create",
            "sampling/createMessage" => "sampling/createMessage",
            other => {
                return Err(HostError::Invalid(format!(
                    "method must be elicitation/create or sampling/createMessage, not '{other}'"
                )))
            }
        };
        if !ask.params.is_object() {
            return Err(HostError::Invalid("params must be a JSON object".into()));
        }
        if ask.key.is_empty() || ask.key.len() > MAX_ASK_KEY {
            return Err(HostError::Invalid(format!(
                "key must be 1 to {MAX_ASK_KEY} characters"
            )));
        }
        let Some((record, _)) = self.leased_record(shard, &ask.lease)? else {
            return Err(self.ended(shard, &ask.lease.task_id)?);
        };
        let caps = record.request.client;
        let supported = match method {
            "elicitation/create" => caps.elicitation,
            _ => caps.sampling,
        };
        if !supported {
            return Ok(Some(Err(ErrorObject::new(
                taskmesh_mcp::jsonrpc::METHOD_NOT_FOUND,
                format!("the task's client did not declare support for {method}"),
            ))));
        }
        let id = (ask.lease.task_id.clone(), ask.key.clone());
        let asked = self.inner.workers.asks.lock().get(&id).cloned();
        let asked = match asked {
            Some(a) => a,
            None => {
                let Some(actor) = self.actor(&ask.lease.task_id) else {
                    return Err(HostError::Unavailable(
                        "the task's execution is starting; ask again".into(),
                    ));
                };
                let (reply, answer) = tokio::sync::oneshot::channel();
                actor
                    .cast(TaskMsg::Outbound {
                        key: Some(ask.key),
                        method,
                        params: ask.params,
                        reply,
                    })
                    .map_err(|_| HostError::Unavailable("the task's execution stopped".into()))?;
                let answer: futures::future::BoxFuture<'static, ToolResult> =
                    Box::pin(async move {
                        answer.await.unwrap_or_else(|_| {
                            Err(ErrorObject::internal("the task's execution stopped"))
                        })
                    });
                let asked = futures::FutureExt::shared(answer);
                self.inner.workers.asks.lock().insert(id, asked.clone());
                asked
            }
        };
        Ok(tokio::time::timeout(ask.wait, asked).await.ok())
    }

    /// Propose a lease command on `shard`: the changed record, `None` when the task ended or is
    /// gone, [`HostError::StaleLease`] when the token no longer holds.
    async fn propose_lease(
        &self,
        shard: u32,
        cmd: Command,
    ) -> Result<Option<TaskRecord>, HostError> {
        let replica = self.shard(shard)?;
        let task_id = cmd.task_id().unwrap_or_default().to_string();
        let cmd_task = task_id.as_str();
        match replica
            .propose(cmd)
            .await
            .map_err(|e| HostError::from_shard(shard, e))?
        {
            Applied::Updated { record } => Ok(Some(record)),
            Applied::Rejected(Rejection::StaleLease) => {
                if let Some(tool) =
                    replica.read_local(|s| s.get(cmd_task).map(|r| r.request.tool.clone()))
                {
                    super::metrics::lease(&tool, "stale_refused");
                }
                Err(HostError::StaleLease)
            }
            Applied::Rejected(Rejection::Terminal(_) | Rejection::NotFound) => Ok(None),
            other => Err(HostError::Internal(format!(
                "unexpected lease command result {other:?}"
            ))),
        }
    }
}

/// What a worker gets of a record its lease was just written to.
fn leased_of(record: &TaskRecord) -> Option<Leased> {
    let lease = record.worker.as_ref()?.lease.as_ref()?;
    Some(Leased {
        task_id: record.task_id.clone(),
        tool: record.request.tool.clone(),
        arguments_json: record.request.arguments_json.clone(),
        principal: record.owner.clone(),
        attempt: lease.attempt,
        token: lease.token.clone(),
        deadline_ms: lease.deadline_ms,
        progress_wanted: record.request.progress_token_json.is_some(),
    })
}
