//! The lean connections of an [`HttpTransport`](super::HttpTransport): HTTP/1.1 connections
//! of its own, kept alive and reused (one per request in flight), to an endpoint resolved
//! once, with nothing between the request and the connection: for callers that send many
//! small requests and whose own cost counts (the load generator shares its machine with the
//! server it measures).

use std::net::SocketAddr;
use std::sync::Arc;

use hyper::client::conn::http1::{self, SendRequest};
use hyper::header::{HeaderMap, HeaderValue, HOST};
use hyper::{Method, Request, Uri};
use hyper_util::rt::TokioIo;
use parking_lot::Mutex;

use super::WireError;

/// A connection's sending half.
pub(super) type Sender = SendRequest<reqwest::Body>;

/// The idle connections of one transport.
pub(super) type Idle = Arc<Mutex<Vec<Sender>>>;

/// Where the requests go and the connections kept to it.
pub(super) struct Lean {
    addr: SocketAddr,
    /// For `https://`: the TLS configuration and the name the certificate must carry.
    tls: Option<(
        Arc<rustls::ClientConfig>,
        rustls::pki_types::ServerName<'static>,
    )>,
    authority: HeaderValue,
    path: Uri,
    pub(super) idle: Idle,
}

impl Lean {
    /// `url` (`http://` or, with `tls`, `https://`), its host resolved now.
    pub(super) async fn new(
        url: &str,
        tls: Option<Arc<rustls::ClientConfig>>,
    ) -> Result<Self, WireError> {
        let bad = || WireError::Url(url.to_string());
        let uri: Uri = url.parse().map_err(|_| bad())?;
        let auth = uri.authority().ok_or_else(bad)?;
        let (tls, port) = match (uri.scheme_str(), tls) {
            (Some("http"), _) => (None, auth.port_u16().unwrap_or(80)),
            (Some("https"), Some(config)) => {
                let host = auth.host().trim_start_matches('[').trim_end_matches(']');
                let name =
                    rustls::pki_types::ServerName::try_from(host.to_string()).map_err(|_| bad())?;
                (Some((config, name)), auth.port_u16().unwrap_or(443))
            }
            _ => return Err(bad()),
        };
        let addr = tokio::net::lookup_host((auth.host(), port))
            .await
            .map_err(|e| WireError::Send(e.to_string()))?
            .next()
            .ok_or_else(|| WireError::Send(format!("{} resolves to nothing", auth.host())))?;
        Ok(Self {
            addr,
            tls,
            authority: HeaderValue::from_str(auth.as_str()).map_err(|_| bad())?,
            path: Uri::try_from(uri.path_and_query().map_or("/", |p| p.as_str()))
                .map_err(|_| bad())?,
            idle: Arc::new(Mutex::new(Vec::new())),
        })
    }

    async fn connect(&self) -> Result<Sender, WireError> {
        let failed = |e: &dyn std::fmt::Display| WireError::Send(e.to_string());
        let tcp = tokio::net::TcpStream::connect(self.addr)
            .await
            .map_err(|e| failed(&e))?;
        let _ = tcp.set_nodelay(true);
        let Some((config, name)) = &self.tls else {
            let (sender, conn) = http1::handshake(TokioIo::new(tcp))
                .await
                .map_err(|e| failed(&e))?;
            tokio::spawn(conn);
            return Ok(sender);
        };
        let stream = tokio_rustls::TlsConnector::from(config.clone())
            .connect(name.clone(), tcp)
            .await
            .map_err(|e| failed(&e))?;
        let (sender, conn) = http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| failed(&e))?;
        tokio::spawn(conn);
        Ok(sender)
    }

    /// Send a request on an idle connection (a new one when none is ready); the answer's head
    /// and body, and the connection, to be put back once the body is read.
    pub(super) async fn send(
        &self,
        method: Method,
        mut headers: HeaderMap,
        body: reqwest::Body,
    ) -> Result<(hyper::Response<hyper::body::Incoming>, Sender), WireError> {
        let reused = self.idle.lock().pop();
        let mut sender = match reused {
            Some(mut s) => match s.ready().await {
                Ok(()) => s,
                Err(_) => self.connect().await?,
            },
            None => self.connect().await?,
        };
        headers.insert(HOST, self.authority.clone());
        let mut req = Request::new(body);
        *req.method_mut() = method;
        *req.uri_mut() = self.path.clone();
        *req.headers_mut() = headers;
        let resp = sender
            .send_request(req)
            .await
            .map_err(|e| WireError::Send(e.to_string()))?;
        Ok((resp, sender))
    }
}
