//! Domain <-> `taskmesh.v1` messages: task views and records, statuses and host errors here;
//! the task operations of `TaskService.Apply` and their answers in [`ops`].

pub mod ops;

use std::sync::Arc;

use taskmesh_host::{HostError, TaskRead};
use taskmesh_rpc::v1;
use taskmesh_task::{
    ClientCaps, ClientTask, Lease, Outbox, OutboxEvent, Outcome, TaskRecord, TaskStatus, TaskView,
    ToolRequest, Watcher, WorkerJob,
};

/// A struct literal whose fields listed in brackets move from the fields of the same name of
/// `$from` (the two forms agree on their name and type), and whose other fields are given.
macro_rules! moving {
    ($($ty:ident)::+ { [$($same:ident),* $(,)?] from $from:ident, $($field:ident: $value:expr),* $(,)? }) => {
        $($ty)::+ { $($same: $from.$same,)* $($field: $value,)* }
    };
}

mod lease;
pub use lease::{leased_from_pb, leased_to_pb, worker_tool_from_pb, worker_tool_to_pb};

/// The wire form of a status.
pub fn status_to_pb(s: TaskStatus) -> v1::TaskStatus {
    match s {
        TaskStatus::Working => v1::TaskStatus::Working,
        TaskStatus::InputRequired => v1::TaskStatus::InputRequired,
        TaskStatus::Completed => v1::TaskStatus::Completed,
        TaskStatus::Failed => v1::TaskStatus::Failed,
        TaskStatus::Cancelled => v1::TaskStatus::Cancelled,
    }
}

/// A status from the wire; `None` for `Unspecified`.
pub fn status_from_pb(s: v1::TaskStatus) -> Option<TaskStatus> {
    Some(match s {
        v1::TaskStatus::Working => TaskStatus::Working,
        v1::TaskStatus::InputRequired => TaskStatus::InputRequired,
        v1::TaskStatus::Completed => TaskStatus::Completed,
        v1::TaskStatus::Failed => TaskStatus::Failed,
        v1::TaskStatus::Cancelled => TaskStatus::Cancelled,
        v1::TaskStatus::Unspecified => return None,
    })
}

/// The wire form of a view; its strings move into it (no copy).
pub fn view_to_pb(v: TaskView) -> v1::TaskView {
    moving!(v1::TaskView {
        [task_id, status_message, created_at_ms, last_updated_at_ms, ttl_ms, poll_interval_ms,
         updated_index] from v,
        status: status_to_pb(v.status) as i32,
    })
}

/// A view from a peer; `None` when it is malformed (no status).
pub fn view_from_pb(v: v1::TaskView) -> Option<TaskView> {
    let status = status_from_pb(v1::TaskStatus::try_from(v.status).ok()?)?;
    Some(moving!(TaskView {
        [task_id, status_message, created_at_ms, last_updated_at_ms, ttl_ms, poll_interval_ms,
         updated_index] from v,
        status: status,
    }))
}

/// The wire form of a read's answer (a `ReadTasks` result); its strings move into it.
pub fn read_to_pb(r: TaskRead) -> v1::get_task_result::Outcome {
    use v1::get_task_result::Outcome as W;
    match r {
        TaskRead::Task(task) => W::Task(view_to_pb(task)),
        TaskRead::Waiting { task, requests } => W::Waiting(v1::WaitingTask {
            task: Some(view_to_pb(task)),
            requests_json: requests.iter().map(|j| j.to_vec()).collect(),
        }),
        TaskRead::Ended(record) => W::Ended(record_to_pb(*record)),
    }
}

/// A read's answer from a peer; a malformed one (or none) is [`HostError::Internal`], an
/// error the peer's [`HostError`] for `shard`.
pub fn read_from_pb(
    shard: u32,
    r: Option<v1::get_task_result::Outcome>,
) -> Result<TaskRead, HostError> {
    use v1::get_task_result::Outcome as W;
    match r {
        Some(W::Task(t)) => ops::view_of(Some(t)).map(TaskRead::Task),
        Some(W::Waiting(w)) => Ok(TaskRead::Waiting {
            task: ops::view_of(w.task)?,
            requests: w.requests_json.into_iter().map(Arc::new).collect(),
        }),
        Some(W::Ended(r)) => ops::record_of(Some(r)).map(|r| TaskRead::Ended(Box::new(r))),
        Some(W::Error(e)) => Err(error_from_pb(shard, &e)),
        None => Err(HostError::Internal(
            "a peer answered fewer reads than it was asked".into(),
        )),
    }
}

