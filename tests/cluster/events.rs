//! Task events read by cursor across a three-node cluster: `events/poll` continued through a
//! different node at every page, and an `events/stream` dropped and resumed from its last
//! cursor on another node, each see every status change of the caller's tasks exactly once,
//! whichever nodes lead their shards; a resumed stream also gets the changes made after it
//! opened, pushed from shards led elsewhere.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde_json::{json, Value};
use taskmesh_testkit::modern::Modern;
use taskmesh_testkit::Sse;

use super::{start_cluster, TOKEN};

const EVENT: &str = "taskmesh.task.updated";

/// Run `confirm_delete` through `m` to its end, answering its question through `answer`.
async fn asked(m: &Modern, answer: &Modern) -> String {
    let id = m.start("confirm_delete", json!({"filename": "x"})).await;
    for _ in 0..600 {
        let t = answer.ok("tasks/get", json!({"taskId": id})).await;
        if let Some(k) = t["inputRequests"].as_object().and_then(|r| r.keys().next()) {
            answer
                .ok(
                    "tasks/update",
                    json!({"taskId": id, "inputResponses": {k.clone(): {"action": "accept", "content": {"confirm": true}}}}),
                )
                .await;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(m.until_terminal(&id).await["status"], "completed");
    id
}

/// The next event of a stream, its (event id, task id, status) and the cursor after it; the
/// heartbeats on the way are skipped.
async fn next_event(sse: &mut Sse) -> ((String, String, String), String) {
    loop {
        let n = sse.next().await.expect("a stream message");
        match n["method"].as_str() {
            Some("notifications/events/event") => {
                let e = &n["params"];
                return (key(e), e["cursor"].as_str().expect("a cursor").to_string());
            }
            Some("notifications/events/heartbeat") => {}
            Some("notifications/events/active") => {
                assert_eq!(n["params"]["truncated"], false, "{n}");
            }
            _ => panic!("unexpected: {n}"),
        }
    }
}

fn key(e: &Value) -> (String, String, String) {
    (
        e["eventId"].as_str().expect("eventId").to_string(),
        e["data"]["taskId"].as_str().expect("taskId").to_string(),
        e["data"]["status"].as_str().expect("status").to_string(),
    )
}

/// What the tasks must have produced: each task's changes in order.
fn by_task(events: &[(String, String, String)]) -> BTreeMap<String, Vec<String>> {
    let mut m: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (_, t, s) in events {
        m.entry(t.clone()).or_default().push(s.clone());
    }
    m
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn polls_and_streams_resumed_through_other_nodes_see_every_event_once() {
    let nodes = start_cluster();
    let through = crate::ready_modern_clients(&nodes).await;
    let r = through[0]
        .ok("events/poll", json!({"name": EVENT, "cursor": null}))
        .await;
    let start = r["cursor"].as_str().expect("a cursor").to_string();

    // Phase one: tasks on every node (their shards led anywhere), two of them asking.
    let mut expected: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut ids = Vec::new();
    for i in 0..45 {
        ids.push(
            through[i % 3]
                .start("slow_compute", json!({"seconds": 0}))
                .await,
        );
    }
    for id in &ids {
        through[0].until_terminal(id).await;
        expected.insert(id.clone(), vec!["completed".into()]);
    }
    for i in 0..2 {
        let id = asked(&through[i], &through[i + 1]).await;
        expected.insert(
            id,
            vec![
                "input_required".into(),
                "working".into(),
                "completed".into(),
            ],
        );
    }

    // A stream on node 2 from the start: half of what is there, then the client goes.
    let mut sse = through[1]
        .open("events/stream", json!({"name": EVENT, "cursor": start}))
        .await
        .unwrap_or_else(|a| panic!("refused: {} {}", a.status, a.body));
    let mut streamed = Vec::new();
    let mut cursor = String::new();
    for _ in 0..25 {
        let (e, c) = next_event(&mut sse).await;
        streamed.push(e);
        cursor = c;
    }
    drop(sse);

    // Resumed on node 3 from the last cursor read: the rest, then phase two's changes as they
    // happen.
    let mut sse = through[2]
        .open("events/stream", json!({"name": EVENT, "cursor": cursor}))
        .await
        .unwrap_or_else(|a| panic!("refused: {} {}", a.status, a.body));
    let mut ids = Vec::new();
    for i in 0..15 {
        ids.push(
            through[i % 3]
                .start("slow_compute", json!({"seconds": 0}))
                .await,
        );
    }
    for id in &ids {
        through[1].until_terminal(id).await;
        expected.insert(id.clone(), vec!["completed".into()]);
    }
    let total: usize = expected.values().map(Vec::len).sum();
    while streamed.len() < total {
        streamed.push(next_event(&mut sse).await.0);
    }
    drop(sse);

    // Polls of 7 from the start, each page through the next node.
    let mut polled = Vec::new();
    let mut cursor = start.clone();
    for page in 0..1_000 {
        let r = through[page % 3]
            .ok(
                "events/poll",
                json!({"name": EVENT, "cursor": cursor, "maxEvents": 7}),
            )
            .await;
        assert_eq!(r["truncated"], false, "{r}");
        polled.extend(r["events"].as_array().unwrap().iter().map(key));
        cursor = r["cursor"].as_str().unwrap().to_string();
        if r["hasMore"] != true {
            break;
        }
    }

    for (what, events) in [("the stream", &streamed), ("the polls", &polled)] {
        let unique: BTreeSet<&String> = events.iter().map(|(id, _, _)| id).collect();
        assert_eq!(unique.len(), events.len(), "{what} gave an event twice");
        assert_eq!(by_task(events), expected, "{what}");
    }
}

/// A client's webhook subscription on three nodes: made through node 1, it covers tasks
/// created through every node while node 2 and then node 3 are killed (kill -9) and restarted
/// (their shard leaderships move and come back); every task's end reaches the receiver, each
/// message verified by the Standard Webhooks library; the subscription survives the restarts
/// (a refresh through node 2 finds it, same id, no new verification) and is removed through
/// node 3.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_subscription_survives_node_kills_and_covers_every_node_s_tasks() {
    use taskmesh_testkit::python::{received, webhook_receiver, webhooks_venv};

    let dir = tempfile::tempdir().unwrap();
    let python = webhooks_venv(std::path::Path::new(env!("CARGO_TARGET_TMPDIR")));
    let secret = format!(
        "whsec_{}",
        base64::Engine::encode(&base64::engine::general_purpose::STANDARD, [0x44u8; 32])
    );
    let out = dir.path().join("events.jsonl");
    let receiver = webhook_receiver(&python, &secret, &out, None);
    let extra = "[events]\nallow_addresses = [\"127.0.0.0/8\"]\nhttp_hosts = [\"127.0.0.1\"]\nretry_base_ms = 200\nretry_max_ms = 1000\nmax_attempts = 1000\n";
    let grpc = taskmesh_testkit::free_ports(3);
    let config = |id| crate::node_config_with(id, &grpc, extra);
    let mut nodes = [
        taskmesh_testkit::Server::start_node(crate::TASKMESH, &config(1), true),
        taskmesh_testkit::Server::start_node(crate::TASKMESH, &config(2), false),
        taskmesh_testkit::Server::start_node(crate::TASKMESH, &config(3), false),
    ];
    taskmesh_testkit::wait_cluster_ready(
        &[&nodes[0], &nodes[1], &nodes[2]],
        TOKEN,
        crate::shards(),
    )
    .await;
    let url = format!("http://127.0.0.1:{}/hooks", receiver.port);
    let params = json!({"name": EVENT, "arguments": {"terminalOnly": true},
                        "delivery": {"mode": "webhook", "url": url, "secret": secret}});
    let m1 = Modern::new(&nodes[0].url, Some(TOKEN), true);
    let r = m1.ok("events/subscribe", params.clone()).await;
    let sub = r["id"].as_str().expect("an id").to_string();

    let mut made = Vec::new();
    for i in 0..120usize {
        match i {
            40 => nodes[1].kill9_and_restart(),
            80 => nodes[2].kill9_and_restart(),
            _ => {}
        }
        // Through a node that is up (node 1 is never killed), and every node once it is back.
        let through = if (40..50).contains(&i) || (80..90).contains(&i) {
            &nodes[0]
        } else {
            &nodes[i % 3]
        };
        let m = Modern::new(&through.url, Some(TOKEN), true);
        made.push(m.start("slow_compute", json!({"seconds": 0.1})).await);
    }
    for id in &made {
        assert_eq!(m1.until_terminal(id).await["status"], "completed");
    }
    // Every end reaches the receiver (bounded: 60 s), each verified.
    let mut ended = BTreeSet::new();
    for _ in 0..600 {
        ended = received(&out)
            .iter()
            .inspect(|l| assert!(l.get("refused").is_none(), "did not verify: {l}"))
            .filter(|l| l["subscription"] == json!(sub) && l.get("event").is_some())
            .map(|l| l["event"]["data"]["taskId"].as_str().unwrap().to_string())
            .collect();
        if made.iter().all(|t| ended.contains(t)) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let missing: Vec<&String> = made.iter().filter(|t| !ended.contains(*t)).collect();
    assert!(missing.is_empty(), "ends never delivered: {missing:?}");

    // The subscription is still there after the restarts: a refresh through node 2 keeps its
    // id and is not verified again; removed through node 3, it is gone.
    let m2 = Modern::new(&nodes[1].url, Some(TOKEN), true);
    let r = m2.ok("events/subscribe", params.clone()).await;
    assert_eq!(r["id"], json!(sub), "{r}");
    let verifications = received(&out)
        .iter()
        .filter(|l| l.get("verification").is_some())
        .count();
    assert_eq!(verifications, 1);
    let m3 = Modern::new(&nodes[2].url, Some(TOKEN), true);
    let gone =
        json!({"name": EVENT, "arguments": {"terminalOnly": true}, "delivery": {"url": url}});
    m3.ok("events/unsubscribe", gone.clone()).await;
    assert_eq!(m1.send("events/unsubscribe", gone).await.code(), -32023);
}
