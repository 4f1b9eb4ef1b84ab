//! Workers (docs/workers.md): tools served by processes that pull their tasks through the
//! worker API, hold them under leases and complete them. Registration and `tools/list`, a task
//! run and completed, a lease that runs out (offered again, or failed by policy, bounded
//! attempts), the stale worker's late completion refused, a plain call answered by a worker,
//! input requests through the worker to the client, and cancellation. The API's edges are in
//! `worker_api.rs`.

use std::time::Duration;

use serde_json::{json, Value};
use taskmesh_client::worker::{Declaration, Lease, Worker, WorkerError};
use taskmesh_testkit::{Client, Server};

use crate::{AUTH, TASKMESH};

/// Leases of 1 s, at most 2 attempts; worker identity `imaging` may serve `resize_*`,
/// `flaky`, `strict` and `slow_compute` (a built-in: refused), `other` only `other_tool`.
pub(crate) fn config() -> String {
    format!(
        r#"[auth]
status_principals = ["alice"]
{AUTH}
[tasks]
max_result_bytes = 2048
[workers]
lease_ms = 1000
poll_wait_max_ms = 2000
idle_timeout_ms = 60000
max_attempts = 2
[workers.tokens]
"worker-token-1" = "imaging"
"worker-token-2" = "other"
[workers.identities.imaging]
tools = ["resize_*", "flaky", "strict", "slow_compute"]
[workers.identities.other]
tools = ["other_tool"]
"#
    )
}

fn schema() -> Value {
    json!({"type": "object", "properties": {"width": {"type": "integer"}}, "required": ["width"]})
}

pub(crate) async fn register(
    s: &Server,
    token: &str,
    tools: Vec<Declaration>,
) -> Result<Worker, WorkerError> {
    Worker::register(&s.url, token, tools, 4, "test").await
}

pub(crate) async fn imaging(s: &Server, tools: Vec<Declaration>) -> Worker {
    register(s, "worker-token-1", tools).await.unwrap()
}

/// A session of alice that speaks tasks and answers elicitation.
pub(crate) async fn alice(s: &Server) -> Client {
    Client::connect(
        &s.url,
        Some("alice-token-1"),
        "2025-11-25",
        json!({"tasks": {"list": {}, "cancel": {}}, "elicitation": {}}),
    )
    .await
}

pub(crate) fn text_result(text: &str) -> Value {
    json!({"content": [{"type": "text", "text": text}], "isError": false})
}

/// The one lease a poll gets within 10 s.
pub(crate) async fn lease_one(w: &Worker) -> Lease {
    for _ in 0..5 {
        let mut got = w.poll(1, Duration::from_secs(2)).await.unwrap();
        if let Some(l) = got.pop() {
            assert!(got.is_empty());
            return l;
        }
    }
    panic!("no task was leased");
}

pub(crate) fn code(r: Result<impl std::fmt::Debug, WorkerError>) -> String {
    r.unwrap_err().code().unwrap_or("transport").to_string()
}

