//! TLS for a node's listeners, and the certificates of a local cluster.
//!
//! - [`certs`]: `taskmesh certs`, a throwaway certificate authority and node certificates
//!   made with rcgen (no system openssl): every node certificate names `node-{id}.taskmesh`
//!   and `taskmesh-node`, plus the host names and addresses clients reach the node at.
//! - [`ServerTls`]: a listener's certificate and key, read from PEM files and read again when
//!   either file changes, so a certificate is replaced without a restart; each new connection
//!   is served with the newest good pair.
//!
//! - [`cluster`]: mutual TLS on the internal gRPC port (node and operator identities, the
//!   admission of members only, reloading).
//!
//! The cryptography is rustls on the ring provider.

pub mod certs;
pub mod cluster;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::ServerConfig;

/// Why a certificate or key could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read or holds no PEM item of the kind needed.
    #[error("{path}: {reason}")]
    File {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The certificate and key do not make a usable server configuration.
    #[error("certificate {cert} with key {key}: {source}")]
    Config {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// rustls's reason.
        #[source]
        source: rustls::Error,
    },
    /// Making a certificate failed.
    #[error("making a certificate: {0}")]
    Generate(#[from] rcgen::Error),
    /// Writing a certificate or key failed.
    #[error("writing {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

/// The certificates of a PEM file (the leaf first, then its chain).
pub fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let file_error = |reason: String| TlsError::File {
        path: path.to_path_buf(),
        reason,
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| file_error(e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_error(e.to_string()))?;
    if certs.is_empty() {
        return Err(file_error("no certificate in it".into()));
    }
    Ok(certs)
}

/// The private key of a PEM file (PKCS#8, PKCS#1 or SEC1).
pub fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| TlsError::File {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}

/// A listener's TLS: its certificate and key files, and the server configuration made of
/// their newest good contents.
pub struct ServerTls {
    cert: PathBuf,
    key: PathBuf,
    alpn: Vec<Vec<u8>>,
    current: std::sync::RwLock<(Arc<ServerConfig>, Option<Stamps>)>,
}

/// The modification times of the certificate and key files a configuration was read from.
type Stamps = (SystemTime, SystemTime);

impl ServerTls {
    /// Read `cert` and `key` now (an error names the file and what is wrong); `alpn` are the
    /// protocols offered, in order of preference.
    pub fn load(cert: &Path, key: &Path, alpn: &[&[u8]]) -> Result<Arc<Self>, TlsError> {
        let alpn: Vec<Vec<u8>> = alpn.iter().map(|p| p.to_vec()).collect();
        let config = build(cert, key, &alpn)?;
        Ok(Arc::new(ServerTls {
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
            alpn,
            current: std::sync::RwLock::new((config, stamps(cert, key))),
        }))
    }

    /// The configuration a new connection is served with.
    pub fn config(&self) -> Arc<ServerConfig> {
        match self.current.read() {
            Ok(c) => c.0.clone(),
            Err(poisoned) => poisoned.into_inner().0.clone(),
        }
    }

    /// Read the files again if either changed since the last read; a pair that cannot be used
    /// is logged and the one in use stays. Whether a new pair is now in use.
    pub fn reload(&self) -> bool {
        let now = stamps(&self.cert, &self.key);
        let seen = match self.current.read() {
            Ok(c) => c.1,
            Err(poisoned) => poisoned.into_inner().1,
        };
        if now == seen {
            return false;
        }
        match build(&self.cert, &self.key, &self.alpn) {
            Ok(config) => {
                if let Ok(mut c) = self.current.write() {
                    *c = (config, now);
                }
                tracing::info!(cert = %self.cert.display(), "TLS certificate reloaded");
                true
            }
            Err(e) => {
                tracing::warn!(error = %e, "the changed TLS certificate or key cannot be used; the previous pair stays in use");
                false
            }
        }
    }

    /// Check the files for changes every `every`, for as long as this is in use.
    pub fn spawn_reload(self: &Arc<Self>, every: Duration) {
        check_every(self, every, |tls| {
            tls.reload();
        });
    }
}

/// Run `check` on `tls` every `every`, for as long as something else holds it.
pub(crate) fn check_every<T: Send + Sync + 'static>(tls: &Arc<T>, every: Duration, check: fn(&T)) {
    let weak = Arc::downgrade(tls);
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(every).await;
            let Some(tls) = weak.upgrade() else { break };
            check(&tls);
        }
    });
}

/// The cryptography every TLS connection of a node uses: rustls's ring provider. (It offers
/// no post-quantum key exchange, which is why rustls marks it deprecated; the aws-lc provider
/// that has one needs a C toolchain with cmake to build, which the project does not require.)
#[allow(deprecated)]
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The modification times of both files (`None` when either cannot be read).
fn stamps(cert: &Path, key: &Path) -> Option<Stamps> {
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    Some((modified(cert)?, modified(key)?))
}

fn build(cert: &Path, key: &Path, alpn: &[Vec<u8>]) -> Result<Arc<ServerConfig>, TlsError> {
    let chain = read_certs(cert)?;
    let private = read_key(key)?;
    let mut config = ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .and_then(|b| b.with_no_client_auth().with_single_cert(chain, private))
        .map_err(|source| TlsError::Config {
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
            source,
        })?;
    config.alpn_protocols = alpn.to_vec();
    Ok(Arc::new(config))
}
