//! The Python SDK 1.30 client as the receiver of task-augmented requests
//! (`tests/interop/python_client_tasks.py`, its experimental task handlers over the SDK's
//! `InMemoryTaskStore`): `confirm_delete` and `ask_model` ask it task-augmented, it answers
//! with tasks of its own, and the server follows them to the answer that resumes the tool.

use serde_json::json;
use taskmesh_testkit::Server;

use super::{interop_script, run_file, sdk_python, TASKMESH};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_client_runs_elicitation_and_sampling_as_its_tasks() {
    let python = sdk_python().await;
    let server = Server::start(
        TASKMESH,
        "[auth.tokens]\n\"py-receiver-token\" = \"alice\"\n\n[tasks]\nclient_poll_min_ms = 100\n",
    );
    let script = interop_script("python_client_tasks.py");
    let run = tokio::task::block_in_place(|| {
        run_file(&python, &script, &server, &["py-receiver-token"], "")
    });
    run.eq(
        &run.step("initialize")["protocolVersion"],
        json!("2025-11-25"),
        "protocol version",
    );
    for (step, kind, text) in [
        ("elicitation", "elicitation", "Deleted py-report.txt"),
        ("sampling", "sampling", "The model said: forty-two"),
    ] {
        let s = run.step(step);
        run.eq(
            &s["handled"][0]["kind"],
            json!(kind),
            &format!("{step}: asked once, task-augmented"),
        );
        run.ensure(
            s["handled"].as_array().is_some_and(|h| h.len() == 1),
            format!("{step}: one request: {s}"),
        );
        run.eq(
            &s["handled"][0]["ttl"],
            json!(86_400_000),
            &format!("{step}: the TTL the server chose"),
        );
        run.eq(
            &s["clientTasks"][0]["status"],
            json!("completed"),
            &format!("{step}: the client's task"),
        );
        run.eq(
            &s["resultText"],
            json!([text]),
            &format!("{step}: the tool's result"),
        );
        run.eq(&s["isError"], json!(false), &format!("{step}: isError"));
    }
}
