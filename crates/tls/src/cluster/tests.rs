use super::*;
use crate::certs::{generate, node_name};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn files(dir: &Path, stem: &str) -> TlsFiles {
    TlsFiles {
        ca: dir.join("ca.pem"),
        cert: dir.join(format!("{stem}.pem")),
        key: dir.join(format!("{stem}.key")),
    }
}

/// Node 1's server admitting nodes 1 and 2, and a client presenting `client`: whether a byte
/// written by the client comes back (the server echoes it), else the client's error.
async fn exchange(server: &ClusterTls, client: Arc<ClientConfig>) -> Result<(), std::io::Error> {
    let (a, b) = tokio::io::duplex(64 * 1024);
    let acceptor = tokio_rustls::TlsAcceptor::from(server.server_config());
    let served = tokio::spawn(async move {
        let mut s = acceptor.accept(b).await?;
        let mut byte = [0u8; 1];
        s.read_exact(&mut byte).await?;
        s.write_all(&byte).await?;
        s.flush().await?;
        Ok::<_, std::io::Error>(())
    });
    let connector = tokio_rustls::TlsConnector::from(client);
    let mut c = connector.connect(node_server_name(), a).await?;
    c.write_all(b"x").await?;
    c.flush().await?;
    let mut byte = [0u8; 1];
    let read = c.read_exact(&mut byte).await.map(|_| ());
    let _ = served.await;
    read
}

fn members(ids: &'static [u64]) -> Arc<Admission> {
    Admission::new(move |id| ids.contains(&id))
}

#[test]
fn a_certificate_names_one_identity_or_none() {
    let dir = tempfile::tempdir().unwrap();
    generate(dir.path(), &[7, 12], &["127.0.0.1".into()], true).unwrap();
    let id_of =
        |stem: &str| identity(&read_certs(&dir.path().join(format!("{stem}.pem"))).unwrap()[0]);
    assert_eq!(id_of("node-7"), Some(Identity::Node(7)));
    assert_eq!(id_of("node-12"), Some(Identity::Node(12)));
    assert_eq!(id_of("admin"), Some(Identity::Admin));
    assert_eq!(id_of("ca"), None);
    // Two identities in one certificate, or an id spelled with a leading zero: no identity.
    let key = rcgen::KeyPair::generate().unwrap();
    for names in [
        vec![node_name(1), node_name(2)],
        vec![node_name(1), ADMIN_NAME.to_string()],
        vec!["node-01.taskmesh".to_string()],
        vec!["node-.taskmesh".to_string()],
    ] {
        let cert = rcgen::CertificateParams::new(names.clone())
            .unwrap()
            .self_signed(&key)
            .unwrap();
        assert_eq!(identity(cert.der()), None, "{names:?}");
    }
}

#[tokio::test]
async fn the_server_admits_members_and_operators_and_refuses_everyone_else() {
    let dir = tempfile::tempdir().unwrap();
    generate(dir.path(), &[1, 2, 9], &[], true).unwrap();
    let other = tempfile::tempdir().unwrap();
    generate(other.path(), &[2], &[], false).unwrap();
    let server = ClusterTls::load(
        files(dir.path(), "node-1"),
        Some(Identity::Node(1)),
        members(&[1, 2]),
    )
    .unwrap();
    let client = |d: &Path, stem: &str| {
        ClusterTls::load(files(d, stem), None, members(&[]))
            .unwrap()
            .client_config()
    };
    exchange(&server, client(dir.path(), "node-2"))
        .await
        .expect("a member is admitted");
    exchange(&server, client(dir.path(), "admin"))
        .await
        .expect("an operator is admitted");

    // A node of the same authority that is not a member: the access_denied alert.
    let e = exchange(&server, client(dir.path(), "node-9"))
        .await
        .unwrap_err();
    assert!(is_refusal(&e), "{e:?}");
    // The member's id from another authority: refused (its chain does not verify). The
    // client trusts this cluster's authority, so only the server can refuse it.
    let roots = || {
        let mut r = RootCertStore::empty();
        for c in read_certs(&dir.path().join("ca.pem")).unwrap() {
            r.add(c).unwrap();
        }
        r
    };
    let builder = || {
        ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .unwrap()
            .with_root_certificates(roots())
    };
    let foreign = builder()
        .with_client_auth_cert(
            read_certs(&other.path().join("node-2.pem")).unwrap(),
            read_key(&other.path().join("node-2.key")).unwrap(),
        )
        .unwrap();
    let e = exchange(&server, Arc::new(foreign)).await.unwrap_err();
    assert!(
        !is_refusal(&e),
        "an unknown authority is a certificate error: {e:?}"
    );
    // No certificate at all.
    let anonymous = builder().with_no_client_auth();
    exchange(&server, Arc::new(anonymous)).await.unwrap_err();

    // Admission is decided per connection: once node 9 is a member it gets in.
    server.admission().set(|id| [1, 2, 9].contains(&id));
    exchange(&server, client(dir.path(), "node-9"))
        .await
        .expect("node 9 is now a member");
}

#[test]
fn a_node_certificate_must_name_the_node_and_changed_files_are_read_again() {
    let dir = tempfile::tempdir().unwrap();
    generate(dir.path(), &[1, 2], &[], false).unwrap();
    let e = ClusterTls::load(
        files(dir.path(), "node-2"),
        Some(Identity::Node(1)),
        members(&[]),
    )
    .err()
    .unwrap();
    assert!(e.to_string().contains("names node 2, not node 1"), "{e}");

    let tls = ClusterTls::load(
        files(dir.path(), "node-1"),
        Some(Identity::Node(1)),
        members(&[]),
    )
    .unwrap();
    assert!(!tls.reload(), "nothing changed");
    let before = tls.server_config();
    // Another node's certificate copied over this one's: not this node; the old one stays.
    std::thread::sleep(Duration::from_millis(20));
    std::fs::copy(dir.path().join("node-2.pem"), dir.path().join("node-1.pem")).unwrap();
    std::fs::copy(dir.path().join("node-2.key"), dir.path().join("node-1.key")).unwrap();
    assert!(!tls.reload());
    assert!(Arc::ptr_eq(&before, &tls.server_config()));
    // A new certificate for node 1: in use from the next connection.
    std::thread::sleep(Duration::from_millis(20));
    generate(dir.path(), &[1], &[], false).unwrap();
    assert!(tls.reload());
    assert!(!Arc::ptr_eq(&before, &tls.server_config()));
}
