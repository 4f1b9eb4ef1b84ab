//! Streamable HTTP: `POST /mcp`, `GET /mcp`, `DELETE /mcp`.
//!
//! Checks, in order: `Origin` against the allow-list (403), the bearer token when
//! authentication is configured (401 with `WWW-Authenticate`), the body size (413), the
//! session (`Mcp-Session-Id`: missing 400, unknown or ended 404) and `MCP-Protocol-Version`
//! (400 when unsupported; another supported version than the session's is served at the
//! session's). Then the body is classified and
//! dispatched; bad JSON-RPC gets its JSON-RPC error with HTTP 400 and changes nothing.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::Value;
use taskmesh_mcp::jsonrpc::{self, ErrorObject, Message, RequestId};
use tracing::Instrument;

use crate::audit;
use crate::auth::{Identity, Operation, Refusal};
use crate::delivery::JsonMessage;
use crate::dispatch::{self, Cx, Reply};
use crate::limits::WrongToken;
use crate::resume::{self, open_get_reader, primes, EventId, Opening, Out, Reader, ResumeError};
use crate::session::SessionClaims;
use crate::{metrics, relay, slots, wire, Gateway};

/// Header carrying the signed session id (`Mcp-Session-Id`), in lower case. Every request
/// but `initialize` must send it; the `initialize` answer carries the new one.
pub const SESSION_HEADER: &str = "mcp-session-id";
pub use crate::modern::VERSION_HEADER;

/// The axum router serving `/mcp`.
pub fn router(gw: Arc<Gateway>) -> axum::Router {
    let limit = gw.cfg.max_body_bytes;
    let mut routes = axum::Router::new();
    for path in gw.auth.metadata_paths() {
        routes = routes.route(&path, axum::routing::get(handle_resource_metadata));
    }
    routes
        .route("/status", axum::routing::get(handle_status))
        .route("/metrics", axum::routing::get(handle_metrics))
        .route("/healthz", axum::routing::get(handle_healthz))
        .route("/readyz", axum::routing::get(handle_readyz))
        .route(
            "/mcp",
            post(handle_post).get(handle_get).delete(handle_delete),
        )
        .layer(DefaultBodyLimit::max(limit))
        .with_state(gw)
}

fn plain(status: StatusCode, msg: &'static str) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        msg,
    )
        .into_response()
}

fn rpc_error(status: StatusCode, id: Option<&RequestId>, e: &ErrorObject) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        jsonrpc::error_response(id, e),
    )
        .into_response()
}

/// `Origin` check: absent is allowed (non-browser clients); present must match the list.
fn origin_allowed(gw: &Gateway, headers: &HeaderMap) -> bool {
    let Some(origin) = headers.get(header::ORIGIN) else {
        return true;
    };
    let Ok(origin) = origin.to_str() else {
        return false;
    };
    gw.cfg.allowed_origins.iter().any(|allowed| {
        if allowed == "*" || allowed == origin {
            return true;
        }
        // An entry without a port matches any port of that scheme and host.
        origin.strip_prefix(allowed.as_str()).is_some_and(|rest| {
            rest.starts_with(':') && rest[1..].chars().all(|c| c.is_ascii_digit())
        })
    })
}

/// The caller, or the 401 (503 when the token could not be checked now) to send. A wrong token
/// counts towards its address's `limits.failed_auth_per_minute`; past it, it gets 429 instead,
/// neither counted nor audited (see [`crate::limits`]).
async fn authenticate(
    gw: &Gateway,
    peer: Option<std::net::IpAddr>,
    headers: &HeaderMap,
) -> Result<Identity, Response> {
    let refusal = match gw
        .auth
        .authenticate(headers.get(header::AUTHORIZATION))
        .await
    {
        Ok(identity) => return Ok(identity),
        Err(r) => r,
    };
    let response = match &refusal {
        Refusal::Invalid(why) if gw.limits.wrong_token(peer, why) == WrongToken::Locked => {
            metrics::refused(429, "failed_auth_lockout");
            too_many(
                "Too Many Requests: too many wrong tokens from this address (limits.failed_auth_per_minute)",
                "60",
            )
        }
        Refusal::Missing | Refusal::Invalid(_) => {
            let error = matches!(refusal, Refusal::Invalid(_)).then_some("invalid_token");
            metrics::refused(401, error.unwrap_or("no_token"));
            let mut r = plain(StatusCode::UNAUTHORIZED, "authentication required");
            if let Some(v) = gw.auth.challenge(error, &[]) {
                r.headers_mut().insert(header::WWW_AUTHENTICATE, v);
            }
            r
        }
        Refusal::Unavailable(why) => {
            tracing::warn!(error = %why, "a token could not be checked");
            metrics::refused(503, "token_check_unavailable");
            let mut r = plain(
                StatusCode::SERVICE_UNAVAILABLE,
                "Service Unavailable: the token could not be checked now",
            );
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
            r
        }
    };
    Err(response)
}

