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
use taskmesh_mcp::jsonrpc::{self, Message, RequestId};
use tracing::Instrument;

use crate::audit;
use crate::auth::Operation;
use crate::delivery::JsonMessage;
use crate::dispatch::{self, Cx, Reply};
use crate::front::{
    forbidden_without_scope, front, plain, rpc_error, session_of, too_many, Fronted, Peer,
};
use crate::resume::{self, open_get_reader, primes, EventId, Opening, Out, Reader, ResumeError};
use crate::session::SessionClaims;
use crate::spans::{otel_answered, otel_span, request_facts, request_span};
use crate::{metrics, relay, slots, status, wire, Gateway};

pub use crate::modern::VERSION_HEADER;
pub use crate::session::SESSION_HEADER;

/// The path the MCP endpoint is served on.
pub const MCP_PATH: &str = "/mcp";

/// The axum router serving `/mcp`, the status endpoints and the worker API (its JSON mirror
/// under `/worker/v1/` and its gRPC service).
pub fn router(gw: Arc<Gateway>) -> axum::Router {
    let limit = gw.cfg.http.max_body_bytes;
    let mut routes = crate::workers::mirror::routes().route_service(
        "/taskmesh.v1.WorkerService/{method}",
        crate::workers::service(gw.clone()),
    );
    for path in gw.auth.metadata_paths() {
        routes = routes.route(&path, axum::routing::get(handle_resource_metadata));
    }
    routes
        .route("/status", axum::routing::get(status::handle_status))
        .route("/metrics", axum::routing::get(status::handle_metrics))
        .route("/healthz", axum::routing::get(status::handle_healthz))
        .route("/readyz", axum::routing::get(status::handle_readyz))
        .route(
            MCP_PATH,
            post(handle_post).get(handle_get).delete(handle_delete),
        )
        .layer(DefaultBodyLimit::max(limit))
        .with_state(gw)
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
    post_mcp(gw, peer, version, headers, body).await
}

/// A `POST /mcp` from `peer`: what [`router`] answers it with. The listener calls it
/// directly, ahead of the router's layers, for the requests that are most of the traffic.
pub async fn post_mcp(
    gw: Arc<Gateway>,
    peer: Option<std::net::IpAddr>,
    version: axum::http::Version,
    headers: HeaderMap,
    body: Body,
) -> Response {
    // The caller is checked on the headers, before a byte of the body is read.
    let identity = match front(&gw, peer, &headers).await {
        Ok(i) => i,
        Err(r) => return r,
    };
    let limit = Duration::from_millis(gw.cfg.http.body_read_timeout_ms);
    let read =
        tokio::time::timeout(limit, read_body(body, &headers, gw.cfg.http.max_body_bytes)).await;
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
    let keepalive = Duration::from_millis(gw.cfg.http.sse_keepalive_ms.max(100));
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
    Fronted(identity): Fronted,
    headers: HeaderMap,
) -> Response {
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
    let reply = dispatch::tasks::tasks_result(gw, &cx, origin.request_id, origin.task_id).await;
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
    too_many(
        "Too Many Requests: this session holds http.max_streams_per_session open GET streams",
        "1",
    )
}

async fn handle_delete(
    State(gw): State<Arc<Gateway>>,
    Fronted(identity): Fronted,
    headers: HeaderMap,
) -> Response {
    let (id, claims) = match session_of(&gw, &headers, &identity.principal) {
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

pub use status::ops_router;
