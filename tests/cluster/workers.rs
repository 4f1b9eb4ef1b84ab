//! Workers on a three-node cluster: a worker registered on one node is listed by every node and
//! served the tasks of every shard, whichever node leads it; the leader of a leased task's
//! shard killed (kill -9) while the worker holds the lease, its heartbeat and completion go
//! through another node and succeed; every task is completed exactly once.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde_json::{json, Value};
use taskmesh_client::worker::{Declaration, Lease, Worker, WorkerError};
use taskmesh_testkit::{free_ports, Client, Server, V};

use crate::{leader_of, node_config_with, shards, TASKMESH, TOKEN};

const WORKERS: &str = r#"
[workers]
lease_ms = 15000
poll_wait_max_ms = 2000
[workers.tokens]
"cluster-worker-token" = "crunch"
[workers.identities.crunch]
tools = ["crunch"]
"#;

async fn cluster() -> [Server; 3] {
    let grpc = free_ports(3);
    let config = |id| node_config_with(id, &grpc, WORKERS);
    let nodes = [
        Server::start_node(TASKMESH, &config(1), true),
        Server::start_node(TASKMESH, &config(2), false),
        Server::start_node(TASKMESH, &config(3), false),
    ];
    taskmesh_testkit::wait_cluster_ready(&[&nodes[0], &nodes[1], &nodes[2]], TOKEN, shards()).await;
    nodes
}

async fn client(s: &Server) -> Client {
    Client::connect(
        &s.url,
        Some(TOKEN),
        V,
        json!({"tasks": {"list": {}, "cancel": {}}}),
    )
    .await
}

fn result(text: &str) -> Value {
    json!({"content": [{"type": "text", "text": text}]})
}

