//! Interoperability with the Rust SDK of the new generation: the `rmcp` 3.11.0 client, over its
//! own Streamable HTTP client transport (reqwest), in its `server/discover` lifecycle at
//! protocol 2026-07-28, declaring the tasks extension (`io.modelcontextprotocol/tasks`), drives
//! a real `taskmesh serve` process: discovery, `tools/list`, the server-decided tasks of
//! `tools/call` (`CallToolResponse::Task`), `tasks/get` with the outcome inline, input through
//! `inputRequests` and `tasks/update`, `tasks/cancel`, the input rounds of a plain call
//! (`CallToolResponse::InputRequired`, retried with `inputResponses` and `requestState`), and a
//! `subscriptions/listen` stream told of a tool-list change.
//!
//! Every step goes through rmcp's typed client methods (`call_tool_once`, `get_task`,
//! `update_task`, `cancel_task`, `listen`), its request `_meta`, its routing headers and its
//! typed decoding of the answers. rmcp 3.11.0's subscription filter has no `taskIds`, so task
//! notifications are not asked for here (the protocol tests cover them).

// A test binary: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use rmcp3::model::{
    CallToolRequestParams, CancelTaskParams, ClientCapabilities, ClientConfig, GetTaskParams,
    Implementation, InputResponses, ProtocolVersion, ServerNotification, SubscriptionFilter,
    TaskPayload, TaskStatus, UpdateTaskParams,
};
use rmcp3::service::RunningService;
use rmcp3::transport::StreamableHttpClientTransport;
use rmcp3::{ClientHandler, ClientLifecycleMode, ClientServiceExt, RoleClient};
use serde_json::{json, Value};
use taskmesh_testkit::Server;

/// The server executable under test.
const TASKMESH: &str = env!("CARGO_BIN_EXE_taskmesh");

/// Upper bound for every single wait in this file.
const WAIT: Duration = Duration::from_secs(30);

/// A client that declares the tasks extension and elicitation.
struct TasksClient;

impl ClientHandler for TasksClient {
    fn get_info(&self) -> ClientConfig {
        let caps: ClientCapabilities = serde_json::from_value(json!({
            "elicitation": {},
            "extensions": {"io.modelcontextprotocol/tasks": {}},
        }))
        .unwrap();
        ClientConfig::new(caps, Implementation::new("taskmesh-rmcp-interop", "1.0.0"))
    }
}

async fn connect(url: &str) -> RunningService<RoleClient, TasksClient> {
    let transport = StreamableHttpClientTransport::from_uri(url);
    tokio::time::timeout(
        WAIT,
        TasksClient.serve_with_lifecycle(
            transport,
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        ),
    )
    .await
    .expect("discovery in time")
    .expect("discovery")
}

fn args(v: Value) -> rmcp3::model::JsonObject {
    v.as_object().cloned().unwrap()
}

