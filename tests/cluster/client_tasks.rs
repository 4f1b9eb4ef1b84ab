//! Tasks in the other direction across a failover: a tool's sampling request runs as the
//! client's task; the leader of the server task's shard is killed (kill -9) while the client
//! task is pending; the new leader's execution (`ask_model` is run again by its resume policy)
//! follows the same client task, recorded through the shard's log, rather than ask again, and
//! the server task completes once the client's task does.

use serde_json::{json, Value};
use taskmesh_testkit::{free_ports, status_of, wait_cluster_ready, Client, Server, Sse, V};

use crate::{node_config_with, shards, TASKMESH, TOKEN};

async fn leader_of(observer: &Server, shard: u32) -> u64 {
    status_of(observer, TOKEN).await["shards"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["shard"] == shard)
        .and_then(|s| s["leader"].as_u64())
        .expect("the shard has a leader")
}

async fn next_request(get: &mut Sse) -> Value {
    loop {
        let m = get.next().await.expect("the GET stream stays open");
        if m.get("method").is_some() && m.get("id").is_some() {
            return m;
        }
    }
}

fn client_task(status: &str) -> Value {
    json!({
        "taskId": "client-sampling-1",
        "status": status,
        "ttl": 120000,
        "createdAt": "2026-12-06T10:00:00.000Z",
        "lastUpdatedAt": "2026-12-06T10:00:01.000Z",
        "pollInterval": 60,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_task_is_followed_by_the_new_leader_after_a_kill() {
    let grpc = free_ports(3);
    let config = |id| {
        node_config_with(id, &grpc, "").replace("[tasks]\n", "[tasks]\nclient_poll_min_ms = 50\n")
    };
    let mut nodes = vec![
        Server::start_node(TASKMESH, &config(1), true),
        Server::start_node(TASKMESH, &config(2), false),
        Server::start_node(TASKMESH, &config(3), false),
    ];
    wait_cluster_ready(&[&nodes[0], &nodes[1], &nodes[2]], TOKEN, shards()).await;
    let caps = json!({
        "sampling": {},
        "tasks": {"list": {}, "cancel": {}, "requests": {"sampling": {"createMessage": {}}}},
    });

    // A task whose shard another node than the client's leads (so the client's session and
    // its GET stream outlive the kill); each try is a new task id, hence likely another shard.
    let mut found = None;
    for _ in 0..20 {
        let home = &nodes[1];
        let c = Client::connect(&home.url, Some(TOKEN), V, caps.clone()).await;
        let get = c.open_get().await;
        let id = c.start_task("ask_model", json!({"prompt": "6 x 7?"})).await;
        let leader = leader_of(home, taskmesh_task::shard_of(&id, shards())).await;
        if leader != 2 {
            found = Some((c, get, id, leader));
            break;
        }
        c.ok("tasks/cancel", json!({"taskId": id})).await;
    }
    let (c, mut get, id, leader) = found.expect("a task led by another node than the client's");

    let ask = next_request(&mut get).await;
    assert_eq!(ask["method"], "sampling/createMessage", "{ask}");
    assert!(ask["params"]["task"]["ttl"].as_u64().is_some(), "{ask}");
    c.answer(&ask["id"], json!({"task": client_task("working")}))
        .await;
    // Followed (recorded first): a poll comes, the client task still works.
    let poll = next_request(&mut get).await;
    assert_eq!(poll["method"], "tasks/get", "{poll}");
    assert_eq!(poll["params"]["taskId"], "client-sampling-1");
    c.answer(&poll["id"], client_task("working")).await;

    nodes[usize::try_from(leader).unwrap() - 1].kill9();

    // The new leader follows the same client task: it polls it (never asks the model again),
    // then fetches its result once it completed.
    let mut asked_again = false;
    let mut fetched = false;
    for _ in 0..200 {
        let m = next_request(&mut get).await;
        match m["method"].as_str().unwrap() {
            "tasks/get" => {
                assert_eq!(m["params"]["taskId"], "client-sampling-1", "{m}");
                c.answer(&m["id"], client_task("completed")).await;
            }
            "tasks/result" => {
                assert_eq!(m["params"]["taskId"], "client-sampling-1", "{m}");
                c.answer(
                    &m["id"],
                    json!({"role": "assistant", "content": {"type": "text", "text": "42"},
                           "model": "test-model", "stopReason": "endTurn"}),
                )
                .await;
                fetched = true;
                break;
            }
            "sampling/createMessage" => asked_again = true,
            other => panic!("unexpected request {other}: {m}"),
        }
    }
    assert!(fetched, "the client task's result was never fetched");
    assert!(
        !asked_again,
        "the model was asked again instead of the client task followed"
    );
    let done = c.wait_status(&id, "completed").await;
    assert_eq!(done["status"], "completed");
    let r = c.ok("tasks/result", json!({"taskId": id})).await;
    assert_eq!(r["content"][0]["text"], "The model said: 42", "{r}");
}
