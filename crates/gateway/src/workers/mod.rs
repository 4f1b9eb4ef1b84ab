//! The worker API (proto/taskmesh/v1/worker.proto): who the worker is, and each call as one
//! function of the request message to the response message. The gRPC service (`grpc.rs`) and
//! the JSON mirror under `/worker/v1/` (`mirror.rs`) both call these, so the two cannot differ.
//!
//! A registration, a poll and a deregistration are this node's (the worker's registrations
//! and the queues of the shards it leads live here); a heartbeat, an input request and a
//! completion are operations on the leader of the task's shard, wherever it is, through the
//! router.

mod grpc;
pub(crate) mod mirror;

pub use grpc::service;

use std::time::Duration;

use axum::http::HeaderValue;
use serde_json::Value;
use taskmesh_host::ops::{LeaseAsk, LeaseBeat, LeaseComplete, LeaseRef};
use taskmesh_host::workers::Declared;
use taskmesh_host::WorkerError;
use taskmesh_mcp::ErrorObject;
use taskmesh_rpc::v1;

use crate::auth::bearer_token;
use crate::Gateway;

/// The worker identity of a call whose `Authorization` header is `header`: a static worker
/// token's, or the principal of an access token that grants the worker scope. A client's
/// static token, or an access token without the worker scope, is refused.
pub(crate) async fn identify(
    gw: &Gateway,
    header: Option<&HeaderValue>,
) -> Result<String, WorkerError> {
    let settings = gw.router.host().worker_settings();
    let Some(token) = bearer_token(header) else {
        return Err(WorkerError::Unauthenticated(
            "a worker credential is required (Authorization: Bearer)".into(),
        ));
    };
    if let Some(identity) = settings.tokens.get(token) {
        return Ok(identity.clone());
    }
    if gw.auth.is_client_token(token) {
        return Err(WorkerError::Forbidden(
            "a client token cannot act as a worker".into(),
        ));
    }
    if !gw.auth.has_issuers() {
        return Err(WorkerError::Unauthenticated(
            "not a worker token of this server (workers.tokens)".into(),
        ));
    }
    match gw.auth.authenticate(header).await {
        Ok(identity) if identity.grants(&settings.scope) => Ok(identity.principal),
        Ok(_) => Err(WorkerError::Forbidden(format!(
            "the access token does not grant the worker scope '{}' (workers.scope)",
            settings.scope
        ))),
        Err(crate::auth::Refusal::Unavailable(why)) => Err(WorkerError::Unavailable(format!(
            "the token could not be checked now: {why}"
        ))),
        Err(e) => Err(WorkerError::Unauthenticated(e.to_string())),
    }
}

/// Whether the bearer token of `header` is a worker's credential (a static worker token):
/// such a token is refused on `/mcp`.
pub(crate) fn is_worker_token(gw: &Gateway, header: Option<&HeaderValue>) -> bool {
    bearer_token(header).is_some_and(|t| gw.router.host().worker_settings().tokens.contains_key(t))
}

/// How long one ask of an input request waits for the client's answer on the task's leader
/// before the gateway asks again (the same key: the same request).
const ASK_WAIT: Duration = Duration::from_secs(2);

/// 64 random bits as hex, for a key of an input request the worker did not name.
fn secret_key() -> Result<String, WorkerError> {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes)
        .map_err(|e| WorkerError::Unavailable(format!("OS random source failed: {e}")))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// JSON text that must hold a value of the kind `what` says: `None` when empty.
fn json_field(text: &str, field: &str) -> Result<Option<Value>, WorkerError> {
    if text.trim().is_empty() {
        return Ok(None);
    }
    serde_json::from_str(text)
        .map(Some)
        .map_err(|e| WorkerError::Invalid(format!("{field} is not JSON: {e}")))
}

/// A declared tool as the registry will hold it.
fn declared(t: v1::WorkerTool) -> Result<Declared, WorkerError> {
    taskmesh_router::convert::worker_tool_from_pb(t)
        .map(|spec| Declared { spec })
        .map_err(WorkerError::Invalid)
}

pub(crate) fn register(
    gw: &Gateway,
    identity: &str,
    r: v1::RegisterRequest,
) -> Result<v1::RegisterResponse, WorkerError> {
    let tools = r
        .tools
        .into_iter()
        .map(declared)
        .collect::<Result<Vec<_>, _>>()?;
    let reg =
        gw.router
            .host()
            .register_worker(identity, &r.label, tools, r.max_concurrent_tasks)?;
    Ok(v1::RegisterResponse {
        worker_id: reg.worker_id,
        lease_ms: reg.lease_ms,
        poll_wait_max_ms: reg.poll_wait_max_ms,
        idle_timeout_ms: reg.idle_timeout_ms,
        node_id: reg.node_id,
    })
}