/// The wire form of a record; the record's strings move into it (no copy).
pub fn record_to_pb(r: TaskRecord) -> v1::TaskRecord {
    moving!(v1::TaskRecord {
        [task_id, owner, session, status_message, created_at_ms, last_updated_at_ms, ttl_ms,
         poll_interval_ms, exec_term, updated_index, upstream_task] from r,
        status: status_to_pb(r.status) as i32,
        request: Some(request_to_pb(r.request)),
        client_task: r.client_task.map(|c| moving!(v1::ClientTask { [key, method, task_id] from c, })),
        outcome: r.outcome.map(outcome_to_pb),
        worker: r.worker.map(|w| v1::WorkerJob {
            rerun: w.rerun,
            attempts: w.attempts,
            lease: w.lease.map(|l| moving!(v1::WorkerLease {
                [holder, worker_id, token, attempt, deadline_ms] from l,
            })),
        }),
        outbox: r.outbox.map(|o| v1::TaskOutbox {
            watchers: o
                .watchers
                .into_iter()
                .map(|w| moving!(v1::TaskWatcher { [id, terminal_only] from w, }))
                .collect(),
            events: o
                .events
                .into_iter()
                .map(|e| moving!(v1::OutboxEvent {
                    [index, status_message, at_ms, pending] from e,
                    status: status_to_pb(e.status) as i32,
                }))
                .collect(),
        }),
    })
}

/// The wire form of an outcome.
pub fn outcome_to_pb(o: Outcome) -> v1::Outcome {
    v1::Outcome {
        kind: Some(match o {
            Outcome::Result { json } => v1::outcome::Kind::ResultJson(json),
            Outcome::Error {
                code,
                message,
                data_json,
            } => v1::outcome::Kind::Error(v1::OutcomeError {
                code,
                message,
                data_json,
            }),
        }),
    }
}

/// An outcome from the wire; `None` when it has no kind.
pub fn outcome_from_pb(o: v1::Outcome) -> Option<Outcome> {
    Some(match o.kind? {
        v1::outcome::Kind::ResultJson(json) => Outcome::Result { json },
        v1::outcome::Kind::Error(e) => Outcome::Error {
            code: e.code,
            message: e.message,
            data_json: e.data_json,
        },
    })
}

/// The wire form of a tool request; its strings move into it (no copy) and the client
/// capabilities are always set.
pub fn request_to_pb(r: ToolRequest) -> v1::ToolRequest {
    moving!(v1::ToolRequest {
        [tool, arguments_json, progress_token_json, answers_json, traceparent] from r,
        client: Some(v1::ClientCaps {
            elicitation: r.client.elicitation,
            sampling: r.client.sampling,
            elicitation_tasks: r.client.elicitation_tasks,
            sampling_tasks: r.client.sampling_tasks,
        }),
    })
}

/// A tool request from the wire; missing client capabilities read as neither
/// elicitation nor sampling.
pub fn request_from_pb(r: v1::ToolRequest) -> ToolRequest {
    let client = r.client.unwrap_or_default();
    moving!(ToolRequest {
        [tool, arguments_json, progress_token_json, answers_json, traceparent] from r,
        client: ClientCaps {
            elicitation: client.elicitation,
            sampling: client.sampling,
            elicitation_tasks: client.elicitation_tasks,
            sampling_tasks: client.sampling_tasks,
        },
    })
}

/// A record from a peer; `None` when it is malformed.
pub fn record_from_pb(r: v1::TaskRecord) -> Option<TaskRecord> {
    let status = status_from_pb(v1::TaskStatus::try_from(r.status).ok()?)?;
    let outcome = r.outcome.and_then(outcome_from_pb);
    let request = request_from_pb(r.request?);
    let outbox = match r.outbox {
        Some(o) => Some(Box::new(Outbox {
            watchers: o
                .watchers
                .into_iter()
                .map(|w| moving!(Watcher { [id, terminal_only] from w, }))
                .collect(),
            events: o
                .events
                .into_iter()
                .map(|e| {
                    let status = status_from_pb(v1::TaskStatus::try_from(e.status).ok()?)?;
                    Some(moving!(OutboxEvent {
                        [index, status_message, at_ms, pending] from e,
                        status: status,
                    }))
                })
                .collect::<Option<Vec<_>>>()?,
        })),
        None => None,
    };
    Some(moving!(TaskRecord {
        [task_id, owner, session, status_message, created_at_ms, last_updated_at_ms, ttl_ms,
         poll_interval_ms, exec_term, updated_index, upstream_task] from r,
        status: status,
        request: request,
        outcome: outcome,
        client_task: r.client_task.map(|c| moving!(ClientTask { [key, method, task_id] from c, })),
        worker: r.worker.map(|w| WorkerJob {
            rerun: w.rerun,
            attempts: w.attempts,
            lease: w.lease.map(|l| moving!(Lease {
                [holder, worker_id, token, attempt, deadline_ms] from l,
            })),
        }),
        outbox: outbox,
    }))
}

