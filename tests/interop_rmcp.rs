//! Interoperability with the Rust SDK: the `rmcp` 2.2.0 client, over its own Streamable HTTP
//! client transport (reqwest), drives a real `taskmesh serve` process through the 2025-11-25
//! task flow: handshake, tool-level negotiation, a plain call, task-augmented calls polled with
//! `tasks/get`, deferred results with `tasks/result`, cancellation with `tasks/cancel`, and the
//! `-32602` error rules.
//!
//! How the steps map onto rmcp 2.2.0's client API:
//! * `initialize`, `tools/list` and a plain `tools/call` use the typed `Peer<RoleClient>` methods
//!   (`peer_info`, `list_all_tools`, `call_tool`).
//! * rmcp 2.2.0 has no typed client method for task-augmented calls or for the `tasks/*` methods.
//!   `Peer::call_tool` only accepts `ServerResult::CallToolResult`, so a `CreateTaskResult`
//!   answer would surface as `ServiceError::UnexpectedResponse`. Those steps therefore go through
//!   `Peer::send_request` with the typed `ClientRequest` variants (`CallToolRequest` carrying
//!   `CallToolRequestParams::with_task`, `GetTaskRequest`, `GetTaskPayloadRequest`,
//!   `CancelTaskRequest`). This is still rmcp's own request path: its request ids, its transport,
//!   its session and `MCP-Protocol-Version` headers, and its typed `ServerResult` decoding.

// A test binary: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, CancelTaskParams, CancelTaskRequest,
    ClientRequest, ErrorCode, GetTaskParams, GetTaskPayloadParams, GetTaskPayloadRequest,
    GetTaskRequest, JsonObject, ProtocolVersion, RelatedTaskMetadata, ServerResult, Task,
    TaskMetadata, TaskStatus, TaskSupport,
};
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{RoleClient, ServiceError, ServiceExt};
use serde_json::{json, Value};
use taskmesh_testkit::Server;

/// The server executable under test.
const TASKMESH: &str = env!("CARGO_BIN_EXE_taskmesh");

/// Upper bound for every single wait in this file.
const WAIT: Duration = Duration::from_secs(30);

type McpClient = RunningService<RoleClient, ()>;

fn args(v: Value) -> JsonObject {
    match v {
        Value::Object(m) => m,
        other => panic!("arguments must be an object, got {other}"),
    }
}

/// Send one typed request through rmcp, bounded by [`WAIT`].
async fn send(
    client: &McpClient,
    what: &str,
    request: ClientRequest,
) -> Result<ServerResult, ServiceError> {
    tokio::time::timeout(WAIT, client.send_request(request))
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer within {WAIT:?}"))
}

/// The JSON-RPC error code carried by an rmcp error (panics on any other kind of failure).
fn rpc_code(what: &str, r: Result<ServerResult, ServiceError>) -> i32 {
    match r {
        Err(ServiceError::McpError(e)) => e.code.0,
        Err(other) => panic!("{what}: expected a JSON-RPC error, got {other:?}"),
        Ok(ok) => panic!("{what}: expected a JSON-RPC error, got a result {ok:?}"),
    }
}

/// `tools/call` with `task` metadata. Returns the created task.
async fn call_as_task(client: &McpClient, name: &'static str, arguments: Value, ttl: u64) -> Task {
    let params = CallToolRequestParams::new(name)
        .with_arguments(args(arguments))
        .with_task(TaskMetadata::new().with_ttl(ttl));
    let r = send(
        client,
        name,
        ClientRequest::CallToolRequest(CallToolRequest::new(params)),
    )
    .await
    .unwrap_or_else(|e| panic!("task-augmented {name}: {e:?}"));
    match r {
        ServerResult::CreateTaskResult(created) => created.task,
        other => panic!("task-augmented {name}: expected a CreateTaskResult, got {other:?}"),
    }
}