pub(crate) fn tool_names(list: &Value) -> Vec<String> {
    list["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn a_worker_tool_is_listed_leased_renewed_and_completed_exactly_once() {
    let s = Server::start(TASKMESH, &config());
    let c = alice(&s).await;
    assert!(!tool_names(&c.ok("tools/list", json!({})).await).contains(&"resize_image".into()));

    let w = imaging(&s, vec![Declaration::new("resize_image", schema())]).await;
    let list = c.ok("tools/list", json!({})).await;
    let entry = list["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "resize_image")
        .cloned()
        .expect("the worker's tool is listed");
    assert_eq!(entry["inputSchema"], schema());
    assert_eq!(entry["execution"]["taskSupport"], "optional");

    // A call missing a required argument is refused before any task exists.
    assert_eq!(
        c.err_code(
            "tools/call",
            json!({"name": "resize_image", "arguments": {}, "task": {}})
        )
        .await,
        -32602
    );
    let id = c.start_task("resize_image", json!({"width": 640})).await;
    let lease = lease_one(&w).await;
    assert_eq!(lease.task_id, id);
    assert_eq!(lease.tool, "resize_image");
    assert_eq!(lease.arguments, json!({"width": 640}));
    assert_eq!(lease.principal, "alice");
    assert_eq!(lease.attempt, 1);

    // A heartbeat renews the lease and sets the status message the client polls.
    let beat = w.heartbeat(&lease, None, Some("resizing")).await.unwrap();
    assert!(!beat.cancelled);
    assert!(beat.deadline_ms >= lease.deadline_ms);
    let t = c.ok("tasks/get", json!({"taskId": id})).await;
    assert_eq!(t["status"], "working");
    assert_eq!(t["statusMessage"], "resizing");

    let status = w.complete(&lease, Ok(text_result("640px"))).await.unwrap();
    assert_eq!(status, "completed");
    let result = c.ok("tasks/result", json!({"taskId": id})).await;
    assert_eq!(result["content"][0]["text"], "640px");
    // Exactly one completion: the same lease cannot complete it again.
    assert_eq!(
        code(w.complete(&lease, Ok(text_result("again"))).await),
        "FAILED_PRECONDITION"
    );
    let result = c.ok("tasks/result", json!({"taskId": id})).await;
    assert_eq!(result["content"][0]["text"], "640px");
    // A heartbeat of the completed task says it ended (not that it was cancelled).
    assert_eq!(
        code(w.heartbeat(&lease, None, None).await),
        "FAILED_PRECONDITION"
    );

    // The lease's grant and completion are counted, and the dispatch latency observed.
    let metrics = taskmesh_testkit::metrics::metrics_of(&s.url, Some("alice-token-1")).await;
    let value = |series: &str| taskmesh_testkit::metrics::sample(&metrics, series);
    for event in ["granted", "completed"] {
        let series =
            format!(r#"taskmesh_worker_leases_total{{tool="resize_image",event="{event}"}}"#);
        assert!(
            value(&series).is_some_and(|v| v >= 1.0),
            "{series}: {metrics}"
        );
    }
    let dispatched = r#"taskmesh_worker_dispatch_seconds_count{tool="resize_image"}"#;
    assert_eq!(value(dispatched), Some(1.0), "{metrics}");
    assert_eq!(value("taskmesh_workers_live"), Some(1.0), "{metrics}");

    // The tool goes with its last worker.
    w.deregister().await.unwrap();
    assert!(!tool_names(&c.ok("tools/list", json!({})).await).contains(&"resize_image".into()));
}

#[tokio::test]
async fn a_lease_that_runs_out_is_offered_again_and_the_stale_worker_cannot_complete() {
    let s = Server::start(TASKMESH, &config());
    let c = alice(&s).await;
    let w = imaging(
        &s,
        vec![Declaration::new("flaky", json!({"type": "object"}))],
    )
    .await;
    let id = c.start_task("flaky", json!({})).await;
    let first = lease_one(&w).await;
    // No heartbeat: the lease runs out and the task is leased again, attempt 2.
    let second = lease_one(&w).await;
    assert_eq!(second.task_id, id);
    assert_eq!(second.attempt, 2);
    assert_ne!(second.token, first.token);
    assert_eq!(
        code(w.complete(&first, Ok(text_result("late"))).await),
        "FAILED_PRECONDITION"
    );
    assert_eq!(
        code(w.heartbeat(&first, None, None).await),
        "FAILED_PRECONDITION"
    );
    assert_eq!(c.status(&id).await, "working");
    let metrics = taskmesh_testkit::metrics::metrics_of(&s.url, Some("alice-token-1")).await;
    for event in ["expired", "stale_refused"] {
        let series = format!(r#"taskmesh_worker_leases_total{{tool="flaky",event="{event}"}}"#);
        let seen = taskmesh_testkit::metrics::sample(&metrics, &series);
        assert!(seen.is_some_and(|v| v >= 1.0), "{series}: {metrics}");
    }
    w.complete(&second, Ok(text_result("second")))
        .await
        .unwrap();
    let result = c.ok("tasks/result", json!({"taskId": id})).await;
    assert_eq!(result["content"][0]["text"], "second");

    // Attempts are bounded (workers.max_attempts = 2): a task whose second lease runs out
    // fails, saying so.
    let id = c.start_task("flaky", json!({})).await;
    let _ = lease_one(&w).await;
    let last = lease_one(&w).await;
    assert_eq!(last.attempt, 2);
    let t = c.wait_status(&id, "failed").await;
    assert!(
        t["statusMessage"]
            .as_str()
            .unwrap()
            .contains("the last one allowed"),
        "{t}"
    );
    assert_eq!(
        code(w.complete(&last, Ok(text_result("too late"))).await),
        "FAILED_PRECONDITION"
    );
}

#[tokio::test]
async fn a_tool_that_fails_when_its_worker_is_lost_fails_with_a_message() {
    let s = Server::start(TASKMESH, &config());
    let c = alice(&s).await;
    let decl = Declaration::new("strict", json!({"type": "object"})).failing_when_lost();
    let w = imaging(&s, vec![decl]).await;
    let id = c.start_task("strict", json!({})).await;
    let lease = lease_one(&w).await;
    let t = c.wait_status(&id, "failed").await;
    let msg = t["statusMessage"].as_str().unwrap();
    assert!(msg.contains("was lost") && msg.contains("'fail'"), "{msg}");
    assert_eq!(
        code(w.complete(&lease, Ok(text_result("late"))).await),
        "FAILED_PRECONDITION"
    );
    // Nothing is offered again.
    assert!(w
        .poll(1, Duration::from_millis(1500))
        .await
        .unwrap()
        .is_empty());
}

#[tokio::test]
async fn a_plain_call_of_a_worker_tool_answers_when_its_worker_completes() {
    let s = Server::start(TASKMESH, &config());
    let c = alice(&s).await;
    let w = imaging(&s, vec![Declaration::new("resize_plain", schema())]).await;
    let serving = w.clone();
    let served = tokio::spawn(async move {
        serving
            .serve(|job| async move {
                job.progress(1.0, Some(2.0), Some("half"));
                let width = job.arguments["width"].as_i64().unwrap_or(0);
                Ok(text_result(&format!("{}px", width * 2)))
            })
            .await
    });
    let r = c
        .ok(
            "tools/call",
            json!({"name": "resize_plain", "arguments": {"width": 21}}),
        )
        .await;
    assert_eq!(r["content"][0]["text"], "42px");
    served.abort();
}

#[tokio::test]
async fn an_input_request_reaches_the_client_and_its_answer_reaches_the_worker() {
    let s = Server::start(TASKMESH, &config());
    let c = alice(&s).await;
    let w = imaging(
        &s,
        vec![Declaration::new("resize_ask", json!({"type": "object"}))],
    )
    .await;
    let id = c.start_task("resize_ask", json!({})).await;
    let lease = lease_one(&w).await;
    let asking = {
        let (w, lease) = (w.clone(), lease.clone());
        tokio::spawn(async move {
            let params = json!({"message": "Which size?", "requestedSchema": {"type": "object", "properties": {"width": {"type": "integer"}}}});
            w.request_input(&lease, "elicitation/create", params).await
        })
    };
    c.wait_status(&id, "input_required").await;
    let (rid, mut stream) = c.open_stream("tasks/result", json!({"taskId": id})).await;
    let mut asked = None;
    while let Some(m) = stream.next().await {
        if m["method"] == "elicitation/create" {
            assert_eq!(m["params"]["message"], "Which size?");
            asked = Some(m.clone());
            c.answer(
                &m["id"],
                json!({"action": "accept", "content": {"width": 99}}),
            )
            .await;
            break;
        }
    }
    assert!(asked.is_some(), "the worker's request reached the client");
    let answer = asking.await.unwrap().unwrap().unwrap();
    assert_eq!(answer["content"]["width"], 99);
    c.wait_status(&id, "working").await;
    w.complete(&lease, Ok(text_result("99px"))).await.unwrap();
    while let Some(m) = stream.next().await {
        if m["id"] == json!(rid) {
            assert_eq!(m["result"]["content"][0]["text"], "99px");
            return;
        }
    }
    panic!("tasks/result ended without the result");
}

#[tokio::test]
async fn a_cancelled_task_tells_its_worker_and_refuses_its_completion() {
    let s = Server::start(TASKMESH, &config());
    let c = alice(&s).await;
    let w = imaging(
        &s,
        vec![Declaration::new("resize_cancel", json!({"type": "object"}))],
    )
    .await;
    let id = c.start_task("resize_cancel", json!({})).await;
    let lease = lease_one(&w).await;
    c.ok("tasks/cancel", json!({"taskId": id})).await;
    let beat = w.heartbeat(&lease, None, None).await.unwrap();
    assert!(beat.cancelled);
    assert_eq!(
        code(w.complete(&lease, Ok(text_result("x"))).await),
        "FAILED_PRECONDITION"
    );
    assert_eq!(c.status(&id).await, "cancelled");
}
