//! Tools of a worker (taskmesh's worker API) called as tasks by the Rust SDK's clients: a Rust
//! [`Worker`] in this process (`Worker::serve`) serves `rmw_*` tools of a real `taskmesh
//! serve`, and
//! * `rmcp` 2.2.0 on protocol 2025-11-25 calls them task-augmented (`tools/call` with `task`,
//!   through `Peer::send_request` with rmcp's typed requests, as tests/interop_rmcp.rs explains):
//!   the worker's result through `tasks/get` and `tasks/result`; a `tasks/cancel` that the
//!   worker's handler sees on `Job::cancel` while the task stays cancelled;
//! * `rmcp` 3.11.0 on protocol 2026-07-28 with the tasks extension calls them with its typed
//!   client methods (`call_tool_once`, `get_task`, `update_task`): the worker's tool is a task
//!   the server decided on, whose result comes inline; the worker's elicitation arrives in
//!   `inputRequests` and its answer, sent with `tasks/update`, reaches the handler.

// A test binary: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use serde_json::{json, Value};
use taskmesh_client::jsonrpc::ErrorObject;
use taskmesh_client::worker::{Declaration, Job, Worker};
use taskmesh_testkit::worker::{interview, no_tool, text_result, wait_cancel, Events, Served};
use taskmesh_testkit::Server;

/// The server executable under test.
const TASKMESH: &str = env!("CARGO_BIN_EXE_taskmesh");

/// Upper bound for every single wait in this file.
const WAIT: Duration = Duration::from_secs(30);

const CLIENT_TOKEN: &str = "rmcp-worker-client-token";
const WORKER_TOKEN: &str = "rmcp-worker-token";
/// The status message the cancellable tool sets once it runs; the test cancels on seeing it.
const RUNNING_MESSAGE: &str = "waiting to be cancelled";

/// Client principal `rmcp-client`; worker identity `rmcp-workers` may serve `rmw_*`. Leases are
/// long enough that no task runs twice on a loaded machine.
fn config() -> String {
    format!(
        r#"[auth.tokens]
"{CLIENT_TOKEN}" = "rmcp-client"

[workers]
lease_ms = 6000
poll_wait_max_ms = 2000
idle_timeout_ms = 60000
max_attempts = 2

[workers.tokens]
"{WORKER_TOKEN}" = "rmcp-workers"

[workers.identities.rmcp-workers]
tools = ["rmw_*"]
"#
    )
}

/// The worker's tools: a product, an interview asking a name, and a tool that waits to be
/// cancelled.
fn declarations() -> Vec<Declaration> {
    let product = json!({
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
    });
    vec![
        Declaration::new("rmw_product", product),
        Declaration::new("rmw_interview", json!({"type": "object"})),
        Declaration::new("rmw_wait_cancel", json!({"type": "object"})),
    ]
}

/// One leased task: what the tool does. The handlers report what they saw as events
/// (`{"event", "taskId", ...}`).
async fn handle(worker: Worker, events: Events, job: Job) -> Result<Value, ErrorObject> {
    match job.lease.tool.as_str() {
        "rmw_product" => {
            let (a, b) = (job.arguments["a"].as_i64(), job.arguments["b"].as_i64());
            let product = a.unwrap_or(0) * b.unwrap_or(0);
            Ok(text_result(&format!(
                "product={product} attempt={} principal={}",
                job.lease.attempt, job.lease.principal
            )))
        }
        "rmw_interview" => interview(&job, &events).await,
        "rmw_wait_cancel" => wait_cancel(&worker, &job, &events, RUNNING_MESSAGE, WAIT).await,
        other => Err(no_tool(other)),
    }
}

/// rmcp 2.2.0 on protocol 2025-11-25.
mod rmcp2 {
    use rmcp::model::{
        CallToolRequest, CallToolRequestParams, CallToolResult, CancelTaskParams,
        CancelTaskRequest, ClientRequest, GetTaskParams, GetTaskPayloadParams,
        GetTaskPayloadRequest, GetTaskRequest, JsonObject, ServerResult, Task, TaskMetadata,
        TaskStatus,
    };
    use rmcp::service::RunningService;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::{RoleClient, ServiceExt};
    use serde_json::Value;

