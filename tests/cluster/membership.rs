//! Nodes joining and leaving a running cluster: placement, replicas and leaders follow the
//! metadata (driven with the `taskmesh cluster` commands).

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use taskmesh_testkit::{free_ports, status_of, wait_cluster_ready, History, Server};

use crate::{connect, node_config_with, TASKMESH, TOKEN};

/// `taskmesh cluster ARGS` against the node whose gRPC port is `port`, with the operator's
/// certificate; its JSON output.
fn cluster_cli(port: u16, args: &[&str]) -> Value {
    let certs = taskmesh_testkit::certs::admin_certs();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_taskmesh"))
        .arg("cluster")
        .arg(args[0])
        .args(["--peer", &format!("127.0.0.1:{port}")])
        .arg("--certs")
        .arg(certs.path())
        .args(&args[1..])
        .output()
        .expect("run taskmesh cluster");
    assert!(
        out.status.success(),
        "taskmesh cluster {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("cluster metadata JSON")
}

/// Per shard, the node ids of the placement (sorted), from the metadata.
fn placement_of(meta: &Value) -> Vec<Vec<u64>> {
    meta["placement"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            let mut ids: Vec<u64> = l
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap())
                .collect();
            ids.sort_unstable();
            ids
        })
        .collect()
}

/// Wait (bounded: 90 s) until the groups match the metadata's placement: the metadata records
/// every shard group as created (until then it refuses joins and removals, as "try again"),
/// every node hosts exactly the replicas placed on it, and each shard's leader lists exactly
/// the placed nodes as voters. Returns, per node id, how many shards it leads.
async fn wait_placement_applied(
    nodes: &[(u64, &Server)],
    grpc_port: u16,
) -> std::collections::BTreeMap<u64, usize> {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let meta = cluster_cli(grpc_port, &["status"]);
        let placement = placement_of(&meta);
        let created = meta["created"].as_array().map_or(0, Vec::len);
        let mut ok = created == placement.len();
        let mut leads = std::collections::BTreeMap::new();
        let mut led = vec![false; placement.len()];
        for (id, n) in nodes {
            let st = status_of(n, TOKEN).await;
            let hosted: Vec<u64> = st["shards"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s["shard"].as_u64().unwrap())
                .collect();
            let placed: Vec<u64> = (0..placement.len() as u64)
                .filter(|s| placement[*s as usize].contains(id))
                .collect();
            ok &= hosted == placed;
            leads.insert(*id, 0usize);
            for s in st["shards"].as_array().unwrap() {
                if s["isLeader"] == true {
                    let shard = s["shard"].as_u64().unwrap() as usize;
                    let mut voters: Vec<u64> = s["voters"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|v| v.as_u64().unwrap())
                        .collect();
                    voters.sort_unstable();
                    ok &= voters == placement[shard];
                    led[shard] = true;
                    *leads.get_mut(id).unwrap() += 1;
                }
            }
        }
        if ok && led.iter().all(|l| *l) {
            return leads;
        }
        assert!(
            Instant::now() < deadline,
            "groups never matched the placement {placement:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_join_and_leave_under_load_with_replicas_and_leaders_spread() {
    let mut history = History::default();
    // Four nodes create the cluster (8 shards unless the suite says otherwise, 3 replicas each); a fifth joins later through
    // the seeds, then the bootstrapping node is removed.
    let grpc = free_ports(5);
    let extra = "[cluster]\nleader_settle_ms = 500\n";
    let extra = |id: u64| node_config_with(id, &grpc[..4], "").replace("[cluster]\n", extra);
    let n2 = Server::start_node(TASKMESH, &extra(2), false);
    let n3 = Server::start_node(TASKMESH, &extra(3), false);
    let n4 = Server::start_node(TASKMESH, &extra(4), false);
    let n1 = Server::start_node(TASKMESH, &extra(1), true);
    wait_cluster_ready(&[&n1, &n2, &n3, &n4], TOKEN, crate::shards()).await;

    let meta = cluster_cli(grpc[1], &["status"]);
    assert_eq!(meta["shards"], crate::shards());
    let placement = placement_of(&meta);
    for id in 1..=4u64 {
        let replicas = placement.iter().filter(|l| l.contains(&id)).count();
        assert_eq!(
            replicas as u32,
            crate::shards() * 3 / 4,
            "node {id} in {placement:?}"
        );
    }
    assert!(placement.iter().all(|l| l.len() == 3));
    let four = [(1, &n1), (2, &n2), (3, &n3), (4, &n4)];
    let leads = wait_placement_applied(&four, grpc[0]).await;
    // Leadership follows the preferred leaders: a quarter of the shards per node.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut leads = leads;
    while leads.values().any(|l| *l as u32 != crate::shards() / 4) {
        assert!(
            Instant::now() < deadline,
            "leadership never balanced: {leads:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
        leads = wait_placement_applied(&four, grpc[0]).await;
    }
    println!("4 nodes: leaders per node {leads:?}");

    // Work: finished tasks and long-running ones, polled continuously through nodes 2 and 3
    // while the cluster changes; no poll may fail.
    let c2 = connect(&n2).await;
    let c3 = connect(&n3).await;
    let mut ids = vec![];
    for i in 0..12 {
        let secs = if i % 2 == 0 { 0.0 } else { 600.0 };
        ids.push(
            c2.start_task("slow_compute", json!({"seconds": secs}))
                .await,
        );
    }
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut load = vec![];
    for c in [c2.clone(), c3.clone()] {
        let (ids, stop) = (ids.clone(), stop.clone());
        load.push(tokio::spawn(async move {
            let mut seen = vec![];
            let mut rounds = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && rounds < 3000 {
                for id in &ids {
                    let t0 = Instant::now();
                    let r = c.call("tasks/get", json!({"taskId": id})).await;
                    let task = r
                        .get("result")
                        .unwrap_or_else(|| panic!("poll failed while the cluster changed: {r}"));
                    seen.push((id.clone(), t0, Instant::now(), task.clone()));
                }
                rounds += 1;
            }
            seen
        }));
    }

    // Grow: node 5 is added (mutual TLS refuses a node that is not a member), joins, takes
    // its share of replicas, and serves every task.
    let addr5 = format!("127.0.0.1:{}", grpc[4]);
    let meta = cluster_cli(grpc[1], &["add", "--node", "5", "--addr", &addr5]);
    assert_eq!(meta["nodes"]["5"], addr5.as_str());
    let n5 = Server::start_node(TASKMESH, &node_config_with(5, &grpc, ""), false);
    let five = [(1, &n1), (2, &n2), (3, &n3), (4, &n4), (5, &n5)];
    let deadline = Instant::now() + Duration::from_secs(60);
    while cluster_cli(grpc[0], &["status"])["nodes"]
        .get("5")
        .is_none()
    {
        assert!(Instant::now() < deadline, "node 5 never joined");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let leads = wait_placement_applied(&five, grpc[0]).await;
    let placement = placement_of(&cluster_cli(grpc[0], &["status"]));
    for id in 1..=5u64 {
        let replicas = placement.iter().filter(|l| l.contains(&id)).count();
        let share = crate::shards() as usize * 3 / 5;
        assert!(
            (share..=share + 1).contains(&replicas),
            "node {id} in {placement:?}"
        );
    }
    println!("5 nodes: placement {placement:?}, leaders per node {leads:?}");
    let c5 = connect(&n5).await;
    for id in &ids {
        let via5 = history.poll(&c5, id).await;
        let via2 = history.poll(&c2, id).await;
        assert_eq!(via5["taskId"], via2["taskId"]);
        assert_eq!(via5["createdAt"], via2["createdAt"]);
    }

    // Shrink: remove node 1; its replicas move to the others and it ends up holding none.
    let meta = cluster_cli(grpc[2], &["remove", "--node", "1"]);
    assert!(meta["nodes"].get("1").is_none());
    let rest = [(2, &n2), (3, &n3), (4, &n4), (5, &n5)];
    let leads = wait_placement_applied(&rest, grpc[1]).await;
    assert!(!leads.contains_key(&1));
    let deadline = Instant::now() + Duration::from_secs(30);
    while !status_of(&n1, TOKEN).await["shards"]
        .as_array()
        .unwrap()
        .is_empty()
    {
        assert!(
            Instant::now() < deadline,
            "node 1 kept replicas after its removal"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    println!("after removing node 1: leaders per node {leads:?}");
    let mut n1 = n1;
    n1.kill9();

    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut polls = 0;
    for l in load {
        for (id, t0, t1, task) in l.await.unwrap() {
            history.observe(&id, t0, t1, &task);
            polls += 1;
        }
    }
    // Nothing was lost: every task through every remaining node, and the list.
    let c4 = connect(&n4).await;
    for id in &ids {
        for c in [&c2, &c3, &c4, &c5] {
            history.poll(c, id).await;
        }
    }
    assert_eq!(
        c4.ok("tasks/list", json!({})).await["tasks"]
            .as_array()
            .unwrap()
            .len(),
        ids.len()
    );
    let pairs = history.check();
    println!("{polls} polls during the changes, no errors; history: {pairs} ordered pairs checked");
    assert!(polls > 0 && pairs > 0);
}