async fn get_task(client: &McpClient, task_id: &str) -> Result<Task, ServiceError> {
    let r = send(
        client,
        "tasks/get",
        ClientRequest::GetTaskRequest(GetTaskRequest::new(GetTaskParams::new(task_id))),
    )
    .await?;
    match r {
        ServerResult::GetTaskResult(t) => Ok(t.task),
        other => panic!("tasks/get: expected a flat Task (GetTaskResult), got {other:?}"),
    }
}

async fn cancel_task(client: &McpClient, task_id: &str) -> Result<ServerResult, ServiceError> {
    send(
        client,
        "tasks/cancel",
        ClientRequest::CancelTaskRequest(CancelTaskRequest::new(CancelTaskParams::new(task_id))),
    )
    .await
}

/// The Task inside a successful `tasks/cancel` answer.
///
/// rmcp 2.2.0 decodes `ServerResult` as an untagged union in which `GetTaskResult` is listed
/// before `CancelTaskResult`. Both are the same flat Task shape, so a `tasks/cancel` answer is
/// decoded as the `GetTaskResult` variant; either variant is accepted here.
fn cancelled_task(r: ServerResult) -> Task {
    match r {
        ServerResult::CancelTaskResult(t) => t.task,
        ServerResult::GetTaskResult(t) => t.task,
        other => panic!("tasks/cancel: expected a flat Task, got {other:?}"),
    }
}

/// `tasks/result` for a `tools/call` task, decoded as the original `CallToolResult`.
///
/// rmcp 2.2.0's `GetTaskPayloadResult` refuses to deserialize by design (it says to use the
/// catch-all instead), so the payload arrives either as `ServerResult::CallToolResult` (the
/// untagged union tries that variant first) or as `CustomResult`; the latter is decoded into the
/// typed `CallToolResult` here.
async fn task_payload(client: &McpClient, task_id: &str) -> Result<CallToolResult, ServiceError> {
    let r = send(
        client,
        "tasks/result",
        ClientRequest::GetTaskPayloadRequest(GetTaskPayloadRequest::new(
            GetTaskPayloadParams::new(task_id),
        )),
    )
    .await?;
    Ok(match r {
        ServerResult::CallToolResult(c) => c,
        ServerResult::CustomResult(v) => serde_json::from_value(v.0.clone())
            .unwrap_or_else(|e| panic!("tasks/result is not a CallToolResult ({e}): {}", v.0)),
        other => panic!("tasks/result: expected the original CallToolResult, got {other:?}"),
    })
}

fn is_terminal(s: &TaskStatus) -> bool {
    matches!(
        s,
        TaskStatus::Completed | TaskStatus::Failed | TaskStatus::Cancelled
    )
}

/// Poll `tasks/get` until the task is terminal, honouring `pollInterval` (clamped to keep the
/// test quick). Every intermediate status must be `working`; the whole loop is bounded by [`WAIT`].
async fn poll_to_terminal(client: &McpClient, task_id: &str) -> (Task, Vec<TaskStatus>) {
    let polling = async {
        let mut seen = Vec::new();
        loop {
            let t = get_task(client, task_id)
                .await
                .unwrap_or_else(|e| panic!("tasks/get {task_id}: {e:?}"));
            assert_eq!(t.task_id, task_id);
            seen.push(t.status.clone());
            if is_terminal(&t.status) {
                return (t, seen);
            }
            assert_eq!(
                t.status,
                TaskStatus::Working,
                "unexpected intermediate status: {t:?}"
            );
            let wait = t.poll_interval.unwrap_or(200).clamp(50, 500);
            tokio::time::sleep(Duration::from_millis(wait)).await;
        }
    };
    tokio::time::timeout(WAIT, polling)
        .await
        .unwrap_or_else(|_| {
            panic!("task {task_id} did not reach a terminal status within {WAIT:?}")
        })
}

/// Text of the first content block.
fn first_text(r: &CallToolResult) -> &str {
    r.content
        .first()
        .and_then(|c| c.as_text())
        .map(|t| t.text.as_str())
        .unwrap_or_else(|| panic!("no text content in {r:?}"))
}

