//! The public HTTP listener: accepts connections and serves the MCP router on them (HTTP/1.1
//! and HTTP/2), bounded so that a client cannot hold the server with connections that do
//! nothing.
//!
//! - At most `http.max_connections` connections are open at once; one more is closed as soon
//!   as it is accepted. The value is kept within the open-file limit less a reserve
//!   ([`crate::descriptors`]), so accepting never fails for want of a descriptor and a new
//!   client never waits in the listen queue behind idle connections.
//! - With `[http.tls]`, every connection is TLS (HTTP/1.1 or HTTP/2 by ALPN), with the newest
//!   good certificate of the configured files; the handshake must end within
//!   `http.header_read_timeout_ms`.
//! - A request's head may take at most `http.max_header_bytes` (431 past it).
//! - A request's headers must arrive within `http.header_read_timeout_ms` of the moment the
//!   connection waits for them (a new connection, and between the requests of a kept-alive
//!   one), else the connection is closed: a client that sends a byte a second, or nothing,
//!   is let go.
//! - Each connection carries its peer's address to the handlers (`ConnectInfo`) and has
//!   `TCP_NODELAY` set: small frames (an SSE event, a short answer) leave at once, not after
//!   the client's delayed ACK.
//!
//! It stops accepting when `stop` resolves, then lets the open connections finish (the caller
//! bounds how long).

use std::sync::Arc;
use std::time::Duration;

use axum::extract::ConnectInfo;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tower::ServiceExt;

/// The listener's bounds (docs/configuration.md, `[http]`).
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// Connections open at once.
    pub max_connections: usize,
    /// How long a request's headers may take to arrive.
    pub header_read_timeout: Duration,
    /// The most bytes a request's head may take (HTTP/1: the parser's buffer, 431 past it;
    /// HTTP/2: the header list).
    pub max_header_bytes: usize,
}

impl Bounds {
    /// The bounds `[http]` sets, `max_connections` fitted to the open-file limit in force
    /// ([`crate::descriptors::connection_limit`]).
    pub fn of(http: &taskmesh_gateway::settings::HttpSettings) -> Self {
        Self {
            max_connections: crate::descriptors::connection_limit(http.max_connections),
            header_read_timeout: Duration::from_millis(http.header_read_timeout_ms),
            max_header_bytes: http.max_header_bytes,
        }
    }
}

/// The listener's TLS, when it serves HTTPS.
pub type Tls = Option<std::sync::Arc<taskmesh_tls::ServerTls>>;

/// After an `accept` that failed (out of file descriptors, say), the pause before the next.
const ACCEPT_RETRY_PAUSE: Duration = Duration::from_millis(50);

/// What the listener serves: `POST /mcp` straight to the gateway's handler, everything else
/// through the router. So the router's layers never see `POST /mcp`: a layer that must apply
/// to it goes in the gateway's handler.
#[derive(Clone)]
pub struct App {
    /// Every route, `/mcp` included.
    pub router: axum::Router,
    /// The gateway whose `POST /mcp` handler takes those requests ahead of the router: the same
    /// handler the router would reach, without the per-request work of its layers (the path
    /// match, the boxed service's clone, the extractors), which is a fifth of a poll's CPU.
    pub gateway: Arc<taskmesh_gateway::Gateway>,
}

impl App {
    /// Answer `req` from `peer`.
    async fn call(
        self,
        peer: std::net::SocketAddr,
        req: hyper::Request<hyper::body::Incoming>,
    ) -> Result<axum::response::Response, std::convert::Infallible> {
        if req.method() == hyper::Method::POST
            && req.uri().path() == taskmesh_gateway::http::MCP_PATH
        {
            let (parts, body) = req.into_parts();
            return Ok(taskmesh_gateway::http::post_mcp(
                self.gateway,
                Some(peer.ip()),
                parts.version,
                parts.headers,
                axum::body::Body::new(body),
            )
            .await);
        }
        let mut req = req.map(axum::body::Body::new);
        req.extensions_mut().insert(ConnectInfo(peer));
        self.router.oneshot(req).await
    }
}

