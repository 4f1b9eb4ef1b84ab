//! The ceiling: the smallest HTTP server that answers like an MCP server to the load
//! generator. Every POST gets the same JSON body (200, `application/json`), except
//! notifications, which get 202; every answer carries a session id. Its throughput, measured by
//! the same generator with the same settings, is the upper bound taskmesh is compared with.
//!
//! The body is a JSON-RPC result that satisfies the generator's checks for `initialize`,
//! `tools/call` (a `CreateTaskResult`) and `tasks/get` (a task in status `working`), padded
//! to the size of a real `tasks/get` answer.

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;

/// The task id every ceiling answer names.
pub const CEILING_TASK_ID: &str = "00000000000000000000000000000000";

/// The fixed answer, padded with spaces to at least `size` bytes.
pub fn body(size: usize) -> Bytes {
    let task = format!(
        r#""taskId":"{CEILING_TASK_ID}","status":"working","createdAt":"2026-01-01T00:00:00.000Z","lastUpdatedAt":"2026-01-01T00:00:00.000Z","ttl":3600000,"pollInterval":1000"#
    );
    let mut s = format!(
        r#"{{"jsonrpc":"2.0","id":1,"result":{{"protocolVersion":"2025-11-25",{task},"task":{{{task}}}}}}}"#
    );
    while s.len() < size {
        s.push(' ');
    }
    Bytes::from(s)
}

async fn answer(req: Request<Incoming>, body: Bytes) -> Result<Response<Full<Bytes>>, Infallible> {
    let whole = req.into_body().collect().await.map(|b| b.to_bytes());
    let is_notification = whole
        .as_ref()
        .map(|b| !b.windows(5).any(|w| w == b"\"id\":"))
        .unwrap_or(false);
    let mut resp = if is_notification {
        Response::new(Full::new(Bytes::new()))
    } else {
        Response::new(Full::new(body))
    };
    if is_notification {
        *resp.status_mut() = hyper::StatusCode::ACCEPTED;
    } else {
        resp.headers_mut().insert(
            hyper::header::CONTENT_TYPE,
            hyper::header::HeaderValue::from_static("application/json"),
        );
    }
    resp.headers_mut().insert(
        "mcp-session-id",
        hyper::header::HeaderValue::from_static("ceiling"),
    );
    Ok(resp)
}

/// Serve the ceiling on `listener` until the task is dropped.
pub async fn serve(listener: tokio::net::TcpListener, size: usize) -> std::io::Result<()> {
    let body = body(size);
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        let body = body.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| answer(req, body.clone()));
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// Bind `addr` and return the listener with its actual address.
pub async fn bind(addr: SocketAddr) -> std::io::Result<(tokio::net::TcpListener, SocketAddr)> {
    let l = tokio::net::TcpListener::bind(addr).await?;
    let a = l.local_addr()?;
    Ok((l, a))
}