/// A host error as a gRPC status carrying a `TaskError`.
pub fn error_to_status(
    e: &HostError,
    leader_addr: impl Fn(u64) -> Option<String>,
) -> tonic::Status {
    error_to_pb(e, leader_addr).into_status()
}

/// An error with the chain of its causes, for a message that crosses to another node.
fn report(e: &dyn std::error::Error) -> String {
    let mut msg = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        msg.push_str(": ");
        msg.push_str(&c.to_string());
        cause = c.source();
    }
    msg
}

/// A host error as a `TaskError`.
pub fn error_to_pb(e: &HostError, leader_addr: impl Fn(u64) -> Option<String>) -> v1::TaskError {
    use v1::TaskErrorKind as Kind;
    let msg = report(e);
    match e {
        HostError::NotFound => v1::TaskError::not_found(msg),
        HostError::Terminal(s) => v1::TaskError::terminal(status_to_pb(*s), msg),
        HostError::Capacity { limit } => v1::TaskError::capacity(*limit as u64, msg),
        HostError::NotLeader { leader_hint, .. } => v1::TaskError::not_leader(
            leader_hint.map(|id| v1::LeaderHint {
                node_id: id,
                address: leader_addr(id).unwrap_or_default(),
            }),
            msg,
        ),
        HostError::Unavailable(_) => v1::TaskError::unavailable(msg),
        HostError::Invalid(_) => v1::TaskError::of_kind(Kind::Invalid, msg),
        HostError::StaleLease => v1::TaskError::of_kind(Kind::StaleLease, msg),
        HostError::QueueFull(_) => v1::TaskError::of_kind(Kind::QueueFull, msg),
        HostError::Misconfigured(_) => v1::TaskError::of_kind(Kind::Misconfigured, msg),
        HostError::Shard { .. } | HostError::Internal(_) => {
            v1::TaskError::of_kind(Kind::Internal, msg)
        }
    }
}

/// A gRPC status from a peer as a host error.
pub fn error_from_status(shard: u32, s: &tonic::Status) -> HostError {
    error_from_pb(shard, &v1::TaskError::of_status(s))
}

