//! The delivery delays of `GET /status` (`streamDelivery`): every message a task hands out to
//! a live stream is counted once, by kind, when it is written to the client.

use serde_json::{json, Value};
use taskmesh_testkit::{status_of, Client, Server};

use crate::TASKMESH;

/// A task with a progress token whose request goes out on the GET stream and whose result is
/// held on `tasks/result`: the status notifications, the request and the progress report, and
/// the result are each counted once, under their kind.
#[tokio::test]
async fn each_message_written_to_a_live_stream_is_counted_once_by_kind() {
    let s = Server::start(TASKMESH, "");
    let c = Client::new_session(&s.url).await;
    let mut get = c.open_get().await;
    let created = c
        .ok(
            "tools/call",
            json!({"name": "confirm_delete", "arguments": {"filename": "a"}, "task": {},
                   "_meta": {"progressToken": "p1"}}),
        )
        .await;
    let id = created["task"]["taskId"].as_str().unwrap().to_string();
    let mut statuses = 0;
    let request = loop {
        let m = get.next().await.expect("GET stream open");
        if m["method"] == "notifications/tasks/status" {
            statuses += 1;
        } else if m["method"] == "elicitation/create" {
            break m;
        }
    };
    let (rid, mut held) = c.open_stream("tasks/result", json!({"taskId": id})).await;
    c.answer(
        &request["id"],
        json!({"action": "accept", "content": {"confirm": true}}),
    )
    .await;
    let mut progress = 0;
    loop {
        let m = held.next().await.expect("the result follows");
        if m["id"] == json!(rid) {
            break;
        }
        assert_eq!(m["method"], "notifications/progress", "{m}");
        progress += 1;
    }
    assert_eq!(progress, 1, "confirm_delete reports once it has its answer");
    loop {
        let m = get.next().await.expect("GET stream open");
        if m["method"] == "notifications/tasks/status" {
            statuses += 1;
            if m["params"]["status"] == "completed" {
                break;
            }
        }
    }

    let delivery = &status_of(&s, "").await["streamDelivery"];
    let count = |kind: &str| delivery[kind]["count"].as_u64().unwrap();
    assert_eq!(count("status"), statuses, "{delivery}");
    assert_eq!(
        count("message"),
        2,
        "the request and the progress report: {delivery}"
    );
    assert_eq!(count("result"), 1, "{delivery}");
    for kind in ["status", "message", "result"] {
        let h = &delivery[kind];
        let buckets = h["buckets"].as_array().unwrap();
        let last: &Value = buckets.last().unwrap();
        assert_eq!(last["count"], h["count"], "every delay is in a bucket: {h}");
        assert!(
            h["maxUs"].as_u64().unwrap() * h["count"].as_u64().unwrap()
                >= h["sumUs"].as_u64().unwrap(),
            "{h}"
        );
    }
}
