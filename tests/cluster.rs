//! Cluster tests with real node processes on loopback: three nodes replicate every shard;
//! any node answers any request with the same answer; a session minted on one node works on
//! the others; a client's answer to an elicitation may reach any node; the loss of a node
//! (kill -9) loses no acknowledged task and changes no terminal result.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use taskmesh_testkit::{
    free_ports, get_eventually, status_of, wait_cluster_ready, Client, History, Server, V,
};

/// The server executable under test.
const TASKMESH: &str = env!("CARGO_BIN_EXE_taskmesh");

const TOKEN: &str = "alice-token-1";

fn node_config(id: u64, grpc: &[u16]) -> String {
    node_config_with(id, grpc, "")
}

fn node_config_with(id: u64, grpc: &[u16], extra: &str) -> String {
    taskmesh_testkit::node_config(id, grpc, 8, TOKEN, extra)
}

fn start_cluster() -> Vec<Server> {
    let grpc = free_ports(3);
    let n2 = Server::start_node(TASKMESH, &node_config(2, &grpc), false);
    let n3 = Server::start_node(TASKMESH, &node_config(3, &grpc), false);
    let n1 = Server::start_node(TASKMESH, &node_config(1, &grpc), true);
    vec![n1, n2, n3]
}

async fn connect(s: &Server) -> Client {
    Client::connect(&s.url, Some(TOKEN), V, json!({"elicitation": {}})).await
}

