//! `GET /readyz` in a cluster: a node whose shards have lost their leader is not ready and becomes
//! ready when its peers return; and a load balancer that sends polls only to ready nodes sees
//! no error through a rolling restart (a stopping node turns unready first and serves on for
//! `shutdown_unready_wait_ms`).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use taskmesh_testkit::{free_ports, http, wait_cluster_ready, Client, Server, V};

use crate::{node_config_with, TASKMESH, TOKEN};

/// `GET /readyz` of the node at MCP URL `url`: the status and body (`None`: no answer).
async fn readyz(url: &str) -> Option<(u16, String)> {
    let r = http()
        .get(url.replace("/mcp", "/readyz"))
        .timeout(Duration::from_secs(2))
        .send()
        .await
        .ok()?;
    Some((r.status().as_u16(), r.text().await.ok()?))
}

/// Wait (bounded: 60 s) until `/readyz` of `url` answers `status`; its body.
async fn until_readyz(url: &str, status: u16) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some((s, body)) = readyz(url).await {
            if s == status {
                return body;
            }
        }
        assert!(
            Instant::now() < deadline,
            "{url} never answered /readyz with {status}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_cut_from_its_leaders_is_not_ready_until_its_peers_return() {
    let grpc = free_ports(3);
    let mut n2 = Server::start_node(TASKMESH, &node_config_with(2, &grpc, ""), false);
    let n3 = Server::start_node(TASKMESH, &node_config_with(3, &grpc, ""), false);
    let mut n1 = Server::start_node(TASKMESH, &node_config_with(1, &grpc, ""), true);
    wait_cluster_ready(&[&n1, &n2, &n3], TOKEN, crate::shards()).await;
    for n in [&n1, &n2, &n3] {
        assert_eq!(until_readyz(&n.url, 200).await, "ready\n");
    }
    // Alone, node 3's groups lose their leaders: it says so.
    n1.kill9();
    n2.kill9();
    let why = until_readyz(&n3.url, 503).await;
    assert!(
        why.starts_with("not ready: shard ")
            && (why.contains("knows no leader") || why.contains("has not heard from its leader")),
        "{why}"
    );
    // The healthz of a node that is not ready is still fine: it is alive.
    let health = http()
        .get(n3.url.replace("/mcp", "/healthz"))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status().as_u16(), 200);
    n1.start_again();
    n2.start_again();
    for n in [&n1, &n2, &n3] {
        until_readyz(&n.url, 200).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn polls_sent_only_to_ready_nodes_see_no_error_through_a_rolling_restart() {
    let grpc = free_ports(3);
    let listen = free_ports(3);
    let extra = "[cluster]\nleader_transfer_ms = 3000\n";
    let config = |id: u64| {
        node_config_with(id, &grpc, "")
            .replace("[cluster]\n", extra)
            .replacen(
                &format!("shards = {}\n", crate::shards()),
                &format!(
                    "shards = {}\nshutdown_unready_wait_ms = 1000\n",
                    crate::shards()
                ),
                1,
            )
    };
    let at = |id: u64| format!("127.0.0.1:{}", listen[id as usize - 1]);
    let n2 = Server::start_node_at(TASKMESH, &at(2), &config(2), false);
    let n3 = Server::start_node_at(TASKMESH, &at(3), &config(3), false);
    let n1 = Server::start_node_at(TASKMESH, &at(1), &config(1), true);
    wait_cluster_ready(&[&n1, &n2, &n3], TOKEN, crate::shards()).await;
    let urls: Vec<String> = [&n1, &n2, &n3].iter().map(|n| n.url.clone()).collect();
    let c = Client::connect(&urls[0], Some(TOKEN), V, json!({})).await;
    let mut ids = Vec::new();
    for i in 0..20 {
        ids.push(
            c.start_task(
                "slow_compute",
                json!({"seconds": 3600, "label": format!("t{i}")}),
            )
            .await,
        );
    }
    let ids = Arc::new(ids);

    // The balancer: each node's /readyz every 100 ms.
    let stop = Arc::new(AtomicBool::new(false));
    let ready: Arc<Vec<AtomicBool>> = Arc::new((0..3).map(|_| AtomicBool::new(true)).collect());
    let mut tasks = Vec::new();
    for (i, url) in urls.iter().enumerate() {
        let (url, ready, stop) = (url.clone(), ready.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let ok = matches!(readyz(&url).await, Some((200, _)));
                ready[i].store(ok, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }));
    }
    // Four clients poll through whichever node the balancer says is ready, in turn.
    let polls = Arc::new(AtomicUsize::new(0));
    let mut pollers = Vec::new();
    for w in 0..4usize {
        let (urls, ready, stop, ids, polls) = (
            urls.clone(),
            ready.clone(),
            stop.clone(),
            ids.clone(),
            polls.clone(),
        );
        pollers.push(tokio::spawn(async move {
            let mut clients = Vec::new();
            for u in &urls {
                clients.push(Client::connect(u, Some(TOKEN), V, json!({})).await);
            }
            let mut turn = w;
            while !stop.load(Ordering::Relaxed) {
                turn += 1;
                let Some(node) = (0..3)
                    .map(|k| (turn + k) % 3)
                    .find(|k| ready[*k].load(Ordering::Relaxed))
                else {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                };
                let id = &ids[turn % ids.len()];
                let r = clients[node].call("tasks/get", json!({"taskId": id})).await;
                assert_eq!(
                    r["result"]["status"],
                    "working",
                    "a poll through ready node {} failed: {r}",
                    node + 1
                );
                polls.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    // Rolling restart: SIGTERM each node in turn, wait for it to be ready again.
    let mut nodes = [n1, n2, n3];
    for k in 0..3 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let before = polls.load(Ordering::Relaxed);
        tokio::task::block_in_place(|| nodes[k].restart());
        until_readyz(&nodes[k].url, 200).await;
        // The balancer has seen it back before the next node goes.
        let deadline = Instant::now() + Duration::from_secs(10);
        while !ready[k].load(Ordering::Relaxed) {
            assert!(
                Instant::now() < deadline,
                "the balancer never saw node {} back",
                k + 1
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(
            polls.load(Ordering::Relaxed) > before,
            "polls went on while node {} restarted",
            k + 1
        );
    }
    stop.store(true, Ordering::Relaxed);
    for p in pollers {
        p.await.unwrap();
    }
    for t in tasks {
        t.await.unwrap();
    }
    let total = polls.load(Ordering::Relaxed);
    println!("{total} polls through ready nodes during the rolling restart, none failed");
    assert!(total > 0);
}
