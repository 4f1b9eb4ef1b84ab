//! The front checks every request to the MCP listener passes before its method is looked at:
//! the Origin, the bearer token (and the lockout of an address that sent too many wrong
//! ones), the scopes an operation needs, the request rate, the session id; and the plain
//! answers of a refusal (401, 403, 429 and 503 with `Retry-After`).
//!
//! `http.rs` calls [`front`] for `/mcp`, and `status.rs` for `/status` and `/metrics`.

use std::convert::Infallible;

use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use taskmesh_mcp::jsonrpc::{self, ErrorObject, RequestId};

use crate::auth::{Identity, Operation, Refusal};
use crate::limits::WrongToken;
use crate::modern::VERSION_HEADER;
use crate::session::{SessionClaims, SESSION_HEADER};
use crate::spans::request_facts;
use crate::{audit, metrics, Gateway};

pub(crate) fn plain(status: StatusCode, msg: &'static str) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        msg,
    )
        .into_response()
}

pub(crate) fn rpc_error(status: StatusCode, id: Option<&RequestId>, e: &ErrorObject) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        jsonrpc::error_response(id, e),
    )
        .into_response()
}

/// `Origin` check: absent is allowed (non-browser clients); present must match the list.
pub(crate) fn origin_allowed(gw: &Gateway, headers: &HeaderMap) -> bool {
    let Some(origin) = headers.get(header::ORIGIN) else {
        return true;
    };
    let Ok(origin) = origin.to_str() else {
        return false;
    };
    gw.cfg.http.allowed_origins.iter().any(|allowed| {
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
pub(crate) async fn authenticate(
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
            retry_later(
                StatusCode::SERVICE_UNAVAILABLE,
                "Service Unavailable: the token could not be checked now",
                "5",
            )
        }
    };
    Err(response)
}

/// The 403 for a caller whose token lacks scopes `operation` requires (audited as
/// `insufficient_scope`, for the request `method` `request_id`), or `None` when it may.
pub(crate) fn forbidden_without_scope(
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
pub(crate) fn session_of(
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
pub(crate) struct Peer(pub(crate) Option<std::net::IpAddr>);

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

/// The caller of a request that passed the front checks ([`front`]); a request that did not is
/// answered with its refusal before the handler runs.
pub(crate) struct Fronted(pub(crate) Identity);

impl axum::extract::FromRequestParts<std::sync::Arc<Gateway>> for Fronted {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        gw: &std::sync::Arc<Gateway>,
    ) -> Result<Self, Self::Rejection> {
        let Ok(Peer(peer)) = Peer::from_request_parts(parts, gw).await;
        front(gw, peer, &parts.headers).await.map(Fronted)
    }
}

/// Common front checks (origin, authentication, the request rate); the caller on success. A
/// token that verifies is heard whatever others sent from its address.
pub(crate) async fn front(
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
    if crate::workers::is_worker_token(gw, headers.get(header::AUTHORIZATION)) {
        metrics::refused(403, "worker_credential");
        return Err(plain(
            StatusCode::FORBIDDEN,
            "Forbidden: a worker credential cannot act as a client",
        ));
    }
    let identity = authenticate(gw, peer, headers).await?;
    if gw
        .auth
        .has_issuers()
        .then(|| gw.router.host().worker_settings().scope.as_str())
        .is_some_and(|scope| identity.grants(scope))
    {
        metrics::refused(403, "worker_credential");
        return Err(plain(
            StatusCode::FORBIDDEN,
            "Forbidden: a token with the worker scope cannot act as a client",
        ));
    }
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
pub(crate) fn too_many(why: &'static str, retry_after_s: &'static str) -> Response {
    retry_later(StatusCode::TOO_MANY_REQUESTS, why, retry_after_s)
}

/// `status` saying `why` in plain text, with `Retry-After: retry_after_s` (seconds).
pub(crate) fn retry_later(
    status: StatusCode,
    why: impl Into<Body>,
    retry_after_s: &'static str,
) -> Response {
    let mut r = (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        why.into(),
    )
        .into_response();
    r.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static(retry_after_s));
    r
}