/// The `io.modelcontextprotocol/related-task` entry of a result's `_meta`.
fn related_task(r: &CallToolResult) -> Option<Value> {
    r.meta
        .as_ref()
        .and_then(|m| m.get(RelatedTaskMetadata::META_KEY))
        .cloned()
}

/// The fields the schema requires on every Task are present and the timestamps look like RFC 3339.
fn assert_task_shape(t: &Task) {
    assert!(!t.task_id.is_empty(), "empty taskId: {t:?}");
    assert!(
        t.created_at.contains('T'),
        "createdAt is not RFC 3339: {t:?}"
    );
    assert!(
        t.last_updated_at.contains('T'),
        "lastUpdatedAt is not RFC 3339: {t:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rmcp_client_drives_the_task_flow() {
    let server = Server::start(TASKMESH, "");

    // 1. initialize through rmcp's Streamable HTTP client transport.
    let transport = StreamableHttpClientTransport::from_uri(server.url.as_str());
    let mut client: McpClient = tokio::time::timeout(WAIT, ().serve(transport))
        .await
        .expect("initialize within 30 s")
        .expect("rmcp initialize");
    let info = client.peer_info().expect("server info after initialize");
    assert_eq!(info.protocol_version, ProtocolVersion::V_2025_11_25);
    assert_eq!(info.protocol_version.as_str(), taskmesh_testkit::V);
    let tasks = info
        .capabilities
        .tasks
        .as_ref()
        .expect("capabilities.tasks");
    let tools_call = tasks
        .requests
        .as_ref()
        .and_then(|r| r.tools.as_ref())
        .and_then(|t| t.call.as_ref());
    assert!(
        tools_call.is_some(),
        "capabilities.tasks.requests.tools.call missing: {tasks:?}"
    );
    assert!(
        tasks.cancel.is_some(),
        "capabilities.tasks.cancel missing: {tasks:?}"
    );
    assert!(
        info.capabilities.tools.is_some(),
        "capabilities.tools missing"
    );

    // 2. tools/list: every tool declares execution.taskSupport.
    let tools = tokio::time::timeout(WAIT, client.list_all_tools())
        .await
        .expect("tools/list within 30 s")
        .expect("tools/list");
    assert!(!tools.is_empty());
    for t in &tools {
        assert!(
            t.execution.as_ref().and_then(|e| e.task_support).is_some(),
            "tool {} has no execution.taskSupport",
            t.name
        );
    }
    let support_of = |name: &str| {
        tools
            .iter()
            .find(|t| t.name == name)
            .unwrap_or_else(|| panic!("tool {name} not listed"))
            .execution
            .as_ref()
            .and_then(|e| e.task_support)
    };
    assert_eq!(support_of("slow_compute"), Some(TaskSupport::Optional));
    assert_eq!(support_of("failing_job"), Some(TaskSupport::Required));
    assert_eq!(support_of("greet"), Some(TaskSupport::Forbidden));

    // 3. A plain call through the typed `call_tool`.
    let greeting = tokio::time::timeout(
        WAIT,
        client.call_tool(
            CallToolRequestParams::new("greet").with_arguments(args(json!({"name": "rmcp"}))),
        ),
    )
    .await
    .expect("greet within 30 s")
    .expect("greet");
    assert_eq!(first_text(&greeting), "Hello, rmcp!");
    assert_ne!(greeting.is_error, Some(true));

    // A `required` tool called without `task` is rejected with -32601, which rmcp's typed
    // `call_tool` surfaces as a JSON-RPC error.
    let plain_required = tokio::time::timeout(
        WAIT,
        client.call_tool(CallToolRequestParams::new("failing_job")),
    )
    .await
    .expect("failing_job within 30 s");
    match plain_required {
        Err(ServiceError::McpError(e)) => assert_eq!(e.code, ErrorCode::METHOD_NOT_FOUND, "{e:?}"),
        other => panic!("plain failing_job: expected -32601, got {other:?}"),
    }

    // 4. slow_compute as a task, polled to completion, then its deferred result.
    let created = call_as_task(
        &client,
        "slow_compute",
        json!({"seconds": 1.5, "label": "rmcp"}),
        60_000,
    )
    .await;
    assert_task_shape(&created);
    assert_eq!(
        created.status,
        TaskStatus::Working,
        "a new task starts in working: {created:?}"
    );
    assert_eq!(created.ttl, Some(60_000), "{created:?}");
    let id = created.task_id.clone();
    let (done, seen) = poll_to_terminal(&client, &id).await;
    assert_eq!(
        done.status,
        TaskStatus::Completed,
        "polled {seen:?}: {done:?}"
    );
    assert_eq!(done.ttl, Some(60_000), "{done:?}");
    assert_eq!(done.created_at, created.created_at);
    assert_task_shape(&done);

    let payload = task_payload(&client, &id)
        .await
        .expect("tasks/result of the completed task");
    assert_eq!(first_text(&payload), "rmcp: computed for 1.5 seconds");
    assert_ne!(payload.is_error, Some(true), "{payload:?}");
    assert_eq!(
        related_task(&payload),
        Some(json!({"taskId": id})),
        "{payload:?}"
    );
    // Reading the result does not consume it: a second read replays the same payload.
    let again = task_payload(&client, &id)
        .await
        .expect("second tasks/result");
    assert_eq!(again, payload);

    // 5. failing_job as a task ends failed; tasks/result replays the stored tool error.
    let created = call_as_task(&client, "failing_job", json!({}), 60_000).await;
    assert_task_shape(&created);
    assert_eq!(created.status, TaskStatus::Working);
    assert_eq!(created.ttl, Some(60_000));
    let failed_id = created.task_id.clone();
    assert_ne!(failed_id, id, "task ids are unique");
    let (failed, seen) = poll_to_terminal(&client, &failed_id).await;
    assert_eq!(
        failed.status,
        TaskStatus::Failed,
        "polled {seen:?}: {failed:?}"
    );
    assert!(
        failed.status_message.is_some(),
        "a failed task carries a diagnostic statusMessage: {failed:?}"
    );
    let payload = task_payload(&client, &failed_id)
        .await
        .expect("tasks/result of the failed task");
    assert_eq!(payload.is_error, Some(true), "{payload:?}");
    assert!(
        first_text(&payload).starts_with("failing_job: the job failed"),
        "{payload:?}"
    );
    assert_eq!(
        related_task(&payload),
        Some(json!({"taskId": failed_id})),
        "{payload:?}"
    );

    // 6. Cancel a long-running task through rmcp.
    let created = call_as_task(
        &client,
        "slow_compute",
        json!({"seconds": 600, "label": "long"}),
        60_000,
    )
    .await;
    assert_eq!(created.status, TaskStatus::Working);
    let long_id = created.task_id.clone();
    let still = get_task(&client, &long_id)
        .await
        .expect("tasks/get of the long task");
    assert_eq!(still.status, TaskStatus::Working);
    let cancelled = cancelled_task(cancel_task(&client, &long_id).await.expect("tasks/cancel"));
    assert_eq!(cancelled.task_id, long_id);
    assert_eq!(cancelled.status, TaskStatus::Cancelled, "{cancelled:?}");
    assert_eq!(
        get_task(&client, &long_id)
            .await
            .expect("tasks/get after cancel")
            .status,
        TaskStatus::Cancelled
    );
    // A cancelled task is terminal: cancelling it again is invalid params.
    assert_eq!(
        rpc_code("second tasks/cancel", cancel_task(&client, &long_id).await),
        -32602
    );
    // Cancelling a completed task is rejected the same way.
    assert_eq!(
        rpc_code(
            "tasks/cancel of a completed task",
            cancel_task(&client, &id).await
        ),
        -32602
    );
    // The cancelled status is sticky.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        get_task(&client, &long_id)
            .await
            .expect("tasks/get later")
            .status,
        TaskStatus::Cancelled
    );

    // 7. Unknown task ids are invalid params for tasks/get (and for tasks/result, tasks/cancel).
    let unknown = "no-such-task-0000";
    let r = get_task(&client, unknown).await;
    match r {
        Err(ServiceError::McpError(e)) => assert_eq!(e.code, ErrorCode::INVALID_PARAMS, "{e:?}"),
        other => panic!("tasks/get of an unknown id: expected -32602, got {other:?}"),
    }
    let r = task_payload(&client, unknown).await;
    match r {
        Err(ServiceError::McpError(e)) => assert_eq!(e.code, ErrorCode::INVALID_PARAMS, "{e:?}"),
        other => panic!("tasks/result of an unknown id: expected -32602, got {other:?}"),
    }
    assert_eq!(
        rpc_code(
            "tasks/cancel of an unknown id",
            cancel_task(&client, unknown).await
        ),
        -32602
    );

    // The session still works after the error answers.
    assert!(get_task(&client, &id).await.is_ok());
    let _ = tokio::time::timeout(WAIT, client.close()).await;
}

