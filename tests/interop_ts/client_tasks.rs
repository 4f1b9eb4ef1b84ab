//! The TypeScript SDK 1.32.2 client as the receiver of task-augmented requests
//! (`tests/interop/ts_client_tasks.mjs`): `confirm_delete` and `ask_model` ask it
//! task-augmented, its handlers answer with tasks of its `InMemoryTaskStore`, and the server
//! follows them (`tasks/get`, then `tasks/result`, answered by the SDK from the store) to the
//! answer that resumes the tool.

use std::path::Path;
use std::process::Command;

use serde_json::{json, Value};
use taskmesh_testkit::{run_bounded, Server};

use super::{provision_with, SCRIPT_TIMEOUT, TASKMESH, TOKEN};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typescript_sdk_client_runs_elicitation_and_sampling_as_its_tasks() {
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/interop/ts_client_tasks.mjs");
    let dir = tokio::task::spawn_blocking(move || provision_with(&script))
        .await
        .unwrap();
    let server = Server::start(
        TASKMESH,
        &format!(
            "[auth.tokens]\n\"{TOKEN}\" = \"ts-interop\"\n\n[tasks]\nclient_poll_min_ms = 100\n"
        ),
    );
    let url = server.url.clone();
    let run = tokio::task::spawn_blocking(move || {
        run_bounded(
            Command::new("node")
                .arg(dir.join("ts_client_tasks.mjs"))
                .arg(&url)
                .arg(TOKEN),
            SCRIPT_TIMEOUT,
        )
    })
    .await
    .unwrap();
    let mut steps = std::collections::HashMap::new();
    for l in run.observations() {
        let name = l["step"].as_str().unwrap().to_string();
        assert!(
            l.get("error").is_none(),
            "step {name} failed: {}\n{}\n--- server log ---\n{}",
            l["error"],
            run.describe(),
            server.log_text()
        );
        steps.insert(name, l["data"].clone());
    }
    let step = |name: &str| -> &Value {
        steps
            .get(name)
            .unwrap_or_else(|| panic!("no step {name}:\n{}", run.describe()))
    };
    assert_eq!(step("initialize")["protocolVersion"], "2025-11-25");

    for (name, kind, text) in [
        ("elicitation", "elicitation", "Deleted ts-report.txt"),
        ("sampling", "sampling", "The model said: forty-two"),
    ] {
        let s = step(name);
        // Asked once, task-augmented with the server's TTL; the SDK made a task of it.
        let handled = s["handled"].as_array().unwrap();
        assert_eq!(handled.len(), 1, "{name}: {s}");
        assert_eq!(handled[0]["kind"], kind);
        assert_eq!(handled[0]["taskAugmented"], true, "{name}: {s}");
        assert_eq!(handled[0]["ttl"], json!(86_400_000), "{name}: {s}");
        assert!(handled[0]["clientTaskId"].is_string(), "{name}: {s}");
        // The server task waited on it, then took its result.
        assert_eq!(s["result"]["texts"], json!([text]), "{name}: {s}");
        assert_eq!(s["error"], Value::Null, "{name}: {s}");
        assert_eq!(s["clientTasks"][0]["status"], "completed", "{name}: {s}");
        assert!(
            s["statuses"]
                .as_array()
                .unwrap()
                .iter()
                .any(|x| x == "input_required"),
            "{name}: the server task waits while the client's task runs: {s}"
        );
    }
}
