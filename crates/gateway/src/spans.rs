//! The spans and audit facts of one MCP request: the `mcp` tracing span (method, principal,
//! id, task id, trace id), the OpenTelemetry server span of a traced request, and what audit
//! events say about it. `http.rs` opens them around each message it dispatches.

use axum::http::HeaderMap;
use axum::response::Response;
use serde_json::Value;
use taskmesh_mcp::jsonrpc::{Message, RequestId};

use crate::auth::Identity;
use crate::{audit, metrics, Gateway};

/// What audit events say about the request `method` `request_id` of `identity`.
pub(crate) fn request_facts(
    gw: &Gateway,
    identity: &Identity,
    method: &str,
    request_id: Option<&RequestId>,
) -> audit::RequestFacts {
    audit::RequestFacts {
        principal: identity.principal.clone(),
        issuer: identity.issuer.clone(),
        node: gw.router.host().node_id(),
        method: method.to_string(),
        request_id: request_id.map(ToString::to_string).unwrap_or_default(),
    }
}

/// The span of one MCP message: its method, JSON-RPC id, principal, the task it is about (a
/// task id in its parameters, or the task a `tools/call` creates, recorded then) and its trace
/// id. At debug level: following requests is asked for with the log filter (see
/// docs/operations.md).
pub(crate) fn request_span(msg: &Message, principal: &str) -> tracing::Span {
    let method = match msg {
        Message::Request { method, .. } | Message::Notification { method, .. } => method.as_str(),
        Message::Response { .. } => "(response)",
    };
    let span = tracing::debug_span!(
        "mcp",
        method,
        id = tracing::field::Empty,
        principal,
        task_id = tracing::field::Empty,
        trace_id = tracing::field::Empty,
    );
    // The other fields cost a copy each: only for a span that is on.
    if span.is_disabled() {
        return span;
    }
    let (id, params) = match msg {
        Message::Request { id, params, .. } => (Some(id), params.as_ref()),
        Message::Notification { params, .. } => (None, params.as_ref()),
        Message::Response { id, .. } => (Some(id), None),
    };
    if let Some(id) = id {
        span.record("id", id.to_string().as_str());
    }
    if let Some(task) = params.and_then(|p| p.get("taskId")).and_then(Value::as_str) {
        let task: String = task
            .chars()
            .take(taskmesh_router::MAX_TASK_ID_LEN)
            .collect();
        span.record("task_id", task.as_str());
    }
    span
}

/// The server span of a sampled request: under the client's `traceparent` when it sent a
/// sampled one, a new trace when `tracing.sample_ratio` draws it; `None` otherwise. Named
/// `METHOD` or `METHOD TARGET` (the tool of a `tools/call`).
pub(crate) fn otel_span(msg: &Message, headers: &HeaderMap) -> Option<taskmesh_telemetry::Span> {
    use taskmesh_telemetry::KeyValue;
    let parent = headers
        .get(taskmesh_telemetry::HEADER)
        .and_then(|v| v.to_str().ok());
    let parent = taskmesh_telemetry::decide(parent)?;
    let (method, id, params) = match msg {
        Message::Request { method, id, params } => (method.as_str(), Some(id), params.as_ref()),
        Message::Notification { method, params } => (method.as_str(), None, params.as_ref()),
        Message::Response { id, .. } => ("(response)", Some(id), None),
    };
    let mut attributes = vec![KeyValue::new("mcp.method.name", method.to_owned())];
    if let Some(id) = id {
        attributes.push(KeyValue::new("jsonrpc.request.id", id.to_string()));
    }
    let tool = (method == "tools/call")
        .then(|| params.and_then(|p| p.get("name")).and_then(Value::as_str))
        .flatten();
    if let Some(tool) = tool {
        attributes.push(KeyValue::new("gen_ai.tool.name", tool.to_owned()));
    }
    if let Some(task) = params.and_then(|p| p.get("taskId")).and_then(Value::as_str) {
        let task: String = task
            .chars()
            .take(taskmesh_router::MAX_TASK_ID_LEN)
            .collect();
        attributes.push(KeyValue::new("taskmesh.task_id", task));
    }
    let name = match tool {
        Some(tool) => format!("{method} {tool}"),
        None => method.to_owned(),
    };
    taskmesh_telemetry::Span::start(
        name,
        taskmesh_telemetry::SpanKind::Server,
        parent.as_ref(),
        attributes,
    )
}

/// End a request's span with what it answered: the HTTP status, and a failed status for a
/// JSON-RPC error or an HTTP error.
pub(crate) fn otel_answered(mut otel: taskmesh_telemetry::Span, response: &Response) {
    let status = response.status().as_u16();
    otel.set(taskmesh_telemetry::KeyValue::new(
        "http.response.status_code",
        i64::from(status),
    ));
    if response.extensions().get::<metrics::RpcError>().is_some() {
        otel.fail("JSON-RPC error");
    } else if status >= 400 {
        otel.fail(format!("HTTP {status}"));
    }
}
