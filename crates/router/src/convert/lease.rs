//! The wire form of the worker lease operations (`LeaseBeat`, `LeaseComplete`, `LeaseAsk`) and
//! their answers, both ways: the parts of `ops.rs`'s conversions that are about leases.

use serde_json::Value;
use taskmesh_host::ops::{LeaseAsk, LeaseBeat, LeaseComplete, LeaseRef, Renewed};
use taskmesh_host::workers::Leased;
use taskmesh_host::HostError;
use taskmesh_mcp::ErrorObject;
use taskmesh_mcp::TaskSupport;
use taskmesh_rpc::v1;
use taskmesh_task::{Outcome, TaskStatus};
use taskmesh_tools::{ResumePolicy, ToolSpec};
type ToolResult = Result<Value, ErrorObject>;
use tonic::Status;

use super::{outcome_from_pb, outcome_to_pb, status_from_pb, status_to_pb};

fn lease_to_pb(shard: u32, l: &LeaseRef) -> Option<v1::LeaseRef> {
    Some(v1::LeaseRef {
        shard,
        task_id: l.task_id.clone(),
        token: l.token.clone(),
        holder: l.holder.clone(),
    })
}

/// The lease a peer sent, with the shard it names.
fn lease_from_pb(l: Option<v1::LeaseRef>) -> Result<(u32, LeaseRef), Status> {
    let l = l.ok_or_else(|| Status::invalid_argument("lease is required"))?;
    Ok((
        l.shard,
        LeaseRef {
            task_id: l.task_id,
            token: l.token,
            holder: l.holder,
        },
    ))
}

/// A tool result (or a client's answer) as an outcome on the wire.
fn result_to_pb(r: &ToolResult) -> v1::Outcome {
    outcome_to_pb(match r {
        Ok(v) => Outcome::Result {
            json: v.to_string(),
        },
        Err(e) => Outcome::Error {
            code: e.code,
            message: e.message.clone(),
            data_json: e.data.as_ref().map(|d| d.to_string()),
        },
    })
}

/// An outcome on the wire as a tool result; `None` when it is malformed.
fn result_from_pb(o: Option<v1::Outcome>) -> Option<ToolResult> {
    Some(match outcome_from_pb(o?)? {
        Outcome::Result { json } => Ok(serde_json::from_str(&json).ok()?),
        Outcome::Error {
            code,
            message,
            data_json,
        } => Err(ErrorObject {
            code,
            message,
            data: match data_json {
                Some(d) => Some(serde_json::from_str(&d).ok()?),
                None => None,
            },
        }),
    })
}

pub(super) fn beat_to_pb(shard: u32, b: &LeaseBeat) -> v1::LeaseBeatRequest {
    let (progress, total, progress_message) = match &b.progress {
        Some((p, t, m)) => (Some(*p), *t, m.clone()),
        None => (None, None, None),
    };
    v1::LeaseBeatRequest {
        lease: lease_to_pb(shard, &b.lease),
        progress,
        total,
        progress_message,
        status_message: b.status_message.clone(),
    }
}

pub(super) fn beat_from_pb(r: v1::LeaseBeatRequest) -> Result<(u32, LeaseBeat), Status> {
    let (shard, lease) = lease_from_pb(r.lease)?;
    Ok((
        shard,
        LeaseBeat {
            lease,
            progress: r.progress.map(|p| (p, r.total, r.progress_message)),
            status_message: r.status_message,
        },
    ))
}

pub(super) fn complete_to_pb(shard: u32, c: &LeaseComplete) -> v1::LeaseCompleteRequest {
    v1::LeaseCompleteRequest {
        lease: lease_to_pb(shard, &c.lease),
        outcome: Some(result_to_pb(&c.result)),
    }
}

pub(super) fn complete_from_pb(
    r: v1::LeaseCompleteRequest,
) -> Result<(u32, LeaseComplete), Status> {
    let (shard, lease) = lease_from_pb(r.lease)?;
    let result = result_from_pb(r.outcome)
        .ok_or_else(|| Status::invalid_argument("outcome is missing or malformed"))?;
    Ok((shard, LeaseComplete { lease, result }))
}

pub(super) fn ask_to_pb(shard: u32, a: &LeaseAsk) -> v1::LeaseAskRequest {
    v1::LeaseAskRequest {
        lease: lease_to_pb(shard, &a.lease),
        method: a.method.clone(),
        params_json: a.params.to_string(),
        key: a.key.clone(),
        wait_ms: a.wait.as_millis() as u64,
    }
}

pub(super) fn ask_from_pb(r: v1::LeaseAskRequest) -> Result<(u32, LeaseAsk), Status> {
    let params = serde_json::from_str(&r.params_json)
        .map_err(|e| Status::invalid_argument(format!("params_json: {e}")))?;
    let (shard, lease) = lease_from_pb(r.lease)?;
    let ask = LeaseAsk {
        lease,
        method: r.method,
        params,
        key: r.key,
        wait: std::time::Duration::from_millis(r.wait_ms.min(MAX_ASK_WAIT_MS)),
    };
    Ok((shard, ask))
}

