//! Fault tests with real node processes on loopback: a shard that loses two of its three
//! replicas keeps the outcomes its leader could not write and records them when the replicas
//! return; on five nodes, shards that keep a majority serve while two nodes are down; and a
//! randomized run of kills, stops and restarts loses nothing and leaves no task behind.
//!
//! The tests of this file run one at a time (each starts up to five nodes on two cores).

// A test binary: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use taskmesh_testkit::{
    free_ports, get_eventually, status_of, wait_cluster_ready, Client, Server, V,
};

mod quorum;
mod random;

/// The server executable under test.
const TASKMESH: &str = env!("CARGO_BIN_EXE_taskmesh");

const TOKEN: &str = "alice-token-1";

/// Held for the whole of each test: the tests of this file never run at the same time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Start `n` nodes with `shards` shards (node 1 bootstraps) and wait until every shard leads.
async fn start_cluster(n: usize, shards: u32, extra: &str) -> Vec<Server> {
    let grpc = free_ports(n);
    let mut nodes: Vec<Server> = (2..=n as u64)
        .map(|id| {
            Server::start_node(
                TASKMESH,
                &taskmesh_testkit::node_config(id, &grpc, shards, TOKEN, extra),
                false,
            )
        })
        .collect();
    nodes.insert(
        0,
        Server::start_node(
            TASKMESH,
            &taskmesh_testkit::node_config(1, &grpc, shards, TOKEN, extra),
            true,
        ),
    );
    let refs: Vec<&Server> = nodes.iter().collect();
    wait_cluster_ready(&refs, TOKEN, shards).await;
    nodes
}

async fn connect(s: &Server) -> Client {
    Client::connect(&s.url, Some(TOKEN), V, json!({"elicitation": {}})).await
}

/// One shard as the running nodes that host it report it.
#[derive(Debug, Clone, Default)]
struct ShardView {
    leader: Option<u64>,
    term: u64,
    voters: Vec<u64>,
}

/// Every shard's leader, term and voters, from the running nodes that host a replica of it (a
/// leader's own report wins over a follower's).
async fn shard_views(nodes: &[Server], shards: u32) -> Vec<ShardView> {
    let mut out = vec![ShardView::default(); shards as usize];
    for n in nodes.iter().filter(|n| n.is_running()) {
        for s in status_of(n, TOKEN).await["shards"]
            .as_array()
            .expect("shards")
        {
            let view = &mut out[s["shard"].as_u64().expect("shard") as usize];
            if view.voters.is_empty() || s["isLeader"] == true {
                *view = ShardView {
                    leader: s["leader"].as_u64(),
                    term: s["term"].as_u64().unwrap_or(0),
                    voters: s["voters"]
                        .as_array()
                        .expect("voters")
                        .iter()
                        .filter_map(Value::as_u64)
                        .collect(),
                };
            }
        }
    }
    out
}

/// Poll `id` through `c` until it is terminal (bounded by `limit`); the last task seen.
async fn wait_terminal(c: &Client, id: &str, limit: Duration) -> Value {
    let deadline = Instant::now() + limit;
    loop {
        let t = get_eventually(c, id).await;
        if taskmesh_testkit::is_terminal(&t) || Instant::now() > deadline {
            return t;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