async fn python_upstream() -> taskmesh_testkit::python::UpstreamHttp {
    let python = tokio::task::spawn_blocking(|| {
        taskmesh_testkit::python::mcp_venv(std::path::Path::new(env!("CARGO_TARGET_TMPDIR")))
    })
    .await
    .unwrap();
    taskmesh_testkit::python::upstream_http(&python, taskmesh_testkit::free_ports(1)[0]).await
}

/// The same rmcp client, against a node whose tools are an upstream's (the Python SDK server
/// over Streamable HTTP): the upstream's tools listed with their `taskSupport`; a slow one as a
/// task polled to completion and its deferred result; a tool error as a failed task whose
/// result replays it; a JSON-RPC error replayed exactly; a running one cancelled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rmcp_client_runs_upstream_tools_as_tasks() {
    let up = python_upstream().await;
    let server = Server::start(
        TASKMESH,
        &format!(
            "[tools]\nbuiltin = false\n\n[[upstream]]\nname = \"py\"\nurl = {:?}\n\
             tools = {{ include = [\"slow\", \"fail\", \"refuse\", \"wait_cancel\", \"echo\"] }}\n\n\
             [upstream.overrides.echo]\ntask_support = \"forbidden\"\n",
            up.url
        ),
    );
    taskmesh_testkit::wait_upstreams_serving(&server, "").await;
    let transport = StreamableHttpClientTransport::from_uri(server.url.as_str());
    let client: McpClient = tokio::time::timeout(WAIT, ().serve(transport))
        .await
        .expect("initialize within 30 s")
        .expect("rmcp initialize");

    let tools = tokio::time::timeout(WAIT, client.list_all_tools())
        .await
        .expect("tools/list within 30 s")
        .expect("tools/list");
    let mut names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    names.sort_unstable();
    // rmcp's client declares no `tasks` capability: it is offered the hand-off tools too.
    assert_eq!(
        names,
        [
            "echo",
            "fail",
            "refuse",
            "slow",
            "task_cancel",
            "task_result",
            "task_status",
            "wait_cancel"
        ]
    );
    let support_of = |name: &str| {
        tools
            .iter()
            .find(|t| t.name == name)
            .and_then(|t| t.execution.as_ref())
            .and_then(|e| e.task_support)
    };
    assert_eq!(support_of("slow"), Some(TaskSupport::Optional));
    assert_eq!(support_of("echo"), Some(TaskSupport::Forbidden));

    let created = call_as_task(&client, "slow", json!({"steps": 4}), 60_000).await;
    let (done, seen) = poll_to_terminal(&client, &created.task_id).await;
    assert_eq!(done.status, TaskStatus::Completed, "{seen:?}");
    let payload = task_payload(&client, &created.task_id).await.unwrap();
    assert_eq!(first_text(&payload), "slept 4 steps");
    assert_eq!(
        related_task(&payload),
        Some(json!({"taskId": created.task_id}))
    );

    let created = call_as_task(&client, "fail", json!({}), 60_000).await;
    let (done, _) = poll_to_terminal(&client, &created.task_id).await;
    assert_eq!(done.status, TaskStatus::Failed);
    let payload = task_payload(&client, &created.task_id).await.unwrap();
    assert_eq!(payload.is_error, Some(true));
    assert!(
        first_text(&payload).contains("the tool failed on purpose"),
        "{payload:?}"
    );

    let created = call_as_task(&client, "refuse", json!({}), 60_000).await;
    let (done, _) = poll_to_terminal(&client, &created.task_id).await;
    assert_eq!(done.status, TaskStatus::Failed);
    match task_payload(&client, &created.task_id).await {
        Err(ServiceError::McpError(e)) => {
            assert_eq!(e.code, ErrorCode::INVALID_PARAMS);
            assert_eq!(e.message, "refused on purpose");
            assert_eq!(e.data, Some(json!({"why": "test"})));
        }
        other => panic!("tasks/result of refuse: expected the upstream's error, got {other:?}"),
    }

    let created = call_as_task(&client, "wait_cancel", json!({}), 60_000).await;
    let t = cancelled_task(cancel_task(&client, &created.task_id).await.unwrap());
    assert_eq!(t.status, TaskStatus::Cancelled);
    let (done, _) = poll_to_terminal(&client, &created.task_id).await;
    assert_eq!(done.status, TaskStatus::Cancelled);
    client.cancel().await.unwrap();
}

