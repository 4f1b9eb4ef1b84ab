//! The operator's commands on a real cluster: `taskmesh cluster leaders` (a table, or JSON)
//! agrees with every node's `/status`; `transfer-leader` moves a shard's leadership to the
//! voter named; `snapshot` builds a snapshot on every replica of a shard and its log is purged;
//! bad requests fail with a clear message and change nothing.

use std::process::Output;

use serde_json::json;
use taskmesh_testkit::metrics::{metrics_of, sample};
use taskmesh_testkit::{free_ports, status_of, wait_cluster_ready, Server};

use crate::{connect, json_of, node_config_with, TASKMESH, TOKEN};

/// `taskmesh cluster ARGS --peer 127.0.0.1:PORT` with the operator's certificate.
fn cli(port: u16, args: &[&str]) -> Output {
    let certs = taskmesh_testkit::certs::admin_certs();
    std::process::Command::new(TASKMESH)
        .arg("cluster")
        .args(args)
        .args(["--peer", &format!("127.0.0.1:{port}")])
        .arg("--certs")
        .arg(certs.path())
        .output()
        .expect("run taskmesh cluster")
}

/// Per shard, the leader every node's /status agrees on.
async fn leaders_by_status(nodes: &[&Server]) -> Vec<u64> {
    let mut leaders = vec![0u64; crate::shards() as usize];
    for n in nodes {
        for s in status_of(n, TOKEN).await["shards"].as_array().unwrap() {
            if s["isLeader"] == true {
                leaders[s["shard"].as_u64().unwrap() as usize] = s["leader"].as_u64().unwrap();
            }
        }
    }
    leaders
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaders_transfer_leader_and_snapshot_through_the_cli() {
    let grpc = free_ports(3);
    // Snapshots keep no log behind them, so the purge shows; leaderships stay where they are
    // put (no hand-back to the preferred leader during the test).
    let extra = "leader_settle_ms = 600000\n[raft]\nmax_in_snapshot_log_to_keep = 0\n";
    let n2 = Server::start_node(TASKMESH, &node_config_with(2, &grpc, extra), false);
    let n3 = Server::start_node(TASKMESH, &node_config_with(3, &grpc, extra), false);
    let n1 = Server::start_node(TASKMESH, &node_config_with(1, &grpc, extra), true);
    let nodes = [&n1, &n2, &n3];
    wait_cluster_ready(&nodes, TOKEN, crate::shards()).await;
    let c = connect(&n1).await;
    for i in 0..20 {
        let id = c
            .start_task(
                "slow_compute",
                json!({"seconds": 0.01, "label": format!("t{i}")}),
            )
            .await;
        c.wait_status(&id, "completed").await;
    }

    // leaders: JSON and table, as the nodes themselves say.
    let table = json_of(&cli(grpc[1], &["leaders", "--json"]));
    let by_status = leaders_by_status(&nodes).await;
    let rows = table["shards"].as_array().unwrap();
    assert_eq!(rows.len(), crate::shards() as usize);
    for r in rows {
        let shard = r["shard"].as_u64().unwrap() as usize;
        assert_eq!(r["leader"].as_u64(), Some(by_status[shard]), "{r}");
        assert_eq!(r["replicas"].as_array().unwrap().len(), 3);
    }
    assert_eq!(table["unreachable"], json!([]));
    let human = cli(grpc[1], &["leaders"]);
    assert!(human.status.success());
    let text = String::from_utf8(human.stdout).unwrap();
    assert!(
        text.lines().next().unwrap().contains("shard")
            && text.lines().count() == crate::shards() as usize + 1,
        "{text}"
    );

    // transfer-leader: shard 0 to a voter that does not lead it, asked through any node.
    let from = by_status[0];
    let to = (1..=3u64).find(|n| *n != from).unwrap();
    let moved = json_of(&cli(
        grpc[2],
        &[
            "transfer-leader",
            "--shard",
            "0",
            "--node",
            &to.to_string(),
            "--json",
        ],
    ));
    assert_eq!(moved["leader"].as_u64(), Some(to), "{moved}");
    assert_eq!(moved["moved"], true);
    assert_eq!(leaders_by_status(&nodes).await[0], to);
    // A node that is not a voter: refused, nothing moves.
    let refused = cli(grpc[0], &["transfer-leader", "--shard", "0", "--node", "9"]);
    assert!(!refused.status.success());
    let why = String::from_utf8_lossy(&refused.stderr);
    assert!(why.contains("not a voter"), "{why}");
    assert_eq!(leaders_by_status(&nodes).await[0], to);

    // snapshot: every replica of shard 1 builds one and purges the log before it.
    let first_before: Vec<u64> = {
        let mut v = Vec::new();
        for n in nodes {
            let st = status_of(n, TOKEN).await;
            let s = st["shards"]
                .as_array()
                .unwrap()
                .iter()
                .find(|s| s["shard"] == 1)
                .cloned()
                .unwrap();
            v.push(s["firstLogIndex"].as_u64().unwrap_or(0));
        }
        v
    };
    let snap = json_of(&cli(grpc[0], &["snapshot", "--shard", "1", "--json"]));
    let replicas = snap["replicas"].as_array().unwrap();
    assert_eq!(replicas.len(), 3, "{snap}");
    for (i, r) in replicas.iter().enumerate() {
        assert!(r.get("error").is_none(), "{snap}");
        let covers = r["coversIndex"].as_u64().unwrap();
        assert!(covers > 0, "{snap}");
        // Purged: empty, or starting past where it started before.
        assert!(
            r["firstLogIndex"]
                .as_u64()
                .is_none_or(|first| first > first_before[i]),
            "the log was purged: {snap} (before {first_before:?})"
        );
    }
    // Each replica counted its build; every node's log appends and fsyncs are measured.
    for n in nodes {
        let text = metrics_of(&n.url, Some(TOKEN)).await;
        let value = |series: &str| sample(&text, series).unwrap_or(0.0);
        assert!(
            value(r#"taskmesh_raft_snapshot_builds_total{shard="1"}"#) >= 1.0,
            "{text}"
        );
        assert!(value(r#"taskmesh_raft_snapshot_built_bytes_total{shard="1"}"#) > 0.0);
        assert!(value("taskmesh_raft_snapshot_build_seconds_count") >= 1.0);
        assert!(value("taskmesh_raft_log_append_seconds_count") > 0.0);
        assert!(value("taskmesh_storage_fsync_seconds_count") > 0.0);
        assert!(value("taskmesh_wal_written_bytes_total") > 0.0);
        assert!(value("taskmesh_wal_segments") >= 1.0);
    }
    // A shard that does not exist: a clear error.
    let missing = (crate::shards() + 91).to_string();
    let bad = cli(grpc[0], &["snapshot", "--shard", &missing]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr)
        .contains(&format!("the cluster has {} shards", crate::shards())));
    // Tasks made before all of it still answer.
    let again = c.ok("tasks/list", json!({})).await;
    assert_eq!(again["tasks"].as_array().unwrap().len(), 20);
}
