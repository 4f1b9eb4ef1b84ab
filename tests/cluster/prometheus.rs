//! A real Prometheus (the Debian package) scrapes a 3-node cluster's `[metrics] listen`
//! listeners: the series exist on every node, tasks created through one node show up in the
//! sum, every shard has exactly one leader, and killing a node moves the leader-change counters
//! of the others while its target goes down.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use taskmesh_testkit::{free_ports, http, wait_cluster_ready, Server};

use crate::{connect, node_config_with, TASKMESH, TOKEN};

/// A Prometheus server on a free loopback port with its data in a temporary directory;
/// killed when dropped.
struct Prometheus {
    child: Child,
    url: String,
    _dir: tempfile::TempDir,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Prometheus {
    /// Scrape `targets` (loopback ports) every second.
    async fn start(targets: &[u16]) -> Prometheus {
        let dir = tempfile::tempdir().unwrap();
        let list: Vec<String> = targets
            .iter()
            .map(|p| format!("\"127.0.0.1:{p}\""))
            .collect();
        let config = format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: taskmesh\n    static_configs:\n      - targets: [{}]\n",
            list.join(", ")
        );
        std::fs::write(dir.path().join("prometheus.yml"), config).unwrap();
        let port = free_ports(1)[0];
        let log = std::fs::File::create(dir.path().join("prometheus.log")).unwrap();
        let child = Command::new("prometheus")
            .arg(format!(
                "--config.file={}",
                dir.path().join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("prometheus (Debian package prometheus) runs");
        let p = Prometheus {
            child,
            url: format!("http://127.0.0.1:{port}"),
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ready = http().get(format!("{}/-/ready", p.url)).send().await;
            if ready.is_ok_and(|r| r.status().is_success()) {
                return p;
            }
            assert!(Instant::now() < deadline, "prometheus never became ready");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The instant vector of `query`: each series' labels and value.
    async fn query(&self, query: &str) -> Vec<(Value, f64)> {
        let r: Value = http()
            .get(format!("{}/api/v1/query", self.url))
            .query(&[("query", query)])
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(r["status"], "success", "{query}: {r}");
        r["data"]["result"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                let v = s["value"][1].as_str().unwrap().parse().unwrap();
                (s["metric"].clone(), v)
            })
            .collect()
    }

    /// The single value of `query` (`None` while it has no series).
    async fn value(&self, query: &str) -> Option<f64> {
        self.query(query).await.first().map(|(_, v)| *v)
    }

    /// Wait (bounded: 30 s) until `query`'s single value satisfies `ok`; that value.
    async fn until(&self, query: &str, ok: impl Fn(f64) -> bool) -> f64 {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(v) = self.value(query).await.filter(|v| ok(*v)) {
                return v;
            }
            assert!(
                Instant::now() < deadline,
                "{query} never got there: {:?}",
                self.query(query).await
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_scrapes_every_node_and_sees_the_work_and_a_failover() {
    let grpc = free_ports(3);
    let metrics = free_ports(3);
    let config = |id: u64| {
        let extra = format!(
            "[metrics]\nlisten = \"127.0.0.1:{}\"\n",
            metrics[id as usize - 1]
        );
        node_config_with(id, &grpc, &extra)
    };
    let n2 = Server::start_node(TASKMESH, &config(2), false);
    let n3 = Server::start_node(TASKMESH, &config(3), false);
    let n1 = Server::start_node(TASKMESH, &config(1), true);
    wait_cluster_ready(&[&n1, &n2, &n3], TOKEN, crate::shards()).await;
    let prometheus = Prometheus::start(&metrics).await;
    prometheus
        .until(r#"sum(up{job="taskmesh"})"#, |v| v == 3.0)
        .await;
    prometheus.until("sum(taskmesh_ready)", |v| v == 3.0).await;

    // Every node reports every shard it hosts, and each shard has one leader.
    prometheus
        .until("count(taskmesh_raft_is_leader)", |v| {
            v == f64::from(crate::shards() * 3)
        })
        .await;
    prometheus
        .until("sum(taskmesh_raft_is_leader)", |v| {
            v == f64::from(crate::shards())
        })
        .await;
    assert_eq!(
        prometheus
            .query("process_resident_memory_bytes")
            .await
            .len(),
        3
    );

    // Tasks created through node 1 show up, and the requests that made them.
    let c = connect(&n1).await;
    let mut ids = Vec::new();
    // 20 tasks: some of them (all but with odds of 3e-9) on shards that another node leads.
    for i in 0..20 {
        ids.push(
            c.start_task(
                "slow_compute",
                json!({"seconds": 0.05, "label": format!("t{i}")}),
            )
            .await,
        );
    }
    for id in &ids {
        c.wait_status(id, "completed").await;
    }
    prometheus
        .until("sum(taskmesh_tasks_created_total)", |v| v >= 5.0)
        .await;
    prometheus
        .until(
            r#"sum(taskmesh_tasks_terminal_total{status="completed"})"#,
            |v| v >= 5.0,
        )
        .await;
    prometheus
        .until(
            r#"sum(taskmesh_mcp_requests_total{method="tools/call",outcome="ok"})"#,
            |v| v >= 5.0,
        )
        .await;
    // Node 1 forwarded creates and polls to the other nodes' leaders, its polls in batches.
    prometheus
        .until(
            r#"sum(taskmesh_forwarded_requests_total{outcome="ok"})"#,
            |v| v >= 1.0,
        )
        .await;
    prometheus
        .until("sum(taskmesh_forwarded_read_batch_reads_count)", |v| {
            v >= 1.0
        })
        .await;

    // Every query of the Grafana dashboard is valid PromQL over these series, and the panels
    // of what has happened by now have data.
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../deploy/grafana/taskmesh.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let mut with_data = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        let mut any = false;
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap().replace("$job", "taskmesh");
            any |= !prometheus.query(&expr).await.is_empty();
        }
        if any {
            with_data.push(panel["title"].as_str().unwrap().to_string());
        }
    }
    for title in [
        "MCP requests by method",
        "Request latency p50 / p99",
        "Tasks created and finished",
        "Shards led per node",
        "Ready nodes",
        "Memory per node",
    ] {
        assert!(
            with_data.iter().any(|t| t == title),
            "{title}: {with_data:?}"
        );
    }

    // Kill the node that leads the most shards: the others see new leaders.
    let leads = prometheus.query("taskmesh_raft_is_leader == 1").await;
    let port_of = |instance: &Value| {
        instance["instance"]
            .as_str()
            .unwrap()
            .rsplit(':')
            .next()
            .unwrap()
            .parse::<u16>()
            .unwrap()
    };
    let victim_port = (0..3)
        .map(|i| metrics[i])
        .max_by_key(|p| leads.iter().filter(|(l, _)| port_of(l) == *p).count())
        .unwrap();
    let changes_before = prometheus
        .value("sum(taskmesh_raft_leader_changes_total)")
        .await
        .unwrap_or(0.0);
    let survivors_elections =
        format!(r#"sum(taskmesh_raft_elections_total{{instance!="127.0.0.1:{victim_port}"}})"#);
    let elections_before = prometheus.value(&survivors_elections).await.unwrap_or(0.0);
    let mut nodes = [n1, n2, n3];
    let victim = metrics.iter().position(|p| *p == victim_port).unwrap();
    nodes[victim].kill9();
    prometheus
        .until(
            &format!(r#"up{{instance="127.0.0.1:{victim_port}"}}"#),
            |v| v == 0.0,
        )
        .await;
    let changes_after = prometheus
        .until(
            &format!(
                r#"sum(taskmesh_raft_leader_changes_total{{instance!="127.0.0.1:{victim_port}"}})"#
            ),
            |v| v > changes_before,
        )
        .await;
    // The survivors held elections for the shards the victim led.
    prometheus
        .until(
            &format!(
                r#"sum(taskmesh_raft_elections_total{{instance!="127.0.0.1:{victim_port}"}})"#
            ),
            |v| v > elections_before,
        )
        .await;
    // Every shard is led again by one of the two others.
    prometheus
        .until(
            &format!(r#"sum(taskmesh_raft_is_leader{{instance!="127.0.0.1:{victim_port}"}})"#),
            |v| v == f64::from(crate::shards()),
        )
        .await;
    println!("leader changes seen: {changes_before} before the kill, {changes_after} after");
}