pub(super) fn renewed_to_pb(r: Renewed) -> v1::LeaseBeatResponse {
    v1::LeaseBeatResponse {
        deadline_ms: r.deadline_ms,
        cancelled: r.cancelled,
    }
}

pub(super) fn renewed_from_pb(r: v1::LeaseBeatResponse) -> Renewed {
    Renewed {
        deadline_ms: r.deadline_ms,
        cancelled: r.cancelled,
    }
}

pub(super) fn completed_to_pb(s: TaskStatus) -> v1::LeaseCompleteResponse {
    v1::LeaseCompleteResponse {
        status: status_to_pb(s) as i32,
    }
}

pub(super) fn completed_from_pb(r: v1::LeaseCompleteResponse) -> Result<TaskStatus, HostError> {
    v1::TaskStatus::try_from(r.status)
        .ok()
        .and_then(status_from_pb)
        .ok_or_else(|| HostError::Internal("a completion answer without its status".into()))
}

pub(super) fn answered_to_pb(r: &Option<ToolResult>) -> v1::LeaseAskResponse {
    v1::LeaseAskResponse {
        answer: r.as_ref().map(result_to_pb),
    }
}

pub(super) fn answered_from_pb(r: v1::LeaseAskResponse) -> Result<Option<ToolResult>, HostError> {
    match r.answer {
        None => Ok(None),
        answer => result_from_pb(answer)
            .map(Some)
            .ok_or_else(|| HostError::Internal("an input answer that does not decode".into())),
    }
}

/// The longest wait of one input ask a peer may ask for: below the peers' request time-out.
const MAX_ASK_WAIT_MS: u64 = 10_000;

/// A worker tool's declaration on the wire.
pub fn worker_tool_to_pb(spec: &ToolSpec) -> v1::WorkerTool {
    let text = |v: &Option<Value>| v.as_ref().map(Value::to_string).unwrap_or_default();
    v1::WorkerTool {
        name: spec.name.clone(),
        title: spec.title.clone().unwrap_or_default(),
        description: spec.description.clone().unwrap_or_default(),
        input_schema_json: spec.input_schema.to_string(),
        output_schema_json: text(&spec.output_schema),
        task_support: match spec.task_support {
            TaskSupport::Required => v1::WorkerTaskSupport::Required,
            TaskSupport::Forbidden => v1::WorkerTaskSupport::Forbidden,
            TaskSupport::Optional => v1::WorkerTaskSupport::Optional,
        } as i32,
        resume: match spec.resume {
            ResumePolicy::Fail => v1::WorkerResumePolicy::Fail,
            ResumePolicy::Rerun => v1::WorkerResumePolicy::Rerun,
        } as i32,
        annotations_json: text(&spec.annotations),
    }
}

/// A worker tool's declaration from the wire, or why it is malformed (naming the field).
pub fn worker_tool_from_pb(t: v1::WorkerTool) -> Result<ToolSpec, String> {
    let json = |text: &str, field: &str| -> Result<Option<Value>, String> {
        if text.trim().is_empty() {
            return Ok(None);
        }
        serde_json::from_str(text)
            .map(Some)
            .map_err(|e| format!("tool '{}': {field} is not JSON: {e}", t.name))
    };
    let task_support = match v1::WorkerTaskSupport::try_from(t.task_support) {
        Ok(v1::WorkerTaskSupport::Required) => TaskSupport::Required,
        Ok(v1::WorkerTaskSupport::Forbidden) => TaskSupport::Forbidden,
        Ok(_) => TaskSupport::Optional,
        Err(_) => {
            return Err(format!(
                "tool '{}': unknown task_support {}",
                t.name, t.task_support
            ))
        }
    };
    let resume = match v1::WorkerResumePolicy::try_from(t.resume) {
        Ok(v1::WorkerResumePolicy::Fail) => ResumePolicy::Fail,
        Ok(_) => ResumePolicy::Rerun,
        Err(_) => {
            return Err(format!(
                "tool '{}': unknown resume policy {}",
                t.name, t.resume
            ))
        }
    };
    let input_schema = json(&t.input_schema_json, "inputSchema")?
        .ok_or_else(|| format!("tool '{}': inputSchema is required", t.name))?;
    let output_schema = json(&t.output_schema_json, "outputSchema")?;
    let annotations = json(&t.annotations_json, "annotations")?;
    let mut spec = ToolSpec::new(t.name, input_schema, task_support, resume);
    spec.title = Some(t.title).filter(|s| !s.is_empty());
    spec.description = Some(t.description).filter(|s| !s.is_empty());
    spec.output_schema = output_schema;
    spec.annotations = annotations;
    Ok(spec)
}

/// A lease granted to a worker, on the wire.
pub fn leased_to_pb(l: Leased) -> v1::TaskLease {
    moving!(v1::TaskLease {
        [task_id, tool, arguments_json, principal, attempt, token, deadline_ms, progress_wanted]
        from l,
    })
}

/// A lease granted by another node, from the wire.
pub fn leased_from_pb(l: v1::TaskLease) -> Leased {
    moving!(Leased {
        [task_id, tool, arguments_json, principal, attempt, token, deadline_ms, progress_wanted]
        from l,
    })
}
