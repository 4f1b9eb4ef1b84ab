//! Streams across nodes: a server request goes out on exactly one stream even when the
//! session's GET stream and the task's `tasks/result` stream are on two different gateways
//! (the task's leader is whichever node its shard has).

use serde_json::json;
use taskmesh_testkit::{wait_cluster_ready, Client, Server};

use crate::{connect, start_cluster, TOKEN};

/// A ready three-node cluster's one session, as a client of each node.
async fn one_session_on_each_node(nodes: &[Server]) -> [Client; 3] {
    wait_cluster_ready(&[&nodes[0], &nodes[1], &nodes[2]], TOKEN, crate::shards()).await;
    let c1 = connect(&nodes[0]).await;
    let mut via_node2 = c1.clone();
    via_node2.url = nodes[1].url.clone();
    let mut via_node3 = c1.clone();
    via_node3.url = nodes[2].url.clone();
    [c1, via_node2, via_node3]
}

/// The session's GET stream is on node 2 and its `tasks/result` stream on node 3: each of the
/// task's requests reaches the client once, on the GET stream (which claimed it first), and
/// the `tasks/result` stream carries only the result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_request_goes_out_once_across_gateways() {
    let nodes = start_cluster();
    let [c1, via_node2, via_node3] = one_session_on_each_node(&nodes).await;
    let mut get = via_node2.open_get().await;

    for round in 0..4 {
        let file = format!("f{round}");
        let id = c1
            .start_task("confirm_delete", json!({ "filename": file }))
            .await;
        let req = loop {
            let m = get.next().await.expect("GET stream open");
            if m["method"] == "elicitation/create"
                && m["params"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"] == id
            {
                break m;
            }
        };
        via_node3.wait_status(&id, "input_required").await;
        let (rid, mut stream) = via_node3
            .open_stream("tasks/result", json!({ "taskId": id }))
            .await;
        via_node3
            .answer(
                &req["id"],
                json!({"action":"accept","content":{"confirm":false}}),
            )
            .await;
        let mut again = vec![];
        let resp = loop {
            let m = stream.next().await.expect("tasks/result stream open");
            if m["id"] == json!(rid) {
                break m;
            }
            if m.get("method").is_some() && m.get("id").is_some() {
                again.push(m);
            }
        };
        assert!(
            again.is_empty(),
            "round {round}: the request came again on tasks/result: {again:?}"
        );
        let text = resp["result"]["content"][0]["text"].as_str().unwrap();
        assert!(text.starts_with(&format!("Kept {file}")), "{resp}");
    }
}

/// A stream cut on one node is resumed through another with `Last-Event-ID`: the node reached
/// reads the rest from the node holding the stream, with nothing lost and nothing repeated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_cut_on_one_node_resumes_through_another() {
    let nodes = start_cluster();
    let [c1, via_node2, via_node3] = one_session_on_each_node(&nodes).await;

    // tasks/result held by node 1, cut after its request, resumed through node 2.
    let id = c1
        .start_task("confirm_delete", json!({ "filename": "r" }))
        .await;
    c1.wait_status(&id, "input_required").await;
    let (rid, mut first) = c1
        .open_stream("tasks/result", json!({ "taskId": id }))
        .await;
    let q = first.next().await.expect("the request");
    assert_eq!(q["method"], "elicitation/create");
    let last = first.last_event_id.clone().expect("events have ids");
    first.close();
    via_node2
        .answer(&q["id"], json!({"action":"decline"}))
        .await;
    let mut second = via_node2.resume(&last).await;
    let resp = loop {
        let m = second.next().await.expect("the result follows");
        assert!(m.get("method").is_none(), "the request came again: {m}");
        if m["id"] == json!(rid) {
            break m;
        }
    };
    let text = resp["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.starts_with("Kept r"), "{resp}");
    assert!(
        second.next().await.is_none(),
        "the stream ends after its result"
    );

    // The GET stream held by node 1, cut; a request sent while nobody reads it comes through
    // node 3, and the one read before the cut does not come again.
    let mut get = c1.open_get().await;
    let a = c1
        .start_task("confirm_delete", json!({ "filename": "g1" }))
        .await;
    let qa = next_request_of(&mut get, &a).await;
    let last = get.last_event_id.clone().expect("events have ids");
    get.close();
    c1.answer(&qa["id"], json!({"action":"decline"})).await;
    let b = c1
        .start_task("confirm_delete", json!({ "filename": "g2" }))
        .await;
    let mut again = via_node3.resume(&last).await;
    let qb = loop {
        let m = again.next().await.expect("GET stream open");
        assert_ne!(
            m["id"], qa["id"],
            "the request read before the cut came again"
        );
        if m["method"] == "elicitation/create" {
            break m;
        }
    };
    assert_eq!(
        qb["params"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        json!(b)
    );
}

/// The next request of task `task` on `get`.
async fn next_request_of(get: &mut taskmesh_testkit::Sse, task: &str) -> serde_json::Value {
    loop {
        let m = get.next().await.expect("GET stream open");
        if m["method"] == "elicitation/create"
            && m["params"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"] == task
        {
            return m;
        }
    }
}

/// The session (issued by node 1) keeps a GET stream open through node 2 and another through
/// node 3: both are held by node 1, so each status notification of its tasks goes out on one
/// of them, never on both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_notification_goes_out_once_across_gateways() {
    let nodes = start_cluster();
    let [c1, via_node2, via_node3] = one_session_on_each_node(&nodes).await;
    let mut streams = vec![via_node2.open_get().await, via_node3.open_get().await];
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut readers = vec![];
    for (n, mut sse) in streams.drain(..).enumerate() {
        let seen = seen.clone();
        readers.push(tokio::spawn(async move {
            while let Some(m) = sse.next().await {
                let id = sse.last_event_id.clone().unwrap_or_default();
                seen.lock().unwrap().push((n, m, id));
            }
        }));
    }
    let mut ids = vec![];
    for i in 0..3 {
        let id = c1
            .start_task(
                "slow_compute",
                json!({ "seconds": 0.2, "label": format!("n{i}") }),
            )
            .await;
        c1.wait_status(&id, "completed").await;
        ids.push(id);
    }
    // The last task's `completed` notification has reached one of the streams: every earlier
    // one was sent before it, by the same node.
    let last = ids.last().unwrap().clone();
    for _ in 0..600 {
        let done = seen.lock().unwrap().iter().any(|(_, m, _)| {
            m["method"] == "notifications/tasks/status"
                && m["params"]["taskId"] == json!(last)
                && m["params"]["status"] == "completed"
        });
        if done {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    for r in &readers {
        r.abort();
    }
    let seen = seen.lock().unwrap();
    for id in &ids {
        for status in ["working", "completed"] {
            let on: Vec<usize> = seen
                .iter()
                .filter(|(_, m, _)| {
                    m["method"] == "notifications/tasks/status"
                        && m["params"]["taskId"] == json!(id)
                        && m["params"]["status"] == status
                })
                .map(|(n, _, _)| *n)
                .collect();
            assert!(
                on.len() <= 1,
                "task {id} `{status}` went out on streams {on:?}"
            );
        }
        let completed = seen.iter().any(|(_, m, _)| {
            m["params"]["taskId"] == json!(id) && m["params"]["status"] == "completed"
        });
        assert!(completed, "task {id}: no `completed` notification");
    }
    assert!(
        seen.iter().all(|(_, _, e)| e.starts_with("1.")),
        "the streams are held by node 1, the session's home"
    );
}
