//! `taskmesh backup` under load and `taskmesh restore` into a new node: every task acknowledged
//! before the backup began is served by the restored node, with its result; live tasks are
//! taken over there; a restore run twice inserts nothing; bad directories are refused.

use std::process::Output;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use taskmesh_testkit::{free_ports, wait_cluster_ready, Server};

use crate::{connect, json_of, node_config_with, TASKMESH, TOKEN};

/// `taskmesh COMMAND DIR --peer 127.0.0.1:PORT --json` with the operator's certificate.
async fn cli(command: &str, dir: &std::path::Path, port: u16) -> Output {
    let certs = taskmesh_testkit::certs::admin_certs();
    tokio::process::Command::new(TASKMESH)
        .arg(command)
        .arg(dir)
        .args(["--peer", &format!("127.0.0.1:{port}"), "--json"])
        .arg("--certs")
        .arg(certs.path())
        .kill_on_drop(true)
        .output()
        .await
        .expect("run taskmesh")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_under_load_restores_every_acknowledged_task_into_a_new_node() {
    let grpc = free_ports(3);
    let n2 = Server::start_node(TASKMESH, &node_config_with(2, &grpc, ""), false);
    let n3 = Server::start_node(TASKMESH, &node_config_with(3, &grpc, ""), false);
    let n1 = Server::start_node(TASKMESH, &node_config_with(1, &grpc, ""), true);
    wait_cluster_ready(&[&n1, &n2, &n3], TOKEN, crate::shards()).await;
    let c1 = connect(&n1).await;

    // Tasks that run for an hour: live in the backup, taken over by the restored node.
    let mut long = Vec::new();
    for i in 0..4 {
        long.push(
            c1.start_task(
                "slow_compute",
                json!({"seconds": 3600, "label": format!("long{i}")}),
            )
            .await,
        );
    }
    // Load through every node: creates, each recorded with when it was acknowledged.
    let acked: Arc<Mutex<Vec<(String, Instant)>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let mut workers = Vec::new();
    for (w, node) in [&n1, &n2, &n3, &n1].into_iter().enumerate() {
        let c = connect(node).await;
        let (acked, stop) = (acked.clone(), stop.clone());
        workers.push(tokio::spawn(async move {
            for i in 0..2_000 {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let label = format!("w{w}-{i}");
                let r = c
                    .call(
                        "tools/call",
                        json!({"name": "slow_compute", "arguments": {"seconds": 0.05, "label": label}, "task": {}}),
                    )
                    .await;
                let id = r["result"]["task"]["taskId"].as_str().unwrap_or_else(|| panic!("{r}"));
                acked.lock().unwrap().push((id.to_owned(), Instant::now()));
            }
        }));
    }
    // Let the load run a while, then back up while it goes on.
    while acked.lock().unwrap().len() < 200 {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let dir = tempfile::tempdir().unwrap();
    let backup_dir = dir.path().join("backup");
    let began = Instant::now();
    let out = cli("backup", &backup_dir, grpc[1]).await;
    let manifest = json_of(&out);
    let acked_during = acked
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, at)| *at > began)
        .count();
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.await.unwrap();
    }
    let before: Vec<String> = acked
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, at)| *at < began)
        .map(|(id, _)| id.clone())
        .collect();
    println!(
        "backup of {} records; {} creates acknowledged before it began, {acked_during} while it ran",
        manifest["records"],
        before.len()
    );
    assert_eq!(manifest["format"], "taskmesh-backup/1");
    assert_eq!(manifest["shards"], crate::shards());
    assert!(manifest["records"].as_u64().unwrap() >= (before.len() + long.len()) as u64);
    assert!(backup_dir.join("manifest.json").exists());

    // A backup never goes into a directory that holds something.
    let out = cli("backup", &backup_dir, grpc[1]).await;
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("is not empty"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // A new node, with nothing, as the only member of a new cluster.
    let fresh_grpc = free_ports(1);
    let fresh = Server::start_node(TASKMESH, &node_config_with(1, &fresh_grpc, ""), true);
    wait_cluster_ready(&[&fresh], TOKEN, crate::shards()).await;
    // A directory that is no finished backup is refused.
    let out = cli("restore", dir.path(), fresh_grpc[0]).await;
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("did not finish"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let restored = json_of(&cli("restore", &backup_dir, fresh_grpc[0]).await);
    assert_eq!(restored["records"], manifest["records"]);
    assert_eq!(restored["inserted"], manifest["records"]);

    // Every task acknowledged before the backup began is there, and ends as it did.
    let cf = connect(&fresh).await;
    for id in &before {
        let done = cf.wait_status(id, "completed").await;
        assert_eq!(done["status"], "completed", "{id}: {done}");
        let here = cf.ok("tasks/result", json!({"taskId": id})).await;
        let there = c1.ok("tasks/result", json!({"taskId": id})).await;
        assert_eq!(here, there, "the result of {id}");
    }
    // The hour-long tasks were live: the new node runs them again (resume policy rerun).
    for id in &long {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let t = cf.ok("tasks/get", json!({"taskId": id})).await;
            assert_eq!(t["status"], "working", "{t}");
            let message = t["statusMessage"].as_str().unwrap_or_default();
            if message.contains("started again") {
                break;
            }
            assert!(Instant::now() < deadline, "{id} was not taken over: {t}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        cf.ok("tasks/cancel", json!({"taskId": id})).await;
    }
    // Restoring again changes nothing.
    let again = json_of(&cli("restore", &backup_dir, fresh_grpc[0]).await);
    assert_eq!(again["inserted"], 0, "{again}");
    for id in &long {
        assert_eq!(cf.status(id).await, "cancelled");
    }
}
