//! The reference MCP server, `@modelcontextprotocol/server-everything` (TypeScript SDK, from
//! npm), over stdio as a `taskmesh serve` process's `[[upstream]]`: its tools served with their
//! titles and annotations; a call as a task; its progress, elicitation and sampling relayed
//! through `tasks/result`; a tool it runs only as its own task, followed (with its
//! elicitation); and its process started with the configured environment only.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use taskmesh_testkit::npm::npm_package;
use taskmesh_testkit::{Client, Server};

use super::served::{answer_once, config_with, related, text, tool_names};

const TASKMESH: &str = env!("CARGO_BIN_EXE_taskmesh");
const PACKAGE: &str = "@modelcontextprotocol/server-everything@2026.8.31";

/// The server's entry point, installed under the test target's temporary directory.
fn everything() -> PathBuf {
    npm_package(
        Path::new(env!("CARGO_TARGET_TMPDIR")),
        "server-everything-2026.8.31",
        PACKAGE,
    )
    .join("node_modules/@modelcontextprotocol/server-everything/dist/index.js")
}

/// `node`, found on the test's PATH (the upstream's own environment has none).
fn node() -> PathBuf {
    std::env::var_os("PATH")
        .and_then(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join("node"))
                .find(|n| n.is_file())
        })
        .expect("node on PATH")
}

#[tokio::test]
async fn the_reference_server_s_tools_run_as_durable_tasks() {
    let script = tokio::task::spawn_blocking(everything).await.unwrap();
    let endpoint = format!(
        "command = {:?}\nargs = [{:?}, \"stdio\"]\nenv = {{ TASKMESH_UPSTREAM_TEST = \"only-this\" }}",
        node().display().to_string(),
        script.display().to_string()
    );
    let s = Server::start(
        TASKMESH,
        &config_with(
            &endpoint,
            "tools = { include = [\"get-sum\", \"get-env\", \"trigger-long-running-operation\", \
             \"trigger-elicitation-request\", \"trigger-sampling-request\", \"simulate-research-query\"] }",
            "",
        ),
    );
    taskmesh_testkit::wait_upstreams_serving(&s, "").await;
    let c = Client::new_session(&s.url).await;

    assert_eq!(
        tool_names(&c).await,
        [
            "py_get-env",
            "py_get-sum",
            "py_simulate-research-query",
            "py_trigger-elicitation-request",
            "py_trigger-long-running-operation",
            "py_trigger-sampling-request"
        ]
    );
    let listed = c.ok("tools/list", json!({})).await;
    let tools = listed["tools"].as_array().unwrap();
    let long = tools
        .iter()
        .find(|t| t["name"] == "py_trigger-long-running-operation")
        .unwrap();
    assert_eq!(
        long["title"], "Trigger Long Running Operation Tool",
        "{long}"
    );
    assert_eq!(long["annotations"]["readOnlyHint"], true, "{long}");
    assert_eq!(long["execution"]["taskSupport"], "optional", "{long}");
    assert!(
        long["inputSchema"]["properties"]["steps"].is_object(),
        "{long}"
    );

    let id = c.start_task("py_get-sum", json!({"a": 2, "b": 3})).await;
    c.wait_status(&id, "completed").await;
    let r = c.ok("tasks/result", json!({"taskId": id})).await;
    assert!(text(&r).contains('5'), "{r}");

    // Progress of the upstream call, on the task's progress token, then the result.
    let r = c
        .ok(
            "tools/call",
            json!({"name": "py_trigger-long-running-operation",
                   "arguments": {"duration": 0.3, "steps": 3}, "task": {},
                   "_meta": {"progressToken": "long"}}),
        )
        .await;
    let id = r["task"]["taskId"].as_str().unwrap().to_string();
    let (rid, mut stream) = c.open_stream("tasks/result", json!({"taskId": id})).await;
    let mut progress = Vec::new();
    let result = loop {
        let m = stream.next().await.expect("progress, then the result");
        if m["id"] == json!(rid) {
            break m;
        }
        assert_eq!(m["method"], "notifications/progress", "{m}");
        assert_eq!(m["params"]["progressToken"], "long", "{m}");
        assert_eq!(related(&m), &json!(id), "{m}");
        progress.push(m["params"]["progress"].as_f64().unwrap());
    };
    assert_eq!(progress, [1.0, 2.0, 3.0]);
    assert!(text(&result["result"]).contains("Steps: 3"), "{result}");

    let (request, result) = answer_once(
        &c,
        "py_trigger-elicitation-request",
        json!({}),
        json!({"action": "accept", "content": {"name": "Ada Lovelace", "check": true}}),
    )
    .await;
    assert_eq!(request["method"], "elicitation/create", "{request}");
    assert!(
        request["params"]["requestedSchema"]["properties"]["name"].is_object(),
        "{request}"
    );
    let all: Vec<&str> = result["result"]["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["text"].as_str())
        .collect();
    assert!(
        all.iter().any(|t| t.contains("Name: Ada Lovelace")),
        "{result}"
    );

    let (request, result) = answer_once(
        &c,
        "py_trigger-sampling-request",
        json!({"prompt": "a haiku", "maxTokens": 20}),
        json!({"role": "assistant", "content": {"type": "text", "text": "sampled by the client"},
               "model": "test-model"}),
    )
    .await;
    assert_eq!(request["method"], "sampling/createMessage", "{request}");
    assert!(
        text(&result["result"]).contains("sampled by the client"),
        "{result}"
    );

    // A tool the server runs only as a task (taskSupport required there): taskmesh calls it
    // task-augmented and follows the server's task; its clarifying elicitation, asked while
    // that task is input_required, reaches the client through the taskmesh task.
    let (request, result) = answer_once(
        &c,
        "py_simulate-research-query",
        json!({"topic": "python", "ambiguous": true}),
        json!({"action": "accept", "content": {"interpretation": "snake"}}),
    )
    .await;
    assert_eq!(request["method"], "elicitation/create", "{request}");
    assert!(
        request["params"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("python"),
        "{request}"
    );
    assert!(
        text(&result["result"]).contains("**Clarification**: snake"),
        "{result}"
    );
    // A plain call of it is answered through the server's task too.
    let r = c
        .ok(
            "tools/call",
            json!({"name": "py_simulate-research-query", "arguments": {"topic": "tides"}}),
        )
        .await;
    assert!(text(&r).contains("# Research Report: tides"), "{r}");

    // The process has exactly the configured environment, nothing of the node's.
    let r = c
        .ok("tools/call", json!({"name": "py_get-env", "arguments": {}}))
        .await;
    let env: Value = serde_json::from_str(text(&r)).unwrap();
    assert_eq!(env, json!({"TASKMESH_UPSTREAM_TEST": "only-this"}), "{r}");
}