#[tokio::test]
async fn any_node_serves_any_request_and_a_killed_node_loses_nothing() {
    let mut history = History::default();
    let mut nodes = start_cluster();
    wait_cluster_ready(&[&nodes[0], &nodes[1], &nodes[2]], TOKEN, 8).await;
    let c1 = connect(&nodes[0]).await;
    let c2 = connect(&nodes[1]).await;
    let c3 = connect(&nodes[2]).await;

    // The session of node 1's client, with its GET stream opened on node 2: status
    // notifications of its tasks reach it there, whichever node leads each task.
    let mut via_node2 = c1.clone();
    via_node2.url = nodes[1].url.clone();
    let mut get_stream = via_node2.open_get().await;

    // Creates through node 1 (retried by the router until every shard has a leader).
    let mut ids = vec![];
    for i in 0..8 {
        ids.push(
            c1.start_task(
                "slow_compute",
                json!({"seconds": 0.3, "label": format!("n{i}")}),
            )
            .await,
        );
    }
    // Fetch results through node 3, poll through all three: identical answers.
    for (i, id) in ids.iter().enumerate() {
        let r = c3.call("tasks/result", json!({"taskId": id})).await;
        assert_eq!(
            r["result"]["content"][0]["text"],
            format!("n{i}: computed for 0.3 seconds"),
            "{r}"
        );
        let a = history.poll(&c1, id).await;
        let b = history.poll(&c2, id).await;
        let c = history.poll(&c3, id).await;
        assert_eq!(a["status"], "completed");
        assert_eq!(a, b);
        assert_eq!(b, c);
    }
    // Concurrent polls through every node, known and unknown ids mixed: the polls a node
    // forwards to the same leader share internal calls, and each still gets its own answer.
    let unknown: Vec<String> = (0..8u64)
        .map(|i| format!("{:032x}", 0xdead_0000 + i))
        .collect();
    let mut polls = Vec::new();
    for c in [&c1, &c2, &c3] {
        for id in ids.iter().chain(unknown.iter()) {
            polls.push(async move {
                let r = c.call("tasks/get", json!({ "taskId": id })).await;
                (id.clone(), r)
            });
        }
    }
    for (id, r) in futures::future::join_all(polls).await {
        if ids.contains(&id) {
            assert_eq!(r["result"]["taskId"], id.as_str(), "{r}");
            assert_eq!(r["result"]["status"], "completed", "{r}");
        } else {
            assert_eq!(r["error"]["code"], -32602, "{r}");
        }
    }
    // Each task's completion was announced exactly once on that stream.
    let mut completed: std::collections::HashMap<String, usize> = Default::default();
    let mut done_watching = None;
    loop {
        let next = match done_watching {
            None => Some(get_stream.next().await.expect("GET stream open")),
            Some(until) => tokio::time::timeout_at(until, get_stream.next())
                .await
                .unwrap_or(None),
        };
        let Some(m) = next else { break };
        if m["method"] == "notifications/tasks/status" && m["params"]["status"] == "completed" {
            *completed
                .entry(m["params"]["taskId"].as_str().unwrap().to_string())
                .or_default() += 1;
        }
        if done_watching.is_none() && ids.iter().all(|id| completed.contains_key(id)) {
            done_watching = Some(tokio::time::Instant::now() + Duration::from_millis(700));
        }
    }
    for id in &ids {
        assert_eq!(
            completed.get(id),
            Some(&1),
            "completion of {id} announced {:?} times",
            completed.get(id)
        );
    }

    // One list across all shards, through node 2.
    let listed = c2.ok("tasks/list", json!({})).await;
    assert_eq!(listed["tasks"].as_array().unwrap().len(), ids.len());

    // A session minted on node 1 is valid on node 2.
    let mut moved = c1.clone();
    moved.url = nodes[1].url.clone();
    assert_eq!(moved.status(&ids[0]).await, "completed");

    // Cancel through node 3 what node 1 created; node 2 sees it cancelled.
    let long = c1.start_task("slow_compute", json!({"seconds": 60})).await;
    assert_eq!(
        c3.ok("tasks/cancel", json!({"taskId": long})).await["status"],
        "cancelled"
    );
    assert_eq!(history.poll(&c2, &long).await["status"], "cancelled");

    // Elicitation: created through node 1, result stream on node 2, answer posted to node 3.
    let ask = c1
        .start_task("confirm_delete", json!({"filename": "x.txt"}))
        .await;
    for _ in 0..200 {
        if history.poll(&c1, &ask).await["status"] == "input_required" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (rid, mut stream) = c2.open_stream("tasks/result", json!({"taskId": ask})).await;
    let q = stream.next().await.expect("elicitation on the stream");
    assert_eq!(q["method"], "elicitation/create");
    c3.answer(
        &q["id"],
        json!({"action": "accept", "content": {"confirm": true}}),
    )
    .await;
    let fin = stream.next().await.expect("final answer");
    assert_eq!(fin["id"], json!(rid));
    assert_eq!(fin["result"]["content"][0]["text"], "Deleted x.txt");

    // Everything terminal, as seen before the failure.
    let mut before = vec![];
    for id in ids.iter().chain([&long, &ask]) {
        before.push(history.poll(&c2, id).await);
    }

    // kill -9 one node; the others keep serving every task, unchanged.
    nodes[0].kill9();
    let killed_at = Instant::now();
    let mut worst = Duration::ZERO;
    for (id, want) in ids.iter().chain([&long, &ask]).zip(&before) {
        let t0 = Instant::now();
        let got = history.poll(&c3, id).await;
        worst = worst.max(t0.elapsed());
        assert_eq!(&got, want, "task {id} changed after the kill");
        let r = c2.call("tasks/result", json!({"taskId": id})).await;
        assert!(r.get("result").is_some() || r.get("error").is_some());
    }
    println!(
        "unavailability after kill -9 of node 1: longest wait for one poll {:?} ({:?} after the kill)",
        worst,
        killed_at.elapsed()
    );
    // New work is accepted and completes on the surviving majority.
    let after = c2
        .start_task("slow_compute", json!({"seconds": 0.2, "label": "after"}))
        .await;
    let r = c3.call("tasks/result", json!({"taskId": after})).await;
    assert_eq!(
        r["result"]["content"][0]["text"],
        "after: computed for 0.2 seconds"
    );
    let pairs = history.check();
    assert!(pairs > 0);
    println!("history: {pairs} ordered pairs of polls checked");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolling_restart_under_load_shows_no_errors_and_a_full_restart_loses_nothing() {
    let mut nodes = start_cluster();
    wait_cluster_ready(&[&nodes[0], &nodes[1], &nodes[2]], TOKEN, 8).await;
    let mut clients = vec![];
    for n in &nodes {
        clients.push(connect(n).await);
    }
    let mut history = History::default();
    let mut ids = vec![];
    for i in 0..6 {
        let id = clients[i % 3]
            .start_task("slow_compute", json!({"seconds": 0.2 + (i as f64) * 0.5}))
            .await;
        ids.push(id);
    }

    // Rolling SIGTERM restart: while node k restarts, clients of the other nodes keep polling
    // every task; not one of those requests may fail.
    let mut polls = 0usize;
    let mut made_during_restarts: Vec<String> = vec![];
    for k in 0..3 {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut load = vec![];
        for (j, c) in clients.iter().enumerate() {
            if j == k {
                continue;
            }
            let c = c.clone();
            let ids = ids.clone();
            let stop = stop.clone();
            load.push(tokio::spawn(async move {
                let mut seen = vec![];
                let mut created = vec![];
                let mut rounds = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) || rounds == 0 {
                    for id in &ids {
                        let t0 = Instant::now();
                        let r = c.call("tasks/get", json!({"taskId": id})).await;
                        let task = r
                            .get("result")
                            .unwrap_or_else(|| panic!("poll failed during a rolling restart: {r}"));
                        seen.push((id.clone(), t0, Instant::now(), task.clone()));
                    }
                    if rounds % 5 == 0 {
                        let r = c
                            .call(
                                "tools/call",
                                json!({"name": "slow_compute", "arguments": {"seconds": 0.1}, "task": {}}),
                            )
                            .await;
                        let id = r["result"]["task"]["taskId"]
                            .as_str()
                            .unwrap_or_else(|| panic!("create failed during a rolling restart: {r}"));
                        created.push(id.to_string());
                    }
                    rounds += 1;
                    if rounds > 2000 {
                        break;
                    }
                }
                (seen, created)
            }));
        }
        let node = &mut nodes[k];
        tokio::task::block_in_place(|| node.restart());
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for l in load {
            let (seen, created) = l.await.unwrap();
            for (id, t0, t1, task) in seen {
                history.observe(&id, t0, t1, &task);
                polls += 1;
            }
            made_during_restarts.extend(created);
        }
        clients[k] = connect(&nodes[k]).await;
    }
    println!(
        "rolling restart: {polls} polls and {} creates, no errors",
        made_during_restarts.len()
    );
    assert!(!made_during_restarts.is_empty());
    // Every create acknowledged during the restarts is there and finishes.
    for id in &made_during_restarts {
        let r = clients[1].call("tasks/result", json!({"taskId": id})).await;
        assert!(
            r.get("result").is_some(),
            "task {id} created during a restart: {r}"
        );
    }

    // Every task ends and its result is retrievable through every node.
    let mut finals = vec![];
    for id in &ids {
        let mut last = Value::Null;
        for _ in 0..300 {
            last = get_eventually(&clients[0], id).await;
            if ["completed", "failed", "cancelled"].contains(&last["status"].as_str().unwrap()) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(
            last["status"], "completed",
            "task {id} did not finish after the rolling restart: {last}"
        );
        let r = clients[0].call("tasks/result", json!({"taskId": id})).await;
        assert!(r.get("result").is_some(), "{r}");
        finals.push(get_eventually(&clients[1], id).await);
    }

    // kill -9 every node, start them all again: nothing lost, nothing changed.
    for n in nodes.iter_mut() {
        n.kill9();
    }
    for n in nodes.iter_mut() {
        tokio::task::block_in_place(|| n.kill9_and_restart());
    }
    let c = connect(&nodes[2]).await;
    for (id, want) in ids.iter().zip(&finals) {
        let t0 = Instant::now();
        let got = get_eventually(&c, id).await;
        history.observe(id, t0, Instant::now(), &got);
        assert_eq!(&got, want, "task {id} changed across a full restart");
    }
    assert_eq!(
        c.ok("tasks/list", json!({})).await["tasks"]
            .as_array()
            .unwrap()
            .len(),
        ids.len() + made_during_restarts.len()
    );
    let pairs = history.check();
    assert!(pairs > 0);
    println!("history: {pairs} ordered pairs of polls checked");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn result_streams_held_open_survive_a_node_kill() {
    let mut history = History::default();
    let mut nodes = start_cluster();
    wait_cluster_ready(&[&nodes[0], &nodes[1], &nodes[2]], TOKEN, 8).await;
    let c2 = connect(&nodes[1]).await;
    let c3 = connect(&nodes[2]).await;
    // Long enough to be running when a node dies; spread over the shards.
    let mut ids = vec![];
    for i in 0..8 {
        ids.push(
            c2.start_task(
                "slow_compute",
                json!({"seconds": 3, "label": format!("r{i}")}),
            )
            .await,
        );
    }
    // Hold tasks/result open on node 3 for every task.
    let mut waits = vec![];
    for id in &ids {
        let c = c3.clone();
        let id = id.clone();
        waits.push(tokio::spawn(async move {
            let r = c.call("tasks/result", json!({"taskId": id})).await;
            (id, r)
        }));
    }
    tokio::time::sleep(Duration::from_millis(800)).await;
    // Node 1 bootstrapped the groups and leads some (usually most) of the shards.
    nodes[0].kill9();
    for (i, w) in waits.into_iter().enumerate() {
        let (id, r) = w.await.unwrap();
        assert_eq!(
            r["result"]["content"][0]["text"],
            format!("r{i}: computed for 3 seconds"),
            "task {id}: {r}"
        );
        assert_eq!(
            r["result"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
            json!(id)
        );
        assert_eq!(history.poll(&c2, &id).await["status"], "completed");
    }
    history.poll_all(&[&c2, &c3, &c2]).await;
    let pairs = history.check();
    assert!(pairs > 0);
    println!("history: {pairs} ordered pairs of polls checked");
}

/// Wait until `follower` has applied, on every shard, at least what the shard's leader had
/// applied (leaders may move meanwhile, also to the follower itself: whichever node reports
/// leading a shard is asked), and holds the same number of tasks.
async fn wait_caught_up(follower: &Server, others: &[&Server]) {
    for _ in 0..300 {
        let mut target = std::collections::HashMap::new();
        for n in others.iter().copied().chain([follower]) {
            for s in status_of(n, TOKEN).await["shards"].as_array().unwrap() {
                if s["isLeader"] == true {
                    target.insert(
                        s["shard"].as_u64().unwrap(),
                        (s["lastAppliedIndex"].as_u64().unwrap(), s["tasks"].clone()),
                    );
                }
            }
        }
        let mine = status_of(follower, TOKEN).await;
        let caught_up = target.len() == 8
            && mine["shards"].as_array().unwrap().iter().all(|s| {
                let (applied, tasks) = &target[&s["shard"].as_u64().unwrap()];
                s["lastAppliedIndex"].as_u64().unwrap_or(0) >= *applied && s["tasks"] == *tasks
            });
        if caught_up {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("node never caught up: {}", status_of(follower, TOKEN).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_node_catches_up_from_the_log_and_through_a_snapshot() {
    let mut history = History::default();
    let grpc = free_ports(3);
    let extra = "[raft]\nsnapshot_logs_since_last = 20\nmax_in_snapshot_log_to_keep = 0\n";
    let n2 = Server::start_node(TASKMESH, &node_config_with(2, &grpc, extra), false);
    let n3 = Server::start_node(TASKMESH, &node_config_with(3, &grpc, extra), false);
    let n1 = Server::start_node(TASKMESH, &node_config_with(1, &grpc, extra), true);
    let mut nodes = [n1, n2, n3];
    wait_cluster_ready(&[&nodes[0], &nodes[1], &nodes[2]], TOKEN, 8).await;
    let c2 = connect(&nodes[1]).await;
    let mut ids = vec![];
    ids.push(c2.start_task("slow_compute", json!({"seconds": 0})).await);

    // From the log: node 3 misses a few writes.
    nodes[2].kill9();
    for _ in 0..8 {
        ids.push(c2.start_task("slow_compute", json!({"seconds": 0})).await);
    }
    tokio::task::block_in_place(|| nodes[2].kill9_and_restart());
    wait_caught_up(&nodes[2], &[&nodes[0], &nodes[1]]).await;

    // Through a snapshot: node 3 misses enough writes that the leaders compact past it.
    let before = status_of(&nodes[2], TOKEN).await;
    nodes[2].kill9();
    for _ in 0..160 {
        ids.push(c2.start_task("slow_compute", json!({"seconds": 0})).await);
    }
    let mut compacted_past = 0;
    for l in [&nodes[0], &nodes[1]] {
        for s in status_of(l, TOKEN).await["shards"].as_array().unwrap() {
            if s["isLeader"] != true {
                continue;
            }
            let shard = s["shard"].as_u64().unwrap() as usize;
            let had = before["shards"][shard]["lastAppliedIndex"]
                .as_u64()
                .unwrap_or(0);
            if s["firstLogIndex"].as_u64().unwrap_or(0) > had + 1 {
                compacted_past += 1;
            }
        }
    }
    assert!(
        compacted_past > 0,
        "no leader compacted its log past node 3"
    );
    tokio::task::block_in_place(|| nodes[2].kill9_and_restart());
    wait_caught_up(&nodes[2], &[&nodes[0], &nodes[1]]).await;

    // Node 3's copy is the real thing: with node 1 gone, nodes 2 and 3 serve every task.
    nodes[0].kill9();
    let c3 = connect(&nodes[2]).await;
    for id in &ids {
        let t = history.poll(&c3, id).await;
        assert_eq!(t["status"], "completed", "{id}");
    }
    println!(
        "catch-up: {} tasks; {compacted_past} shard(s) caught up through a snapshot",
        ids.len()
    );
    history.poll_all(&[&c2, &c3, &c2]).await;
    let pairs = history.check();
    assert!(pairs > 0);
    println!("history: {pairs} ordered pairs of polls checked");
}

/// `taskmesh cluster ARGS` against the node whose gRPC port is `port`; its JSON output.
fn cluster_cli(port: u16, args: &[&str]) -> Value {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_taskmesh"))
        .arg("cluster")
        .arg(args[0])
        .args(["--peer", &format!("127.0.0.1:{port}")])
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

/// Wait (bounded: 90 s) until the groups match the metadata's placement: every node hosts
/// exactly the replicas placed on it, and each shard's leader lists exactly the placed nodes
/// as voters. Returns, per node id, how many shards it leads.
async fn wait_placement_applied(
    nodes: &[(u64, &Server)],
    grpc_port: u16,
) -> std::collections::BTreeMap<u64, usize> {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let placement = placement_of(&cluster_cli(grpc_port, &["status"]));
        let mut ok = true;
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
    // Four nodes create the cluster (8 shards, 3 replicas each); a fifth joins later through
    // the seeds, then the bootstrapping node is removed.
    let grpc = free_ports(5);
    let extra = "[cluster]\nleader_settle_ms = 500\n";
    let extra = |id: u64| node_config_with(id, &grpc[..4], "").replace("[cluster]\n", extra);
    let n2 = Server::start_node(TASKMESH, &extra(2), false);
    let n3 = Server::start_node(TASKMESH, &extra(3), false);
    let n4 = Server::start_node(TASKMESH, &extra(4), false);
    let n1 = Server::start_node(TASKMESH, &extra(1), true);
    wait_cluster_ready(&[&n1, &n2, &n3, &n4], TOKEN, 8).await;

    let meta = cluster_cli(grpc[1], &["status"]);
    assert_eq!(meta["shards"], 8);
    let placement = placement_of(&meta);
    for id in 1..=4u64 {
        let replicas = placement.iter().filter(|l| l.contains(&id)).count();
        assert_eq!(replicas, 6, "node {id} in {placement:?}");
    }
    assert!(placement.iter().all(|l| l.len() == 3));
    let four = [(1, &n1), (2, &n2), (3, &n3), (4, &n4)];
    let leads = wait_placement_applied(&four, grpc[0]).await;
    // Leadership follows the preferred leaders: two shards per node.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut leads = leads;
    while leads.values().any(|l| *l != 2) {
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

    // Grow: node 5 joins, takes its share of replicas, and serves every task.
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
        assert!((4..=5).contains(&replicas), "node {id} in {placement:?}");
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

/// The hex trace id in a log line's `trace_id=` field (quoted or not).
fn trace_id_in(line: &str) -> Option<String> {
    let rest = &line[line.find("trace_id=")? + "trace_id=".len()..];
    let id: String = rest
        .trim_start_matches('"')
        .chars()
        .take_while(|c| c.is_ascii_hexdigit())
        .collect();
    (id.len() == 16).then_some(id)
}

/// With the request spans asked for in the log filter, a poll that node 1 forwards to the
/// shard's leader can be followed: node 1 logs it with a trace id, and the leader logs the
/// forwarded read with the same id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forwarded_poll_is_followed_across_nodes_by_its_trace_id() {
    let grpc = free_ports(3);
    let traced =
        "[log]\nlevel = \"info,openraft=warn,taskmesh_gateway=debug,taskmesh_router=debug\"";
    let n2 = Server::start_node(TASKMESH, &node_config_with(2, &grpc, traced), false);
    let n3 = Server::start_node(TASKMESH, &node_config_with(3, &grpc, traced), false);
    let n1 = Server::start_node(TASKMESH, &node_config_with(1, &grpc, traced), true);
    wait_cluster_ready(&[&n1, &n2, &n3], TOKEN, 8).await;
    let c1 = connect(&n1).await;

    // Polls through node 1 until one was forwarded (8 shards on 3 nodes: node 1 leads only
    // some of them).
    let mut followed = None;
    for i in 0..32 {
        let id = c1
            .start_task(
                "slow_compute",
                json!({"seconds": 0.1, "label": format!("t{i}")}),
            )
            .await;
        let polled = c1.call("tasks/get", json!({"taskId": id})).await;
        assert_eq!(polled["result"]["taskId"], id.as_str(), "{polled}");
        let log = n1.log_text();
        let forwarded = log.lines().find(|l| {
            l.contains("forwarding to the shard's leader")
                && l.contains("tasks/get")
                && l.contains(&id)
        });
        if let Some(line) = forwarded {
            let trace = trace_id_in(line).unwrap_or_else(|| panic!("no trace id in: {line}"));
            println!("gateway node: {line}");
            followed = Some((id, trace));
            break;
        }
    }
    let (task_id, trace) = followed.expect("no poll through node 1 was forwarded");

    // The leader's log names the same trace id for the read of that task.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let on_leader = [&n2, &n3].iter().find_map(|n| {
            n.log_text()
                .lines()
                .find(|l| {
                    l.contains("forwarded read") && l.contains(&task_id) && l.contains(&trace)
                })
                .map(str::to_string)
        });
        if let Some(line) = on_leader {
            println!("leader: {line}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no node logged the forwarded read of {task_id} with trace id {trace}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
