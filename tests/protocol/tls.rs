//! The MCP listener over TLS (`[http.tls]`) with certificates from `taskmesh certs`: a client
//! that trusts the authority opens a session over HTTPS; plain HTTP and a client that does
//! not trust the authority get nothing; a certificate replaced on disk is served to new
//! connections without a restart.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::json;
use taskmesh_testkit::{Client, Server, V};

use crate::{init_body, TASKMESH};

/// `taskmesh certs` into `dir` for node 1, naming 127.0.0.1.
fn certs(dir: &Path) {
    let out = Command::new(TASKMESH)
        .args([
            "certs",
            "--node",
            "1",
            "--host",
            "127.0.0.1",
            "--host",
            "localhost",
            "--out",
        ])
        .arg(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// An HTTPS client trusting only the authority in `dir`, that keeps no connection open (each
/// request makes a new one and sees the certificate served now).
fn client_trusting(dir: &Path) -> reqwest::Client {
    let ca = std::fs::read(dir.join("ca.pem")).unwrap();
    reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(&ca).unwrap())
        .tls_info(true)
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

/// The certificate the server presents now, as DER.
async fn served_cert(http: &reqwest::Client, base: &str) -> Vec<u8> {
    let r = http.get(format!("{base}/status")).send().await.unwrap();
    r.extensions()
        .get::<reqwest::tls::TlsInfo>()
        .and_then(|i| i.peer_certificate())
        .expect("the TLS peer certificate")
        .to_vec()
}

#[tokio::test]
async fn the_listener_serves_https_and_takes_a_new_certificate_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    certs(dir.path());
    let s = Server::start(
        TASKMESH,
        &format!(
            "[http.tls]\ncert_file = {:?}\nkey_file = {:?}\nreload_interval_ms = 100\n",
            dir.path().join("node-1.pem"),
            dir.path().join("node-1.key")
        ),
    );
    assert!(s.url.starts_with("https://127.0.0.1:"), "{}", s.url);
    let base = s.url.trim_end_matches("/mcp").to_string();

    // A session over HTTPS.
    let mut c = Client::new(&s.url);
    c.http = client_trusting(dir.path());
    let r = c.post(&init_body(V), &[]).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.headers.contains_key("mcp-session-id"));

    // Plain HTTP to the TLS port, and a client that trusts other roots: no answer.
    let plain = reqwest::Client::new()
        .post(s.url.replace("https://", "http://"))
        .body(init_body(V))
        .send()
        .await;
    assert!(plain.is_err() || plain.is_ok_and(|r| !r.status().is_success()));
    let other = tempfile::tempdir().unwrap();
    certs(other.path());
    let stranger = client_trusting(other.path());
    assert!(stranger.get(format!("{base}/status")).send().await.is_err());

    // A new certificate (and key) replaces the old one on disk: new connections get it.
    let http = client_trusting(dir.path());
    let old = served_cert(&http, &base).await;
    std::fs::remove_file(dir.path().join("node-1.pem")).unwrap();
    std::fs::remove_file(dir.path().join("node-1.key")).unwrap();
    certs(dir.path());
    let mut renewed = false;
    for _ in 0..100 {
        if served_cert(&http, &base).await != old {
            renewed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(renewed, "the renewed certificate is served");
    // The session made before goes on over the new certificate.
    let mut again = c.clone();
    again.session = Some(r.headers["mcp-session-id"].to_str().unwrap().to_string());
    let ping = again
        .post(
            &json!({"jsonrpc":"2.0","id":2,"method":"ping"}).to_string(),
            &[],
        )
        .await;
    assert_eq!(ping.status, 200, "{}", ping.body);
}
