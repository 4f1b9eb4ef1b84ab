//! Mutual TLS on the internal gRPC port: who a peer is, and whether it may connect.
//!
//! Every connection to a node's internal port is TLS 1.3 with a client certificate, both sides
//! signed by the cluster's authority (`ca_file`). A certificate's identity is in its subject
//! alternative names: `node-{id}.taskmesh` is node `id`, `admin.taskmesh` is an operator's
//! `taskmesh cluster` command ([`Identity`]). A node's server accepts a node certificate only
//! when [`Admission`] says the id is a member; it accepts an operator certificate, which the
//! gRPC server then confines to the cluster service. A certificate that names no identity, or
//! several, is refused.
//!
//! Dialling checks the server's certificate against the authority and the name
//! [`NODE_NAME`](crate::certs::NODE_NAME), which every node certificate carries: the address
//! a node is dialled at comes from the cluster metadata, so the name need not match it.
//!
//! [`ClusterTls`] reads the authority, certificate and key from PEM files and reads them again
//! when any of them changes ([`ClusterTls::reload`]): new connections use the new files,
//! connections already open keep theirs.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, DigitallySignedStruct, DistinguishedName, RootCertStore, ServerConfig};

use crate::certs::{ADMIN_NAME, NODE_NAME};
use crate::{provider, read_certs, read_key, TlsError};

/// Who a certificate says its holder is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Identity {
    /// Node `id` of the cluster (`node-{id}.taskmesh`).
    Node(u64),
    /// An operator's command (`admin.taskmesh`).
    Admin,
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Identity::Node(id) => write!(f, "node {id}"),
            Identity::Admin => f.write_str("admin"),
        }
    }
}

/// The identity `cert` names, if it names exactly one. (Call it on a certificate whose chain
/// was verified: it reads the names, it does not check them.)
pub fn identity(cert: &CertificateDer<'_>) -> Option<Identity> {
    let parsed = webpki::EndEntityCert::try_from(cert).ok()?;
    let mut found = None;
    for name in parsed.valid_dns_names() {
        let this = if name == ADMIN_NAME {
            Identity::Admin
        } else if let Some(id) = name
            .strip_prefix("node-")
            .and_then(|n| n.strip_suffix(".taskmesh"))
        {
            // Digits only: no sign, no wildcard, no leading zeros that would make two names
            // for one id.
            if id.is_empty() || !id.bytes().all(|b| b.is_ascii_digit()) || id.starts_with('0') {
                return None;
            }
            Identity::Node(id.parse().ok()?)
        } else {
            continue;
        };
        if found.is_some_and(|f| f != this) {
            return None;
        }
        found = Some(this);
    }
    found
}

/// Which node ids a node's server accepts, decided when each connection is made.
pub struct Admission {
    check: RwLock<Arc<dyn Fn(u64) -> bool + Send + Sync>>,
}

impl fmt::Debug for Admission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Admission")
    }
}

impl Admission {
    /// Admit the node ids `check` says are members.
    pub fn new(check: impl Fn(u64) -> bool + Send + Sync + 'static) -> Arc<Self> {
        Arc::new(Self {
            check: RwLock::new(Arc::new(check)),
        })
    }

    /// Decide by `check` from now on.
    pub fn set(&self, check: impl Fn(u64) -> bool + Send + Sync + 'static) {
        let check: Arc<dyn Fn(u64) -> bool + Send + Sync> = Arc::new(check);
        match self.check.write() {
            Ok(mut c) => *c = check,
            Err(poisoned) => *poisoned.into_inner() = check,
        }
    }

    /// Whether node `id` may connect now.
    pub fn admits(&self, id: u64) -> bool {
        let check = match self.check.read() {
            Ok(c) => c.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        };
        check(id)
    }
}

/// The files of one side of the internal port's TLS.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// The cluster's authority (PEM): peers' certificates must chain to it.
    pub ca: PathBuf,
    /// This side's certificate (PEM, leaf first).
    pub cert: PathBuf,
    /// This side's private key (PEM).
    pub key: PathBuf,
}

/// The modification times of the three files a configuration was read from.
type Stamps = [Option<SystemTime>; 3];

/// One side of the internal port's mutual TLS: the server configuration a node accepts
/// connections with, and the client configuration it (or a `taskmesh cluster` command) dials
/// with, both made from the newest good files.
pub struct ClusterTls {
    files: TlsFiles,
    /// The identity this side's certificate must name (`None`: any, for operator tools).
    expect: Option<Identity>,
    admission: Arc<Admission>,
    current: RwLock<Current>,
}

#[derive(Clone)]
struct Current {
    server: Arc<ServerConfig>,
    client: Arc<ClientConfig>,
    stamps: Stamps,
}

impl ClusterTls {
    /// Read `files` now. `expect`: the identity the certificate must name (a node's own id);
    /// `admission`: which node ids the server side accepts. An error names the file and what
    /// is wrong.
    pub fn load(
        files: TlsFiles,
        expect: Option<Identity>,
        admission: Arc<Admission>,
    ) -> Result<Arc<Self>, TlsError> {
        let current = build(&files, expect, &admission)?;
        Ok(Arc::new(Self {
            files,
            expect,
            admission,
            current: RwLock::new(current),
        }))
    }

    /// The configuration a new incoming connection is served with.
    pub fn server_config(&self) -> Arc<ServerConfig> {
        self.read().server
    }

    /// The configuration a new outgoing connection is made with.
    pub fn client_config(&self) -> Arc<ClientConfig> {
        self.read().client
    }

