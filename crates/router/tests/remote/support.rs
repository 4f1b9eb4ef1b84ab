//! What the tests of this binary share: a one-shard node with a running task, served over real
//! gRPC on a loopback port.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use taskmesh_host::{Host, HostConfig, NewTask};
use taskmesh_router::service::TaskGrpc;
use taskmesh_shard::{ShardConfig, ShardReplica};
use taskmesh_task::ToolRequest;
use taskmesh_tools::ToolRegistry;

pub const TASK: &str = "0123456789abcdef0123456789abcdef";

/// A node with one shard it leads and one running task owned by alice (`TASK`, an hour of
/// `slow_compute`).
pub async fn host(dir: &std::path::Path) -> Host {
    host_with(dir, HostConfig::default()).await
}

/// [`host`] with the given settings.
pub async fn host_with(dir: &std::path::Path, cfg: HostConfig) -> Host {
    let db = taskmesh_shard::fixtures::open_store(dir, |c| c).await;
    let host = Host::new(cfg, Arc::new(ToolRegistry::with_builtins()), 1);
    let cfg = ShardConfig {
        shard_id: 0,
        node_id: 1,
        ..ShardConfig::default()
    };
    let replica = <ShardReplica>::open(db, cfg).await.unwrap();
    replica.bootstrap_single().await.unwrap();
    host.add_shard(replica.clone()).unwrap();
    replica.wait_leader(Duration::from_secs(30)).await.unwrap();
    host.create(
        0,
        NewTask {
            task_id: TASK.into(),
            owner: "alice".into(),
            session: None,
            ttl_ms: None,
            request: ToolRequest::new("slow_compute", json!({"seconds": 3600}).to_string()),
            worker_rerun: None,
        },
    )
    .await
    .unwrap();
    host
}

/// Serve `host`'s TaskService at `addr` on a runtime of its own: shutting that runtime down
/// ends the server and every connection to it at once, as a process exit would.
pub fn serve(host: &Host, addr: &str) -> tokio::runtime::Runtime {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let listener = {
        let _in_rt = rt.enter();
        // The address of a server that just went away is taken again at once; its runtime
        // may still be closing its listener (a runtime shut down in the background), so a
        // bind refused as in use is tried again for a while.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let socket = tokio::net::TcpSocket::new_v4().unwrap();
            socket.set_reuseaddr(true).unwrap();
            match socket.bind(addr.parse().unwrap()) {
                Ok(()) => break socket.listen(64).unwrap(),
                Err(e)
                    if e.kind() == std::io::ErrorKind::AddrInUse
                        && std::time::Instant::now() < deadline =>
                {
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => panic!("bind {addr}: {e}"),
            }
        }
    };
    let svc = TaskGrpc::new(host.clone(), Arc::new(|_| None)).into_server();
    rt.spawn(
        tonic::transport::Server::builder()
            .add_service(svc)
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
    );
    rt
}

pub fn free_addr() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().to_string()
}
