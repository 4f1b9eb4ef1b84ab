//! The Python worker of examples/worker-python, run by `tests/interop/python_worker_serve.py`,
//! serves tools through a real `taskmesh serve`; the official Python SDK client
//! (`tests/interop/python_worker_client.py`, protocol 2025-11-25) calls them as tasks. Checked
//! end to end: the results, the progress of `ctx.progress` relayed to the client, the status
//! message of `ctx.set_status`, an elicitation answered by the client and received by
//! `ctx.elicit`, a cancellation that the worker's handler sees as `Cancelled` while the task
//! stays cancelled, a handler's exception and `ToolError` as a failed task, and the worker
//! registering again by itself once a server restart dropped its registration.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use taskmesh_testkit::{Client, Server};

use super::{interop_script, run_file, sdk_python, Run, TASKMESH};

const CLIENT_TOKEN: &str = "py-worker-client-token";
const WORKER_TOKEN: &str = "py-worker-token";
/// The longest the test waits for the worker to report what its handler saw.
const EVENT_WAIT: Duration = Duration::from_secs(30);

/// A client principal `py-client`; worker identity `py-workers` may serve `py_*`. Leases are
/// long enough that no task runs twice on a loaded machine.
fn config() -> String {
    format!(
        r#"[auth.tokens]
"{CLIENT_TOKEN}" = "py-client"

[workers]
lease_ms = 6000
poll_wait_max_ms = 2000
idle_timeout_ms = 60000
max_attempts = 2

[workers.tokens]
"{WORKER_TOKEN}" = "py-workers"

[workers.identities.py-workers]
tools = ["py_*"]
"#
    )
}

/// The worker script, killed when dropped. Its output goes to files in its own temporary
/// directory, beside the events it reports; both are shown when the test fails.
struct WorkerProcess {
    child: Child,
    dir: tempfile::TempDir,
}

impl WorkerProcess {
    fn start(python: &Path, server: &Server) -> WorkerProcess {
        let dir = tempfile::tempdir().unwrap();
        let stdout = std::fs::File::create(dir.path().join("stdout")).unwrap();
        let stderr = std::fs::File::create(dir.path().join("stderr")).unwrap();
        let child = Command::new(python)
            .arg("-B")
            .arg(interop_script("python_worker_serve.py"))
            .arg(&server.url)
            .arg(WORKER_TOKEN)
            .arg(dir.path().join("events.jsonl"))
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env("PYTHONUNBUFFERED", "1")
            .env_remove("PYTHONPATH")
            // The worker talks to 127.0.0.1 only: no proxy in between.
            .env_remove("http_proxy")
            .env_remove("HTTP_PROXY")
            .env_remove("all_proxy")
            .env_remove("ALL_PROXY")
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .spawn()
            .expect("start the Python worker");
        WorkerProcess { child, dir }
    }

    fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The events the worker reported so far, one JSON object a line.
    fn events(&self) -> Vec<Value> {
        std::fs::read_to_string(self.file("events.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("event {l:?}: {e}")))
            .collect()
    }

    /// The worker's event `name` of task `task_id`, waiting for it (bounded).
    async fn event(&self, name: &str, task_id: &str) -> Value {
        let until = Instant::now() + EVENT_WAIT;
        loop {
            let found = self
                .events()
                .into_iter()
                .find(|e| e["event"] == name && e["taskId"] == task_id);
            if let Some(e) = found {
                return e;
            }
            if Instant::now() >= until {
                panic!(
                    "the worker reported no `{name}` event for task {task_id}\n\n{}",
                    self.describe()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn describe(&self) -> String {
        let read = |name| std::fs::read_to_string(self.file(name)).unwrap_or_default();
        format!(
            "--- worker events ---\n{}\n--- worker stdout ---\n{}\n--- worker stderr ---\n{}",
            read("events.jsonl"),
            read("stdout"),
            read("stderr")
        )
    }
}

impl Drop for WorkerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("{}", self.describe());
        }
    }
}

/// The step's task id.
fn task_id(run: &Run, step: &Value) -> String {
    run.str_at(&step["taskId"], "task id").to_string()
}

/// The progress notifications `progress` (progress, total, message) of task `id`.
fn progress(id: &str, progress: &[(f64, f64, &str)]) -> Value {
    progress
        .iter()
        .map(|(p, t, m)| json!({"progress": p, "total": t, "message": m, "relatedTaskId": id}))
        .collect()
}

fn check_tools(run: &Run) {
    let tools = run.step("wait_tools");
    for (tool, support) in [
        ("py_sum", "optional"),
        ("py_interview", "optional"),
        ("py_wait_cancel", "required"),
        ("py_fail", "optional"),
        ("py_reject", "optional"),
    ] {
        run.eq(
            &tools[tool]["taskSupport"],
            json!(support),
            &format!("taskSupport of {tool}"),
        );
    }
    run.eq(&tools["py_sum"]["title"], json!("Sum numbers"), "title");
    run.eq(
        &tools["py_sum"]["description"],
        json!("Add numbers up, reporting progress after each."),
        "description from the docstring",
    );
    run.eq(
        &tools["py_sum"]["inputSchema"],
        json!({
            "type": "object",
            "properties": {"numbers": {"type": "array", "items": {"type": "number"}}},
            "required": ["numbers"],
        }),
        "declared input schema",
    );
}

/// A result, progress relayed from `ctx.progress`, a plain call of the same tool.
fn check_results(run: &Run) {
    let sum = run.step("sum_task");
    let id = task_id(run, sum);
    run.eq(&sum["finalStatus"], json!("completed"), "sum task status");
    run.eq(
        &sum["resultText"],
        json!(["sum=10 attempt=1 principal=py-client"]),
        "sum task result",
    );
    run.eq(&sum["isError"], json!(false), "sum task isError");
    run.eq(&sum["resultRelatedTaskId"], json!(id), "sum result's task");
    run.eq(
        &sum["progress"],
        progress(
            &id,
            &[
                (1.0, 4.0, "added 1"),
                (2.0, 4.0, "added 2"),
                (3.0, 4.0, "added 3"),
                (4.0, 4.0, "added 4"),
            ],
        ),
        "progress relayed from ctx.progress",
    );
    run.eq(
        &run.step("sum_plain")["text"],
        json!(["sum=42 attempt=1 principal=py-client"]),
        "plain call of a worker tool",
    );
}

/// The elicitation: asked of the SDK client for the task, answered, received by the worker.
async fn check_interview(run: &Run, worker: &WorkerProcess) {
    let step = run.step("interview");
    let id = task_id(run, step);
    run.eq(
        &step["elicitations"],
        json!([{
            "message": "What is your name?",
            "requestedSchema": {
                "type": "object",
                "properties": {"name": {"type": "string"}},
                "required": ["name"],
            },
            "relatedTaskId": id,
        }]),
        "the worker's elicitation as the SDK client got it",
    );
    let elicited = worker.event("elicited", &id).await;
    run.eq(
        &elicited["answer"],
        json!({"action": "accept", "content": {"name": "Python SDK"}}),
        "the answer ctx.elicit returned",
    );
    run.eq(&step["finalStatus"], json!("completed"), "interview status");
    run.eq(
        &step["resultText"],
        json!(["Hello, Python SDK!"]),
        "interview result",
    );
    run.eq(
        &step["structuredContent"],
        json!({"name": "Python SDK"}),
        "interview structuredContent",
    );
    run.eq(
        &step["progress"],
        progress(&id, &[(1.0, 2.0, "got a name"), (2.0, 2.0, "greeting")]),
        "progress after the elicitation",
    );
}

/// The cancellation: the status message the worker set, then `Cancelled` in its handler, and
/// the task still cancelled after the handler ended.
async fn check_cancel(run: &Run, worker: &WorkerProcess, server: &Server) {
    let step = run.step("cancel");
    let id = task_id(run, step);
    run.eq(&step["runningStatus"], json!("working"), "before cancel");
    run.eq(
        &step["runningStatusMessage"],
        json!("waiting to be cancelled"),
        "statusMessage from ctx.set_status",
    );
    run.eq(&step["cancelStatus"], json!("cancelled"), "tasks/cancel");
    run.eq(&step["finalStatus"], json!("cancelled"), "after cancel");
    let seen = worker.event("cancelled", &id).await;
    run.eq(&seen["flag"], json!(true), "ctx.cancelled in the handler");
    let never = worker
        .events()
        .into_iter()
        .any(|e| e["event"] == "never_cancelled");
    run.ensure(!never, "the handler ran to its end");
    let caps = json!({"tasks": {"list": {}, "cancel": {}}});
    let c = Client::connect(&server.url, Some(CLIENT_TOKEN), "2025-11-25", caps).await;
    run.eq(
        &json!(c.status(&id).await),
        json!("cancelled"),
        "status once the handler ended",
    );
}

/// A handler's exception: an isError result; a `ToolError`: a JSON-RPC error.
fn check_failures(run: &Run) {
    let fail = run.step("fail");
    run.eq(&fail["finalStatus"], json!("failed"), "py_fail status");
    run.eq(&fail["isError"], json!(true), "py_fail isError");
    run.eq(
        &fail["resultText"],
        json!(["ValueError: bad input on purpose"]),
        "py_fail result",
    );
    let reject = run.step("reject");
    run.eq(&reject["finalStatus"], json!("failed"), "py_reject status");
    run.eq(
        &reject["resultError"],
        json!({"code": -32001, "message": "rejected on purpose", "data": {"why": "testing"}}),
        "py_reject error",
    );
}

/// The server restarts (on the same port): the worker's registration is gone, the worker
/// registers again by itself, and its tools are listed and served again.
async fn check_registers_again(run: &Run, server: &mut Server) {
    tokio::task::block_in_place(|| server.restart());
    let caps = json!({"tasks": {"list": {}, "cancel": {}}});
    let c = Client::connect(&server.url, Some(CLIENT_TOKEN), "2025-11-25", caps).await;
    let until = Instant::now() + EVENT_WAIT;
    loop {
        let list = c.ok("tools/list", json!({})).await;
        let names = list["tools"].as_array().cloned().unwrap_or_default();
        if names.iter().any(|t| t["name"] == "py_sum") {
            break;
        }
        run.ensure(
            Instant::now() < until,
            "the worker's tools were not listed again after a restart",
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let r = c
        .ok(
            "tools/call",
            json!({"name": "py_sum", "arguments": {"numbers": [1, 2]}}),
        )
        .await;
    run.eq(
        &r["content"],
        json!([{"type": "text", "text": "sum=3 attempt=1 principal=py-client"}]),
        "a plain call served after the worker registered again",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_worker_serves_sdk_client_tasks_with_progress_input_and_cancellation() {
    let python = sdk_python().await;
    // A fixed port, so that the worker finds the server again after its restart.
    let listen = format!("127.0.0.1:{}", taskmesh_testkit::free_ports(1)[0]);
    let mut server = Server::start_at(TASKMESH, &listen, &config());
    let worker = WorkerProcess::start(&python, &server);
    let client = interop_script("python_worker_client.py");
    let run =
        tokio::task::block_in_place(|| run_file(&python, &client, &server, &[CLIENT_TOKEN], ""));
    run.eq(
        &run.step("initialize")["protocolVersion"],
        json!("2025-11-25"),
        "protocol version",
    );
    check_tools(&run);
    check_results(&run);
    check_interview(&run, &worker).await;
    check_cancel(&run, &worker, &server).await;
    check_failures(&run);
    check_registers_again(&run, &mut server).await;
    drop(worker);
}
