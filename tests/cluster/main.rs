//! Cluster tests with real node processes on loopback: three nodes replicate every shard;
//! any node answers any request with the same answer; a session minted on one node works on
//! the others; a client's answer to an elicitation may reach any node; the loss of a node
//! (kill -9) loses no acknowledged task and changes no terminal result.

// A test binary: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used)]

use serde_json::json;
use taskmesh_testkit::{free_ports, Client, Server, V};

mod admin;
mod backup;
mod client_tasks;
mod events;
mod handoff;
mod membership;
mod modern;
mod mtls;
mod prometheus;
mod quiesce;
mod readiness;
mod serving;
mod streams;
mod trace;
mod webhooks;
mod worker_faults;
mod workers;

/// The server executable under test.
const TASKMESH: &str = env!("CARGO_BIN_EXE_taskmesh");

const TOKEN: &str = "alice-token-1";

fn node_config(id: u64, grpc: &[u16]) -> String {
    node_config_with(id, grpc, "")
}

fn node_config_with(id: u64, grpc: &[u16], extra: &str) -> String {
    taskmesh_testkit::node_config(id, grpc, shards(), TOKEN, extra)
}

/// The shard count of the suite's clusters: 8, or `TEST_CLUSTER_SHARDS`.
fn shards() -> u32 {
    taskmesh_testkit::cluster_shards(8)
}

fn start_cluster() -> Vec<Server> {
    let grpc = free_ports(3);
    let n2 = Server::start_node(TASKMESH, &node_config(2, &grpc), false);
    let n3 = Server::start_node(TASKMESH, &node_config(3, &grpc), false);
    let n1 = Server::start_node(TASKMESH, &node_config(1, &grpc), true);
    vec![n1, n2, n3]
}

/// Wait until the three `nodes` are ready; a 2026-07-28 client of each (the suite's token, the
/// tasks extension and elicitation declared).
async fn ready_modern_clients(nodes: &[Server]) -> Vec<taskmesh_testkit::modern::Modern> {
    taskmesh_testkit::wait_cluster_ready(&[&nodes[0], &nodes[1], &nodes[2]], TOKEN, shards()).await;
    nodes
        .iter()
        .map(|n| {
            let mut m = taskmesh_testkit::modern::Modern::new(&n.url, Some(TOKEN), true);
            m.elicitation = true;
            m
        })
        .collect()
}

/// The JSON an operator's command printed; panics with its stderr when it failed.
fn json_of(out: &std::process::Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON output")
}

/// A ready three-node cluster of the suite's settings, with `tasks` (lines of `key = value`)
/// added to their `[tasks]` section.
async fn ready_cluster_with_tasks(tasks: &str) -> [Server; 3] {
    let grpc = free_ports(3);
    let config =
        |id| node_config_with(id, &grpc, "").replace("[tasks]\n", &format!("[tasks]\n{tasks}\n"));
    let nodes = [
        Server::start_node(TASKMESH, &config(1), true),
        Server::start_node(TASKMESH, &config(2), false),
        Server::start_node(TASKMESH, &config(3), false),
    ];
    taskmesh_testkit::wait_cluster_ready(&[&nodes[0], &nodes[1], &nodes[2]], TOKEN, shards()).await;
    nodes
}

/// The id of the node that leads `shard`, as `observer` sees it.
async fn leader_of(observer: &Server, shard: u32) -> u64 {
    taskmesh_testkit::status_of(observer, TOKEN).await["shards"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["shard"] == shard)
        .and_then(|s| s["leader"].as_u64())
        .expect("the shard has a leader")
}

async fn connect(s: &Server) -> Client {
    Client::connect(&s.url, Some(TOKEN), V, json!({"elicitation": {}})).await
}