/// Serve `app` on `listener` until `stop` resolves, then until every open connection ended.
pub async fn serve(
    listener: TcpListener,
    app: App,
    bounds: Bounds,
    tls: Tls,
    stop: impl std::future::Future<Output = ()>,
) {
    let graceful = GracefulShutdown::new();
    let open = Arc::new(Semaphore::new(bounds.max_connections));
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(bounds.header_read_timeout)
        .max_buf_size(bounds.max_header_bytes);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_header_list_size(u32::try_from(bounds.max_header_bytes).unwrap_or(u32::MAX));
    let mut stop = std::pin::pin!(stop);
    let counts = Counts::new();
    loop {
        let (tcp, peer) = tokio::select! {
            () = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(ACCEPT_RETRY_PAUSE).await;
                    continue;
                }
            },
        };
        let Ok(permit) = open.clone().try_acquire_owned() else {
            tracing::debug!(peer = %peer, limit = bounds.max_connections, "connection refused: http.max_connections open");
            counts.closed("max_connections");
            drop(tcp);
            continue;
        };
        let permit = counts.open(permit);
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "TCP_NODELAY not set on an accepted connection");
        }
        let app = app.clone();
        let service = hyper::service::service_fn(move |req| app.clone().call(peer, req));
        let builder = builder.clone();
        let watcher = graceful.watcher();
        let wait = bounds.header_read_timeout;
        let tls = tls.as_ref().map(|t| t.config());
        let counts = counts.clone();
        tokio::spawn(async move {
            // A new connection that sends nothing is let go as one that stops halfway through
            // its headers is (the HTTP layer times those, from their first byte).
            let mut first = [0u8; 1];
            match tokio::time::timeout(wait, tcp.peek(&mut first)).await {
                Ok(Ok(n)) if n > 0 => {}
                _ => {
                    tracing::debug!(peer = %peer, "connection closed: no request within http.header_read_timeout_ms");
                    counts.closed("no_request");
                    drop(permit);
                    return;
                }
            }
            let ended = match tls {
                None => {
                    let conn = builder.serve_connection_with_upgrades(TokioIo::new(tcp), service);
                    watcher.watch(conn.into_owned()).await
                }
                Some(config) => {
                    // The handshake is bounded like a request's head.
                    let acceptor = tokio_rustls::TlsAcceptor::from(config);
                    let stream = match tokio::time::timeout(wait, acceptor.accept(tcp)).await {
                        Ok(Ok(s)) => s,
                        Ok(Err(e)) => {
                            tracing::debug!(peer = %peer, error = %e, "TLS handshake failed");
                            counts.closed("tls_handshake_failed");
                            drop(permit);
                            return;
                        }
                        Err(_) => {
                            tracing::debug!(peer = %peer, "connection closed: TLS handshake not done within http.header_read_timeout_ms");
                            counts.closed("tls_handshake_timeout");
                            drop(permit);
                            return;
                        }
                    };
                    let conn =
                        builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
                    watcher.watch(conn.into_owned()).await
                }
            };
            if let Err(e) = ended {
                if e.downcast_ref::<hyper::Error>()
                    .is_some_and(hyper::Error::is_parse_too_large)
                {
                    counts.head_too_large();
                }
                tracing::trace!(peer = %peer, error = %e, "connection ended");
            }
            drop(permit);
        });
    }
    drop(listener);
    graceful.shutdown().await;
}

/// The listener's connection metrics: open connections, and connections closed before any
/// request was served, by cause.
#[derive(Clone)]
struct Counts {
    open: taskmesh_metrics::metrics::Gauge,
}

impl Counts {
    fn new() -> Self {
        Self {
            open: taskmesh_metrics::metrics::gauge!(taskmesh_metrics::names::HTTP_CONNECTIONS),
        }
    }

    /// A connection taken in: counted open until `permit`'s guard is dropped.
    fn open(&self, permit: tokio::sync::OwnedSemaphorePermit) -> OpenConnection {
        self.open.increment(1.0);
        OpenConnection {
            _permit: permit,
            open: self.open.clone(),
        }
    }

    fn closed(&self, cause: &'static str) {
        taskmesh_metrics::metrics::counter!(
            taskmesh_metrics::names::HTTP_CONNECTIONS_CLOSED,
            "cause" => cause
        )
        .increment(1);
    }

    /// A request head over `http.max_header_bytes`: hyper answered 431 and closed.
    fn head_too_large(&self) {
        taskmesh_metrics::metrics::counter!(
            taskmesh_metrics::names::HTTP_REFUSALS,
            "status" => "431",
            "cause" => "header_too_large"
        )
        .increment(1);
    }
}

/// An open connection's place among `http.max_connections`, counted in the open gauge.
struct OpenConnection {
    _permit: tokio::sync::OwnedSemaphorePermit,
    open: taskmesh_metrics::metrics::Gauge,
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.open.decrement(1.0);
    }
}
