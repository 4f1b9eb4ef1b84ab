//! How a node dials another: one set of channel settings for every internal service (Raft
//! transport, task service, cluster service), over mutual TLS or, with `cluster.insecure`,
//! plain TCP ([`Dialer`]).

use std::sync::Arc;
use std::time::Duration;

use taskmesh_tls::cluster::{node_server_name, ClusterTls};
use tonic::transport::{Channel, Endpoint, Uri};

/// How long dialling a peer may take before the attempt fails (the TLS handshake included).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// HTTP/2 pings on every channel, idle or not, this often...
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(1);
/// ...and a channel whose ping is not answered within this is closed (a peer cut off by the
/// network is noticed in about two seconds, and the channel reconnects).
pub const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(1);

/// A peer address that cannot be dialled.
#[derive(Debug, thiserror::Error)]
pub enum DialError {
    /// The address is empty or only whitespace.
    #[error("empty peer address")]
    Empty,
    /// The address has a scheme other than plain `http://`; holds the trimmed address.
    #[error("peer address {0:?}: give host:port (a scheme other than http:// is not supported)")]
    Scheme(String),
    /// The address is not a valid URI.
    #[error("peer address {addr:?}")]
    Invalid {
        /// The address as given, trimmed.
        addr: String,
        /// The transport's reason for refusing it.
        #[source]
        source: tonic::transport::Error,
    },
}

/// The endpoint of the peer at `addr` (`host:port`, or `http://host:port`), with the
/// settings above. (No adaptive flow-control window: its BDP pings cost the many small
/// messages of the task service; the Raft transport, which streams snapshots, adds it.)
pub fn endpoint(addr: &str) -> Result<Endpoint, DialError> {
    let addr = addr.trim();
    if addr.is_empty() {
        return Err(DialError::Empty);
    }
    let uri = match addr.split_once("://") {
        None => format!("http://{addr}"),
        Some(("http", _)) => addr.to_string(),
        Some(_) => return Err(DialError::Scheme(addr.to_string())),
    };
    let endpoint = Endpoint::from_shared(uri).map_err(|source| DialError::Invalid {
        addr: addr.to_string(),
        source,
    })?;
    Ok(endpoint
        .connect_timeout(CONNECT_TIMEOUT)
        .tcp_nodelay(true)
        .http2_keep_alive_interval(KEEPALIVE_INTERVAL)
        .keep_alive_timeout(KEEPALIVE_TIMEOUT)
        .keep_alive_while_idle(true))
}

/// How this process reaches the internal port of a node: TLS 1.3 with this side's certificate
/// (the server's checked against the cluster's authority and the name every node certificate
/// carries), or plain TCP for a cluster configured `insecure`.
#[derive(Clone, Default)]
pub struct Dialer {
    tls: Option<Arc<ClusterTls>>,
}

impl std::fmt::Debug for Dialer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.tls.is_some() {
            "Dialer(mtls)"
        } else {
            "Dialer(plaintext)"
        })
    }
}

impl Dialer {
    /// Plain TCP (`cluster.insecure = true`).
    pub fn plaintext() -> Self {
        Self { tls: None }
    }

    /// Mutual TLS with `tls`'s newest configuration at each connection.
    pub fn mtls(tls: Arc<ClusterTls>) -> Self {
        Self { tls: Some(tls) }
    }

    /// A channel to `endpoint` that connects on first use (and again after a failure).
    pub fn connect_lazy(&self, endpoint: &Endpoint) -> Channel {
        match &self.tls {
            None => endpoint.connect_lazy(),
            Some(tls) => {
                let tls = tls.clone();
                endpoint.connect_with_connector_lazy(tower::service_fn(move |uri: Uri| {
                    connect_tls(tls.clone(), uri)
                }))
            }
        }
    }

    /// [`endpoint`] of `addr` with [`Dialer::connect_lazy`].
    pub fn channel(&self, addr: &str) -> Result<Channel, DialError> {
        Ok(self.connect_lazy(&endpoint(addr)?))
    }
}

impl Dialer {
    /// Whether the node at `addr` refuses this side's certificate at the handshake (its
    /// server does not admit it). `false` on a plaintext dialer, and when the node cannot be
    /// reached, accepts the connection, or does not answer within [`CONNECT_TIMEOUT`] twice.
    pub async fn refused_by(&self, addr: &str) -> bool {
        use tokio::io::AsyncReadExt;
        let Some(tls) = &self.tls else { return false };
        let Ok(Ok(tcp)) =
            tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::TcpStream::connect(addr.trim()))
                .await
        else {
            return false;
        };
        let connector = tokio_rustls::TlsConnector::from(tls.client_config());
        let Ok(Ok(mut stream)) =
            tokio::time::timeout(CONNECT_TIMEOUT, connector.connect(node_server_name(), tcp)).await
        else {
            return false;
        };
        // TLS 1.3: the server judges the client's certificate after the client's last
        // handshake message, and says so with an alert the next read returns.
        let mut byte = [0u8; 1];
        match tokio::time::timeout(CONNECT_TIMEOUT, stream.read(&mut byte)).await {
            Ok(Err(e)) => taskmesh_tls::cluster::is_refusal(&e),
            _ => false,
        }
    }
}

/// TCP to `uri`'s host and port, then the TLS handshake.
async fn connect_tls(
    tls: Arc<ClusterTls>,
    uri: Uri,
) -> Result<
    hyper_util::rt::TokioIo<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>,
    std::io::Error,
> {
    let invalid = || std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("{uri}"));
    let host = uri.host().ok_or_else(invalid)?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let port = uri.port_u16().ok_or_else(invalid)?;
    let tcp = tokio::net::TcpStream::connect((host, port)).await?;
    tcp.set_nodelay(true)?;
    let connector = tokio_rustls::TlsConnector::from(tls.client_config());
    let stream = connector.connect(node_server_name(), tcp).await?;
    Ok(hyper_util::rt::TokioIo::new(stream))
}
