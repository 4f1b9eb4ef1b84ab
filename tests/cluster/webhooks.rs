//! Task events to a webhook on a three-node cluster, durable across failover: 1,000 tasks with
//! a webhook of their ends, the shard leaders of two nodes killed (kill -9) in turn, and a
//! receiver (verifying with the Standard Webhooks library) that answers 500 for a while and
//! then recovers. Every task's end reaches the receiver, verified; the ends acknowledged more
//! than once are all of shards whose leader was killed or changed during the run (an
//! acknowledgment whose `Settle` did not commit under the leader that sent it), and every task
//! finished.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{json, Value};
use taskmesh_testkit::python::{received, webhook_receiver, webhooks_venv};
use taskmesh_testkit::{free_ports, Client, Server, V};

use crate::{node_config_with, shards, TASKMESH, TOKEN};

async fn client(s: &Server) -> Client {
    Client::connect(
        &s.url,
        Some(TOKEN),
        V,
        json!({"tasks": {"list": {}, "cancel": {}}}),
    )
    .await
}

/// The shards `node` sees node `id` lead now.
async fn led_by(node: &Server, id: u64) -> BTreeSet<u32> {
    taskmesh_testkit::status_of(node, TOKEN).await["shards"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["leader"].as_u64() == Some(id))
        .map(|s| s["shard"].as_u64().unwrap() as u32)
        .collect()
}

