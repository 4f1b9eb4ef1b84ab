//! The JSON mirror of the worker API: `POST /worker/v1/<call>`, the request and the answer as
//! JSON objects with the proto's fields in lowerCamelCase and each `*_json` field as the JSON
//! value itself under its name without the suffix (docs/workers.md). A refusal is an HTTP
//! status with `{"error": {"code": "<gRPC code name>", "message": "..."}}`.

use std::future::Future;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Value};
use taskmesh_host::WorkerError;
use taskmesh_rpc::v1;

use crate::Gateway;

/// The routes of the mirror.
pub(crate) fn routes() -> axum::Router<Arc<Gateway>> {
    axum::Router::new()
        .route("/worker/v1/register", post(register))
        .route("/worker/v1/poll", post(poll))
        .route("/worker/v1/heartbeat", post(heartbeat))
        .route("/worker/v1/request_input", post(request_input))
        .route("/worker/v1/complete", post(complete))
        .route("/worker/v1/deregister", post(deregister))
}

/// The HTTP status of a refusal.
fn http_status(e: &WorkerError) -> StatusCode {
    match e {
        WorkerError::Invalid(_) => StatusCode::BAD_REQUEST,
        WorkerError::Unauthenticated(_) => StatusCode::UNAUTHORIZED,
        WorkerError::Forbidden(_) => StatusCode::FORBIDDEN,
        WorkerError::NotFound(_) => StatusCode::NOT_FOUND,
        WorkerError::Conflict(_) | WorkerError::StaleLease | WorkerError::Ended(_) => {
            StatusCode::CONFLICT
        }
        WorkerError::Exhausted(_) => StatusCode::TOO_MANY_REQUESTS,
        WorkerError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        WorkerError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

fn refusal(e: &WorkerError) -> Response {
    let body = json!({ "error": { "code": e.code(), "message": e.to_string() } });
    let mut r = (http_status(e), axum::Json(body)).into_response();
    if matches!(e, WorkerError::Unauthenticated(_)) {
        r.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            header::HeaderValue::from_static("Bearer"),
        );
    }
    r
}

/// Authenticate the worker, read its request and answer with `call`'s response.
async fn answer<Req, Fut>(
    gw: Arc<Gateway>,
    headers: HeaderMap,
    body: Bytes,
    call: impl FnOnce(Arc<Gateway>, String, Req) -> Fut,
) -> Response
where
    Req: DeserializeOwned,
    Fut: Future<Output = Result<Value, WorkerError>>,
{
    let identity = match super::identify(&gw, headers.get(header::AUTHORIZATION)).await {
        Ok(i) => i,
        Err(e) => return refusal(&e),
    };
    let req = match serde_json::from_slice::<Req>(&body) {
        Ok(r) => r,
        Err(e) => {
            return refusal(&WorkerError::Invalid(format!(
                "the body is not a valid request: {e}"
            )))
        }
    };
    match call(gw, identity, req).await {
        Ok(v) => axum::Json(v).into_response(),
        Err(e) => refusal(&e),
    }
}

fn text(v: Option<Value>) -> String {
    v.map(|v| v.to_string()).unwrap_or_default()
}

fn value(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or(Value::Null)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ToolJson {
    name: String,
    #[serde(default)]
    title: String,
    #[serde(default)]
    description: String,
    input_schema: Value,
    output_schema: Option<Value>,
    /// `optional` (default), `required` or `forbidden`.
    task_support: Option<String>,
    /// `rerun` (default) or `fail`.
    resume: Option<String>,
    annotations: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RegisterJson {
    tools: Vec<ToolJson>,
    #[serde(default)]
    max_concurrent_tasks: u32,
    #[serde(default)]
    label: String,
}

fn tool_of(t: ToolJson) -> Result<v1::WorkerTool, WorkerError> {
    let task_support = match t.task_support.as_deref() {
        None | Some("optional") => v1::WorkerTaskSupport::Optional,
        Some("required") => v1::WorkerTaskSupport::Required,
        Some("forbidden") => v1::WorkerTaskSupport::Forbidden,
        Some(other) => {
            return Err(WorkerError::Invalid(format!(
                "tool '{}': taskSupport must be optional, required or forbidden, not '{other}'",
                t.name
            )))
        }
    };
    let resume = match t.resume.as_deref() {
        None | Some("rerun") => v1::WorkerResumePolicy::Rerun,
        Some("fail") => v1::WorkerResumePolicy::Fail,
        Some(other) => {
            return Err(WorkerError::Invalid(format!(
                "tool '{}': resume must be rerun or fail, not '{other}'",
                t.name
            )))
        }
    };
    Ok(v1::WorkerTool {
        name: t.name,
        title: t.title,
        description: t.description,
        input_schema_json: t.input_schema.to_string(),
        output_schema_json: text(t.output_schema),
        task_support: task_support as i32,
        resume: resume as i32,
        annotations_json: text(t.annotations),
    })
}

async fn register(State(gw): State<Arc<Gateway>>, headers: HeaderMap, body: Bytes) -> Response {
    answer(gw, headers, body, |gw, id, r: RegisterJson| async move {
        let tools = r.tools.into_iter().map(tool_of).collect::<Result<_, _>>()?;
        let req = v1::RegisterRequest {
            tools,
            max_concurrent_tasks: r.max_concurrent_tasks,
            label: r.label,
        };
        let a = super::register(&gw, &id, req)?;
        Ok(json!({
            "workerId": a.worker_id,
            "leaseMs": a.lease_ms,
            "pollWaitMaxMs": a.poll_wait_max_ms,
            "idleTimeoutMs": a.idle_timeout_ms,
            "nodeId": a.node_id,
        }))
    })
    .await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct PollJson {
    worker_id: String,
    #[serde(default)]
    max_tasks: u32,
    #[serde(default)]
    wait_ms: u64,
}

async fn poll(State(gw): State<Arc<Gateway>>, headers: HeaderMap, body: Bytes) -> Response {
    answer(gw, headers, body, |gw, id, r: PollJson| async move {
        let req = v1::PollRequest {
            worker_id: r.worker_id,
            max_tasks: r.max_tasks,
            wait_ms: r.wait_ms,
        };
        let a = super::poll(&gw, &id, req).await?;
        let leases: Vec<Value> = a
            .leases
            .into_iter()
            .map(|l| {
                json!({
                    "taskId": l.task_id,
                    "tool": l.tool,
                    "arguments": value(&l.arguments_json),
                    "principal": l.principal,
                    "attempt": l.attempt,
                    "token": l.token,
                    "deadlineMs": l.deadline_ms,
                    "progressWanted": l.progress_wanted,
                })
            })
            .collect();
        Ok(json!({ "leases": leases }))
    })
    .await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct HeartbeatJson {
    task_id: String,
    token: String,
    progress: Option<f64>,
    total: Option<f64>,
    progress_message: Option<String>,
    status_message: Option<String>,
}

async fn heartbeat(State(gw): State<Arc<Gateway>>, headers: HeaderMap, body: Bytes) -> Response {
    answer(gw, headers, body, |gw, id, r: HeartbeatJson| async move {
        let req = v1::HeartbeatRequest {
            task_id: r.task_id,
            token: r.token,
            progress: r.progress,
            total: r.total,
            progress_message: r.progress_message,
            status_message: r.status_message,
        };
        let a = super::heartbeat(&gw, &id, req).await?;
        Ok(json!({ "deadlineMs": a.deadline_ms, "cancelled": a.cancelled }))
    })
    .await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ErrorJson {
    code: i64,
    message: String,
    data: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RequestInputJson {
    task_id: String,
    token: String,
    method: String,
    params: Option<Value>,
    key: Option<String>,
}

fn error_json(e: v1::JsonRpcError) -> Value {
    let mut v = json!({ "code": e.code, "message": e.message });
    if !e.data_json.is_empty() {
        v["data"] = value(&e.data_json);
    }
    v
}

async fn request_input(
    State(gw): State<Arc<Gateway>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    answer(
        gw,
        headers,
        body,
        |gw, id, r: RequestInputJson| async move {
            let req = v1::RequestInputRequest {
                task_id: r.task_id,
                token: r.token,
                method: r.method,
                params_json: text(r.params),
                key: r.key.unwrap_or_default(),
            };
            let a = super::request_input(&gw, &id, req).await?;
            use v1::request_input_response::Answer;
            Ok(match a.answer {
                Some(Answer::ResultJson(j)) => json!({ "result": value(&j) }),
                Some(Answer::Error(e)) => json!({ "error": error_json(e) }),
                None => json!({}),
            })
        },
    )
    .await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct CompleteJson {
    task_id: String,
    token: String,
    result: Option<Value>,
    error: Option<ErrorJson>,
}

async fn complete(State(gw): State<Arc<Gateway>>, headers: HeaderMap, body: Bytes) -> Response {
    answer(gw, headers, body, |gw, id, r: CompleteJson| async move {
        use v1::complete_request::Outcome;
        let outcome = match (r.result, r.error) {
            (Some(result), None) => Outcome::ResultJson(result.to_string()),
            (None, Some(e)) => Outcome::Error(v1::JsonRpcError {
                code: e.code,
                message: e.message,
                data_json: text(e.data),
            }),
            _ => {
                return Err(WorkerError::Invalid(
                    "a completion carries exactly one of result and error".into(),
                ))
            }
        };
        let req = v1::CompleteRequest {
            task_id: r.task_id,
            token: r.token,
            outcome: Some(outcome),
        };
        let a = super::complete(&gw, &id, req).await?;
        Ok(json!({ "status": a.status }))
    })
    .await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct DeregisterJson {
    worker_id: String,
}

async fn deregister(State(gw): State<Arc<Gateway>>, headers: HeaderMap, body: Bytes) -> Response {
    answer(gw, headers, body, |gw, id, r: DeregisterJson| async move {
        super::deregister(
            &gw,
            &id,
            v1::DeregisterRequest {
                worker_id: r.worker_id,
            },
        )?;
        Ok(json!({}))
    })
    .await
}