/// Wait (bounded: 30 s, for a worker process starting on a loaded machine) until `c`'s node
/// lists `tool`.
pub(crate) async fn wait_listed(c: &Client, tool: &str) {
    for _ in 0..300 {
        let list = c.ok("tools/list", json!({})).await;
        if list["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == tool)
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{tool} was never listed");
}

/// The registration `worker_id` as `taskmesh workers --json` on `s` shows it (waiting, bounded,
/// for the digest that brings it).
async fn workers_listed(s: &Server, worker_id: &str) -> Value {
    for _ in 0..100 {
        let out = std::process::Command::new(TASKMESH)
            .args(["workers", "--json", "--url", &s.url, "--token", TOKEN])
            .output()
            .unwrap();
        let v = crate::json_of(&out);
        if let Some(w) = v["workers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|w| w["workerId"] == worker_id)
        {
            return w.clone();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("worker {worker_id} was never listed");
}

/// Retry `call` while the cluster elects a new leader (bounded: 30 s).
async fn eventually<T, F, Fut>(mut call: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, WorkerError>>,
{
    let mut last = None;
    for _ in 0..150 {
        match call().await {
            Ok(v) => return v,
            Err(e) if matches!(e.code(), Some("UNAVAILABLE") | None) => last = Some(e),
            Err(e) => panic!("refused: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("never served: {last:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_on_one_node_runs_tasks_of_every_shard_and_keeps_its_lease_through_a_leader_kill()
{
    let mut nodes = cluster().await;
    let decl = Declaration::new("crunch", json!({"type": "object"}));
    let w = Worker::register(&nodes[0].url, "cluster-worker-token", vec![decl], 8, "n1")
        .await
        .unwrap();
    let c3 = client(&nodes[2]).await;
    wait_listed(&c3, "crunch").await;
    wait_listed(&client(&nodes[1]).await, "crunch").await;
    // `taskmesh workers` on another node lists the registration with the node holding it.
    let listed = workers_listed(&nodes[1], &w.worker_id).await;
    assert_eq!(listed["nodeId"], 1);
    assert_eq!(listed["identity"], "crunch");
    assert_eq!(listed["label"], "n1");
    assert_eq!(listed["tools"], json!(["crunch"]));

    // Tasks made on node 3, of shards led by every node, all reach the worker on node 1.
    let mut made = BTreeSet::new();
    for i in 0..24 {
        made.insert(c3.start_task("crunch", json!({"i": i})).await);
    }
    let mut leased: BTreeMap<String, Lease> = BTreeMap::new();
    for _ in 0..60 {
        if leased.len() == made.len() {
            break;
        }
        for l in w.poll(8, Duration::from_secs(1)).await.unwrap() {
            assert!(
                leased.insert(l.task_id.clone(), l).is_none(),
                "a task leased twice"
            );
        }
    }
    assert_eq!(leased.keys().cloned().collect::<BTreeSet<_>>(), made);
    for (id, l) in &leased {
        assert_eq!(w.complete(l, Ok(result(id))).await.unwrap(), "completed");
    }
    let c2 = client(&nodes[1]).await;
    for id in &made {
        let r = c2.ok("tasks/result", json!({"taskId": id})).await;
        assert_eq!(r["content"][0]["text"], id.as_str());
    }

    // A leased task's shard leader is killed: the lease holds on the new leader.
    let id = c3.start_task("crunch", json!({"i": "survivor"})).await;
    let lease = loop {
        if let Some(l) = w.poll(1, Duration::from_secs(2)).await.unwrap().pop() {
            break l;
        }
    };
    assert_eq!(lease.task_id, id);
    let victim = leader_of(&nodes[2], taskmesh_task::shard_of(&id, shards())).await;
    nodes[usize::try_from(victim).unwrap() - 1].kill9();
    let alive: Vec<&Server> = nodes.iter().filter(|n| n.is_running()).collect();
    let via = w.via(&alive[0].url);
    let beat = eventually(|| via.heartbeat(&lease, None, Some("after the failover"))).await;
    assert!(!beat.cancelled);
    let status = eventually(|| via.complete(&lease, Ok(result("survived")))).await;
    assert_eq!(status, "completed");
    let c = client(alive[1]).await;
    let r = c.ok("tasks/result", json!({"taskId": id})).await;
    assert_eq!(r["content"][0]["text"], "survived");
    // Exactly once: the lease cannot complete it again, on any node.
    for n in &alive {
        let again = w.via(&n.url).complete(&lease, Ok(result("twice"))).await;
        assert_eq!(again.unwrap_err().code(), Some("FAILED_PRECONDITION"));
    }
}

/// One worker of the load test: registered on `urls[start]` (on the next node when that one
/// is gone), leasing up to 16 tasks at a time and completing each with its argument `i`;
/// accepted completions are counted per task.
async fn load_worker(
    urls: Vec<String>,
    start: usize,
    accepted: std::sync::Arc<parking_lot::Mutex<BTreeMap<String, u32>>>,
    stop: tokio_util::sync::CancellationToken,
) {
    let mut at = start;
    while !stop.is_cancelled() {
        let decl = Declaration::new("crunch", json!({"type": "object"}));
        let url = &urls[at % urls.len()];
        let Ok(w) = Worker::register(url, "cluster-worker-token", vec![decl], 16, "load").await
        else {
            at += 1;
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        while !stop.is_cancelled() {
            let Ok(leases) = w.poll(16, Duration::from_millis(500)).await else {
                at += 1;
                break;
            };
            for l in leases {
                let (w, urls, accepted) = (w.clone(), urls.clone(), accepted.clone());
                tokio::spawn(async move {
                    let done = result(&l.arguments["i"].to_string());
                    // Through the node it polled, else any other (the answer of a completion
                    // that reached a dying node may be lost: a retry is then refused).
                    for n in 0..urls.len() * 10 {
                        let via = if n == 0 {
                            w.clone()
                        } else {
                            w.via(&urls[n % urls.len()])
                        };
                        match via.complete(&l, Ok(done.clone())).await {
                            Ok(_) => {
                                *accepted.lock().entry(l.task_id.clone()).or_default() += 1;
                                return;
                            }
                            Err(e) if matches!(e.code(), None | Some("UNAVAILABLE")) => {
                                tokio::time::sleep(Duration::from_millis(200)).await;
                            }
                            Err(_) => return,
                        }
                    }
                });
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_tasks_over_four_workers_complete_exactly_once_through_a_node_restart() {
    let mut nodes = cluster().await;
    let urls: Vec<String> = nodes.iter().map(|n| n.url.clone()).collect();
    let accepted = std::sync::Arc::new(parking_lot::Mutex::new(BTreeMap::new()));
    let stop = tokio_util::sync::CancellationToken::new();
    let workers: Vec<_> = (0..4)
        .map(|i| tokio::spawn(load_worker(urls.clone(), i, accepted.clone(), stop.clone())))
        .collect();
    let (c1, c3) = (client(&nodes[0]).await, client(&nodes[2]).await);
    wait_listed(&c1, "crunch").await;
    wait_listed(&c3, "crunch").await;

    let mut history = taskmesh_testkit::History::default();
    let mut made: BTreeMap<String, u64> = BTreeMap::new();
    // Twenty creates at a time, alternating between two nodes; the third node is killed and
    // restarted halfway.
    for chunk in (0..1000u64).collect::<Vec<_>>().chunks(20) {
        if chunk[0] == 500 {
            nodes[1].kill9_and_restart();
        }
        let creates = chunk.iter().map(|&i| {
            let c = if i % 2 == 0 { &c1 } else { &c3 };
            async move {
                let t0 = std::time::Instant::now();
                let created = c
                    .ok(
                        "tools/call",
                        json!({"name": "crunch", "arguments": {"i": i}, "task": {}}),
                    )
                    .await;
                (i, t0, std::time::Instant::now(), created)
            }
        });
        for (i, t0, t1, created) in futures::future::join_all(creates).await {
            let id = created["task"]["taskId"].as_str().unwrap().to_string();
            history.observe(&id, t0, t1, &created["task"]);
            made.insert(id, i);
        }
    }
    // Every task ends completed, with its own result, none left behind.
    let c2 = client(&nodes[1]).await;
    for (id, i) in &made {
        let mut last = Value::Null;
        for _ in 0..300 {
            last = history.poll(if i % 3 == 0 { &c2 } else { &c1 }, id).await;
            if taskmesh_testkit::is_terminal(&last) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(last["status"], "completed", "task {id}: {last}");
        let r = c3.ok("tasks/result", json!({"taskId": id})).await;
        assert_eq!(r["content"][0]["text"], i.to_string(), "task {id}");
    }
    history.poll_all(&[&c1, &c2, &c3]).await;
    assert!(history.check() > 0);
    stop.cancel();
    for w in workers {
        w.abort();
    }
    // Exactly one completion accepted per task (a lost answer may hide one, never add one).
    let accepted = accepted.lock();
    assert!(accepted.values().all(|n| *n == 1), "a task completed twice");
    assert!(
        accepted.len() >= made.len() * 9 / 10,
        "{} of {} completions seen",
        accepted.len(),
        made.len()
    );
}
