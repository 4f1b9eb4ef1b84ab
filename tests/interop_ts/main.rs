//! Interop with the official MCP TypeScript SDK (`@modelcontextprotocol/sdk` 1.32.2, the last
//! 1.x, with its experimental tasks client): a real `taskmesh serve` process is driven by
//! `tests/interop/ts_tasks_client.mjs` over Streamable HTTP, and every observation the script
//! prints is asserted here. The SDK's transport keeps the session's GET stream open, so the
//! steps with elicitation and sampling check that each server request reaches its handler
//! exactly once although two streams (GET and `tasks/result`) could carry it.
//!
//! The test installs the SDK with npm under `CARGO_TARGET_TMPDIR` and reuses it on later
//! runs. It needs `node` (18 or later) and `npm`, and access to the npm registry the first
//! time; when either is missing it fails, with the output.

// A test binary: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};
use taskmesh_testkit::npm::npm_package;
use taskmesh_testkit::{run_bounded, Server};

/// The server executable under test.
const TASKMESH: &str = env!("CARGO_BIN_EXE_taskmesh");

mod client_tasks;
mod workers;

const SDK_PACKAGE: &str = "@modelcontextprotocol/sdk@1.32.2";
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(180);
const TOKEN: &str = "ts-interop-token";

/// A directory with the SDK installed and the client script beside its `node_modules` (ES
/// modules resolve packages from the script's own directory).
fn provision() -> PathBuf {
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/interop/ts_tasks_client.mjs");
    provision_with(&script)
}

/// The SDK's directory with `script` copied beside its `node_modules`.
fn provision_with(script: &Path) -> PathBuf {
    let dir = npm_package(
        Path::new(env!("CARGO_TARGET_TMPDIR")),
        "ts-mcp-sdk-1.32.2",
        SDK_PACKAGE,
    );
    std::fs::copy(script, dir.join(script.file_name().unwrap())).unwrap();
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typescript_sdk_tasks_client_interop() {
    let dir = tokio::task::spawn_blocking(provision).await.unwrap();
    let server = Server::start(
        TASKMESH,
        &format!("[auth.tokens]\n\"{TOKEN}\" = \"ts-interop\"\n"),
    );
    let url = server.url.clone();
    let run = tokio::task::spawn_blocking(move || {
        run_bounded(
            Command::new("node")
                .arg(dir.join("ts_tasks_client.mjs"))
                .arg(&url)
                .arg(TOKEN),
            SCRIPT_TIMEOUT,
        )
    })
    .await
    .unwrap();
    let lines = run.observations();
    let mut steps: HashMap<String, Value> = HashMap::new();
    for l in &lines {
        let name = l["step"].as_str().unwrap().to_string();
        assert!(
            l.get("error").is_none(),
            "step {name} failed: {}\n{}",
            l["error"],
            run.describe()
        );
        steps.insert(name, l["data"].clone());
    }
    let step = |name: &str| {
        steps
            .get(name)
            .unwrap_or_else(|| panic!("no step {name}:\n{}", run.describe()))
    };

    let init = step("initialize");
    assert_eq!(init["protocolVersion"], "2025-11-25");
    assert_eq!(
        init["tasks"],
        json!({"list":{},"cancel":{},"requests":{"tools":{"call":{}}}})
    );
    let tools = &step("list_tools")["tools"];
    assert_eq!(tools["slow_compute"], "optional");
    assert_eq!(tools["confirm_delete"], "required");
    assert_eq!(tools["greet"], "forbidden");

    // A task stream: created, polled to completed, the result; progress on the way.
    let slow = step("slow_task_with_progress");
    assert_eq!(slow["kinds"][0], "taskCreated");
    assert_eq!(slow["kinds"].as_array().unwrap().last().unwrap(), "result");
    assert_eq!(
        slow["statuses"].as_array().unwrap().last().unwrap(),
        "completed"
    );
    assert_eq!(
        slow["result"]["texts"],
        json!(["ts: computed for 1.2 seconds"])
    );
    assert_eq!(slow["result"]["isError"], false);
    let progress = slow["progress"].as_array().unwrap();
    assert!(
        !progress.is_empty(),
        "no progress reached the handler: {slow}"
    );
    assert_eq!(progress.last().unwrap(), &json!(1.2));

    // Each request reaches its handler exactly once.
    let elicit = step("elicitation");
    assert_eq!(elicit["handlerCalls"], 1, "{elicit}");
    assert_eq!(elicit["result"]["texts"], json!(["Deleted ts.txt"]));
    // Whether a poll saw `input_required` depends on whether it ran before the handler's
    // answer arrived over the GET stream: either is right, nothing else is.
    assert_eq!(
        elicit["kinds"].as_array().unwrap().last().unwrap(),
        "result"
    );
    assert!(
        elicit["statuses"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| { ["working", "input_required", "completed"].contains(&s.as_str().unwrap()) }),
        "{elicit}"
    );
    let two = step("two_elicitations");
    assert_eq!(two["handlerCalls"], 2, "{two}");
    assert_eq!(two["result"]["texts"], json!(["Ada likes green"]));
    let sampling = step("sampling");
    assert_eq!(sampling["handlerCalls"], 1, "{sampling}");
    assert_eq!(
        sampling["result"]["texts"],
        json!(["The model said: model says hi"])
    );

    let cancel = step("cancel");
    assert_eq!(cancel["cancelStatus"], "cancelled");
    assert_eq!(cancel["getStatus"], "cancelled");

    // With authentication on, the list holds exactly the tasks this principal created.
    let mut listed: Vec<String> = step("list_tasks")["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    listed.sort();
    let mut created: Vec<String> = [
        "slow_task_with_progress",
        "elicitation",
        "two_elicitations",
        "sampling",
    ]
    .iter()
    .map(|s| step(s)["taskId"].as_str().unwrap().to_string())
    .chain([cancel["taskId"].as_str().unwrap().to_string()])
    .collect();
    created.sort();
    assert_eq!(listed, created);
}
