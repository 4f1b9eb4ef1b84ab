//! Serving through any node: the same answers everywhere, kill -9 and rolling restarts under
//! load, result streams held across a node kill, and a restarted node catching up.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use taskmesh_testkit::{
    free_ports, get_eventually, status_of, wait_cluster_ready, History, Server,
};

use crate::{connect, node_config_with, start_cluster, TASKMESH, TOKEN};

#[tokio::test]
async fn any_node_serves_any_request_and_a_killed_node_loses_nothing() {
    let mut history = History::default();
    let mut nodes = start_cluster();
    wait_cluster_ready(&[&nodes[0], &nodes[1], &nodes[2]], TOKEN, crate::shards()).await;
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
    // The session's GET stream is closed first: a request goes out on one stream only, and
    // while that stream is open it would carry it (the request a closed GET stream took is
    // handed to the `tasks/result` stream once node 2 sees the stream gone).
    drop(get_stream);
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
    wait_cluster_ready(&[&nodes[0], &nodes[1], &nodes[2]], TOKEN, crate::shards()).await;
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
    wait_cluster_ready(&[&nodes[0], &nodes[1], &nodes[2]], TOKEN, crate::shards()).await;
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
                // A leader that reports nothing applied yet (just elected after a restart) is
                // asked again on the next round.
                if let (true, Some(applied)) =
                    (s["isLeader"] == true, s["lastAppliedIndex"].as_u64())
                {
                    target.insert(s["shard"].as_u64().unwrap(), (applied, s["tasks"].clone()));
                }
            }
        }
        let mine = status_of(follower, TOKEN).await;
        let caught_up = target.len() == crate::shards() as usize
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

/// How many shards the `leaders` lead whose log starts past what the stopped node had applied
/// (`before`: its `GET /status` then): it can catch up on those only through a snapshot.
async fn compacted_past_node(leaders: &[&Server], before: &serde_json::Value) -> usize {
    let mut compacted = 0;
    for l in leaders {
        for s in status_of(l, TOKEN).await["shards"].as_array().unwrap() {
            if s["isLeader"] != true {
                continue;
            }
            let shard = s["shard"].as_u64().unwrap() as usize;
            let had = before["shards"][shard]["lastAppliedIndex"]
                .as_u64()
                .unwrap_or(0);
            if s["firstLogIndex"].as_u64().unwrap_or(0) > had + 1 {
                compacted += 1;
            }
        }
    }
    compacted
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
    wait_cluster_ready(&[&nodes[0], &nodes[1], &nodes[2]], TOKEN, crate::shards()).await;
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
    // At least 160 tasks (20 entries a shard at 8 shards), and with many shards as many more as
    // it takes for some shard to get enough of them (bounded).
    let (least, most) = (160, 20 * crate::shards() as usize);
    let mut compacted_past = 0;
    let mut made = 0;
    while made < least || (compacted_past == 0 && made < most) {
        for _ in 0..40 {
            ids.push(c2.start_task("slow_compute", json!({"seconds": 0})).await);
            made += 1;
        }
        compacted_past = compacted_past_node(&[&nodes[0], &nodes[1]], &before).await;
    }
    assert!(
        compacted_past > 0,
        "no leader compacted its log past node 3 after {made} tasks"
    );
    tokio::task::block_in_place(|| nodes[2].kill9_and_restart());
    wait_caught_up(&nodes[2], &[&nodes[0], &nodes[1]]).await;
    // Its metrics count the snapshots it installed (at least one per shard compacted past it).
    let metrics = taskmesh_testkit::metrics::metrics_of(&nodes[2].url, Some(TOKEN)).await;
    let installs =
        taskmesh_testkit::metrics::sum(&metrics, "taskmesh_raft_snapshot_installs_total");
    assert!(
        installs >= compacted_past as f64,
        "{installs} snapshot installs counted, {compacted_past} expected at least"
    );

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
