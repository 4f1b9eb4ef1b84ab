//! Domain <-> `taskmesh.v1` messages: task records, statuses and host errors.

use taskmesh_host::HostError;
use taskmesh_rpc::v1;
use taskmesh_task::{ClientCaps, Outcome, TaskRecord, TaskStatus, ToolRequest};

pub fn status_to_pb(s: TaskStatus) -> v1::TaskStatus {
    match s {
        TaskStatus::Working => v1::TaskStatus::Working,
        TaskStatus::InputRequired => v1::TaskStatus::InputRequired,
        TaskStatus::Completed => v1::TaskStatus::Completed,
        TaskStatus::Failed => v1::TaskStatus::Failed,
        TaskStatus::Cancelled => v1::TaskStatus::Cancelled,
    }
}

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

/// The wire form of a record; the record's strings move into it (no copy).
pub fn record_to_pb(r: TaskRecord) -> v1::TaskRecord {
    v1::TaskRecord {
        task_id: r.task_id,
        owner: r.owner,
        session: r.session,
        status: status_to_pb(r.status) as i32,
        status_message: r.status_message,
        created_at_ms: r.created_at_ms,
        last_updated_at_ms: r.last_updated_at_ms,
        ttl_ms: r.ttl_ms,
        poll_interval_ms: r.poll_interval_ms,
        request: Some(request_to_pb(r.request)),
        outcome: r.outcome.map(|o| v1::Outcome {
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
        }),
        exec_term: r.exec_term,
        updated_index: r.updated_index,
    }
}

pub fn request_to_pb(r: ToolRequest) -> v1::ToolRequest {
    v1::ToolRequest {
        tool: r.tool,
        arguments_json: r.arguments_json,
        progress_token_json: r.progress_token_json,
        client: Some(v1::ClientCaps {
            elicitation: r.client.elicitation,
            sampling: r.client.sampling,
        }),
    }
}

pub fn request_from_pb(r: v1::ToolRequest) -> ToolRequest {
    let client = r.client.unwrap_or_default();
    ToolRequest {
        tool: r.tool,
        arguments_json: r.arguments_json,
        progress_token_json: r.progress_token_json,
        client: ClientCaps {
            elicitation: client.elicitation,
            sampling: client.sampling,
        },
    }
}

/// A record from a peer; `None` when it is malformed.
pub fn record_from_pb(r: v1::TaskRecord) -> Option<TaskRecord> {
    let status = status_from_pb(v1::TaskStatus::try_from(r.status).ok()?)?;
    let outcome = match r.outcome.and_then(|o| o.kind) {
        None => None,
        Some(v1::outcome::Kind::ResultJson(json)) => Some(Outcome::Result { json }),
        Some(v1::outcome::Kind::Error(e)) => Some(Outcome::Error {
            code: e.code,
            message: e.message,
            data_json: e.data_json,
        }),
    };
    Some(TaskRecord {
        task_id: r.task_id,
        owner: r.owner,
        session: r.session,
        status,
        status_message: r.status_message,
        created_at_ms: r.created_at_ms,
        last_updated_at_ms: r.last_updated_at_ms,
        ttl_ms: r.ttl_ms,
        poll_interval_ms: r.poll_interval_ms,
        request: request_from_pb(r.request?),
        outcome,
        exec_term: r.exec_term,
        updated_index: r.updated_index,
    })
}

/// A host error as a gRPC status carrying a `TaskError`.
pub fn error_to_status(
    e: &HostError,
    leader_addr: impl Fn(u64) -> Option<String>,
) -> tonic::Status {
    error_to_pb(e, leader_addr).into_status()
}

/// A host error as a `TaskError`.
pub fn error_to_pb(e: &HostError, leader_addr: impl Fn(u64) -> Option<String>) -> v1::TaskError {
    let msg = e.to_string();
    match e {
        HostError::NotFound => v1::TaskError::not_found(msg),
        HostError::Terminal(s) => v1::TaskError::terminal(status_to_pb(*s), msg),
        HostError::Capacity { .. } => v1::TaskError::capacity(msg),
        HostError::NotLeader { leader_hint, .. } => v1::TaskError::not_leader(
            leader_hint.map(|id| v1::LeaderHint {
                node_id: id,
                address: leader_addr(id).unwrap_or_default(),
            }),
            msg,
        ),
        HostError::Unavailable(_) | HostError::Internal(_) => v1::TaskError::unavailable(msg),
    }
}

/// A gRPC status from a peer as a host error.
pub fn error_from_status(shard: u32, s: &tonic::Status) -> HostError {
    let Some(e) = v1::TaskError::from_status(s) else {
        return HostError::Unavailable(format!("peer: {}", s.message()));
    };
    error_from_pb(shard, &e)
}

/// A `TaskError` from a peer as a host error.
pub fn error_from_pb(shard: u32, e: &v1::TaskError) -> HostError {
    match e.kind() {
        v1::TaskErrorKind::NotFound => HostError::NotFound,
        v1::TaskErrorKind::Terminal => status_from_pb(e.terminal_status())
            .map(HostError::Terminal)
            .unwrap_or_else(|| HostError::Internal(e.message.clone())),
        v1::TaskErrorKind::NotLeader => HostError::NotLeader {
            shard,
            leader_hint: e.leader.as_ref().map(|l| l.node_id).filter(|id| *id != 0),
        },
        v1::TaskErrorKind::Capacity => HostError::Capacity { limit: 0 },
        v1::TaskErrorKind::Unavailable | v1::TaskErrorKind::Unspecified => {
            HostError::Unavailable(e.message.clone())
        }
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
                },
            },
            outcome: Some(Outcome::Error {
                code: -32603,
                message: "e".into(),
                data_json: None,
            }),
            exec_term: 4,
            updated_index: 5,
        };
        assert_eq!(record_from_pb(record_to_pb(r.clone())), Some(r));
    }

    #[test]
    fn errors_round_trip() {
        for e in [
            HostError::NotFound,
            HostError::Terminal(TaskStatus::Completed),
            HostError::NotLeader {
                shard: 3,
                leader_hint: Some(2),
            },
        ] {
            let s = error_to_status(&e, |_| Some("127.0.0.1:1".into()));
            assert_eq!(error_from_status(3, &s), e);
        }
    }
}
