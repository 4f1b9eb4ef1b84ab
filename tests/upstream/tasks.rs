//! An upstream that runs calls as tasks itself (`tests/upstream/task_server.py`, the Python
//! SDK's task support, over stdio) behind a `taskmesh serve` process: taskmesh calls it
//! task-augmented and follows the upstream task (the taskmesh task says so in its status
//! message once the upstream task is recorded), relaying its progress; its elicitation reaches
//! the client through the taskmesh task as `input_required`, the answer goes back through the
//! upstream's `tasks/result`; a tool error fails the task with the result replayed; a plain
//! call of such a tool is answered through an upstream task too; `tasks/cancel` cancels the
//! upstream task; a stdio upstream that dies while its task is followed loses the task, which
//! then fails by the tool's resume policy (`fail`), saying so.

use std::time::Duration;

use serde_json::{json, Value};
use taskmesh_testkit::{Client, Server};

use super::python;
use super::served::{answer_once, config_with, related, text};

const TASKMESH: &str = env!("CARGO_BIN_EXE_taskmesh");
/// The status message of a taskmesh task whose call the upstream runs as a task.
pub(crate) const FOLLOWING: &str = "The upstream server runs the call as a task; following it.";

fn task_server_script() -> String {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/upstream/task_server.py")
        .display()
        .to_string()
}

/// The `[[upstream]]` lines of the task server over stdio, counting its starts in `starts`.
fn stdio_endpoint(python: &std::path::Path, starts: &std::path::Path) -> String {
    format!(
        "command = {:?}\nargs = [{:?}, \"stdio\", {:?}]\nenv = {{ PYTHONUNBUFFERED = \"1\" }}",
        python.display().to_string(),
        task_server_script(),
        starts.display().to_string()
    )
}

/// Poll until the task's status message is `want` (bounded: 30 s).
pub(crate) async fn wait_message(c: &Client, id: &str, want: &str) -> Value {
    for _ in 0..600 {
        let t = c.ok("tasks/get", json!({"taskId": id})).await;
        if t["statusMessage"] == want {
            return t;
        }
        assert!(
            t["status"] == "working" || t["status"] == "input_required",
            "{t}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("task {id} never said {want:?}");
}

#[tokio::test]
async fn an_upstream_that_runs_tasks_is_followed_through_its_own_tasks() {
    let python = tokio::task::spawn_blocking(python).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let starts = dir.path().join("starts");
    let endpoint = stdio_endpoint(&python, &starts);
    let s = Server::start(
        TASKMESH,
        &config_with(&endpoint, "task_poll_min_ms = 20", ""),
    );
    taskmesh_testkit::wait_upstreams_serving(&s, "").await;
    let c = Client::new_session(&s.url).await;

    // A task: followed upstream (said once the upstream task is recorded), its progress on the
    // client's token with the related task, then the result.
    let mut get = c.open_get().await;
    let created = c
        .ok(
            "tools/call",
            json!({"name": "py_research", "arguments": {"seconds": 1.5, "steps": 3}, "task": {},
                   "_meta": {"progressToken": "rs"}}),
        )
        .await;
    let id = created["task"]["taskId"].as_str().unwrap().to_string();
    let t = wait_message(&c, &id, FOLLOWING).await;
    assert_eq!(t["status"], "working", "{t}");
    let mut progress = vec![];
    loop {
        let m = get.next().await.expect("GET stream open");
        if m["method"] == "notifications/progress" {
            assert_eq!(m["params"]["progressToken"], "rs", "{m}");
            assert_eq!(related(&m), &json!(id), "{m}");
            progress.push(m["params"]["progress"].as_f64().unwrap());
        }
        if m["method"] == "notifications/tasks/status"
            && m["params"]["taskId"] == json!(id)
            && m["params"]["status"] == "completed"
        {
            break;
        }
    }
    assert_eq!(progress, [1.0, 2.0, 3.0]);
    let r = c.ok("tasks/result", json!({"taskId": id})).await;
    assert_eq!(text(&r), "researched for 1.5 s in 3 steps", "{r}");
    drop(get);

    // The upstream's elicitation, asked while its task is input_required, reaches the client
    // through the taskmesh task; the answer goes back and the result carries it.
    let (request, r) = answer_once(
        &c,
        "py_clarify",
        json!({"topic": "python"}),
        json!({"action": "accept", "content": {"meaning": "the language"}}),
    )
    .await;
    assert_eq!(request["method"], "elicitation/create", "{request}");
    assert_eq!(
        request["params"]["message"], "Which python do you mean?",
        "{request}"
    );
    assert_eq!(text(&r["result"]), "python as in the language", "{r}");

    // A tool error of the upstream task: the taskmesh task fails, its result replayed.
    let id = c.start_task("py_broken", json!({})).await;
    c.wait_status(&id, "failed").await;
    let r = c.ok("tasks/result", json!({"taskId": id})).await;
    assert_eq!(r["isError"], true, "{r}");
    assert_eq!(text(&r), "broken on purpose", "{r}");

    // A plain call of a tool the upstream runs as a task: answered with the task's result.
    let r = c
        .ok(
            "tools/call",
            json!({"name": "py_research", "arguments": {"seconds": 0.2}}),
        )
        .await;
    assert_eq!(text(&r), "researched for 0.2 s in 1 steps", "{r}");

    // tasks/cancel: the upstream task is cancelled too (the upstream counts its tasks by
    // status).
    let id = c.start_task("py_research", json!({"seconds": 60})).await;
    wait_message(&c, &id, FOLLOWING).await;
    let cancelled = c.ok("tasks/cancel", json!({"taskId": id})).await;
    assert_eq!(cancelled["status"], "cancelled");
    assert_eq!(c.status(&id).await, "cancelled");
    let mut counts = Value::Null;
    for _ in 0..100 {
        let r = c
            .ok(
                "tools/call",
                json!({"name": "py_statuses", "arguments": {}}),
            )
            .await;
        counts = serde_json::from_str(text(&r)).unwrap();
        if counts["cancelled"] == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        counts["cancelled"], 1,
        "the upstream task was not cancelled: {counts}"
    );
    let r = c
        .ok("tools/call", json!({"name": "py_starts", "arguments": {}}))
        .await;
    assert_eq!(text(&r), "3", "research started once per call: {r}");
}

#[tokio::test]
async fn a_task_lost_with_its_stdio_upstream_fails_by_the_resume_policy() {
    let python = tokio::task::spawn_blocking(python).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let starts = dir.path().join("starts");
    let endpoint = stdio_endpoint(&python, &starts);
    let s = Server::start(
        TASKMESH,
        &config_with(
            &endpoint,
            "task_poll_min_ms = 20\nretry_initial_ms = 50\nretry_max_ms = 200",
            "",
        ),
    );
    taskmesh_testkit::wait_upstreams_serving(&s, "").await;
    let c = Client::new_session(&s.url).await;
    let id = c.start_task("py_research", json!({"seconds": 60})).await;
    wait_message(&c, &id, FOLLOWING).await;
    let pids = std::fs::read_to_string(dir.path().join("starts.pids")).unwrap();
    let pid = pids.lines().last().unwrap().trim().to_string();
    let killed = std::process::Command::new("kill")
        .args(["-9", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    let t = c.wait_status(&id, "failed").await;
    let why = t["statusMessage"].as_str().unwrap_or_default();
    assert!(why.contains("upstream py") && why.contains("lost"), "{t}");
    // The upstream is served again, by a new process.
    let r = c
        .ok("tools/call", json!({"name": "py_starts", "arguments": {}}))
        .await;
    assert_eq!(text(&r), "1", "{r}");
}