/// The 403 for a caller whose token lacks scopes `operation` requires (audited as
/// `insufficient_scope`, for the request `method` `request_id`), or `None` when it may.
fn forbidden_without_scope(
    gw: &Gateway,
    identity: &Identity,
    operation: Option<Operation>,
    method: &str,
    request_id: Option<&RequestId>,
) -> Option<Response> {
    let missing = gw.auth.missing_scopes(identity, operation?);
    if missing.is_empty() {
        return None;
    }
    metrics::refused(403, "insufficient_scope");
    let outcome = format!("missing scope {}", missing.join(" "));
    let facts = request_facts(gw, identity, method, request_id);
    audit::record_for(&facts, "insufficient_scope", "", &outcome);
    let mut r = plain(
        StatusCode::FORBIDDEN,
        "Forbidden: the token lacks a scope this request needs",
    );
    if let Some(v) = gw.auth.challenge(Some("insufficient_scope"), &missing) {
        r.headers_mut().insert(header::WWW_AUTHENTICATE, v);
    }
    Some(r)
}

/// Validate the session and version headers of a non-initialize request.
#[allow(clippy::result_large_err)]
fn session_of(
    gw: &Gateway,
    headers: &HeaderMap,
    principal: &str,
) -> Result<(String, SessionClaims), Response> {
    let Some(id) = headers.get(SESSION_HEADER).and_then(|v| v.to_str().ok()) else {
        return Err(plain(
            StatusCode::BAD_REQUEST,
            "Bad Request: Mcp-Session-Id header is required",
        ));
    };
    let claims = match gw.sessions.check(id) {
        Some(c) if c.principal == principal => c,
        _ => return Err(plain(StatusCode::NOT_FOUND, "Session not found")),
    };
    if let Some(v) = headers.get(VERSION_HEADER) {
        let v = v.to_str().unwrap_or("");
        if !taskmesh_mcp::is_supported_version(v) {
            return Err(plain(
                StatusCode::BAD_REQUEST,
                "Bad Request: unsupported MCP-Protocol-Version",
            ));
        }
        // Another version this server supports is served, at the session's version: the
        // 400 is for versions that are invalid or unsupported (as the reference servers do).
    }
    Ok((id.to_string(), claims))
}

/// The address of the connection a request came on, when the server records it
/// (`axum::extract::ConnectInfo`).
struct Peer(Option<std::net::IpAddr>);

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Peer {
    type Rejection = Infallible;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _state: &S,
    ) -> Result<Self, Self::Rejection> {
        Ok(Peer(
            parts
                .extensions
                .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
                .map(|c| c.0.ip()),
        ))
    }
}

/// Common front checks (origin, authentication, the request rate); the caller on success. A
/// token that verifies is heard whatever others sent from its address.
async fn front(
    gw: &Gateway,
    peer: Option<std::net::IpAddr>,
    headers: &HeaderMap,
) -> Result<Identity, Response> {
    if !origin_allowed(gw, headers) {
        metrics::refused(403, "origin");
        return Err(plain(
            StatusCode::FORBIDDEN,
            "Forbidden: Origin not allowed",
        ));
    }
    let identity = authenticate(gw, peer, headers).await?;
    if !gw.limits.allow_request(&identity.principal) {
        metrics::refused(429, "request_rate");
        return Err(too_many(
            "Too Many Requests: over limits.requests_per_second for this principal",
            "1",
        ));
    }
    Ok(identity)
}

/// HTTP 429 saying `why`, with `Retry-After: retry_after_s`.
fn too_many(why: &'static str, retry_after_s: &'static str) -> Response {
    let mut r = plain(StatusCode::TOO_MANY_REQUESTS, why);
    r.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static(retry_after_s));
    r
}

