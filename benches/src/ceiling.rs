//! The ceiling: the smallest HTTP server that answers like an MCP server to the load
//! generator. Every request gets a fixed JSON-RPC answer that echoes its id (200,
//! `application/json`), every notification a 202; every answer carries a session id. Its
//! throughput, measured by
//! the same generator with the same settings, is the upper bound taskmesh is compared with.
//!
//! It answers `initialize` and `tools/call` with fixed answers that pass the generator's checks
//! (an `InitializeResult`, a `CreateTaskResult`), and every other request with a `tasks/get`
//! answer (a task in status `working`) padded to the size of a real taskmesh `tasks/get`
//! answer, which is what the poll scenario measures. Telling the methods apart is a byte search
//! of the request and the id is copied as bytes, no JSON parsing: the ceiling does the least a
//! server can do.

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;

/// The task id every ceiling answer names.
pub const CEILING_TASK_ID: &str = "00000000000000000000000000000000";

fn task_fields() -> String {
    format!(
        r#""taskId":"{CEILING_TASK_ID}","status":"working","createdAt":"2026-01-01T00:00:00.000Z","lastUpdatedAt":"2026-01-01T00:00:00.000Z","ttl":3600000,"pollInterval":1000"#
    )
}

const HEAD: &[u8] = br#"{"jsonrpc":"2.0","id":"#;

/// The three fixed answers, each from just after its id to the end.
#[derive(Clone)]
pub struct Bodies {
    initialize: Bytes,
    create: Bytes,
    get: Bytes,
}

impl Bodies {
    /// The answers; the `tasks/get` answer is padded with spaces to at least `get_size` bytes
    /// for a one-byte request id (a longer id lengthens it as it lengthens any server's answer).
    pub fn new(get_size: usize) -> Self {
        let task = task_fields();
        let mut get = format!(r#","result":{{{task}}}}}"#);
        while HEAD.len() + 1 + get.len() < get_size {
            get.push(' ');
        }
        Bodies {
            initialize: Bytes::from_static(
                br#","result":{"protocolVersion":"2025-11-25","capabilities":{"tasks":{}},"serverInfo":{"name":"ceiling","version":"1"}}}"#,
            ),
            create: Bytes::from(format!(r#","result":{{"task":{{{task}}}}}}}"#)),
            get: Bytes::from(get),
        }
    }

    /// The whole `tasks/get` answer for request id `id` (a JSON number or string, as bytes).
    pub fn get_answer(&self, id: &[u8]) -> Bytes {
        whole(id, &self.get)
    }
}

fn whole(id: &[u8], rest: &[u8]) -> Bytes {
    let mut b = Vec::with_capacity(HEAD.len() + id.len() + rest.len());
    b.extend_from_slice(HEAD);
    b.extend_from_slice(id);
    b.extend_from_slice(rest);
    Bytes::from(b)
}

/// The request id as it appears in the body: the bytes after `"id":` up to `,` or `}` (a number
/// or a string without those characters, which is what the generator sends).
fn request_id(body: &[u8]) -> Option<&[u8]> {
    let at = body.windows(5).position(|w| w == b"\"id\":")? + 5;
    let len = body[at..].iter().position(|&c| c == b',' || c == b'}')?;
    Some(&body[at..at + len])
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

async fn answer(
    req: Request<Incoming>,
    bodies: Bodies,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let request = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let mut resp = if let Some(id) = request_id(&request) {
        let rest = if contains(&request, b"\"initialize\"") {
            &bodies.initialize
        } else if contains(&request, b"\"tools/call\"") {
            &bodies.create
        } else {
            &bodies.get
        };
        let mut r = Response::new(Full::new(whole(id, rest)));
        r.headers_mut().insert(
            hyper::header::CONTENT_TYPE,
            hyper::header::HeaderValue::from_static("application/json"),
        );
        r
    } else {
        let mut r = Response::new(Full::new(Bytes::new()));
        *r.status_mut() = hyper::StatusCode::ACCEPTED;
        r
    };
    resp.headers_mut().insert(
        "mcp-session-id",
        hyper::header::HeaderValue::from_static("ceiling"),
    );
    Ok(resp)
}

/// Serve the ceiling on `listener` until the task is dropped.
/// `size` is the size of a real `tasks/get` answer to a request with a one-byte id.
pub async fn serve(listener: tokio::net::TcpListener, size: usize) -> std::io::Result<()> {
    let bodies = Bodies::new(size);
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        let bodies = bodies.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| answer(req, bodies.clone()));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_echo_the_id_and_have_the_asked_size() {
        let b = Bodies::new(257);
        let a = b.get_answer(b"3");
        assert_eq!(a.len(), 257);
        let v: serde_json::Value = serde_json::from_slice(&a).unwrap();
        assert_eq!(v["id"], 3);
        assert_eq!(v["result"]["taskId"], CEILING_TASK_ID);
        let long = b.get_answer(b"123456");
        assert_eq!(long.len(), 257 + 5);
        let req = br#"{"id":42,"jsonrpc":"2.0","method":"tasks/get","params":{"taskId":"x"}}"#;
        assert_eq!(request_id(req), Some(&b"42"[..]));
        assert_eq!(
            request_id(br#"{"jsonrpc":"2.0","id":"a-1"}"#),
            Some(&br#""a-1""#[..])
        );
        assert_eq!(request_id(br#"{"jsonrpc":"2.0","method":"x"}"#), None);
    }
}
