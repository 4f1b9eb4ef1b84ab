//! Upstream tasks in a three-node cluster whose nodes all front the same Python HTTP server:
//! the node that runs some of them is killed (kill -9) mid-call, and each task is taken over
//! by its shard's new leader by its tool's resume policy: a `rerun` tool's task is called
//! again and completes, a `fail` tool's task fails saying why; every task finishes, and the
//! recorded history of polls shows no terminal task changing and no state going back.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use taskmesh_testkit::{
    free_ports, is_terminal, node_config, status_of, wait_cluster_ready, Client, History, Server, V,
};

use super::{http_server, python};

const TASKMESH: &str = env!("CARGO_BIN_EXE_taskmesh");
const TOKEN: &str = "alice-token-1";
const SHARDS: u32 = 8;
/// Steps of the upstream's `slow` (50 ms each): running when the node dies.
const STEPS: u64 = 60;

/// The node leading `shard`, as `observer` sees it.
async fn leader_of(observer: &Server, shard: u32) -> u64 {
    let st = status_of(observer, TOKEN).await;
    st["shards"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["shard"] == shard)
        .and_then(|s| s["leader"].as_u64())
        .expect("the shard has a leader")
}

/// Three nodes serving `upstreams` (node settings), ready, their upstreams served.
async fn start_cluster(upstreams: &str) -> Vec<Server> {
    let grpc = free_ports(3);
    let config = |id| node_config(id, &grpc, SHARDS, TOKEN, upstreams);
    let nodes = vec![
        Server::start_node(TASKMESH, &config(1), true),
        Server::start_node(TASKMESH, &config(2), false),
        Server::start_node(TASKMESH, &config(3), false),
    ];
    wait_cluster_ready(&[&nodes[0], &nodes[1], &nodes[2]], TOKEN, SHARDS).await;
    for n in &nodes {
        taskmesh_testkit::wait_upstreams_serving(n, TOKEN).await;
    }
    nodes
}

/// Poll `id` until it is terminal (bounded: 60 s).
async fn until_terminal(history: &mut History, c: &Client, id: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let t = history.poll(c, id).await;
        if is_terminal(&t) {
            return t;
        }
        assert!(Instant::now() < deadline, "task {id} never finished: {t}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_tasks_survive_the_loss_of_their_node_by_resume_policy() {
    let python = tokio::task::spawn_blocking(python).await.unwrap();
    let up = http_server(&python).await;
    let upstreams = format!(
        r#"
[tools]
builtin = false

[[upstream]]
name = "again"
url = {url:?}
prefix = "again_"
tools = {{ include = ["slow"] }}

[upstream.overrides.slow]
resume = "rerun"

[[upstream]]
name = "once"
url = {url:?}
prefix = "once_"
tools = {{ include = ["slow"] }}
"#,
        url = up.url
    );
    let mut nodes = start_cluster(&upstreams).await;
    let mut clients = Vec::new();
    for n in &nodes {
        clients.push(Client::connect(&n.url, Some(TOKEN), V, json!({})).await);
    }

    let mut again = Vec::new();
    let mut once = Vec::new();
    for _ in 0..8 {
        again.push(
            clients[1]
                .start_task("again_slow", json!({"steps": STEPS}))
                .await,
        );
        once.push(
            clients[1]
                .start_task("once_slow", json!({"steps": STEPS}))
                .await,
        );
    }
    // Kill the node that runs the first `once` task: the leader of its shard.
    let victim = leader_of(&nodes[1], taskmesh_task::shard_of(&once[0], SHARDS)).await;
    let mut history = History::default();
    for id in again.iter().chain(&once) {
        assert_eq!(history.poll(&clients[1], id).await["status"], "working");
    }
    nodes[victim as usize - 1].kill9();
    let survivor = &clients[if victim == 1 { 1 } else { 0 }];

    for id in &again {
        let t = until_terminal(&mut history, survivor, id).await;
        assert_eq!(t["status"], "completed", "{t}");
        let r = survivor.ok("tasks/result", json!({"taskId": id})).await;
        assert_eq!(
            r["content"][0]["text"],
            format!("slept {STEPS} steps"),
            "{r}"
        );
    }
    let mut failed = 0;
    for (i, id) in once.iter().enumerate() {
        let t = until_terminal(&mut history, survivor, id).await;
        match t["status"].as_str() {
            Some("completed") => assert_ne!(i, 0, "the victim's task was not taken over: {t}"),
            Some("failed") => {
                let why = t["statusMessage"].as_str().unwrap_or_default();
                assert!(why.contains("interrupted") && why.contains("'fail'"), "{t}");
                failed += 1;
            }
            _ => panic!("{t}"),
        }
    }
    assert!(failed >= 1);
    history.poll_all(&[survivor, survivor]).await;
    let pairs = history.check();
    println!("{failed} fail-policy tasks failed over; {pairs} ordered pairs of polls checked");
}

/// Tasks of an upstream that runs calls as tasks itself (the Python SDK's task support, over
/// HTTP, shared by the three nodes), with the default resume policy `fail`: the node that
/// follows some of them is killed (kill -9), and each shard's new leader follows the same
/// upstream tasks (recorded, replicated, with the taskmesh task) instead of calling again;
/// every task completes, the upstream started each call once, and the recorded history of
/// polls shows no terminal task changing and no state going back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_tasks_are_followed_again_not_rerun_after_their_node_dies() {
    const TASKS: usize = 8;
    let python = tokio::task::spawn_blocking(python).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let starts = dir.path().join("starts");
    let up = taskmesh_testkit::python::task_upstream_http(&python, free_ports(1)[0], &starts).await;
    let upstreams = format!(
        r#"
[tools]
builtin = false

[[upstream]]
name = "tasks"
url = {url:?}
task_poll_min_ms = 50
tools = {{ include = ["research", "starts"] }}
"#,
        url = up.url
    );
    let mut nodes = start_cluster(&upstreams).await;
    let mut clients = Vec::new();
    for n in &nodes {
        clients.push(Client::connect(&n.url, Some(TOKEN), V, json!({})).await);
    }

    let mut ids = Vec::new();
    for _ in 0..TASKS {
        ids.push(
            clients[1]
                .start_task("research", json!({"seconds": 6, "steps": 3}))
                .await,
        );
    }
    // Every task follows its upstream task (recorded) before the node dies.
    let mut history = History::default();
    for id in &ids {
        super::tasks::wait_message(&clients[1], id, super::tasks::FOLLOWING).await;
        assert_eq!(history.poll(&clients[1], id).await["status"], "working");
    }
    let victim = leader_of(&nodes[1], taskmesh_task::shard_of(&ids[0], SHARDS)).await;
    nodes[victim as usize - 1].kill9();
    let survivor = &clients[if victim == 1 { 1 } else { 0 }];

    let mut followed_again = 0;
    for id in &ids {
        let t = until_terminal(&mut history, survivor, id).await;
        assert_eq!(t["status"], "completed", "{t}");
        let r = survivor.ok("tasks/result", json!({"taskId": id})).await;
        assert_eq!(
            r["content"][0]["text"], "researched for 6.0 s in 3 steps",
            "{r}"
        );
        if taskmesh_task::shard_of(id, SHARDS) == taskmesh_task::shard_of(&ids[0], SHARDS) {
            followed_again += 1;
        }
    }
    let r = survivor
        .ok("tools/call", json!({"name": "starts", "arguments": {}}))
        .await;
    assert_eq!(
        r["content"][0]["text"],
        TASKS.to_string(),
        "each call started once upstream: {r}"
    );
    history.poll_all(&[survivor, survivor]).await;
    let pairs = history.check();
    println!("{followed_again} tasks of the killed node's shard followed again; {pairs} ordered pairs of polls checked");
}