/// Every shard's Raft term as `node` sees it now (every node holds a replica of every shard).
async fn terms(node: &Server) -> BTreeMap<u32, u64> {
    taskmesh_testkit::status_of(node, TOKEN).await["shards"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["shard"].as_u64().unwrap() as u32,
                s["term"].as_u64().unwrap(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_end_reaches_the_webhook_through_leader_kills_and_a_failing_receiver() {
    let dir = tempfile::tempdir().unwrap();
    let python = webhooks_venv(std::path::Path::new(env!("CARGO_TARGET_TMPDIR")));
    let secret = format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode([0x33u8; 32])
    );
    let (out, down) = (dir.path().join("events.jsonl"), dir.path().join("down"));
    std::fs::write(&down, "").unwrap();
    let receiver = webhook_receiver(&python, &secret, &out, Some(&down));
    let extra = format!(
        r#"
[events]
allow_addresses = ["127.0.0.0/8"]
http_hosts = ["127.0.0.1"]
retry_base_ms = 200
retry_max_ms = 1000
max_attempts = 1000
retry_window_ms = 600000

[[webhooks]]
name = "backend"
url = "http://127.0.0.1:{}/hooks"
secret = "{secret}"
terminal_only = true
"#,
        receiver.port
    );
    let grpc = free_ports(3);
    let config = |id| node_config_with(id, &grpc, &extra);
    let mut nodes = [
        Server::start_node(TASKMESH, &config(1), true),
        Server::start_node(TASKMESH, &config(2), false),
        Server::start_node(TASKMESH, &config(3), false),
    ];
    taskmesh_testkit::wait_cluster_ready(&[&nodes[0], &nodes[1], &nodes[2]], TOKEN, shards()).await;
    let c1 = client(&nodes[0]).await;

    let mut history = taskmesh_testkit::History::default();
    let mut made: Vec<String> = Vec::new();
    let terms_before = terms(&nodes[0]).await;
    // The shards whose leader was killed (a leader restarted at once may lead again in the
    // same term: what it had acknowledged and not settled is delivered again all the same).
    let mut killed: BTreeSet<u32> = BTreeSet::new();
    for chunk in (0..1000u64).collect::<Vec<_>>().chunks(20) {
        match chunk[0] {
            300 => {
                killed.extend(led_by(&nodes[0], 2).await);
                nodes[1].kill9_and_restart();
            }
            // The receiver recovers.
            500 => std::fs::remove_file(&down).unwrap(),
            700 => {
                killed.extend(led_by(&nodes[0], 3).await);
                nodes[2].kill9_and_restart();
            }
            _ => {}
        }
        let creates = chunk.iter().map(|i| {
            let c1 = &c1;
            async move {
                let t0 = Instant::now();
                let created = c1
                    .ok(
                        "tools/call",
                        json!({"name": "slow_compute", "arguments": {"seconds": 0.2, "label": i.to_string()}, "task": {}}),
                    )
                    .await;
                (t0, Instant::now(), created)
            }
        });
        for (t0, t1, created) in futures::future::join_all(creates).await {
            let id = created["task"]["taskId"].as_str().unwrap().to_string();
            history.observe(&id, t0, t1, &created["task"]);
            made.push(id);
        }
    }
    // Every task finishes.
    let mut ends: BTreeMap<String, String> = BTreeMap::new();
    for id in &made {
        let mut last = Value::Null;
        for _ in 0..300 {
            last = history.poll(&c1, id).await;
            if taskmesh_testkit::is_terminal(&last) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(last["status"], "completed", "task {id}: {last}");
        ends.insert(id.clone(), "completed".into());
    }
    history.poll_all(&[&c1]).await;
    assert!(history.check() > 0);

    // Every end reaches the receiver and is acknowledged (bounded: 60 s).
    let acked = |lines: &[Value]| -> BTreeMap<String, usize> {
        let mut n = BTreeMap::new();
        for l in lines.iter().filter(|l| l["answered"] == 204) {
            let task = l["event"]["data"]["taskId"].as_str().unwrap().to_owned();
            *n.entry(task).or_default() += 1;
        }
        n
    };
    let mut lines = received(&out);
    for _ in 0..600 {
        if ends.keys().all(|id| acked(&lines).contains_key(id)) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        lines = received(&out);
    }
    let got = acked(&lines);
    let missing: Vec<&String> = ends.keys().filter(|id| !got.contains_key(*id)).collect();
    assert!(
        missing.is_empty(),
        "{} ends never acknowledged: {missing:?}",
        missing.len()
    );
    // Every delivery verified with the library, of the webhook's subscription, with the end as
    // tasks/get shows it, its event id the task's.
    assert!(
        lines.iter().all(|l| l.get("refused").is_none()),
        "a delivery failed verification"
    );
    for l in &lines {
        let (task, event) = (l["event"]["data"]["taskId"].as_str().unwrap(), &l["event"]);
        assert_eq!(l["subscription"], "wh_backend");
        assert_eq!(event["data"]["status"], ends[task].as_str(), "{l}");
        assert!(event["eventId"]
            .as_str()
            .unwrap()
            .starts_with(&format!("{task}-")));
        assert_eq!(l["id"], event["eventId"]);
    }
    // The receiver's failure was seen and outlasted.
    assert!(lines.iter().any(|l| l["answered"] == 500));
    // The shards whose leader was killed or whose leadership changed during the run (the
    // hand-backs to the restarted nodes, and any election a loaded machine caused).
    let terms_after = terms(&nodes[0]).await;
    let moved: BTreeSet<u32> = terms_after
        .iter()
        .filter(|(shard, term)| terms_before.get(shard) != Some(term))
        .map(|(shard, _)| *shard)
        .chain(killed.iter().copied())
        .collect();
    let twice = got.values().filter(|n| **n > 1).count();
    eprintln!(
        "{} deliveries, {} answered 500, {} ends acknowledged more than once; {} shards lost or changed their leader",
        lines.len(),
        lines.iter().filter(|l| l["answered"] == 500).count(),
        twice,
        moved.len()
    );
    // An end acknowledged twice is of a shard whose leader was killed or changed.
    let count = shards();
    for (task, n) in got.iter().filter(|(_, n)| **n > 1) {
        let shard = taskmesh_task::shard_of(task, count);
        assert!(
            moved.contains(&shard),
            "task {task} of shard {shard} acknowledged {n} times, but its leader was never killed or changed"
        );
    }
    drop(receiver);
}
