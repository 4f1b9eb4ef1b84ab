//! Following one forwarded poll across nodes by its trace id in the logs.

use std::time::{Duration, Instant};

use serde_json::json;
use taskmesh_testkit::{free_ports, wait_cluster_ready, Server};

use crate::{connect, node_config_with, TASKMESH, TOKEN};

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
