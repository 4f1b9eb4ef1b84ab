//! Cluster helpers: node configurations on free loopback ports, reads retried while shards
//! elect, a node's `GET /status`, and the wait until every shard of a new cluster has a leader
//! all nodes agree on.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::{http, Client, Server};

/// The shard count of a test's clusters: `default` (the count the test was written with), or
/// `TEST_CLUSTER_SHARDS` when set. CI runs the cluster, fault and partition suites once more
/// with 256, to show that nothing depends on few shards.
pub fn cluster_shards(default: u32) -> u32 {
    std::env::var("TEST_CLUSTER_SHARDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// The configuration of node `id` of a test cluster whose nodes' gRPC ports are `grpc` (node
/// `i` at index `i - 1`), with `shards` shards, the test token (principal `alice`, who may
/// read `GET /status`), and `extra` appended.
pub fn node_config(id: u64, grpc: &[u16], shards: u32, token: &str, extra: &str) -> String {
    format!(
        "{}[auth]\nstatus_principals = [\"alice\"]\n[auth.tokens]\n\"{token}\" = \"alice\"\n",
        open_node_config(id, grpc, shards, extra)
    )
}

/// [`node_config`] without authentication: every caller is `anonymous`.
pub fn open_node_config(id: u64, grpc: &[u16], shards: u32, extra: &str) -> String {
    let peers: Vec<String> = grpc
        .iter()
        .enumerate()
        .map(|(i, p)| format!("{{ id = {}, grpc = \"127.0.0.1:{p}\" }}", i + 1))
        .collect();
    format!(
        r#"node_id = {id}
shards = {shards}
[session]
secret = "a-shared-cluster-secret-for-tests"
[tasks]
list_page_size = 5000
[cluster]
grpc_listen = "127.0.0.1:{}"
peers = [{}]
{extra}
"#,
        grpc[id as usize - 1],
        peers.join(", ")
    )
}

/// `n` free loopback ports, for servers a test starts. They are taken below the kernel's
/// ephemeral range (`ip_local_port_range`), from which outgoing connections get their local
/// ports: a port handed out from that range could be taken by some connection before the
/// server binds it. Each test process walks the range from its own offset, and a port is
/// handed out only if it can be bound at that moment (then released).
pub fn free_ports(n: usize) -> Vec<u16> {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    const LOW: u32 = 10_000;
    let high = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u32>().ok())
        .filter(|low| *low > LOW + 1_000)
        .unwrap_or(32_768);
    let span = high - LOW;
    let _ = NEXT.compare_exchange(
        u32::MAX,
        std::process::id().wrapping_mul(7_919) % span,
        Ordering::AcqRel,
        Ordering::Acquire,
    );
    let mut ports = Vec::with_capacity(n);
    let mut held = Vec::with_capacity(n);
    for _ in 0..span {
        if ports.len() == n {
            break;
        }
        let port = (LOW + NEXT.fetch_add(1, Ordering::AcqRel) % span) as u16;
        if let Ok(l) = std::net::TcpListener::bind(("127.0.0.1", port)) {
            held.push(l);
            ports.push(port);
        }
    }
    assert_eq!(ports.len(), n, "no {n} free loopback ports below {high}");
    ports
}
/// `tasks/get` through `c`, retried while the cluster answers with an internal error (no
/// leader yet, or a leader just died); bounded.
pub async fn get_eventually(c: &Client, id: &str) -> Value {
    for _ in 0..300 {
        let r = c.call("tasks/get", json!({"taskId": id})).await;
        if let Some(res) = r.get("result") {
            return res.clone();
        }
        assert_eq!(r["error"]["code"], -32603, "unexpected error: {r}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("task {id} never became readable");
}

/// `GET /status` of a node.
pub async fn status_of(s: &Server, token: &str) -> Value {
    let url = s.url.replace("/mcp", "/status");
    http()
        .get(url)
        .header("authorization", format!("Bearer {token}"))
        .send()
        .await
        .expect("status")
        .json()
        .await
        .expect("status JSON")
}

/// Wait (bounded: 60 s) until every one of `shards` shards has a leader that some node's
/// `GET /status` names, and every node's view agrees on it: the cluster was created and its
/// groups elected.
pub async fn wait_cluster_ready(nodes: &[&Server], token: &str, shards: u32) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut leaders: Vec<Option<u64>> = vec![None; shards as usize];
        let mut agree = true;
        for n in nodes {
            let st = status_of(n, token).await;
            for s in st["shards"].as_array().cloned().unwrap_or_default() {
                let (Some(shard), Some(leader)) = (s["shard"].as_u64(), s["leader"].as_u64())
                else {
                    agree = false;
                    continue;
                };
                let slot = &mut leaders[shard as usize];
                if slot.is_some_and(|l| l != leader) {
                    agree = false;
                }
                *slot = Some(leader);
            }
        }
        if agree && leaders.iter().all(Option::is_some) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "cluster never became ready: {leaders:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Wait (bounded: 30 s) until every `[[upstream]]` of `s` is `serving` in its `GET /status`
/// (an upstream that did not answer the node's first listing is retried with backoff).
pub async fn wait_upstreams_serving(s: &Server, token: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let st = status_of(s, token).await;
        let ups = st["upstreams"].as_array().cloned().unwrap_or_default();
        if ups.iter().all(|u| u["state"] == "serving") {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "upstreams not serving within 30 s: {ups:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