/// Poll `tasks/get` until the task is terminal (bounded by [`WAIT`]).
async fn until_terminal(
    client: &RunningService<RoleClient, TasksClient>,
    id: &str,
) -> rmcp3::model::GetTaskResult {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let t = client.get_task(GetTaskParams::new(id)).await.unwrap();
        if matches!(
            t.task.status(),
            TaskStatus::Completed | TaskStatus::Failed | TaskStatus::Cancelled
        ) {
            return t;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "task {id} never ended"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The first text of a result object.
fn text(result: &rmcp3::model::JsonObject) -> String {
    result["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[tokio::test]
async fn rmcp_3_drives_tasks_through_the_extension() {
    let server = Server::start(TASKMESH, "[tools]\nconformance = true\n");
    let client = connect(&server.url).await;
    let info = client.peer_info().expect("peer info");
    assert_eq!(info.protocol_version, ProtocolVersion::V_2026_07_28);
    assert_eq!(info.server_info.as_ref().unwrap().name, "taskmesh");
    let ext = serde_json::to_value(&info.capabilities.extensions).unwrap();
    assert_eq!(ext["io.modelcontextprotocol/tasks"], json!({}), "{ext}");
    let tools = client.list_all_tools().await.unwrap();
    assert!(tools.iter().any(|t| t.name == "slow_compute"));

    // The server decides: a task, polled until its result comes inline.
    let r = client
        .call_tool_once(
            CallToolRequestParams::new("slow_compute")
                .with_arguments(args(json!({"seconds": 0.2}))),
        )
        .await
        .unwrap();
    let rmcp3::model::CallToolResponse::Task(created) = r else {
        panic!("not a task: {r:?}");
    };
    assert_eq!(created.task.status, TaskStatus::Working);
    let done = until_terminal(&client, &created.task.task_id).await;
    let TaskPayload::Completed { result } = &done.task.payload else {
        panic!("not completed: {done:?}");
    };
    assert!(text(result).contains("0.2"), "{result:?}");

    // A tool error is completed, with isError in the inline result.
    let r = client
        .call_tool_once(CallToolRequestParams::new("failing_job"))
        .await
        .unwrap();
    let rmcp3::model::CallToolResponse::Task(created) = r else {
        panic!("not a task: {r:?}");
    };
    let done = until_terminal(&client, &created.task.task_id).await;
    let TaskPayload::Completed { result } = &done.task.payload else {
        panic!("a tool error is completed on this wire: {done:?}");
    };
    assert_eq!(result["isError"], true);

    // Input: asked in inputRequests, answered with tasks/update.
    let r = client
        .call_tool_once(
            CallToolRequestParams::new("confirm_delete")
                .with_arguments(args(json!({"filename": "rmcp.txt"}))),
        )
        .await
        .unwrap();
    let rmcp3::model::CallToolResponse::Task(created) = r else {
        panic!("not a task: {r:?}");
    };
    let id = created.task.task_id.clone();
    let deadline = tokio::time::Instant::now() + WAIT;
    let key = loop {
        let t = client.get_task(GetTaskParams::new(&id)).await.unwrap();
        if let TaskPayload::InputRequired { input_requests } = &t.task.payload {
            let (key, request) = input_requests.iter().next().unwrap();
            let request = serde_json::to_value(request).unwrap();
            assert_eq!(request["method"], "elicitation/create", "{request}");
            assert_eq!(
                request["params"]["message"], "Delete rmcp.txt?",
                "{request}"
            );
            break key.clone();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the task never asked"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let mut answers = InputResponses::new();
    answers.insert(
        key,
        json!({"action": "accept", "content": {"confirm": true}}),
    );
    client
        .update_task(UpdateTaskParams::new(&id, answers))
        .await
        .unwrap();
    let done = until_terminal(&client, &id).await;
    let TaskPayload::Completed { result } = &done.task.payload else {
        panic!("not completed: {done:?}");
    };
    assert_eq!(text(result), "Deleted rmcp.txt");

    // Cancel: acknowledged, and the task ends cancelled.
    let r = client
        .call_tool_once(
            CallToolRequestParams::new("slow_compute").with_arguments(args(json!({"seconds": 30}))),
        )
        .await
        .unwrap();
    let rmcp3::model::CallToolResponse::Task(created) = r else {
        panic!("not a task: {r:?}");
    };
    client
        .cancel_task(CancelTaskParams::new(&created.task.task_id))
        .await
        .unwrap();
    let done = until_terminal(&client, &created.task.task_id).await;
    assert_eq!(done.task.status(), TaskStatus::Cancelled);

    // A plain call's input rounds: each round asks one question, answered in the next call
    // with the state echoed; the last one completes.
    const TOOL: &str = "test_input_required_result_multi_round";
    let mut call = CallToolRequestParams::new(TOOL);
    for (key, answer) in [
        ("step1", json!({"name": "Rust"})),
        ("step2", json!({"color": "orange"})),
    ] {
        let r = client.call_tool_once(call).await.unwrap();
        let rmcp3::model::CallToolResponse::InputRequired(round) = r else {
            panic!("not input required: {r:?}");
        };
        let asked: Vec<&String> = round.input_requests.as_ref().unwrap().keys().collect();
        assert_eq!(asked, [key]);
        let mut answers = InputResponses::new();
        answers.insert(key.into(), json!({"action": "accept", "content": answer}));
        call = CallToolRequestParams::new(TOOL)
            .with_input_responses(answers)
            .with_request_state(round.request_state.clone().unwrap());
    }
    let r = client.call_tool_once(call).await.unwrap();
    let rmcp3::model::CallToolResponse::Complete(result) = r else {
        panic!("not complete: {r:?}");
    };
    let result = serde_json::to_value(&result).unwrap();
    assert_eq!(
        result["content"][0]["text"], "Rust likes orange",
        "{result}"
    );

    // A listen stream: acknowledged, then told of a tool-list change.
    let mut sub = tokio::time::timeout(
        WAIT,
        client.listen(SubscriptionFilter::builder().tools_list_changed().build()),
    )
    .await
    .expect("acknowledged in time")
    .unwrap();
    assert_eq!(sub.acknowledged().tools_list_changed, Some(true));
    client
        .call_tool_once(CallToolRequestParams::new("test_trigger_tool_change"))
        .await
        .unwrap();
    let n = tokio::time::timeout(WAIT, sub.next())
        .await
        .expect("a notification in time")
        .unwrap()
        .expect("a notification");
    assert!(
        matches!(n, ServerNotification::ToolListChangedNotification(_)),
        "{n:?}"
    );
    drop(sub);
    client.cancel().await.unwrap();
}