/// The log messages of a task's stream until its result: `(level, data)` of each.
async fn stream_logs(stream: &mut taskmesh_testkit::Sse, rid: i64) -> Vec<(String, String)> {
    let mut logs = vec![];
    loop {
        let m = stream.next().await.expect("the result follows");
        if m["id"] == json!(rid) {
            assert_eq!(m["result"]["content"][0]["text"], "muttered", "{m}");
            return logs;
        }
        if m["method"] == "notifications/message" {
            logs.push((
                m["params"]["level"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                m["params"]["data"].as_str().unwrap_or_default().to_string(),
            ));
        }
    }
}

/// `logging/setLevel` holds for the session whichever node takes it and whichever frames the
/// messages: the level set through one node filters an upstream tool's log messages on a
/// `tasks/result` stream read through another (which asks the session's home) and on the
/// session's GET stream (held by its home).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_levels_hold_across_the_cluster() {
    let python = tokio::task::spawn_blocking(python).await.unwrap();
    let up = http_server(&python).await;
    let upstreams = format!(
        r#"
[tools]
builtin = false

[[upstream]]
name = "py"
url = {url:?}
tools = {{ include = ["mutter"] }}
"#,
        url = up.url
    );
    let nodes = start_cluster(&upstreams).await;
    // One session, made on node 1 (its home), used through every node.
    let at1 = Client::connect(&nodes[0].url, Some(TOKEN), V, json!({})).await;
    let through = |i: usize| {
        let mut c = at1.clone();
        c.url = nodes[i].url.clone();
        c
    };
    let (at2, at3) = (through(1), through(2));
    // The tool logs after this wait: a `tasks/result` stream opened right after the call must
    // attach before it (what the task sends before a stream attaches goes to the session's
    // GET stream instead), also on a machine loaded with other tests.
    let wait = json!({"seconds": 2.0});

    // No level set: every message.
    let id = at3.start_task("mutter", wait.clone()).await;
    let (rid, mut stream) = at3.open_stream("tasks/result", json!({"taskId": id})).await;
    assert_eq!(
        stream_logs(&mut stream, rid).await,
        [
            ("info".into(), "hmm".into()),
            ("warning".into(), "careful".into())
        ]
    );

    // Set through node 2; read through node 3.
    assert_eq!(
        at2.ok("logging/setLevel", json!({"level": "warning"}))
            .await,
        json!({})
    );
    let id = at3.start_task("mutter", wait.clone()).await;
    let (rid, mut stream) = at3.open_stream("tasks/result", json!({"taskId": id})).await;
    assert_eq!(
        stream_logs(&mut stream, rid).await,
        [("warning".to_string(), "careful".to_string())]
    );

    // The GET stream (opened through node 2, held by the home) gets the same.
    let mut get = at2.open_get().await;
    let id = at3.start_task("mutter", json!({"seconds": 0.3})).await;
    let mut logs = vec![];
    loop {
        let m = get.next().await.expect("GET stream open");
        if m["method"] == "notifications/message" {
            logs.push(m["params"]["data"].clone());
        }
        if m["method"] == "notifications/tasks/status"
            && m["params"]["taskId"] == json!(id)
            && m["params"]["status"] == "completed"
        {
            break;
        }
    }
    assert_eq!(logs, [json!("careful")]);
    drop(get);

    // Lowered again through node 3, read through node 2.
    at3.ok("logging/setLevel", json!({"level": "debug"})).await;
    let id = at1.start_task("mutter", wait).await;
    let (rid, mut stream) = at2.open_stream("tasks/result", json!({"taskId": id})).await;
    assert_eq!(stream_logs(&mut stream, rid).await.len(), 2);
}
