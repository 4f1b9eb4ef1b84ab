//! The server side of the internal port: accepting connections (TLS handshakes run
//! concurrently, each bounded in time) and telling every call who made it ([`PeerInfo`]), so
//! that [`Access`] can confine an operator's certificate to the cluster service.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use taskmesh_tls::cluster::{identity, ClusterTls, Identity};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tonic::codegen::http;
use tonic::transport::server::Connected;

/// Who is at the other end of a connection to the internal port; in every call's extensions.
#[derive(Debug, Clone, Copy)]
pub struct PeerInfo {
    /// The peer's address.
    pub remote: Option<SocketAddr>,
    /// The identity its certificate names (`None` on a plaintext port).
    pub identity: Option<Identity>,
}

/// An accepted connection: TLS, or plain TCP on an `insecure` cluster.
pub enum PeerStream {
    /// Plain TCP.
    Plain(TcpStream),
    /// TLS after a completed handshake, with the identity the client's certificate names.
    Tls(Box<tokio_rustls::server::TlsStream<TcpStream>>, Identity),
}

impl Connected for PeerStream {
    type ConnectInfo = PeerInfo;

    fn connect_info(&self) -> PeerInfo {
        match self {
            PeerStream::Plain(s) => PeerInfo {
                remote: s.peer_addr().ok(),
                identity: None,
            },
            PeerStream::Tls(s, id) => PeerInfo {
                remote: s.get_ref().0.peer_addr().ok(),
                identity: Some(*id),
            },
        }
    }
}

impl AsyncRead for PeerStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            PeerStream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            PeerStream::Tls(s, _) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for PeerStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            PeerStream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            PeerStream::Tls(s, _) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            PeerStream::Plain(s) => Pin::new(s).poll_flush(cx),
            PeerStream::Tls(s, _) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            PeerStream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            PeerStream::Tls(s, _) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            PeerStream::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            PeerStream::Tls(s, _) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            PeerStream::Plain(s) => s.is_write_vectored(),
            PeerStream::Tls(s, _) => s.is_write_vectored(),
        }
    }
}

/// How many accepted connections may wait for the server to take them.
const BACKLOG: usize = 128;

/// The connections `listener` accepts, for `Server::serve_with_incoming`: with `tls`, each
/// after its handshake (run on its own task, at most `handshake_timeout`; a failed or refused
/// handshake is logged and dropped). Ends when the server stops taking connections.
pub fn incoming(
    listener: TcpListener,
    tls: Option<Arc<ClusterTls>>,
    handshake_timeout: Duration,
) -> tokio_stream::wrappers::ReceiverStream<std::io::Result<PeerStream>> {
    let (tx, rx) = tokio::sync::mpsc::channel(BACKLOG);
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                a = listener.accept() => a,
                _ = tx.closed() => break,
            };
            let (tcp, remote) = match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors and the like: pause rather than spin.
                    tracing::warn!(error = %e, "accepting an internal connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let _ = tcp.set_nodelay(true);
            match &tls {
                None => {
                    if tx.send(Ok(PeerStream::Plain(tcp))).await.is_err() {
                        break;
                    }
                }
                Some(tls) => {
                    let acceptor = tokio_rustls::TlsAcceptor::from(tls.server_config());
                    let tx = tx.clone();
                    tokio::spawn(async move {
                        match tokio::time::timeout(handshake_timeout, acceptor.accept(tcp)).await {
                            Ok(Ok(stream)) => {
                                let id = stream
                                    .get_ref()
                                    .1
                                    .peer_certificates()
                                    .and_then(|c| c.first())
                                    .and_then(identity);
                                // The verifier admitted only certificates that name someone.
                                if let Some(id) = id {
                                    let _ =
                                        tx.send(Ok(PeerStream::Tls(Box::new(stream), id))).await;
                                }
                            }
                            Ok(Err(e)) => {
                                tracing::debug!(peer = %remote, error = %e, "internal TLS handshake failed");
                            }
                            Err(_) => {
                                tracing::debug!(peer = %remote, "internal TLS handshake timed out");
                            }
                        }
                    });
                }
            }
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(rx)
}

/// The path prefix of the cluster service, the only one an operator's certificate may call.
const CLUSTER_SERVICE: &str = "/taskmesh.v1.ClusterService/";

/// Confines callers to what their certificate allows: a node may call every service, an
/// operator (`admin.taskmesh`) only the cluster service; others get `PERMISSION_DENIED`.
/// Wrap a gRPC server's services with
/// `Server::builder().layer(tower::layer::layer_fn(Access::new))`.
#[derive(Debug, Clone)]
pub struct Access<S> {
    inner: S,
}

impl<S> Access<S> {
    /// `inner`, confined.
    pub fn new(inner: S) -> Self {
        Self { inner }
    }
}

impl<S, B, R> tower::Service<http::Request<B>> for Access<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<R>>,
    S::Future: Send + 'static,
    R: Default,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future =
        futures::future::Either<S::Future, std::future::Ready<Result<http::Response<R>, S::Error>>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let operator = matches!(
            request.extensions().get::<PeerInfo>(),
            Some(PeerInfo {
                identity: Some(Identity::Admin),
                ..
            })
        );
        if operator && !request.uri().path().starts_with(CLUSTER_SERVICE) {
            let status = tonic::Status::permission_denied(
                "an operator certificate may call only the cluster service",
            );
            return futures::future::Either::Right(std::future::ready(Ok(status.into_http())));
        }
        futures::future::Either::Left(self.inner.call(request))
    }
}
