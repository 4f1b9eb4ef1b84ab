//! The webhook client's connections against a receiver on loopback that counts them: https
//! with the URL's host name as the TLS server name and `Host`, certificates the client does
//! not trust refused as `tls_error`, connections kept alive between attempts, and a kept
//! connection that the receiver closed replaced without a failed attempt.

// A test binary: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use taskmesh_webhook::{Attempt, EgressPolicy, Failure, Sender};

mod common;
use common::{secret, send};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

/// What a receiver saw: connections accepted, the TLS server names asked for, the `Host`
/// header of every request.
#[derive(Default)]
struct Seen {
    connections: AtomicUsize,
    server_names: Mutex<Vec<String>>,
    hosts: Mutex<Vec<String>>,
}

/// Answer 204 to every request on `io` until the client closes it, or after `per_connection`
/// requests (then close it, as a receiver whose keep-alive ran out).
async fn serve<S: AsyncRead + AsyncWrite + Unpin>(io: S, seen: &Seen, per_connection: usize) {
    let mut io = BufReader::new(io);
    for _ in 0..per_connection {
        let mut length = 0usize;
        loop {
            let mut line = String::new();
            if io.read_line(&mut line).await.unwrap_or(0) == 0 {
                return;
            }
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((name, value)) = line.split_once(':') {
                match name.to_ascii_lowercase().as_str() {
                    "content-length" => length = value.trim().parse().unwrap(),
                    "host" => seen.hosts.lock().push(value.trim().to_owned()),
                    _ => {}
                }
            }
        }
        let mut body = vec![0; length];
        io.read_exact(&mut body).await.unwrap();
        io.write_all(b"HTTP/1.1 204 No Content\r\n\r\n")
            .await
            .unwrap();
        io.flush().await.unwrap();
    }
}

/// A receiver on loopback, plain or with `tls`; its port.
async fn receiver(
    seen: Arc<Seen>,
    tls: Option<Arc<rustls::ServerConfig>>,
    per_connection: usize,
) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let (tcp, _) = listener.accept().await.unwrap();
            seen.connections.fetch_add(1, Ordering::SeqCst);
            let (seen, tls) = (seen.clone(), tls.clone());
            tokio::spawn(async move {
                match tls {
                    None => serve(tcp, &seen, per_connection).await,
                    Some(config) => {
                        let Ok(stream) = tokio_rustls::TlsAcceptor::from(config).accept(tcp).await
                        else {
                            return;
                        };
                        let name = stream.get_ref().1.server_name().unwrap_or("").to_owned();
                        seen.server_names.lock().push(name);
                        serve(stream, &seen, per_connection).await;
                    }
                }
            });
        }
    });
    port
}

/// A certificate for `localhost` and its key.
fn localhost_cert() -> (CertificateDer<'static>, PrivateKeyDer<'static>) {
    let made = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let key = PrivateKeyDer::Pkcs8(made.signing_key.serialize_der().into());
    (made.cert.der().clone(), key)
}

fn server_tls(
    cert: CertificateDer<'static>,
    key: PrivateKeyDer<'static>,
) -> Arc<rustls::ServerConfig> {
    let config = rustls::ServerConfig::builder_with_provider(taskmesh_tls::provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert], key)
        .unwrap();
    Arc::new(config)
}

fn loopback() -> EgressPolicy {
    EgressPolicy {
        allow: vec!["127.0.0.0/8".parse().unwrap()],
        http_hosts: vec!["127.0.0.1".into()],
    }
}

#[tokio::test]
async fn https_names_the_host_and_refuses_a_certificate_not_trusted() {
    let (cert, key) = localhost_cert();
    let seen = Arc::new(Seen::default());
    let port = receiver(
        seen.clone(),
        Some(server_tls(cert.clone(), key)),
        usize::MAX,
    )
    .await;
    let url = format!("https://localhost:{port}/hooks");

    // The system's roots do not know the receiver's certificate: a TLS failure.
    let system = Sender::new(loopback(), Duration::from_secs(5), 4).unwrap();
    assert_eq!(
        send(&system, &url, &secret(7)).await,
        Attempt::Failed(Failure::Tls)
    );
    assert_eq!(Failure::Tls.category(), "tls_error");
    assert!(
        seen.hosts.lock().is_empty(),
        "a request went past a failed handshake"
    );

    // Trusted, the name connected to (resolved to loopback) is the one asked for and sent.
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert).unwrap();
    let trusting = Sender::with_roots(loopback(), Duration::from_secs(5), 4, roots).unwrap();
    assert_eq!(send(&trusting, &url, &secret(7)).await, Attempt::Acked(204));
    assert_eq!(seen.server_names.lock().last().unwrap(), "localhost");
    assert_eq!(*seen.hosts.lock(), vec![format!("localhost:{port}")]);
}

#[tokio::test]
async fn connections_are_kept_and_one_the_receiver_closed_is_replaced() {
    // A receiver that keeps a connection for any number of requests: one connection for all.
    let seen = Arc::new(Seen::default());
    let port = receiver(seen.clone(), None, usize::MAX).await;
    let sender = Sender::new(loopback(), Duration::from_secs(5), 4).unwrap();
    let url = format!("http://127.0.0.1:{port}/hooks");
    for _ in 0..5 {
        assert_eq!(send(&sender, &url, &secret(7)).await, Attempt::Acked(204));
    }
    assert_eq!(seen.connections.load(Ordering::SeqCst), 1);
    assert_eq!(seen.hosts.lock().len(), 5);

    // A receiver that closes every connection after one answer: each attempt after the
    // first finds its kept connection closed and succeeds on a new one.
    let seen = Arc::new(Seen::default());
    let port = receiver(seen.clone(), None, 1).await;
    let url = format!("http://127.0.0.1:{port}/hooks");
    for _ in 0..3 {
        assert_eq!(send(&sender, &url, &secret(7)).await, Attempt::Acked(204));
    }
    assert_eq!(seen.connections.load(Ordering::SeqCst), 3);
    assert_eq!(seen.hosts.lock().len(), 3);
}
