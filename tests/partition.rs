//! A network partition between real node processes, each in its own network namespace
//! (cluster/netns.sh; needs root): the majority keeps serving, the cut-off node serves nothing
//! stale, pre-vote keeps the rejoining node from deposing healthy leaders, and after healing
//! every node gives the same answers.

// A test binary: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::process::Command;

use serde_json::json;
use taskmesh_testkit::{status_of, wait_cluster_ready, Client, History, Server, V};

/// The server executable under test.
const TASKMESH: &str = env!("CARGO_BIN_EXE_taskmesh");

const TOKEN: &str = "alice-token-1";
/// The shard count: 8, or `TEST_CLUSTER_SHARDS`.
fn shards() -> u32 {
    taskmesh_testkit::cluster_shards(8)
}

fn netns_script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../cluster/netns.sh")
}

fn netns(args: &[&str]) {
    let out = Command::new("bash")
        .arg(netns_script())
        .args(args)
        .output()
        .expect("run cluster/netns.sh");
    assert!(
        out.status.success(),
        "cluster/netns.sh {args:?} failed (this test needs root and iproute2): {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The namespaces of one test run; removed on drop, whatever happens.
struct Hosts {
    prefix: String,
}

impl Hosts {
    fn up() -> Hosts {
        let prefix = format!("tm{}", std::process::id() % 100_000);
        let _ = Command::new("bash")
            .arg(netns_script())
            .args(["down", &prefix, "3"])
            .output();
        netns(&["up", &prefix, "3"]);
        Hosts { prefix }
    }
    fn ns(&self, i: u64) -> String {
        format!("{}-n{i}", self.prefix)
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(netns_script())
            .args(["down", &self.prefix, "3"])
            .output();
    }
}

fn config(id: u64) -> String {
    format!(
        r#"node_id = {id}
shards = {shards}
[session]
secret = "a-shared-cluster-secret-for-tests"
[auth]
status_principals = ["alice"]
[auth.tokens]
"{TOKEN}" = "alice"
[cluster]
grpc_listen = "10.231.0.{id}:7100"
# Short, so that the cut-off node's failures come quickly; long enough for a request that
# first tries the cut-off leader to retry at the leader the majority elects (about a second).
request_retry_ms = 3000
# Leaderships stay where elections put them: this test tells pre-vote's effect (no election
# when the cut-off node returns) from deliberate hand-overs to preferred leaders.
leader_settle_ms = 3600000
peers = [{{ id = 1, grpc = "10.231.0.1:7100" }}, {{ id = 2, grpc = "10.231.0.2:7100" }}, {{ id = 3, grpc = "10.231.0.3:7100" }}]
"#,
        shards = shards()
    )
}

async fn connect(s: &Server) -> Client {
    Client::connect(&s.url, Some(TOKEN), V, json!({})).await
}

async fn terms_of_leaders(nodes: &[&Server]) -> std::collections::BTreeMap<u64, (u64, u64)> {
    let mut out = std::collections::BTreeMap::new();
    for n in nodes {
        let st = status_of(n, TOKEN).await;
        for s in st["shards"].as_array().unwrap() {
            if s["isLeader"] == true {
                out.insert(
                    s["shard"].as_u64().unwrap(),
                    (st["node"].as_u64().unwrap(), s["term"].as_u64().unwrap()),
                );
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partition_majority_serves_minority_serves_nothing_stale_then_all_agree() {
    let mut history = History::default();
    let t0 = std::time::Instant::now();
    let phase = |name: &str| println!("[{:>6.1?}] {name}", t0.elapsed());
    let hosts = Hosts::up();
    let start = |i: u64| {
        Server::start_node_in(
            TASKMESH,
            &hosts.ns(i),
            &format!("10.232.0.{i}:8080"),
            &config(i),
            i == 1,
        )
    };
    let n2 = start(2);
    let n3 = start(3);
    let n1 = start(1);
    wait_cluster_ready(&[&n1, &n2, &n3], TOKEN, shards()).await;
    let (c1, c2, c3) = (connect(&n1).await, connect(&n2).await, connect(&n3).await);
    phase("cluster up");

    let mut ids = vec![];
    for _ in 0..8 {
        ids.push(c1.start_task("slow_compute", json!({"seconds": 0})).await);
    }
    let long = c1.start_task("slow_compute", json!({"seconds": 600})).await;
    for id in &ids {
        assert!(c3
            .call("tasks/result", json!({"taskId": id}))
            .await
            .get("result")
            .is_some());
    }
    assert_eq!(history.poll(&c3, &long).await["status"], "working");

    phase("tasks created");
    // Cut node 3 off from its peers (clients still reach it).
    netns(&["cut", &hosts.prefix, "3"]);
    // The majority keeps serving: reads, a cancel, new tasks.
    for id in &ids {
        assert_eq!(history.poll(&c1, id).await["status"], "completed");
    }
    assert_eq!(
        c2.ok("tasks/cancel", json!({"taskId": long})).await["status"],
        "cancelled"
    );
    let fresh = c2
        .start_task("slow_compute", json!({"seconds": 0, "label": "fresh"}))
        .await;
    let r = c1.call("tasks/result", json!({"taskId": fresh})).await;
    assert_eq!(
        r["result"]["content"][0]["text"],
        "fresh: computed for 0 seconds"
    );

    phase("majority served");
    // The cut-off node answers nothing stale: never `working` for the cancelled task, never
    // "not found" for the task it never saw; it fails instead.
    for id in [&long, &fresh] {
        let r = c3.call("tasks/get", json!({"taskId": id})).await;
        assert!(
            r.get("result").is_none(),
            "stale answer from the cut-off node: {r}"
        );
        assert_eq!(r["error"]["code"], -32603, "{r}");
    }

    phase("minority checked");
    // Heal. Pre-vote: the rejoining node does not depose the leaders elected meanwhile.
    let before = terms_of_leaders(&[&n1, &n2]).await;
    netns(&["heal", &hosts.prefix, "3"]);
    for id in ids.iter().chain([&long, &fresh]) {
        let a = history.poll(&c1, id).await;
        let b = history.poll(&c3, id).await;
        assert_eq!(a, b, "nodes disagree on {id} after healing");
    }
    phase("healed and agreed");
    assert_eq!(history.poll(&c3, &long).await["status"], "cancelled");
    let after = terms_of_leaders(&[&n1, &n2, &n3]).await;
    for (shard, (node, term)) in &before {
        assert_eq!(
            after.get(shard),
            Some(&(*node, *term)),
            "shard {shard}: leadership changed when the cut-off node rejoined"
        );
    }
    println!(
        "partition: {} shards led by the majority kept their leader and term across the heal",
        before.len()
    );
    drop((n1, n2, n3));
    drop(hosts);
    let pairs = history.check();
    assert!(pairs > 0);
    println!("history: {pairs} ordered pairs of polls checked");
}