/// A `TaskError` from a peer as a host error. The peer's message is kept as the detail (a
/// peer's storage failure arrives as [`HostError::Internal`] with its causes in the text).
pub fn error_from_pb(shard: u32, e: &v1::TaskError) -> HostError {
    use v1::TaskErrorKind as Kind;
    let detail = || e.message.clone();
    match e.kind() {
        Kind::NotFound => HostError::NotFound,
        Kind::Terminal => status_from_pb(e.terminal_status())
            .map(HostError::Terminal)
            .unwrap_or_else(|| {
                HostError::Internal(format!("a terminal error without its status: {}", detail()))
            }),
        Kind::NotLeader => HostError::NotLeader {
            shard,
            leader_hint: e.leader.as_ref().map(|l| l.node_id).filter(|id| *id != 0),
        },
        Kind::Capacity => match e.limit {
            Some(limit) => HostError::Capacity {
                limit: usize::try_from(limit).unwrap_or(usize::MAX),
            },
            None => {
                HostError::Internal(format!("a capacity error without its limit: {}", detail()))
            }
        },
        Kind::Invalid => HostError::Invalid(detail()),
        Kind::StaleLease => HostError::StaleLease,
        Kind::QueueFull => HostError::QueueFull(detail()),
        Kind::Misconfigured => HostError::Misconfigured(detail()),
        Kind::Internal => HostError::Internal(detail()),
        Kind::Unavailable | Kind::Unspecified => HostError::Unavailable(detail()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip() {
        let r = TaskRecord {
            task_id: "t".into(),
            owner: "o".into(),
            session: Some("s".into()),
            status: TaskStatus::Failed,
            status_message: Some("m".into()),
            created_at_ms: 1,
            last_updated_at_ms: 2,
            ttl_ms: None,
            poll_interval_ms: 3,
            request: ToolRequest {
                tool: "x".into(),
                arguments_json: "{}".into(),
                progress_token_json: Some("7".into()),
                client: ClientCaps {
                    elicitation: true,
                    sampling: false,
                    elicitation_tasks: false,
                    sampling_tasks: true,
                },
                answers_json: Some(r#"{"user_name":{"action":"accept"}}"#.into()),
                traceparent: Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into()),
            },
            outcome: Some(Outcome::Error {
                code: -32603,
                message: "e".into(),
                data_json: None,
            }),
            exec_term: 4,
            updated_index: 5,
            upstream_task: Some("up-1".into()),
            client_task: Some(ClientTask {
                key: "elicitation/create#1".into(),
                method: "elicitation/create".into(),
                task_id: "client-7".into(),
            }),
            worker: Some(WorkerJob {
                rerun: true,
                attempts: 2,
                lease: Some(Lease {
                    holder: "billing".into(),
                    worker_id: "w".into(),
                    token: "t0k".into(),
                    attempt: 2,
                    deadline_ms: 9,
                }),
            }),
            outbox: Some(Box::new(Outbox {
                watchers: vec![
                    Watcher::every_change("sub-a"),
                    Watcher {
                        id: "sub-b".into(),
                        terminal_only: true,
                    },
                ],
                events: vec![OutboxEvent {
                    index: 5,
                    status: TaskStatus::Failed,
                    status_message: Some("m".into()),
                    at_ms: 2,
                    pending: vec!["sub-b".into()],
                }],
            })),
        };
        let view = TaskView::from(&r);
        assert_eq!(record_from_pb(record_to_pb(r.clone())), Some(r));
        assert_eq!(view_from_pb(view_to_pb(view.clone())), Some(view));
    }

    /// Each host error crosses a gRPC status as the same kind of error, with what the caller
    /// acts on (terminal status, leader hint, limit) and whether it may be retried.
    #[test]
    fn errors_keep_their_kind_and_retryability_across_a_status() {
        let storage = taskmesh_shard::ShardError::storage(std::io::Error::other("disk full"));
        let cases = [
            HostError::NotFound,
            HostError::Terminal(TaskStatus::Completed),
            HostError::Capacity { limit: 7 },
            HostError::NotLeader {
                shard: 3,
                leader_hint: Some(2),
            },
            HostError::Unavailable("an election".into()),
            HostError::Invalid("bad arguments".into()),
            HostError::StaleLease,
            HostError::QueueFull("tool x is full".into()),
            HostError::Misconfigured("tool x is not served".into()),
            HostError::from_shard(3, storage),
            HostError::Internal("a bug".into()),
        ];
        for e in cases {
            let s = error_to_status(&e, |_| Some("127.0.0.1:1".into()));
            let back = error_from_status(3, &s);
            assert_eq!(back.retryable(), e.retryable(), "{e:?} -> {back:?}");
            match (&e, &back) {
                (HostError::NotFound, HostError::NotFound)
                | (HostError::Unavailable(_), HostError::Unavailable(_))
                | (HostError::Invalid(_), HostError::Invalid(_))
                | (HostError::StaleLease, HostError::StaleLease)
                | (HostError::QueueFull(_), HostError::QueueFull(_))
                | (HostError::Misconfigured(_), HostError::Misconfigured(_))
                | (HostError::Internal(_), HostError::Internal(_)) => {}
                (HostError::Shard { .. }, HostError::Internal(m)) => {
                    assert!(m.contains("disk full"), "the cause travels: {m}")
                }
                (HostError::Terminal(a), HostError::Terminal(b)) => assert_eq!(a, b),
                (HostError::Capacity { limit: a }, HostError::Capacity { limit: b }) => {
                    assert_eq!(a, b)
                }
                (
                    HostError::NotLeader { leader_hint: a, .. },
                    HostError::NotLeader { leader_hint: b, .. },
                ) => assert_eq!(a, b),
                _ => panic!("{e:?} came back as {back:?}"),
            }
        }
    }

    /// Statuses of the gRPC layer (no TaskError in them) read by their code.
    #[test]
    fn plain_statuses_read_by_their_code() {
        let read = |s: tonic::Status| error_from_status(0, &s);
        assert!(matches!(
            read(tonic::Status::internal("x")),
            HostError::Internal(_)
        ));
        assert!(matches!(
            read(tonic::Status::invalid_argument("x")),
            HostError::Invalid(_)
        ));
        assert!(matches!(
            read(tonic::Status::unimplemented("x")),
            HostError::Misconfigured(_)
        ));
        for s in [
            tonic::Status::unavailable("x"),
            tonic::Status::deadline_exceeded("x"),
            tonic::Status::cancelled("x"),
            tonic::Status::unknown("x"),
        ] {
            assert!(read(s).retryable());
        }
    }
}