/// rmcp's plain `call_tool` of a long tool, with the hand-off at 300 ms: the answer is the
/// hand-off (a `CallToolResult` whose structured content names the task), and the offered
/// tools, called with rmcp's `call_tool` too, follow the task to the result the call would have
/// given; another principal's calls of them get `-32602`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rmcp_plain_call_is_handed_off_and_followed_through_the_offered_tools() {
    let server = Server::start(
        TASKMESH,
        "[auth.tokens]\n\"alice-token-1\" = \"alice\"\n\"bob-token-22\" = \"bob\"\n\n\
         [tasks]\nhandoff_after_ms = 300\n",
    );
    let connect = |token: &'static str| {
        let config =
            rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(
                server.url.as_str(),
            )
            .auth_header(token);
        let transport = StreamableHttpClientTransport::from_config(config);
        async move {
            tokio::time::timeout(WAIT, ().serve(transport))
                .await
                .expect("initialize within 30 s")
                .expect("rmcp initialize")
        }
    };
    let alice: McpClient = connect("alice-token-1").await;
    let bob: McpClient = connect("bob-token-22").await;

    let handed = call(
        &alice,
        "slow_compute",
        json!({"seconds": 3, "label": "rmcp-long"}),
    )
    .await
    .expect("the hand-off");
    assert_ne!(handed.is_error, Some(true));
    let task = handed.structured_content.clone().expect("the task");
    assert_eq!(task["status"], "working", "{task}");
    let id = task["taskId"].as_str().unwrap().to_string();
    assert!(first_text(&handed).contains(&id));

    for tool in ["task_status", "task_result", "task_cancel"] {
        let r = call(&bob, tool, json!({"taskId": id, "waitSeconds": 0})).await;
        match r {
            Err(ServiceError::McpError(e)) => assert_eq!(e.code, ErrorCode::INVALID_PARAMS),
            other => panic!("{tool} of another principal's task: {other:?}"),
        }
    }

    let status = call(&alice, "task_status", json!({"taskId": id}))
        .await
        .expect("task_status");
    assert_eq!(status.structured_content.unwrap()["status"], "working");
    let result = call(&alice, "task_result", json!({"taskId": id}))
        .await
        .expect("task_result");
    assert!(first_text(&result).contains("rmcp-long"), "{result:?}");
    assert_ne!(result.is_error, Some(true));
    for mut c in [alice, bob] {
        let _ = tokio::time::timeout(WAIT, c.close()).await;
    }
}

/// rmcp's plain `call_tool` of `name`, bounded by [`WAIT`].
async fn call(
    client: &McpClient,
    name: &'static str,
    arguments: Value,
) -> Result<CallToolResult, ServiceError> {
    let params = CallToolRequestParams::new(name).with_arguments(args(arguments));
    tokio::time::timeout(WAIT, client.call_tool(params))
        .await
        .unwrap_or_else(|_| panic!("{name}: no answer within {WAIT:?}"))
}
