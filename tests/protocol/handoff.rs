//! The hand-off of plain calls to clients that do not speak tasks (`tasks.handoff_after_ms`):
//! a plain call still running at the hand-off answers with its task, which runs on and is
//! followed to its real result through the offered tools, scoped to the caller's principal; on
//! 2025-11-25 without the `tasks` capability, on 2025-06-18, and on 2026-07-28 without the
//! extension.

use serde_json::{json, Value};
use taskmesh_testkit::modern::Modern;
use taskmesh_testkit::{Client, Server};

use crate::{AUTH, TASKMESH};

/// Hand-off after 300 ms, the result tool waiting at most 20 s; alice may read the metrics.
fn config() -> String {
    format!(
        "[auth]\nstatus_principals = [\"alice\"]\n{AUTH}\n[tasks]\nhandoff_after_ms = 300\nhandoff_wait_max_ms = 20000\n"
    )
}

fn names(list: &Value) -> Vec<String> {
    list["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect()
}

fn text(result: &Value) -> String {
    result["content"][0]["text"].as_str().unwrap().to_string()
}

/// A session of `token`'s principal at `version` that does not declare `tasks`.
async fn plain(s: &Server, token: &str, version: &str) -> Client {
    Client::connect(&s.url, Some(token), version, json!({"elicitation": {}})).await
}

#[tokio::test]
async fn a_plain_call_that_outlasts_the_hand_off_is_followed_to_its_real_result() {
    let s = Server::start(TASKMESH, &config());
    let alice = plain(&s, "alice-token-1", "2025-11-25").await;
    let bob = plain(&s, "bob-token-22", "2025-11-25").await;

    // The offered tools are listed to a client that does not speak tasks, not to one that does.
    let listed = names(&alice.ok("tools/list", json!({})).await);
    for t in ["task_status", "task_result", "task_cancel", "slow_compute"] {
        assert!(listed.contains(&t.to_string()), "{t} in {listed:?}");
    }
    let speaker = Client::connect(
        &s.url,
        Some("alice-token-1"),
        "2025-11-25",
        json!({"tasks": {"list": {}, "cancel": {}}}),
    )
    .await;
    let listed = names(&speaker.ok("tools/list", json!({})).await);
    assert!(!listed.contains(&"task_result".to_string()), "{listed:?}");
    // ... and a task speaker's plain call of an offered tool's name is an unknown tool.
    assert_eq!(
        speaker
            .err_code(
                "tools/call",
                json!({"name": "task_status", "arguments": {"taskId": "x"}})
            )
            .await,
        -32602
    );

    // A call that ends before the hand-off answers with its result, as a plain call does.
    let quick = alice
        .ok(
            "tools/call",
            json!({"name": "slow_compute", "arguments": {"seconds": 0, "label": "quick"}}),
        )
        .await;
    assert!(text(&quick).contains("quick"), "{quick}");
    assert!(quick.get("structuredContent").is_none(), "{quick}");

    // A longer one is handed off: its task id and status, and how to follow it.
    let handed = alice
        .ok(
            "tools/call",
            json!({"name": "slow_compute", "arguments": {"seconds": 3, "label": "long"}}),
        )
        .await;
    assert_eq!(handed["isError"], false, "{handed}");
    let task = handed["structuredContent"].clone();
    let id = task["taskId"].as_str().unwrap().to_string();
    assert_eq!(task["status"], "working", "{handed}");
    assert_eq!(task["followWith"]["tool"], "task_result");
    assert_eq!(task["followWith"]["arguments"]["taskId"], id.as_str());
    let said = text(&handed);
    assert!(said.contains(&id) && said.contains("task_result"), "{said}");

    // Its status, and the same task to a tasks client of the same principal.
    let status = alice
        .ok(
            "tools/call",
            json!({"name": "task_status", "arguments": {"taskId": id}}),
        )
        .await;
    assert_eq!(status["structuredContent"]["taskId"], id.as_str());
    assert_eq!(status["structuredContent"]["status"], "working");
    assert_eq!(speaker.status(&id).await, "working");

    // Another principal's calls of the offered tools get nothing, and change nothing.
    for tool in ["task_status", "task_result", "task_cancel"] {
        let r = bob
            .call(
                "tools/call",
                json!({"name": tool, "arguments": {"taskId": id, "waitSeconds": 0}}),
            )
            .await;
        assert_eq!(r["error"]["code"], -32602, "{tool}: {r}");
    }

    // A wait shorter than the task says it still works; a long enough one brings the result
    // the call would have answered with.
    let still = alice
        .ok(
            "tools/call",
            json!({"name": "task_result", "arguments": {"taskId": id, "waitSeconds": 0}}),
        )
        .await;
    assert_eq!(still["structuredContent"]["status"], "working", "{still}");
    assert!(text(&still).contains("still"), "{still}");
    let result = alice
        .ok(
            "tools/call",
            json!({"name": "task_result", "arguments": {"taskId": id}}),
        )
        .await;
    assert!(text(&result).contains("long"), "{result}");
    assert_ne!(result["isError"], true, "{result}");
    assert_eq!(speaker.status(&id).await, "completed");
    // Two plain calls ran as tasks; one was handed off.
    let metrics = taskmesh_testkit::metrics::metrics_of(&s.url, Some("alice-token-1")).await;
    let value = |series: &str| taskmesh_testkit::metrics::sample(&metrics, series);
    assert_eq!(
        value("taskmesh_plain_calls_as_tasks_total"),
        Some(2.0),
        "{metrics}"
    );
    assert_eq!(value("taskmesh_handoffs_total"), Some(1.0), "{metrics}");

    // Bad arguments are refused.
    let r = alice
        .call(
            "tools/call",
            json!({"name": "task_result", "arguments": {"taskId": id, "waitSeconds": -1}}),
        )
        .await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
    let r = alice
        .call(
            "tools/call",
            json!({"name": "task_status", "arguments": {}}),
        )
        .await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
}

#[tokio::test]
async fn a_handed_off_task_is_cancelled_by_its_owner_only() {
    let s = Server::start(TASKMESH, &config());
    let alice = plain(&s, "alice-token-1", "2025-11-25").await;
    let bob = plain(&s, "bob-token-22", "2025-11-25").await;
    let handed = alice
        .ok(
            "tools/call",
            json!({"name": "slow_compute", "arguments": {"seconds": 60}}),
        )
        .await;
    let id = handed["structuredContent"]["taskId"]
        .as_str()
        .unwrap()
        .to_string();
    let r = bob
        .call(
            "tools/call",
            json!({"name": "task_cancel", "arguments": {"taskId": id}}),
        )
        .await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
    let cancelled = alice
        .ok(
            "tools/call",
            json!({"name": "task_cancel", "arguments": {"taskId": id}}),
        )
        .await;
    assert_eq!(cancelled["structuredContent"]["status"], "cancelled");
    let status = alice
        .ok(
            "tools/call",
            json!({"name": "task_status", "arguments": {"taskId": id}}),
        )
        .await;
    assert_eq!(status["structuredContent"]["status"], "cancelled");
}

/// On 2025-06-18 (no tasks at all) a tool that asks the client is handed off too, and its
/// question reaches the client on the stream of the call that follows the task.
#[tokio::test]
async fn an_older_client_answers_a_handed_off_task_s_question_on_the_result_tool_s_stream() {
    let s = Server::start(TASKMESH, &config());
    let c = plain(&s, "alice-token-1", "2025-06-18").await;
    let listed = c.ok("tools/list", json!({})).await;
    assert!(
        listed["tools"][0].get("execution").is_none(),
        "no taskSupport on 2025-06-18: {listed}"
    );
    assert!(names(&listed).contains(&"task_result".to_string()));

    // The call asks at once: the question comes on the call's own stream; left unanswered, the
    // call is handed off.
    let (handed, before) = c
        .call_full(
            "tools/call",
            json!({"name": "confirm_delete", "arguments": {"filename": "f.txt"}}),
        )
        .await;
    assert!(
        before.iter().any(|m| m["method"] == "elicitation/create"),
        "{before:?}"
    );
    let id = handed["result"]["structuredContent"]["taskId"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        handed["result"]["structuredContent"]["status"],
        "input_required"
    );

    // The result tool's stream carries the question again; the answer goes to the task.
    let (rid, mut stream) = c
        .open_stream(
            "tools/call",
            json!({"name": "task_result", "arguments": {"taskId": id}}),
        )
        .await;
    let mut answered = false;
    let response = loop {
        let m = stream
            .next()
            .await
            .expect("the stream ends with the response");
        if m["method"] == "elicitation/create" && !answered {
            c.answer(
                &m["id"],
                json!({"action": "accept", "content": {"confirm": true}}),
            )
            .await;
            answered = true;
        } else if m["id"] == json!(rid) {
            break m;
        }
    };
    assert!(answered);
    assert!(text(&response["result"]).contains("f.txt"), "{response}");
}

#[tokio::test]
async fn a_request_without_the_extension_is_handed_off_on_2026_07_28() {
    let s = Server::start(TASKMESH, &config());
    let alice = Modern::new(&s.url, Some("alice-token-1"), false);
    let bob = Modern::new(&s.url, Some("bob-token-22"), false);
    let listed = names(&alice.ok("tools/list", json!({})).await);
    assert!(listed.contains(&"task_result".to_string()), "{listed:?}");
    let with_ext = Modern::new(&s.url, Some("alice-token-1"), true);
    let listed = names(&with_ext.ok("tools/list", json!({})).await);
    assert!(!listed.contains(&"task_result".to_string()), "{listed:?}");

    let handed = alice
        .ok(
            "tools/call",
            json!({"name": "slow_compute", "arguments": {"seconds": 2, "label": "modern"}}),
        )
        .await;
    assert_eq!(handed["resultType"], "complete", "{handed}");
    let id = handed["structuredContent"]["taskId"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(handed["structuredContent"]["status"], "working");
    assert_eq!(
        bob.send(
            "tools/call",
            json!({"name": "task_status", "arguments": {"taskId": id}})
        )
        .await
        .code(),
        -32602
    );
    let result = alice
        .ok(
            "tools/call",
            json!({"name": "task_result", "arguments": {"taskId": id}}),
        )
        .await;
    assert_eq!(result["resultType"], "complete", "{result}");
    assert!(text(&result).contains("modern"), "{result}");
    // The task was a real one: the extension's client reads it completed.
    let got = with_ext.ok("tasks/get", json!({"taskId": id})).await;
    assert_eq!(got["status"], "completed", "{got}");

    // A tool that only runs as a task is still refused without the extension.
    let refused = alice
        .send(
            "tools/call",
            json!({"name": "failing_job", "arguments": {}}),
        )
        .await;
    assert_eq!(refused.code(), -32021);
}

#[tokio::test]
async fn with_the_hand_off_off_plain_calls_run_as_before_and_no_tools_are_offered() {
    let s = Server::start(
        TASKMESH,
        &format!("{AUTH}\n[tasks]\nhandoff_after_ms = 0\n"),
    );
    let c = plain(&s, "alice-token-1", "2025-11-25").await;
    let listed = names(&c.ok("tools/list", json!({})).await);
    assert!(!listed.contains(&"task_status".to_string()), "{listed:?}");
    let r = c
        .ok(
            "tools/call",
            json!({"name": "slow_compute", "arguments": {"seconds": 1, "label": "plain"}}),
        )
        .await;
    assert!(text(&r).contains("plain"), "{r}");
    assert!(r.get("structuredContent").is_none(), "{r}");
    assert_eq!(
        c.err_code(
            "tools/call",
            json!({"name": "task_status", "arguments": {"taskId": "x"}})
        )
        .await,
        -32602
    );
}
