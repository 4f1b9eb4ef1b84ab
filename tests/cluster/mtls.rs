//! Mutual TLS on the internal port of a real cluster: members and the operator get in, a
//! node that is not a member, a certificate of another authority, a client without a
//! certificate and plain gRPC are refused; an operator's certificate reaches only the cluster
//! service; a node's replaced certificate serves new connections without a restart.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::json;
use taskmesh_rpc::dial::Dialer;
use taskmesh_rpc::v1::task_service_client::TaskServiceClient;
use taskmesh_rpc::v1::{self, cluster_service_client::ClusterServiceClient};
use taskmesh_testkit::certs::write_certs;
use taskmesh_testkit::{free_ports, wait_cluster_ready, Server};
use taskmesh_tls::cluster::{Admission, ClusterTls, TlsFiles};

use crate::{connect, node_config_with, TASKMESH, TOKEN};

/// A dialer presenting `cert`/`key`, trusting the authority `ca`.
fn dialer(ca: &Path, cert: &Path, key: &Path) -> Dialer {
    let files = TlsFiles {
        ca: ca.to_path_buf(),
        cert: cert.to_path_buf(),
        key: key.to_path_buf(),
    };
    Dialer::mtls(ClusterTls::load(files, None, Admission::new(|_| false)).unwrap())
}

async fn get_metadata(d: &Dialer, addr: &str) -> Result<(), tonic::Status> {
    let mut c = ClusterServiceClient::new(d.channel(addr).unwrap());
    c.get_metadata(v1::GetMetadataRequest {}).await.map(|_| ())
}

async fn list_tasks(d: &Dialer, addr: &str) -> Result<(), tonic::Status> {
    let mut c = TaskServiceClient::new(d.channel(addr).unwrap());
    let list = v1::ListTasksRequest {
        owner: "alice".into(),
        ..Default::default()
    };
    let request = v1::ApplyRequest {
        op: Some(v1::apply_request::Op::List(list)),
    };
    c.apply(request).await.map(|_| ())
}

