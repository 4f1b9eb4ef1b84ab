//! The Python SDK's plain `call_tool`, a client without tasks, against a node that hands plain
//! calls off (`tests/interop/python_handoff_client.py`): the long call answers with its task,
//! which the same SDK follows through the offered tools to the real result; another
//! principal's calls of them get `-32602`.

use serde_json::json;
use taskmesh_testkit::Server;

use super::{interop_script, run_file, sdk_python, TASKMESH};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_plain_call_is_handed_off_and_followed_to_its_result() {
    let python = sdk_python().await;
    let server = Server::start(
        TASKMESH,
        "[auth.tokens]\n\"py-alice-token\" = \"alice\"\n\"py-bob-token\" = \"bob\"\n\n\
         [tasks]\nhandoff_after_ms = 300\n",
    );
    let script = interop_script("python_handoff_client.py");
    let run = tokio::task::block_in_place(|| {
        run_file(
            &python,
            &script,
            &server,
            &["py-alice-token", "py-bob-token"],
            "",
        )
    });

    let names = &run.step("listed")["names"];
    for t in ["task_status", "task_result", "task_cancel"] {
        run.ensure(
            names.as_array().is_some_and(|n| n.contains(&json!(t))),
            format!("{t} is offered to the SDK's client: {names}"),
        );
    }
    let handed = run.step("handed");
    run.eq(&handed["isError"], json!(false), "hand-off isError");
    run.eq(
        &handed["structured"]["status"],
        json!("working"),
        "hand-off status",
    );
    let id = run.str_at(&handed["structured"]["taskId"], "hand-off task id");
    let said = handed["texts"][0].as_str().unwrap_or_default();
    run.ensure(
        said.contains(id) && said.contains("task_result"),
        format!("the hand-off says how to follow the task: {said}"),
    );
    run.eq(
        &run.step("status")["structured"]["taskId"],
        json!(id),
        "task_status names the task",
    );
    run.eq(
        run.step("foreign"),
        json!({"task_status": -32602, "task_result": -32602, "task_cancel": -32602}),
        "another principal's calls of the offered tools",
    );
    let result = run.step("result");
    run.eq(&result["isError"], json!(false), "result isError");
    run.eq(
        &result["texts"],
        json!(["py-long: computed for 3 seconds"]),
        "the real result, through task_result",
    );
}
