//! Streams across nodes: a server request goes out on exactly one stream even when the
//! session's GET stream and the task's `tasks/result` stream are on two different gateways
//! (the task's leader is whichever node its shard has).

use serde_json::json;
use taskmesh_testkit::wait_cluster_ready;

use crate::{connect, start_cluster, TOKEN};

/// The session's GET stream is on node 2 and its `tasks/result` stream on node 3: each of the
/// task's requests reaches the client once, on the GET stream (which claimed it first), and
/// the `tasks/result` stream carries only the result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_request_goes_out_once_across_gateways() {
    let nodes = start_cluster();
    wait_cluster_ready(&[&nodes[0], &nodes[1], &nodes[2]], TOKEN, 8).await;
    let c1 = connect(&nodes[0]).await;
    let mut via_node2 = c1.clone();
    via_node2.url = nodes[1].url.clone();
    let mut via_node3 = c1.clone();
    via_node3.url = nodes[2].url.clone();
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