/// `r` with `Connection: close` on HTTP/1 (HTTP/2 has no such header; its streams are
/// independent): the rest of a body left unread must not be taken for the next request, and
/// the client must not send its next request on this connection.
fn closing(version: axum::http::Version, mut r: Response) -> Response {
    if version < axum::http::Version::HTTP_2 {
        r.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    r
}

/// The whole body, at most `limit` bytes: a larger one (by its `Content-Length`, before
/// anything is read, or as it arrives) is 413, one that breaks off is 400.
async fn read_body(body: Body, headers: &HeaderMap, limit: usize) -> Result<Bytes, Response> {
    let too_large = || {
        metrics::refused(413, "body_too_large");
        plain(
            StatusCode::PAYLOAD_TOO_LARGE,
            "Payload Too Large: body exceeds http.max_body_bytes",
        )
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(too_large());
    }
    let mut stream = body.into_data_stream();
    let mut buf = Vec::with_capacity(declared.map_or(0, |n| n as usize));
    while let Some(chunk) = futures::StreamExt::next(&mut stream).await {
        let Ok(chunk) = chunk else {
            return Err(plain(
                StatusCode::BAD_REQUEST,
                "Bad Request: unreadable body",
            ));
        };
        if buf.len() + chunk.len() > limit {
            return Err(too_large());
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(Bytes::from(buf))
}

async fn handle_post(
    State(gw): State<Arc<Gateway>>,
    Peer(peer): Peer,
    version: axum::http::Version,
    headers: HeaderMap,
    body: Body,
) -> Response {
    // The caller is checked on the headers, before a byte of the body is read.
    let identity = match front(&gw, peer, &headers).await {
        Ok(i) => i,
        Err(r) => return r,
    };
    let limit = Duration::from_millis(gw.cfg.body_read_timeout_ms);
    let read = tokio::time::timeout(limit, read_body(body, &headers, gw.cfg.max_body_bytes)).await;
    let body = match read {
        Ok(Ok(b)) => b,
        Ok(Err(r)) => return closing(version, r),
        Err(_) => {
            metrics::refused(408, "body_read_timeout");
            return closing(
                version,
                plain(
                    StatusCode::REQUEST_TIMEOUT,
                    "Request Timeout: the body did not arrive within http.body_read_timeout_ms",
                ),
            );
        }
    };
    let msg = match jsonrpc::parse_message(&body) {
        Ok(m) => m,
        Err(e) => return rpc_error(wire::envelope_status(&e), e.id(), &e.to_error()),
    };
    let (operation, method, request_id) = match &msg {
        Message::Request { method, id, .. } => {
            (Operation::of_method(method), method.as_str(), Some(id))
        }
        Message::Response { id, .. } => (Some(Operation::Create), "(response)", Some(id)),
        Message::Notification { method, .. } => (None, method.as_str(), None),
    };
    let counted = metrics::method_index(method);
    let started = std::time::Instant::now();
    if let Some(r) = forbidden_without_scope(&gw, &identity, operation, method, request_id) {
        return r;
    }
    // A request that may be answered with a stream takes its place first (one past the
    // limits changes nothing).
    let slot = match may_stream(&msg) {
        false => None,
        true => match gw.slots.take(&identity.principal) {
            Ok(slot) => Some(slot),
            Err(r) => return r,
        },
    };
    // Only the methods that record audit events pay for their facts (polls do not).
    let facts = audit::AUDITED_METHODS
        .contains(&method)
        .then(|| request_facts(&gw, &identity, method, request_id));
    let principal = identity.principal;
    let is_initialize = matches!(&msg, Message::Request { method, .. } if method == "initialize");
    // Protocol 2026-07-28: no session, the version in the request's `_meta`.
    let modern = !headers.contains_key(SESSION_HEADER) && crate::modern::is_modern(&headers, &msg);
    let session = if modern {
        None // its checks are its own (`crate::modern`)
    } else if is_initialize {
        if let Some(v) = headers.get(VERSION_HEADER).and_then(|v| v.to_str().ok()) {
            if !taskmesh_mcp::is_supported_version(v) {
                return plain(
                    StatusCode::BAD_REQUEST,
                    "Bad Request: unsupported MCP-Protocol-Version",
                );
            }
        }
        None
    } else {
        match session_of(&gw, &headers, &principal) {
            Ok(s) => Some(s),
            Err(r) => return r,
        }
    };
    let span = request_span(&msg, &principal);
    // An OpenTelemetry span only for a sampled request (see `taskmesh_telemetry`).
    let otel = taskmesh_telemetry::enabled()
        .then(|| otel_span(&msg, &headers))
        .flatten();
    let otel_cx = otel.as_ref().map(taskmesh_telemetry::Span::context);
    // A trace id only when someone follows requests (the span is enabled): it then travels to
    // every peer the request reaches (see `taskmesh_rpc::trace`).
    let trace = (!span.is_disabled()).then(taskmesh_rpc::trace::new_id);
    if let Some(t) = trace {
        span.record("trace_id", taskmesh_rpc::trace::format(t).as_str());
    }
    let cx = Cx { principal, session };
    let answered = async move {
        let response = if modern {
            crate::modern::handle(&gw, &headers, &cx.principal, msg).await
        } else {
            dispatch_message(&gw, &cx, msg).await
        };
        tracing::debug!(status = response.status().as_u16(), "answered");
        response
    };
    let answered = audit::scope(facts, answered);
    let answered = taskmesh_telemetry::scope(otel_cx, answered);
    let response = taskmesh_rpc::trace::scope(trace, answered.instrument(span)).await;
    metrics::answered(counted, started, &response);
    if let Some(otel) = otel {
        otel_answered(otel, &response);
    }
    match slot {
        Some(slot) => slots::hold(response, slot),
        None => response,
    }
}

/// Whether a message may be answered with an SSE stream: `tasks/result`, a `tools/call`
/// without `task` (a plain call, or one the server may decide on), `subscriptions/listen`.
fn may_stream(msg: &Message) -> bool {
    match msg {
        Message::Request { method, params, .. } => match method.as_str() {
            "tasks/result" | "subscriptions/listen" => true,
            "tools/call" => params.as_ref().and_then(|p| p.get("task")).is_none(),
            _ => false,
        },
        _ => false,
    }
}

/// What audit events say about the request `method` `request_id` of `identity`.
fn request_facts(
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
fn request_span(msg: &Message, principal: &str) -> tracing::Span {
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
fn otel_span(msg: &Message, headers: &HeaderMap) -> Option<taskmesh_telemetry::Span> {
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
fn otel_answered(mut otel: taskmesh_telemetry::Span, response: &Response) {
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

/// Dispatch one classified message and turn its reply into the HTTP response.
async fn dispatch_message(gw: &Arc<Gateway>, cx: &Cx, msg: Message) -> Response {
    let (reply, id) = match msg {
        Message::Request { id, method, params } => (
            dispatch::request(gw, cx, id.clone(), &method, params).await,
            Some(id),
        ),
        Message::Notification { method, params } => {
            (dispatch::notification(gw, cx, &method, params), None)
        }
        Message::Response { id, outcome } => (dispatch::response(gw, cx, id, outcome), None),
    };
    respond(gw, cx, reply, id.as_ref()).await
}

fn json_response(body: Vec<u8>) -> Response {
    let mut r = Response::new(Body::empty());
    metrics::mark(&mut r, &body);
    *r.body_mut() = Body::from(body);
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

fn is_response(json: &[u8]) -> bool {
    matches!(jsonrpc::parse_message(json), Ok(Message::Response { .. }))
}

async fn respond(gw: &Arc<Gateway>, cx: &Cx, reply: Reply, id: Option<&RequestId>) -> Response {
    match reply {
        Reply::Json(body) => json_response(body),
        Reply::Accepted => StatusCode::ACCEPTED.into_response(),
        Reply::Initialized { body, session_id } => {
            let mut r = json_response(body);
            if let Ok(v) = HeaderValue::from_str(&session_id) {
                r.headers_mut().insert(SESSION_HEADER, v);
            }
            r
        }
        Reply::Stream {
            mut rx,
            json_if_alone,
            origin,
            released,
        } => {
            let first = if json_if_alone {
                match rx.recv().await {
                    None => {
                        return json_response(jsonrpc::error_response(
                            id,
                            &dispatch::cancelled_error(),
                        ));
                    }
                    Some(m) if is_response(&m.json) => return json_response(m.json.to_vec()),
                    Some(m) => Some(m),
                }
            } else {
                None
            };
            let Some((session, claims)) = &cx.session else {
                // Streams exist only in a session (initialize is answered as JSON).
                return StatusCode::INTERNAL_SERVER_ERROR.into_response();
            };
            let reader = gw.hub.open(
                Opening {
                    session,
                    primes: primes(claims),
                    origin,
                    presence: None,
                    gone: None,
                    released,
                },
                first,
                rx,
            );
            sse(gw, Source::Local(reader))
        }
    }
}

/// Where an SSE response reads its events: a stream this node holds, or one another node
/// holds, relayed.
enum Source {
    Local(Reader),
    Relayed(relay::Relayed),
}

impl Source {
    async fn next(&mut self) -> Option<Out> {
        match self {
            Source::Local(r) => r.next().await,
            Source::Relayed(r) => r.next().await,
        }
    }
}

/// An SSE response: the source's events framed with their ids, a keep-alive comment after
/// every `sse_keepalive_ms` without one, the retry field on the priming event and before an
/// on-purpose close.
fn sse(gw: &Arc<Gateway>, source: Source) -> Response {
    let keepalive = Duration::from_millis(gw.cfg.sse_keepalive_ms.max(100));
    let retry = gw.hub.settings().retry;
    let gw = Arc::downgrade(gw);
    let body = futures::stream::unfold(source, move |mut source| {
        let gw = gw.clone();
        async move {
            let bytes = match tokio::time::timeout(keepalive, source.next()).await {
                Err(_) => Bytes::from_static(b":\n\n"),
                Ok(Some(out)) => {
                    let bytes = Bytes::from(resume::frame(&out, retry));
                    if let (Out::Message(_, m), Some(gw)) = (&out, gw.upgrade()) {
                        gw.delivery.written(m);
                    }
                    bytes
                }
                Ok(None) => return None,
            };
            Some((Ok::<_, Infallible>(bytes), source))
        }
    });
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
            (HeaderName::from_static("x-accel-buffering"), "no"),
        ],
        Body::from_stream(body),
    )
        .into_response()
}

async fn handle_get(
    State(gw): State<Arc<Gateway>>,
    Peer(peer): Peer,
    headers: HeaderMap,
) -> Response {
    let identity = match front(&gw, peer, &headers).await {
        Ok(i) => i,
        Err(r) => return r,
    };
    if let Some(r) = forbidden_without_scope(&gw, &identity, Some(Operation::Read), "GET", None) {
        return r;
    }
    let principal = identity.principal;
    let accepts_sse = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/event-stream") || v.contains("*/*"));
    if !accepts_sse {
        return plain(
            StatusCode::NOT_ACCEPTABLE,
            "Not Acceptable: GET /mcp serves text/event-stream",
        );
    }
    let (id, claims) = match session_of(&gw, &headers, &principal) {
        Ok(s) => s,
        Err(r) => return r,
    };
    let slot = match gw.slots.take(&principal) {
        Ok(slot) => slot,
        Err(r) => return r,
    };
    let response = if let Some(last) = headers.get(LAST_EVENT_ID) {
        let Some(event) = last.to_str().ok().and_then(EventId::parse) else {
            return plain(
                StatusCode::BAD_REQUEST,
                "Bad Request: Last-Event-ID is not an event id this server sent",
            );
        };
        reconnect(&gw, principal, id, claims, event).await
    } else {
        open_get_stream(&gw, &id, &claims).await
    };
    slots::hold(response, slot)
}

/// Header of a reconnection (`Last-Event-ID`), in lower case: the id of the last SSE event the
/// client received.
pub const LAST_EVENT_ID: &str = "last-event-id";

/// A reconnection: the rest of the stream `event` names, from the node holding it. When no
/// node can continue it (its holder restarted or is gone, its window passed, or it no longer
/// holds the events after that id): a `tasks/result` stream is answered again (its
/// unanswered requests and then its result come on the new stream), and a GET stream is
/// replaced by a new one.
async fn reconnect(
    gw: &Arc<Gateway>,
    principal: String,
    session: String,
    claims: SessionClaims,
    event: EventId,
) -> Response {
    let resumed = if event.node == gw.hub.node() {
        gw.hub.resume(&session, &event).map(Source::Local)
    } else {
        relay::resume(gw.router.peer_channel(event.node), &event, &session)
            .await
            .map(Source::Relayed)
    };
    let error = match resumed {
        Ok(source) => return sse(gw, source),
        Err(e) => e,
    };
    tracing::debug!(event_id = ?event, error = %error, "reconnection starts over");
    let Some(origin) = event.origin else {
        if event.node == gw.hub.node() && error == ResumeError::TooOld {
            // It cannot be continued: what it carried goes elsewhere now.
            gw.hub.drop_stream(event.stream);
        }
        return open_get_stream(gw, &session, &claims).await;
    };
    // A `tasks/result` stream held here that cannot be continued is taken over by the new
    // answer (`Hub::take_over`), which waits until it has let go of the task.
    let cx = Cx {
        principal,
        session: Some((session, claims)),
    };
    let mut params = serde_json::Map::new();
    params.insert("taskId".into(), Value::String(origin.task_id.clone()));
    let reply = dispatch::tasks::tasks_result(gw, &cx, origin.request_id, &params).await;
    match reply {
        // The answer is ready: it still goes out as the stream the client reconnected to.
        Reply::Json(body) => {
            let (_, rx) = tokio::sync::mpsc::channel(1);
            let Some((session, claims)) = &cx.session else {
                return StatusCode::INTERNAL_SERVER_ERROR.into_response();
            };
            let how = Opening {
                session,
                primes: primes(claims),
                origin: None,
                presence: None,
                gone: None,
                released: None,
            };
            let reader = gw
                .hub
                .open(how, Some(JsonMessage::plain(Arc::new(body))), rx);
            sse(gw, Source::Local(reader))
        }
        other => respond(gw, &cx, other, None).await,
    }
}

/// A new GET stream of the session, on its home node (read from there when that is another
/// node; held here when the home cannot be reached), or HTTP 429 when it holds its limit of
/// them.
async fn open_get_stream(gw: &Arc<Gateway>, id: &str, claims: &SessionClaims) -> Response {
    if claims.home != 0 && claims.home != gw.hub.node() {
        match relay::open(gw.router.peer_channel(claims.home), id).await {
            Ok(relayed) => return sse(gw, Source::Relayed(relayed)),
            Err(tonic::Code::ResourceExhausted) => return too_many_streams(),
            Err(tonic::Code::NotFound) => {
                return plain(StatusCode::NOT_FOUND, "Session not found");
            }
            Err(code) => {
                // Its home is away: the stream is held here, so the session's messages are
                // still delivered (and may go out on one stream of each node meanwhile).
                tracing::debug!(home = claims.home, ?code, "GET stream held away from home");
            }
        }
    }
    match open_get_reader(gw, id, claims) {
        Some(reader) => sse(gw, Source::Local(reader)),
        None => too_many_streams(),
    }
}

fn too_many_streams() -> Response {
    metrics::refused(429, "streams_per_session");
    let mut r = plain(
        StatusCode::TOO_MANY_REQUESTS,
        "Too Many Requests: this session holds http.max_streams_per_session open GET streams",
    );
    r.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    r
}

async fn handle_delete(
    State(gw): State<Arc<Gateway>>,
    Peer(peer): Peer,
    headers: HeaderMap,
) -> Response {
    let principal = match front(&gw, peer, &headers).await {
        Ok(i) => i.principal,
        Err(r) => return r,
    };
    let (id, claims) = match session_of(&gw, &headers, &principal) {
        Ok(s) => s,
        Err(r) => return r,
    };
    match gw.sessions.end(&id, &claims) {
        Ok(()) => StatusCode::OK.into_response(),
        Err(e) => {
            tracing::error!(error = %e, "could not record the ended session");
            plain(
                StatusCode::INTERNAL_SERVER_ERROR,
                "could not end the session",
            )
        }
    }
}

/// `GET /.well-known/oauth-protected-resource[/path]`: the Protected Resource Metadata of RFC
/// 9728 (no authentication: it tells clients where to get a token).
async fn handle_resource_metadata(State(gw): State<Arc<Gateway>>) -> Response {
    match gw.auth.metadata() {
        Some(doc) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            doc.to_string(),
        )
            .into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

/// The operator endpoints without authentication, for a listener only operators and their
/// tools reach (`[metrics] listen`): `/metrics`, `/healthz`, `/readyz`.
pub fn ops_router(gw: Arc<Gateway>) -> axum::Router {
    axum::Router::new()
        .route("/metrics", axum::routing::get(handle_open_metrics))
        .route("/healthz", axum::routing::get(handle_healthz))
        .route("/readyz", axum::routing::get(handle_readyz))
        .with_state(gw)
}

/// `GET /healthz`: the process is alive and serving HTTP. No authentication, no work.
async fn handle_healthz() -> Response {
    plain(StatusCode::OK, "ok\n")
}

/// `GET /readyz`: 200 when the node is ready to serve ([`Gateway::readiness`]), else 503
/// saying why. No authentication; a few reads of local state.
async fn handle_readyz(State(gw): State<Arc<Gateway>>) -> Response {
    match gw.readiness() {
        Ok(()) => plain(StatusCode::OK, "ready\n"),
        Err(why) => (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            format!("not ready: {why}\n"),
        )
            .into_response(),
    }
}

/// The front checks of `/mcp`, and with authentication on, that the caller is one of
/// `auth.status_principals` (403 otherwise): who may read `/status` and `/metrics`.
async fn may_read_status(
    gw: &Gateway,
    peer: Option<std::net::IpAddr>,
    headers: &HeaderMap,
) -> Result<(), Response> {
    let identity = front(gw, peer, headers).await?;
    if !gw.auth.may_read_status(&identity) {
        return Err(plain(
            StatusCode::FORBIDDEN,
            "Forbidden: not one of auth.status_principals",
        ));
    }
    Ok(())
}

/// `GET /metrics` on the MCP listener: the same rules as `/status` (with authentication on,
/// only the principals of `auth.status_principals`).
async fn handle_metrics(
    State(gw): State<Arc<Gateway>>,
    Peer(peer): Peer,
    headers: HeaderMap,
) -> Response {
    if let Err(r) = may_read_status(&gw, peer, &headers).await {
        return r;
    }
    handle_open_metrics(State(gw)).await
}

/// The metrics in the Prometheus text format, this node's state read now; 404 when metrics
/// are off.
async fn handle_open_metrics(State(gw): State<Arc<Gateway>>) -> Response {
    if !taskmesh_metrics::installed() {
        return plain(
            StatusCode::NOT_FOUND,
            "Not Found: metrics are off ([metrics] enabled = false)",
        );
    }
    metrics::refresh(&gw, gw.readiness().is_ok());
    match taskmesh_metrics::render() {
        Some(text) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, taskmesh_metrics::CONTENT_TYPE)],
            text,
        )
            .into_response(),
        None => plain(StatusCode::NOT_FOUND, "Not Found: metrics are off"),
    }
}

/// `GET /status`: this node's view of every shard (leader, term, applied and log indexes, task
/// counts), for operators and tests. Same Origin, authentication and rate-limit rules as `/mcp`;
/// with authentication on, only the principals of `auth.status_principals` may read it (the
/// node's task counts would tell a caller about other principals' tasks).
async fn handle_status(
    State(gw): State<Arc<Gateway>>,
    Peer(peer): Peer,
    headers: HeaderMap,
) -> Response {
    if let Err(r) = may_read_status(&gw, peer, &headers).await {
        return r;
    }
    let status = gw.router.host().shard_status();
    let node = status
        .first()
        .map(|s| s.node)
        .or_else(|| Some(gw.router.node_id()).filter(|id| *id != 0));
    let shards: Vec<serde_json::Value> = status
        .into_iter()
        .map(|s| {
            serde_json::json!({
                "shard": s.shard,
                "isLeader": s.is_leader,
                "leader": s.leader,
                "term": s.term,
                "lastAppliedIndex": s.last_applied_index,
                "firstLogIndex": s.first_log_index,
                "lastLogIndex": s.last_log_index,
                "tasks": s.tasks,
                "liveTasks": s.live_tasks,
                "voters": s.voters,
                "quiet": match s.quiet {
                    taskmesh_host::Quiet::Awake => None,
                    taskmesh_host::Quiet::Leading => Some("leader"),
                    taskmesh_host::Quiet::Following { .. } => Some("follower"),
                },
            })
        })
        .collect();
    let body = serde_json::json!({
        "node": node,
        "liveTasks": gw.router.host().live_tasks(),
        "sseStreams": gw.slots.open(),
        "shards": shards,
        "streamDelivery": gw.delivery.to_json(),
        "upstreams": gw.tools.source_reports(),
    });
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}