/// The certificate node `addr` presents to a new connection (as seen by `config`).
async fn served_certificate(config: std::sync::Arc<rustls::ClientConfig>, addr: &str) -> Vec<u8> {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let tls = tokio_rustls::TlsConnector::from(config)
        .connect(taskmesh_tls::cluster::node_server_name(), tcp)
        .await
        .unwrap();
    tls.get_ref().1.peer_certificates().unwrap()[0].to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_internal_port_admits_members_and_the_operator_and_takes_a_new_certificate() {
    let grpc = free_ports(3);
    // Node 1's files are the test's, checked for changes every 200 ms.
    let mine = tempfile::tempdir().unwrap();
    write_certs(mine.path(), &[1], false);
    let file = |f: &str| mine.path().join(f);
    let tls1 = format!(
        "[cluster.tls]\nca_file = {:?}\ncert_file = {:?}\nkey_file = {:?}\nreload_interval_ms = 200\n",
        file("ca.pem").display().to_string(),
        file("node-1.pem").display().to_string(),
        file("node-1.key").display().to_string(),
    );
    let n2 = Server::start_node(TASKMESH, &node_config_with(2, &grpc, ""), false);
    let n3 = Server::start_node(TASKMESH, &node_config_with(3, &grpc, ""), false);
    let n1 = Server::start_node(TASKMESH, &node_config_with(1, &grpc, &tls1), true);
    // Every shard elected a leader the three nodes agree on: Raft runs over mutual TLS.
    wait_cluster_ready(&[&n1, &n2, &n3], TOKEN, crate::shards()).await;
    let c = connect(&n2).await;
    let before = c
        .start_task("slow_compute", json!({"seconds": 0.1, "label": "before"}))
        .await;
    let addr = format!("127.0.0.1:{}", grpc[0]);

    // Certificates of the cluster's authority: a member (node 2), a node that is not a
    // member (9), the operator.
    let ours = tempfile::tempdir().unwrap();
    write_certs(ours.path(), &[2, 9], true);
    let at = |f: &str| ours.path().join(f);
    let ca = at("ca.pem");
    let member = dialer(&ca, &at("node-2.pem"), &at("node-2.key"));
    let stranger = dialer(&ca, &at("node-9.pem"), &at("node-9.key"));
    let admin = dialer(&ca, &at("admin.pem"), &at("admin.key"));
    // Node 2's id signed by another authority (the client trusts the cluster's, so only the
    // server can refuse it).
    let foreign_dir = tempfile::tempdir().unwrap();
    taskmesh_tls::certs::generate(foreign_dir.path(), &[2], &[], false).unwrap();
    let foreign = dialer(
        &ca,
        &foreign_dir.path().join("node-2.pem"),
        &foreign_dir.path().join("node-2.key"),
    );

    get_metadata(&member, &addr)
        .await
        .expect("a member reads the metadata");
    list_tasks(&member, &addr)
        .await
        .expect("a member calls the task service");
    get_metadata(&admin, &addr)
        .await
        .expect("the operator reads the metadata");
    let denied = list_tasks(&admin, &addr).await.unwrap_err();
    assert_eq!(denied.code(), tonic::Code::PermissionDenied, "{denied:?}");

    // A non-member: the handshake ends with access_denied, and no call gets through.
    assert!(
        stranger.refused_by(&addr).await,
        "a non-member is refused at the handshake"
    );
    assert!(!member.refused_by(&addr).await && !admin.refused_by(&addr).await);
    get_metadata(&stranger, &addr).await.unwrap_err();
    list_tasks(&stranger, &addr).await.unwrap_err();
    // Another authority's certificate and plain gRPC fail too (how the failure reads depends
    // on when the client notices the closed connection).
    get_metadata(&foreign, &addr).await.unwrap_err();
    list_tasks(&foreign, &addr).await.unwrap_err();
    get_metadata(&Dialer::plaintext(), &addr).await.unwrap_err();
    list_tasks(&Dialer::plaintext(), &addr).await.unwrap_err();
    // No client certificate at all: the handshake ends with an alert, no HTTP/2 answer.
    let roots = {
        let mut r = rustls::RootCertStore::empty();
        for c in taskmesh_tls::read_certs(&ca).unwrap() {
            r.add(c).unwrap();
        }
        r
    };
    let anonymous = rustls::ClientConfig::builder_with_provider(taskmesh_tls::provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let tcp = tokio::net::TcpStream::connect(&addr).await.unwrap();
        let mut tls = tokio_rustls::TlsConnector::from(std::sync::Arc::new(anonymous))
            .connect(taskmesh_tls::cluster::node_server_name(), tcp)
            .await
            .unwrap();
        let _ = tls.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").await;
        let mut buf = [0u8; 64];
        let read = tls.read(&mut buf).await;
        assert!(
            matches!(read, Err(_) | Ok(0)),
            "a client without a certificate got an answer: {read:?}"
        );
    }
    assert!(
        n1.log
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.contains("the certificate names a node that is not a member")),
        "the refusal is logged"
    );

    // A new certificate for node 1, written over its files: new connections get it.
    let admin_config = || {
        ClusterTls::load(
            TlsFiles {
                ca: ca.clone(),
                cert: at("admin.pem"),
                key: at("admin.key"),
            },
            None,
            Admission::new(|_| false),
        )
        .unwrap()
        .client_config()
    };
    let old = served_certificate(admin_config(), &addr).await;
    assert_eq!(
        old,
        taskmesh_tls::read_certs(&file("node-1.pem")).unwrap()[0].to_vec()
    );
    taskmesh_tls::certs::generate(mine.path(), &[1], &[], false).unwrap();
    let new = taskmesh_tls::read_certs(&file("node-1.pem")).unwrap()[0].to_vec();
    assert_ne!(old, new);
    let deadline = Instant::now() + Duration::from_secs(30);
    while served_certificate(admin_config(), &addr).await != new {
        assert!(
            Instant::now() < deadline,
            "node 1 never served its new certificate"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(n1
        .log
        .lock()
        .unwrap()
        .iter()
        .any(|l| l.contains("internal TLS certificate reloaded")));
    // The cluster works on: a task made before answers through node 1, a new one finishes.
    let c1 = connect(&n1).await;
    assert_eq!(
        c1.wait_status(&before, "completed").await["taskId"],
        before.as_str()
    );
    let after = c1
        .start_task("slow_compute", json!({"seconds": 0.1, "label": "after"}))
        .await;
    c.wait_status(&after, "completed").await;
}
