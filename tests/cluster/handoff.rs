//! A plain call handed off on a three-node cluster (`tasks.handoff_after_ms`), the leader of
//! its task's shard killed (kill -9) while the task runs: the task is taken over and the
//! offered result tool, asked on a surviving node, brings its real result.

use std::time::Duration;

use serde_json::{json, Value};
use taskmesh_testkit::{Client, Server, V};

use crate::{leader_of, ready_cluster_with_tasks, shards, TOKEN};

/// A session of a client that does not speak tasks.
async fn plain(s: &Server) -> Client {
    Client::connect(&s.url, Some(TOKEN), V, json!({})).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handed_off_task_survives_its_leader_s_death() {
    let mut nodes = ready_cluster_with_tasks("handoff_after_ms = 300").await;

    let c = plain(&nodes[1]).await;
    let handed = c
        .ok(
            "tools/call",
            json!({"name": "slow_compute", "arguments": {"seconds": 4, "label": "survivor"}}),
        )
        .await;
    let id = handed["structuredContent"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("a hand-off: {handed}"))
        .to_string();
    let victim = leader_of(&nodes[1], taskmesh_task::shard_of(&id, shards())).await;
    nodes[usize::try_from(victim).unwrap() - 1].kill9();

    // Follow on a surviving node, in a new session (the old one may have been on the victim).
    let alive = nodes
        .iter()
        .find(|n| n.is_running())
        .expect("two nodes survive");
    let c = plain(alive).await;
    let mut seen: Vec<Value> = vec![];
    for _ in 0..60 {
        let r = c
            .call(
                "tools/call",
                json!({"name": "task_result", "arguments": {"taskId": id, "waitSeconds": 5}}),
            )
            .await;
        let done = r["result"]["content"][0]["text"] == "survivor: computed for 4 seconds";
        seen.push(r);
        if done {
            break;
        }
        // Still working, or no leader yet for a moment: ask again.
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let last = seen.last().unwrap();
    assert_eq!(
        last["result"]["content"][0]["text"], "survivor: computed for 4 seconds",
        "what the result tool said: {seen:#?}"
    );
    let status = c
        .ok(
            "tools/call",
            json!({"name": "task_status", "arguments": {"taskId": id}}),
        )
        .await;
    assert_eq!(status["structuredContent"]["status"], "completed");
}
