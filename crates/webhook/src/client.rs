//! The HTTP/1.1 client webhooks are posted with: each connection opened to an address the
//! egress policy checked when it was resolved (the URL's host kept for `Host` and the TLS
//! server name), no proxy, no redirect followed, and connections kept alive per destination
//! for the next attempt there.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use crate::egress::{EgressPolicy, Endpoint};
use crate::send::Failure;

/// The most of an answer's body read before its connection is given up instead of kept.
const MAX_DRAIN: usize = 64 * 1024;

/// A kept-alive connection, idle since `since`.
struct Idle {
    conn: SendRequest<Full<Bytes>>,
    since: Instant,
}

/// How long a connection is kept idle, and how many per destination.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Keep {
    pub(crate) idle_for: Duration,
    pub(crate) per_destination: usize,
}

/// Connections to webhook receivers.
pub(crate) struct Client {
    policy: Arc<EgressPolicy>,
    tls: tokio_rustls::TlsConnector,
    keep: Keep,
    /// Idle connections by destination ([`Endpoint::origin`]), the newest last.
    idle: Mutex<std::collections::HashMap<String, Vec<Idle>>>,
}

/// An answer: its status and the body read (at most `limit` bytes; `None` past it).
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) body: Option<Bytes>,
}

impl Client {
    pub(crate) fn new(
        policy: Arc<EgressPolicy>,
        tls: Arc<rustls::ClientConfig>,
        keep: Keep,
    ) -> Self {
        Self {
            policy,
            tls: tokio_rustls::TlsConnector::from(tls),
            keep,
            idle: Mutex::default(),
        }
    }

    pub(crate) fn policy(&self) -> &EgressPolicy {
        &self.policy
    }

    /// POST `body` with `headers` to `to`, on a kept-alive connection when one is idle there.
    /// A kept connection that the receiver closed meanwhile (the request not sent, or no
    /// answer begun) is given up and the request made once more on a new one.
    pub(crate) async fn post(
        &self,
        to: &Endpoint,
        headers: &[(&'static str, &str)],
        body: Bytes,
        limit: usize,
    ) -> Result<Answer, Failure> {
        loop {
            let (mut conn, kept) = match self.take(to.origin()) {
                Some(c) => (c, true),
                None => (self.connect(to).await?, false),
            };
            if conn.ready().await.is_err() {
                if kept {
                    continue;
                }
                return Err(Failure::Connection);
            }
            let mut request = hyper::Request::post(to.path.as_str())
                .header("host", to.authority.as_str())
                .header(
                    "user-agent",
                    concat!("taskmesh/", env!("CARGO_PKG_VERSION")),
                );
            for (name, value) in headers {
                request = request.header(*name, *value);
            }
            let request = request
                .body(Full::new(body.clone()))
                .map_err(|_| Failure::Connection)?;
            let answer = match conn.send_request(request).await {
                Ok(a) => a,
                Err(e) if kept && (e.is_canceled() || e.is_incomplete_message()) => continue,
                Err(e) => return Err(failure_of(&e)),
            };
            let status = answer.status().as_u16();
            let mut stream = answer.into_body();
            let mut read = bytes::BytesMut::new();
            let mut whole = true;
            while let Some(frame) = stream.frame().await {
                let frame = frame.map_err(|e| failure_of(&e))?;
                if let Ok(data) = frame.into_data() {
                    if read.len() + data.len() > limit.max(MAX_DRAIN) {
                        whole = false;
                        break;
                    }
                    read.extend_from_slice(&data);
                }
            }
            if whole {
                self.keep_idle(to.origin(), conn);
            }
            let body = (whole && read.len() <= limit).then(|| read.freeze());
            return Ok(Answer { status, body });
        }
    }

    /// An idle connection to `origin` that is still open, dropping those closed or idle too
    /// long.
    fn take(&self, origin: &str) -> Option<SendRequest<Full<Bytes>>> {
        let mut idle = self.idle.lock();
        let kept = idle.get_mut(origin)?;
        while let Some(c) = kept.pop() {
            if !c.conn.is_closed() && c.since.elapsed() < self.keep.idle_for {
                return Some(c.conn);
            }
        }
        None
    }

    fn keep_idle(&self, origin: &str, conn: SendRequest<Full<Bytes>>) {
        if conn.is_closed() {
            return;
        }
        let mut idle = self.idle.lock();
        let kept = idle.entry(origin.to_owned()).or_default();
        kept.retain(|c| !c.conn.is_closed() && c.since.elapsed() < self.keep.idle_for);
        if kept.len() < self.keep.per_destination {
            kept.push(Idle {
                conn,
                since: Instant::now(),
            });
        }
    }

    /// A new connection to `to`: its host resolved and checked now (or its address, checked
    /// when the URL was), each allowed address tried in turn, TLS to the URL's host name.
    async fn connect(&self, to: &Endpoint) -> Result<SendRequest<Full<Bytes>>, Failure> {
        let addrs: Vec<SocketAddr> = match to.ip {
            Some(ip) => vec![SocketAddr::new(ip, to.port)],
            None => self
                .policy
                .resolve(&to.host)
                .await
                .map_err(Failure::Egress)?
                .into_iter()
                .map(|a| SocketAddr::new(a.ip(), to.port))
                .collect(),
        };
        let mut tcp = None;
        for addr in addrs {
            if let Ok(s) = TcpStream::connect(addr).await {
                tcp = Some(s);
                break;
            }
        }
        let tcp = tcp.ok_or(Failure::Connection)?;
        // Small requests answered at once: no waiting for more to send.
        let _ = tcp.set_nodelay(true);
        if !to.https {
            return handshake(tcp).await;
        }
        let name = rustls::pki_types::ServerName::try_from(to.server_name().to_owned())
            .map_err(|_| Failure::Tls)?;
        let tls = self.tls.connect(name, tcp).await.map_err(|e| {
            if e.get_ref().is_some_and(|i| i.is::<rustls::Error>()) {
                Failure::Tls
            } else {
                Failure::Connection
            }
        })?;
        handshake(tls).await
    }
}

/// HTTP/1.1 over `io`, its connection driven by a task of its own until it closes.
async fn handshake<S>(io: S) -> Result<SendRequest<Full<Bytes>>, Failure>
where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let (conn, driver) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| failure_of(&e))?;
    tokio::spawn(async move {
        let _ = driver.await;
    });
    Ok(conn)
}

/// The TLS configuration webhooks are sent with: the system's trusted roots, on the ring
/// provider, HTTP/1.1 only.
pub(crate) fn system_tls() -> Result<Arc<rustls::ClientConfig>, String> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_native_certs::load_native_certs().certs {
        // A certificate the store cannot use is skipped, as every TLS client does.
        let _ = roots.add(cert);
    }
    tls_with(roots)
}

/// A TLS configuration that trusts `roots`.
pub(crate) fn tls_with(roots: rustls::RootCertStore) -> Result<Arc<rustls::ClientConfig>, String> {
    let mut config = rustls::ClientConfig::builder_with_provider(taskmesh_tls::provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("the webhook client's TLS: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// What a transport error was, from its chain of causes.
fn failure_of(e: &(dyn std::error::Error + 'static)) -> Failure {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        if c.is::<rustls::Error>() {
            return Failure::Tls;
        }
        // An I/O error hides the error it wraps from `source()`: look inside.
        if let Some(inner) = c
            .downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::get_ref)
        {
            if inner.is::<rustls::Error>() {
                return Failure::Tls;
            }
        }
        cause = c.source();
    }
    Failure::Connection
}
