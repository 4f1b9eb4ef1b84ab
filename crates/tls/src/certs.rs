//! `taskmesh certs`: a throwaway certificate authority and certificates for the nodes of a
//! local or test cluster, made with rcgen.
//!
//! In `dir`: `ca.pem` and `ca.key` (made once, reused by later calls, so nodes can be added),
//! and for each node id `node-{id}.pem` and `node-{id}.key`. A node certificate names
//! `node-{id}.taskmesh` (its identity among the nodes), `taskmesh-node` (the name every node
//! is dialled by), and each of `hosts` (names or IP addresses clients reach its listeners at).
//! With `admin`, also `admin.pem` and `admin.key`: the operator's certificate for the
//! `taskmesh cluster` commands, naming `admin.taskmesh`. Keys are ECDSA P-256, written readable
//! by their owner only.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

use crate::TlsError;

/// The name every node certificate carries, which nodes dial each other by.
pub const NODE_NAME: &str = "taskmesh-node";

/// The name of an operator's certificate (the `taskmesh cluster` commands).
pub const ADMIN_NAME: &str = "admin.taskmesh";

/// The name that identifies node `id` among the nodes.
pub fn node_name(id: u64) -> String {
    format!("node-{id}.taskmesh")
}

/// Make (or reuse) the authority in `dir` and a certificate for each of `nodes`, naming
/// `hosts` too, and with `admin` the operator's certificate. The files written, in order.
pub fn generate(
    dir: &Path,
    nodes: &[u64],
    hosts: &[String],
    admin: bool,
) -> Result<Vec<PathBuf>, TlsError> {
    std::fs::create_dir_all(dir).map_err(|source| TlsError::Write {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut written = Vec::new();
    let (ca_cert, ca_key) = (dir.join("ca.pem"), dir.join("ca.key"));
    let (issuer_pem, key) = if ca_cert.exists() && ca_key.exists() {
        let read = |p: &Path| {
            std::fs::read_to_string(p).map_err(|e| TlsError::File {
                path: p.to_path_buf(),
                reason: e.to_string(),
            })
        };
        let key = KeyPair::from_pem(&read(&ca_key)?)?;
        (read(&ca_cert)?, key)
    } else {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        let mut name = DistinguishedName::new();
        name.push(DnType::CommonName, "taskmesh cluster CA");
        params.distinguished_name = name;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let cert = params.self_signed(&key)?;
        write(&ca_cert, cert.pem().as_bytes(), false)?;
        write(&ca_key, key.serialize_pem().as_bytes(), true)?;
        written.extend([ca_cert.clone(), ca_key.clone()]);
        (cert.pem(), key)
    };
    let issuer = Issuer::from_ca_cert_pem(&issuer_pem, key)?;
    for &id in nodes {
        let mut names = vec![node_name(id), NODE_NAME.to_string()];
        names.extend(hosts.iter().cloned());
        written.extend(issue(
            dir,
            &format!("node-{id}"),
            &node_name(id),
            names,
            &issuer,
        )?);
    }
    if admin {
        let names = vec![ADMIN_NAME.to_string()];
        written.extend(issue(dir, "admin", ADMIN_NAME, names, &issuer)?);
    }
    Ok(written)
}

/// Make `{stem}.pem` and `{stem}.key` in `dir`: a certificate for `names` (common name
/// `common`) signed by `issuer`, for both ends of a connection.
fn issue(
    dir: &Path,
    stem: &str,
    common: &str,
    names: Vec<String>,
    issuer: &Issuer<'_, KeyPair>,
) -> Result<[PathBuf; 2], TlsError> {
    let mut params = CertificateParams::new(names)?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common);
    params.distinguished_name = dn;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![
        rcgen::ExtendedKeyUsagePurpose::ServerAuth,
        rcgen::ExtendedKeyUsagePurpose::ClientAuth,
    ];
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, issuer)?;
    let (cert_path, key_path) = (
        dir.join(format!("{stem}.pem")),
        dir.join(format!("{stem}.key")),
    );
    // The key first: a reader that sees the new certificate finds its key there.
    write(&key_path, key.serialize_pem().as_bytes(), true)?;
    write(&cert_path, cert.pem().as_bytes(), false)?;
    Ok([cert_path, key_path])
}

/// Write `bytes` to `path` through a temporary file renamed into place (a reader never sees
/// half a file); `private`: readable by the owner only.
fn write(path: &Path, bytes: &[u8], private: bool) -> Result<(), TlsError> {
    let err = |source| TlsError::Write {
        path: path.to_path_buf(),
        source,
    };
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes).map_err(err)?;
    #[cfg(unix)]
    if private {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600)).map_err(err)?;
    }
    #[cfg(not(unix))]
    let _ = private;
    std::fs::rename(&tmp, path).map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_authority_is_made_once_and_signs_every_node() {
        let dir = tempfile::tempdir().unwrap();
        let first = generate(
            dir.path(),
            &[1, 2],
            &["localhost".into(), "127.0.0.1".into()],
            true,
        )
        .unwrap();
        assert_eq!(first.len(), 8, "{first:?}");
        let ca = std::fs::read(dir.path().join("ca.pem")).unwrap();
        let again = generate(dir.path(), &[3], &[], false).unwrap();
        assert_eq!(again.len(), 2, "the authority is reused: {again:?}");
        assert_eq!(std::fs::read(dir.path().join("ca.pem")).unwrap(), ca);
        // Every node certificate chains to the authority and names its identity.
        let roots = {
            let mut r = rustls::RootCertStore::empty();
            for c in crate::read_certs(&dir.path().join("ca.pem")).unwrap() {
                r.add(c).unwrap();
            }
            std::sync::Arc::new(r)
        };
        use rustls::client::danger::ServerCertVerifier;
        let verifier =
            rustls::client::WebPkiServerVerifier::builder_with_provider(roots, crate::provider())
                .build()
                .unwrap();
        for id in [1u64, 2, 3] {
            let chain = crate::read_certs(&dir.path().join(format!("node-{id}.pem"))).unwrap();
            for name in [node_name(id), NODE_NAME.to_string()] {
                let server = rustls::pki_types::ServerName::try_from(name.clone()).unwrap();
                verifier
                    .verify_server_cert(
                        &chain[0],
                        &[],
                        &server,
                        &[],
                        rustls::pki_types::UnixTime::now(),
                    )
                    .unwrap_or_else(|e| panic!("node {id} as {name}: {e}"));
            }
            let other = rustls::pki_types::ServerName::try_from(node_name(id + 10)).unwrap();
            assert!(verifier
                .verify_server_cert(
                    &chain[0],
                    &[],
                    &other,
                    &[],
                    rustls::pki_types::UnixTime::now()
                )
                .is_err());
            crate::read_key(&dir.path().join(format!("node-{id}.key"))).unwrap();
        }
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.path().join("node-1.key"))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o077, 0, "keys are private");
        }
    }
}