    use super::{CLIENT_TOKEN, WAIT};

    pub type McpClient = RunningService<RoleClient, ()>;

    pub async fn connect(url: &str) -> McpClient {
        let config = StreamableHttpClientTransportConfig::with_uri(url).auth_header(CLIENT_TOKEN);
        let transport = StreamableHttpClientTransport::from_config(config);
        tokio::time::timeout(WAIT, ().serve(transport))
            .await
            .expect("initialize in time")
            .expect("rmcp initialize")
    }

    async fn send(client: &McpClient, what: &str, request: ClientRequest) -> ServerResult {
        tokio::time::timeout(WAIT, client.send_request(request))
            .await
            .unwrap_or_else(|_| panic!("{what}: no answer within {WAIT:?}"))
            .unwrap_or_else(|e| panic!("{what}: {e:?}"))
    }

    /// `tools/call` with `task` metadata: the created task.
    pub async fn call_as_task(client: &McpClient, name: &'static str, arguments: Value) -> Task {
        let arguments: JsonObject = arguments.as_object().cloned().unwrap();
        let params = CallToolRequestParams::new(name)
            .with_arguments(arguments)
            .with_task(TaskMetadata::new().with_ttl(60_000));
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        match send(client, name, request).await {
            ServerResult::CreateTaskResult(created) => created.task,
            other => panic!("task-augmented {name}: expected a CreateTaskResult, got {other:?}"),
        }
    }

    pub async fn get_task(client: &McpClient, task_id: &str) -> Task {
        let request =
            ClientRequest::GetTaskRequest(GetTaskRequest::new(GetTaskParams::new(task_id)));
        match send(client, "tasks/get", request).await {
            ServerResult::GetTaskResult(t) => t.task,
            other => panic!("tasks/get: expected a Task, got {other:?}"),
        }
    }

    /// `tasks/cancel`: the task it answers with (rmcp 2.2.0 decodes that flat Task as either
    /// variant, see tests/interop_rmcp.rs).
    pub async fn cancel_task(client: &McpClient, task_id: &str) -> Task {
        let request = ClientRequest::CancelTaskRequest(CancelTaskRequest::new(
            CancelTaskParams::new(task_id),
        ));
        match send(client, "tasks/cancel", request).await {
            ServerResult::CancelTaskResult(t) => t.task,
            ServerResult::GetTaskResult(t) => t.task,
            other => panic!("tasks/cancel: expected a Task, got {other:?}"),
        }
    }

    /// `tasks/result` of a `tools/call` task, as the `CallToolResult`.
    pub async fn task_payload(client: &McpClient, task_id: &str) -> CallToolResult {
        let request = ClientRequest::GetTaskPayloadRequest(GetTaskPayloadRequest::new(
            GetTaskPayloadParams::new(task_id),
        ));
        match send(client, "tasks/result", request).await {
            ServerResult::CallToolResult(c) => c,
            ServerResult::CustomResult(v) => serde_json::from_value(v.0.clone())
                .unwrap_or_else(|e| panic!("tasks/result is not a CallToolResult ({e}): {}", v.0)),
            other => panic!("tasks/result: expected a CallToolResult, got {other:?}"),
        }
    }