pub(crate) async fn poll(
    gw: &Gateway,
    identity: &str,
    r: v1::PollRequest,
) -> Result<v1::PollResponse, WorkerError> {
    let wait = Duration::from_millis(r.wait_ms);
    let leases = gw
        .router
        .poll_workers(identity, &r.worker_id, r.max_tasks, wait)
        .await?;
    Ok(v1::PollResponse {
        leases: leases
            .into_iter()
            .map(taskmesh_router::convert::leased_to_pb)
            .collect(),
    })
}

fn lease_ref(identity: &str, task_id: String, token: String) -> LeaseRef {
    LeaseRef {
        task_id,
        token,
        holder: identity.to_string(),
    }
}

pub(crate) async fn heartbeat(
    gw: &Gateway,
    identity: &str,
    r: v1::HeartbeatRequest,
) -> Result<v1::HeartbeatResponse, WorkerError> {
    if r.progress.is_some_and(|p| !p.is_finite()) || r.total.is_some_and(|t| !t.is_finite()) {
        return Err(WorkerError::Invalid(
            "progress and total must be finite numbers".into(),
        ));
    }
    let beat = LeaseBeat {
        lease: lease_ref(identity, r.task_id, r.token),
        progress: r.progress.map(|p| (p, r.total, r.progress_message)),
        status_message: r.status_message,
    };
    gw.router.host().worker_alive(identity);
    let renewed = gw.router.run(beat).await?;
    Ok(v1::HeartbeatResponse {
        deadline_ms: renewed.deadline_ms,
        cancelled: renewed.cancelled,
    })
}

fn rpc_error(e: ErrorObject) -> v1::JsonRpcError {
    v1::JsonRpcError {
        code: e.code,
        message: e.message,
        data_json: e.data.map(|d| d.to_string()).unwrap_or_default(),
    }
}

fn error_object(e: v1::JsonRpcError) -> Result<ErrorObject, WorkerError> {
    Ok(ErrorObject {
        code: e.code,
        message: e.message,
        data: json_field(&e.data_json, "error.data")?,
    })
}

pub(crate) async fn request_input(
    gw: &Gateway,
    identity: &str,
    r: v1::RequestInputRequest,
) -> Result<v1::RequestInputResponse, WorkerError> {
    let params = json_field(&r.params_json, "params")?.unwrap_or_else(|| serde_json::json!({}));
    // Without a key of the worker's, one of this call's: its asks below are one request.
    let key = match r.key {
        k if k.is_empty() => format!("worker-{}", secret_key()?),
        k => k,
    };
    let ask = LeaseAsk {
        lease: lease_ref(identity, r.task_id, r.token),
        method: r.method,
        params,
        key,
        wait: ASK_WAIT,
    };
    use v1::request_input_response::Answer;
    // The client's answer may take minutes: asked in bounded waits, each one safe to retry.
    let answered = loop {
        if let Some(a) = gw.router.run(ask.clone()).await? {
            break a;
        }
    };
    let answer = match answered {
        Ok(v) => Answer::ResultJson(v.to_string()),
        Err(e) => Answer::Error(rpc_error(e)),
    };
    Ok(v1::RequestInputResponse {
        answer: Some(answer),
    })
}

pub(crate) async fn complete(
    gw: &Gateway,
    identity: &str,
    r: v1::CompleteRequest,
) -> Result<v1::CompleteResponse, WorkerError> {
    use v1::complete_request::Outcome;
    let result = match r.outcome {
        Some(Outcome::ResultJson(text)) => {
            let v = json_field(&text, "result")?
                .ok_or_else(|| WorkerError::Invalid("result is empty".into()))?;
            if !v.get("content").is_some_and(Value::is_array) {
                return Err(WorkerError::Invalid(
                    "result must be a CallToolResult: an object with a content array".into(),
                ));
            }
            Ok(v)
        }
        Some(Outcome::Error(e)) => Err(error_object(e)?),
        None => {
            return Err(WorkerError::Invalid(
                "a completion carries a result or an error".into(),
            ))
        }
    };
    let done = LeaseComplete {
        lease: lease_ref(identity, r.task_id, r.token),
        result,
    };
    let status = gw.router.run(done).await?;
    Ok(v1::CompleteResponse {
        status: status.to_string(),
    })
}

pub(crate) fn deregister(
    gw: &Gateway,
    identity: &str,
    r: v1::DeregisterRequest,
) -> Result<v1::DeregisterResponse, WorkerError> {
    gw.router.host().deregister_worker(identity, &r.worker_id)?;
    Ok(v1::DeregisterResponse {})
}