    /// Which node ids the server side accepts.
    pub fn admission(&self) -> &Arc<Admission> {
        &self.admission
    }

    fn read(&self) -> Current {
        match self.current.read() {
            Ok(c) => c.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Read the files again if any changed since the last read; files that cannot be used are
    /// logged and the configuration in use stays. Whether new files are now in use.
    pub fn reload(&self) -> bool {
        let now = stamps(&self.files);
        if now == self.read().stamps {
            return false;
        }
        match build(&self.files, self.expect, &self.admission) {
            Ok(next) => {
                match self.current.write() {
                    Ok(mut c) => *c = next,
                    Err(poisoned) => *poisoned.into_inner() = next,
                }
                tracing::info!(cert = %self.files.cert.display(), "internal TLS certificate reloaded");
                true
            }
            Err(e) => {
                tracing::warn!(error = %e, "the changed internal TLS files cannot be used; the previous ones stay in use");
                false
            }
        }
    }

    /// Check the files for changes every `every`, for as long as this is in use.
    pub fn spawn_reload(self: &Arc<Self>, every: Duration) {
        crate::check_every(self, every, |tls| {
            tls.reload();
        });
    }
}

fn stamps(files: &TlsFiles) -> Stamps {
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    [
        modified(&files.ca),
        modified(&files.cert),
        modified(&files.key),
    ]
}

fn build(
    files: &TlsFiles,
    expect: Option<Identity>,
    admission: &Arc<Admission>,
) -> Result<Current, TlsError> {
    let stamps = stamps(files);
    let mut roots = RootCertStore::empty();
    for ca in read_certs(&files.ca)? {
        roots.add(ca).map_err(|e| TlsError::File {
            path: files.ca.clone(),
            reason: format!("not a usable authority certificate: {e}"),
        })?;
    }
    let roots = Arc::new(roots);
    let chain = read_certs(&files.cert)?;
    let named = identity(&chain[0]);
    if let Some(want) = expect {
        if named != Some(want) {
            return Err(TlsError::File {
                path: files.cert.clone(),
                reason: match named {
                    Some(other) => format!("the certificate names {other}, not {want}"),
                    None => format!(
                        "the certificate names no identity (a DNS name node-ID.taskmesh or {ADMIN_NAME})"
                    ),
                },
            });
        }
    }
    let key = read_key(&files.key)?;
    let config_error = |source: rustls::Error| TlsError::Config {
        cert: files.cert.clone(),
        key: files.key.clone(),
        source,
    };
    let webpki_client = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider())
        .build()
        .map_err(|e| TlsError::File {
            path: files.ca.clone(),
            reason: e.to_string(),
        })?;
    let verifier = Arc::new(MemberVerifier {
        inner: webpki_client,
        admission: admission.clone(),
    });
    let mut server = ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(config_error)?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain.clone(), key.clone_key())
        .map_err(config_error)?;
    server.alpn_protocols = vec![b"h2".to_vec()];
    let webpki_server = WebPkiServerVerifier::builder_with_provider(roots, provider())
        .build()
        .map_err(|e| TlsError::File {
            path: files.ca.clone(),
            reason: e.to_string(),
        })?;
    let mut client = ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(config_error)?
        .with_webpki_verifier(webpki_server)
        .with_client_auth_cert(chain, key)
        .map_err(config_error)?;
    client.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Current {
        server: Arc::new(server),
        client: Arc::new(client),
        stamps,
    })
}

/// The server name every node is dialled by.
pub fn node_server_name() -> ServerName<'static> {
    ServerName::try_from(NODE_NAME).expect("a valid DNS name")
}

/// The server side's check of a client certificate: it chains to the authority (webpki), and
/// it names an operator or a node that [`Admission`] admits.
#[derive(Debug)]
struct MemberVerifier {
    inner: Arc<dyn ClientCertVerifier>,
    admission: Arc<Admission>,
}

impl ClientCertVerifier for MemberVerifier {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let verified = self
            .inner
            .verify_client_cert(end_entity, intermediates, now)?;
        match identity(end_entity) {
            Some(Identity::Admin) => Ok(verified),
            Some(Identity::Node(id)) if self.admission.admits(id) => Ok(verified),
            Some(Identity::Node(id)) => {
                tracing::warn!(
                    node = id,
                    "refused a connection: the certificate names a node that is not a member"
                );
                Err(refused())
            }
            None => {
                tracing::warn!("refused a connection: the certificate names no node");
                Err(refused())
            }
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// The error a refused identity gets (the peer sees an `access_denied` alert).
fn refused() -> rustls::Error {
    rustls::Error::InvalidCertificate(rustls::CertificateError::ApplicationVerificationFailure)
}

/// Whether `error` (anywhere in its chain of sources) is the alert a node's server sends a
/// certificate it refuses: the peer does not admit this side. (HTTP/2 keeps only the text of
/// an I/O error, so the alert is recognised by rustls's own wording of it as well as by type.)
pub fn is_refusal(error: &(dyn std::error::Error + 'static)) -> bool {
    let alert = rustls::Error::AlertReceived(rustls::AlertDescription::AccessDenied);
    let text = alert.to_string();
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = next {
        let typed = e.downcast_ref::<rustls::Error>().or_else(|| {
            e.downcast_ref::<std::io::Error>()
                .and_then(|io| io.get_ref())
                .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        });
        if typed == Some(&alert) {
            return true;
        }
        if e.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.get_ref().is_some_and(|inner| inner.to_string() == text))
        {
            return true;
        }
        next = e.source();
    }
    false
}

#[cfg(test)]
mod tests;