    /// Poll `tasks/get` until `done` holds of the task (bounded by [`WAIT`]).
    pub async fn poll_until(
        client: &McpClient,
        task_id: &str,
        done: impl Fn(&Task) -> bool,
    ) -> Task {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let t = get_task(client, task_id).await;
            if done(&t) {
                return t;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "task {task_id} stayed {t:?}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }

    pub fn is_terminal(t: &Task) -> bool {
        matches!(
            t.status,
            TaskStatus::Completed | TaskStatus::Failed | TaskStatus::Cancelled
        )
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rmcp_2_runs_a_worker_tool_as_a_task_and_cancels_one_on_2025_11_25() {
    use rmcp::model::{ProtocolVersion, TaskStatus};

    let server = Server::start(TASKMESH, &config());
    let mut worker = Served::start(
        &server.url,
        WORKER_TOKEN,
        declarations(),
        "rmcp",
        WAIT,
        handle,
    )
    .await;
    let client = rmcp2::connect(&server.url).await;
    let info = client.peer_info().expect("server info after initialize");
    assert_eq!(info.protocol_version, ProtocolVersion::V_2025_11_25);
    let tools = tokio::time::timeout(WAIT, client.list_all_tools())
        .await
        .expect("tools/list in time")
        .unwrap();
    assert!(
        tools.iter().any(|t| t.name == "rmw_product"),
        "the worker's tool is listed: {tools:?}"
    );

    // The worker's result, through tasks/get and tasks/result.
    let created = rmcp2::call_as_task(&client, "rmw_product", json!({"a": 6, "b": 7})).await;
    assert_eq!(created.status, TaskStatus::Working, "{created:?}");
    let done = rmcp2::poll_until(&client, &created.task_id, rmcp2::is_terminal).await;
    assert_eq!(done.status, TaskStatus::Completed, "{done:?}");
    let payload = rmcp2::task_payload(&client, &created.task_id).await;
    let payload = serde_json::to_value(&payload).unwrap();
    assert_eq!(
        payload["content"][0]["text"], "product=42 attempt=1 principal=rmcp-client",
        "{payload}"
    );
    assert_ne!(payload["isError"], true, "{payload}");

    // A cancellation once the worker runs the task: seen by its handler, and the task stays
    // cancelled after the handler returned.
    let created = rmcp2::call_as_task(&client, "rmw_wait_cancel", json!({})).await;
    let id = created.task_id.clone();
    let running = rmcp2::poll_until(&client, &id, |t| {
        rmcp2::is_terminal(t) || t.status_message.as_deref() == Some(RUNNING_MESSAGE)
    })
    .await;
    assert_eq!(running.status, TaskStatus::Working, "{running:?}");
    let cancelled = rmcp2::cancel_task(&client, &id).await;
    assert_eq!(cancelled.status, TaskStatus::Cancelled, "{cancelled:?}");
    let seen = worker.event("cancel", &id).await;
    assert_eq!(
        seen["cancelled"], true,
        "the handler saw Job::cancel: {seen}"
    );
    let after = rmcp2::get_task(&client, &id).await;
    assert_eq!(after.status, TaskStatus::Cancelled, "{after:?}");
    client.cancel().await.unwrap();
}

/// rmcp 3.11.0 on protocol 2026-07-28, declaring the tasks extension.
mod rmcp3_client {
    use rmcp3::model::{
        ClientCapabilities, ClientConfig, GetTaskParams, GetTaskResult, Implementation,
        ProtocolVersion, TaskStatus,
    };
    use rmcp3::service::RunningService;
    use rmcp3::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    use rmcp3::transport::StreamableHttpClientTransport;
    use rmcp3::{ClientHandler, ClientLifecycleMode, ClientServiceExt, RoleClient};
    use serde_json::json;

    use super::{CLIENT_TOKEN, WAIT};

    /// A client that declares the tasks extension and elicitation.
    pub struct TasksClient;

    impl ClientHandler for TasksClient {
        fn get_info(&self) -> ClientConfig {
            let caps: ClientCapabilities = serde_json::from_value(json!({
                "elicitation": {},
                "extensions": {"io.modelcontextprotocol/tasks": {}},
            }))
            .unwrap();
            ClientConfig::new(
                caps,
                Implementation::new("taskmesh-rmcp-worker-interop", "1.0.0"),
            )
        }
    }

    pub type McpClient = RunningService<RoleClient, TasksClient>;

    pub async fn connect(url: &str) -> McpClient {
        let config = StreamableHttpClientTransportConfig::with_uri(url).auth_header(CLIENT_TOKEN);
        let transport = StreamableHttpClientTransport::from_config(config);
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

    /// Poll `tasks/get` until `done` holds of the answer (bounded by [`WAIT`]).
    pub async fn poll_until(
        client: &McpClient,
        id: &str,
        done: impl Fn(&GetTaskResult) -> bool,
    ) -> GetTaskResult {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let t = client.get_task(GetTaskParams::new(id)).await.unwrap();
            if done(&t) {
                return t;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "task {id} stayed {t:?}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }

    pub fn is_terminal(t: &GetTaskResult) -> bool {
        matches!(
            t.task.status(),
            TaskStatus::Completed | TaskStatus::Failed | TaskStatus::Cancelled
        )
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rmcp_3_runs_worker_tools_as_tasks_through_the_extension_on_2026_07_28() {
    use rmcp3::model::{
        CallToolRequestParams, CallToolResponse, InputResponses, ProtocolVersion, TaskPayload,
        UpdateTaskParams,
    };

    let server = Server::start(TASKMESH, &config());
    let mut worker = Served::start(
        &server.url,
        WORKER_TOKEN,
        declarations(),
        "rmcp",
        WAIT,
        handle,
    )
    .await;
    let client = rmcp3_client::connect(&server.url).await;
    let info = client.peer_info().expect("peer info");
    assert_eq!(info.protocol_version, ProtocolVersion::V_2026_07_28);
    let text = |result: &rmcp3::model::JsonObject| result["content"][0]["text"].clone();

    // The server decides: the worker's tool is a task, its result inline in tasks/get.
    let args = json!({"a": 3, "b": 5}).as_object().cloned().unwrap();
    let r = client
        .call_tool_once(CallToolRequestParams::new("rmw_product").with_arguments(args))
        .await
        .unwrap();
    let CallToolResponse::Task(created) = r else {
        panic!("not a task: {r:?}");
    };
    let done =
        rmcp3_client::poll_until(&client, &created.task.task_id, rmcp3_client::is_terminal).await;
    let TaskPayload::Completed { result } = &done.task.payload else {
        panic!("not completed: {done:?}");
    };
    assert_eq!(
        text(result),
        "product=15 attempt=1 principal=rmcp-client",
        "{result:?}"
    );

    // The worker's elicitation: asked in inputRequests, answered with tasks/update, received by
    // the handler.
    let r = client
        .call_tool_once(CallToolRequestParams::new("rmw_interview"))
        .await
        .unwrap();
    let CallToolResponse::Task(created) = r else {
        panic!("not a task: {r:?}");
    };
    let id = created.task.task_id.clone();
    let asking = rmcp3_client::poll_until(&client, &id, |t| {
        rmcp3_client::is_terminal(t) || matches!(t.task.payload, TaskPayload::InputRequired { .. })
    })
    .await;
    let TaskPayload::InputRequired { input_requests } = &asking.task.payload else {
        panic!("the task never asked: {asking:?}");
    };
    assert_eq!(input_requests.len(), 1, "{input_requests:?}");
    let (key, request) = input_requests.iter().next().unwrap();
    let request = serde_json::to_value(request).unwrap();
    assert_eq!(request["method"], "elicitation/create", "{request}");
    assert_eq!(
        request["params"]["message"], "What is your name?",
        "{request}"
    );
    let mut answers = InputResponses::new();
    answers.insert(
        key.clone(),
        json!({"action": "accept", "content": {"name": "Rust"}}),
    );
    client
        .update_task(UpdateTaskParams::new(&id, answers))
        .await
        .unwrap();
    let answer = worker.event("answer", &id).await;
    assert_eq!(
        answer["answer"],
        json!({"action": "accept", "content": {"name": "Rust"}}),
        "{answer}"
    );
    let done = rmcp3_client::poll_until(&client, &id, rmcp3_client::is_terminal).await;
    let TaskPayload::Completed { result } = &done.task.payload else {
        panic!("not completed: {done:?}");
    };
    assert_eq!(text(result), "Hello, Rust!", "{result:?}");
    client.cancel().await.unwrap();
}
