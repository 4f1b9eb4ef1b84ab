//! Protocol 2026-07-28 across the cluster: stateless requests reach any node. A task created
//! through one node is read through the others, its `inputRequests` come from its shard's
//! leader whichever node is asked, and the answer (`tasks/update`) through yet another node
//! reaches the task. A `subscriptions/listen` stream on any node is told each change of the
//! tasks it watches, wherever their shards' leaders run.

use serde_json::json;

use super::start_cluster;

#[tokio::test]
async fn stateless_requests_and_task_input_work_through_any_node() {
    let nodes = start_cluster();
    let through = crate::ready_modern_clients(&nodes).await;

    // Tasks on every shard's leader, each read through every node.
    let mut ids = Vec::new();
    for i in 0..6 {
        ids.push(
            through[i % 3]
                .start("slow_compute", json!({"seconds": 0.1}))
                .await,
        );
    }
    for id in &ids {
        for m in &through {
            let t = m.until_terminal(id).await;
            assert_eq!(t["status"], "completed", "{t}");
            assert!(t["result"]["content"].is_array(), "{t}");
        }
    }

    // Input: asked through node 1, seen through nodes 2 and 3, answered through node 3.
    for _ in 0..3 {
        let id = through[0]
            .start("confirm_delete", json!({"filename": "x"}))
            .await;
        let mut key = None;
        for _ in 0..600 {
            let t = through[1].ok("tasks/get", json!({"taskId": id})).await;
            if let Some(k) = t["inputRequests"].as_object().and_then(|m| m.keys().next()) {
                key = Some(k.clone());
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        let key = key.expect("the task asked");
        let seen = through[2].ok("tasks/get", json!({"taskId": id})).await;
        assert!(seen["inputRequests"].get(&key).is_some(), "{seen}");
        through[2]
            .ok(
                "tasks/update",
                json!({"taskId": id, "inputResponses": {key: {"action": "accept", "content": {"confirm": true}}}}),
            )
            .await;
        let t = through[1].until_terminal(&id).await;
        assert_eq!(t["result"]["content"][0]["text"], "Deleted x", "{t}");
    }

    // Task notifications through each node, of tasks created through another one (on shards
    // led anywhere): every watched task is told until it completes, then the stream ends.
    for (n, m) in through.iter().enumerate() {
        let mut ids = Vec::new();
        for _ in 0..4 {
            ids.push(
                through[(n + 1) % 3]
                    .start("slow_compute", json!({"seconds": 1.0}))
                    .await,
            );
        }
        let mut l = m
            .listen(json!({"taskIds": ids}))
            .await
            .unwrap_or_else(|a| panic!("refused: {} {}", a.status, a.body));
        let ack = l.next().await.expect("the acknowledgement");
        assert_eq!(
            ack["params"]["notifications"]["taskIds"],
            json!(ids),
            "{ack}"
        );
        let mut completed = std::collections::HashSet::new();
        loop {
            let msg = l.next().await.expect("a message");
            if msg.get("id").is_some() {
                assert_eq!(msg["result"]["resultType"], "complete", "{msg}");
                break;
            }
            assert_eq!(msg["method"], "notifications/tasks", "{msg}");
            if msg["params"]["status"] == "completed" {
                assert!(msg["params"]["result"]["content"].is_array(), "{msg}");
                completed.insert(msg["params"]["taskId"].as_str().unwrap().to_string());
            }
        }
        assert_eq!(completed.len(), ids.len(), "through node {}", n + 1);
    }
}
