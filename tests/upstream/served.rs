//! A `taskmesh serve` process with the Python server as its `[[upstream]]` (over stdio, and
//! over Streamable HTTP), reached by an MCP session: the upstream's tools in `tools/list` with
//! the prefix and the configured `taskSupport`, plain calls proxied, task-augmented calls as
//! durable tasks with the upstream's progress, elicitation and sampling relayed through the
//! task, its tool errors and JSON-RPC errors as the task's outcome, `tasks/cancel` reaching
//! the upstream, a changed tool list told to clients, an upstream process that dies mid-task,
//! and an upstream that is not there yet.

use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};
use taskmesh_testkit::{Client, Server};

use super::{http_server, http_server_on, python, server_script};

const TASKMESH: &str = env!("CARGO_BIN_EXE_taskmesh");

/// A node serving only the upstream described by `endpoint` (its `url` or `command` lines),
/// as `py_` tools, without `crash`, with `echo` forbidden as a task.
fn config(endpoint: &str) -> String {
    config_with(
        endpoint,
        "tools = { exclude = [\"crash\"] }\n\n[upstream.overrides.echo]\ntask_support = \"forbidden\"",
        "",
    )
}

/// A node serving only the upstream of `endpoint` as `py_` tools, with `more` settings of
/// the upstream and `top` settings of the node.
pub(crate) fn config_with(endpoint: &str, more: &str, top: &str) -> String {
    format!(
        r#"
{top}
[tools]
builtin = false

[[upstream]]
name = "py"
{endpoint}
prefix = "py_"
processes = 1
{more}
"#
    )
}

fn stdio_lines(python: &Path) -> String {
    format!(
        "command = {:?}\nargs = [{:?}, \"stdio\"]\nenv = {{ PYTHONUNBUFFERED = \"1\" }}",
        python.display().to_string(),
        server_script()
    )
}

pub(crate) fn text(result: &Value) -> &str {
    result["content"][0]["text"].as_str().unwrap_or_default()
}

pub(crate) fn related(m: &Value) -> &Value {
    &m["params"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"]
}

/// Start a task of `tool`, wait for input_required, open `tasks/result`, answer its one
/// request with `answer`; the request and the final response.
pub(crate) async fn answer_once(
    c: &Client,
    tool: &str,
    args: Value,
    answer: Value,
) -> (Value, Value) {
    let id = c.start_task(tool, args).await;
    c.wait_status(&id, "input_required").await;
    let (rid, mut stream) = c.open_stream("tasks/result", json!({"taskId": id})).await;
    let request = stream.next().await.expect("the upstream's request");
    assert!(request.get("id").is_some(), "{request}");
    assert_eq!(related(&request), &json!(id), "{request}");
    c.answer(&request["id"], answer).await;
    loop {
        let m = stream.next().await.expect("the result follows the answer");
        if m["id"] == json!(rid) {
            assert_eq!(c.status(&id).await, "completed");
            return (request, m);
        }
    }
}

/// Everything a session sees of the upstream's tools through the node.
async fn exercise(s: &Server) {
    taskmesh_testkit::wait_upstreams_serving(s, "").await;
    let c = Client::new_session(&s.url).await;

    let listed = c.ok("tools/list", json!({})).await;
    let tools = listed["tools"].as_array().unwrap();
    let mut names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "py_add",
            "py_ask",
            "py_cancelled",
            "py_chatty",
            "py_crash_once",
            "py_echo",
            "py_fail",
            "py_grow",
            "py_mutter",
            "py_refuse",
            "py_sample",
            "py_slow",
            "py_traceparent",
            "py_wait_cancel",
            "py_whoami",
        ],
        "only the upstream's tools, prefixed, without the excluded one"
    );
    let tool = |n: &str| tools.iter().find(|t| t["name"] == n).unwrap();
    assert_eq!(tool("py_echo")["execution"]["taskSupport"], "forbidden");
    assert_eq!(tool("py_slow")["execution"]["taskSupport"], "optional");
    assert_eq!(
        tool("py_echo")["inputSchema"]["properties"]["text"]["type"],
        "string"
    );
    assert_eq!(tool("py_echo")["description"], "Echo the text back.");

    // A plain call is proxied; a task of a tool forbidden as a task is refused.
    let r = c
        .ok(
            "tools/call",
            json!({"name": "py_echo", "arguments": {"text": "hi"}}),
        )
        .await;
    assert_eq!(text(&r), "hi");
    assert_eq!(r["isError"], false);
    let code = c
        .err_code(
            "tools/call",
            json!({"name": "py_echo", "arguments": {"text": "hi"}, "task": {}}),
        )
        .await;
    assert_eq!(
        code, -32601,
        "a task of a tool whose taskSupport is forbidden"
    );

    // A task: the upstream's progress on the task's token, with the related task; then the
    // result, stored.
    let mut get = c.open_get().await;
    let created = c
        .ok(
            "tools/call",
            json!({"name": "py_slow", "arguments": {"steps": 3}, "task": {},
                   "_meta": {"progressToken": "tp"}}),
        )
        .await;
    let id = created["task"]["taskId"].as_str().unwrap().to_string();
    let mut progress = vec![];
    loop {
        let m = get.next().await.expect("GET stream open");
        if m["method"] == "notifications/progress" {
            assert_eq!(m["params"]["progressToken"], "tp");
            assert_eq!(related(&m), &json!(id));
            progress.push(m["params"]["progress"].as_f64().unwrap());
        }
        if m["method"] == "notifications/tasks/status"
            && m["params"]["taskId"] == json!(id)
            && m["params"]["status"] == "completed"
        {
            break;
        }
    }
    assert_eq!(progress, [1.0, 2.0, 3.0]);
    let r = c.ok("tasks/result", json!({"taskId": id})).await;
    assert_eq!(text(&r), "slept 3 steps");
    drop(get);

    // Elicitation and sampling asked upstream reach the client through the task.
    let (request, r) = answer_once(
        &c,
        "py_ask",
        json!({}),
        json!({"action": "accept", "content": {"name": "Ada"}}),
    )
    .await;
    assert_eq!(request["method"], "elicitation/create");
    assert_eq!(request["params"]["message"], "What is your name?");
    assert_eq!(text(&r["result"]), "hello Ada");
    let (request, r) = answer_once(
        &c,
        "py_sample",
        json!({"prompt": "say hi"}),
        json!({"role": "assistant", "content": {"type": "text", "text": "hi"}, "model": "m"}),
    )
    .await;
    assert_eq!(request["method"], "sampling/createMessage");
    assert_eq!(
        request["params"]["messages"][0]["content"]["text"],
        "say hi"
    );
    assert_eq!(text(&r["result"]), "model said: hi");

    // Protocol 2026-07-28: an upstream's call cannot be made again for an answer, so a plain
    // call that asks is handed off (`tasks.handoff_after_ms`, on by default) as soon as its task
    // asks; the result tool answers with the task's question as an input round, and the answer
    // sent back in the next round goes to the task, whose result the round after brings.
    let mut m = taskmesh_testkit::modern::Modern::new(&s.url, None, false);
    m.elicitation = true;
    let handed = m
        .ok("tools/call", json!({"name": "py_ask", "arguments": {}}))
        .await;
    assert_eq!(
        handed["structuredContent"]["status"], "input_required",
        "{handed}"
    );
    let id = handed["structuredContent"]["taskId"]
        .as_str()
        .unwrap()
        .to_string();
    let round = m
        .ok(
            "tools/call",
            json!({"name": "task_result", "arguments": {"taskId": id}}),
        )
        .await;
    assert_eq!(round["resultType"], "input_required", "{round}");
    let (key, asked) = round["inputRequests"]
        .as_object()
        .and_then(|r| r.iter().next())
        .expect("the task's question");
    assert_eq!(asked["method"], "elicitation/create", "{round}");
    let answered = m
        .ok(
            "tools/call",
            json!({
                "name": "task_result",
                "arguments": {"taskId": id},
                "inputResponses": {key.as_str(): {"action": "accept", "content": {"name": "Lin"}}},
                "requestState": round["requestState"],
            }),
        )
        .await;
    assert_eq!(answered["resultType"], "complete", "{answered}");
    assert_eq!(text(&answered), "hello Lin", "{answered}");

    // With the extension, as a task it asks in `inputRequests`.
    m.tasks = true;
    let id = m.start("py_ask", json!({})).await;
    let mut key = None;
    for _ in 0..600 {
        let t = m.ok("tasks/get", json!({"taskId": id})).await;
        if let Some(k) = t["inputRequests"].as_object().and_then(|r| r.keys().next()) {
            key = Some(k.clone());
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let key = key.expect("the upstream's task asks");
    m.ok(
        "tasks/update",
        json!({"taskId": id, "inputResponses": {key: {"action": "accept", "content": {"name": "Ida"}}}}),
    )
    .await;
    let t = m.until_terminal(&id).await;
    assert_eq!(t["result"]["content"][0]["text"], "hello Ida", "{t}");

    // A tool error fails the task and is its result; a JSON-RPC error is replayed exactly.
    let id = c.start_task("py_fail", json!({})).await;
    c.wait_status(&id, "failed").await;
    let r = c.ok("tasks/result", json!({"taskId": id})).await;
    assert_eq!(r["isError"], true);
    assert!(text(&r).contains("the tool failed on purpose"), "{r}");
    let id = c.start_task("py_refuse", json!({})).await;
    c.wait_status(&id, "failed").await;
    let r = c.call("tasks/result", json!({"taskId": id})).await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert_eq!(r["error"]["message"], "refused on purpose");
    assert_eq!(r["error"]["data"], json!({"why": "test"}));

    // tasks/cancel cancels the call upstream (the upstream counts it) once it runs (its first
    // progress report says it does).
    let mut get = c.open_get().await;
    let created = c
        .ok(
            "tools/call",
            json!({"name": "py_wait_cancel", "arguments": {}, "task": {},
                   "_meta": {"progressToken": "wc"}}),
        )
        .await;
    let id = created["task"]["taskId"].as_str().unwrap().to_string();
    loop {
        let m = get.next().await.expect("GET stream open");
        if m["method"] == "notifications/progress" && related(&m) == &json!(id) {
            break;
        }
    }
    let cancelled = c.ok("tasks/cancel", json!({"taskId": id})).await;
    assert_eq!(cancelled["status"], "cancelled");
    let mut count = String::new();
    for _ in 0..100 {
        let r = c
            .ok(
                "tools/call",
                json!({"name": "py_cancelled", "arguments": {}}),
            )
            .await;
        count = text(&r).to_string();
        if count == "1" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(count, "1", "the upstream never saw the cancellation");
    assert_eq!(c.status(&id).await, "cancelled");

    log_messages_follow_the_session_s_level(s).await;
}

/// The log messages of a task's tool, with the related task, on the session's GET stream
/// (no `tasks/result` stream is attached) until the task completes.
async fn task_logs(c: &Client, tool: &str) -> Vec<Value> {
    let mut get = c.open_get().await;
    let id = c.start_task(tool, json!({})).await;
    let mut logs = vec![];
    loop {
        let m = get.next().await.expect("GET stream open");
        if m["method"] == "notifications/message" {
            assert_eq!(related(&m), &json!(id), "{m}");
            logs.push(m["params"].clone());
        }
        if m["method"] == "notifications/tasks/status"
            && m["params"]["taskId"] == json!(id)
            && m["params"]["status"] == "completed"
        {
            return logs;
        }
    }
}

/// The log messages before the answer of a plain call of `tool`, and the answer's text.
async fn plain_logs(c: &Client, tool: &str) -> (Vec<Value>, String) {
    let (rid, mut stream) = c
        .open_stream("tools/call", json!({"name": tool, "arguments": {}}))
        .await;
    let mut logs = vec![];
    loop {
        let m = stream.next().await.expect("the answer follows");
        if m["id"] == json!(rid) {
            return (logs, text(&m["result"]).to_string());
        }
        if m["method"] == "notifications/message" {
            logs.push(m["params"].clone());
        }
    }
}

/// The upstream's log messages reach the client, of a task and of a plain call, at every
/// level until the session sets one; then only those at or above it.
async fn log_messages_follow_the_session_s_level(s: &Server) {
    let c = Client::new_session(&s.url).await;
    let logs = task_logs(&c, "py_chatty").await;
    assert_eq!(logs.len(), 1, "{logs:?}");
    assert_eq!(logs[0]["level"], "info");
    assert_eq!(logs[0]["data"], "thinking");
    let (logs, answer) = plain_logs(&c, "py_chatty").await;
    assert_eq!(answer, "done talking");
    assert_eq!(logs.len(), 1, "{logs:?}");
    assert_eq!(logs[0]["data"], "thinking");

    c.ok("logging/setLevel", json!({"level": "warning"})).await;
    assert!(task_logs(&c, "py_chatty").await.is_empty());
    let (logs, answer) = plain_logs(&c, "py_chatty").await;
    assert_eq!(answer, "done talking");
    assert!(logs.is_empty(), "{logs:?}");
    c.ok("logging/setLevel", json!({"level": "info"})).await;
    assert_eq!(task_logs(&c, "py_chatty").await.len(), 1);
}

#[tokio::test]
async fn a_stdio_upstream_s_tools_are_served_as_durable_tasks() {
    let python = tokio::task::spawn_blocking(python).await.unwrap();
    let s = Server::start(TASKMESH, &config(&stdio_lines(&python)));
    exercise(&s).await;
}

#[tokio::test]
async fn an_http_upstream_s_tools_are_served_as_durable_tasks() {
    let python = tokio::task::spawn_blocking(python).await.unwrap();
    let upstream = http_server(&python).await;
    let s = Server::start(TASKMESH, &config(&format!("url = {:?}", upstream.url)));
    exercise(&s).await;

    // Without the hand-off, a 2026-07-28 plain call that asks says to call it as a task.
    let s = Server::start(
        TASKMESH,
        &config_with(
            &format!("url = {:?}", upstream.url),
            "",
            "[tasks]\nhandoff_after_ms = 0",
        ),
    );
    let mut m = taskmesh_testkit::modern::Modern::new(&s.url, None, false);
    m.elicitation = true;
    let a = m
        .send("tools/call", json!({"name": "py_ask", "arguments": {}}))
        .await;
    assert_eq!(a.code(), -32603, "{}", a.body);
    assert!(
        a.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("call it as a task"),
        "{}",
        a.body
    );
}

/// The node's `GET /status` entry of the upstream.
async fn upstream_status(s: &Server) -> Value {
    let status = taskmesh_testkit::status_of(s, "").await;
    status["upstreams"]
        .as_array()
        .and_then(|a| a.iter().find(|u| u["name"] == "py"))
        .cloned()
        .unwrap_or_else(|| panic!("no upstream py in {status}"))
}

/// Read the GET stream until `notifications/tools/list_changed`.
async fn until_list_changed(get: &mut taskmesh_testkit::Sse) {
    loop {
        let m = get.next().await.expect("GET stream open");
        if m["method"] == "notifications/tools/list_changed" {
            assert!(m.get("id").is_none(), "{m}");
            return;
        }
    }
}

pub(crate) async fn tool_names(c: &Client) -> Vec<String> {
    let listed = c.ok("tools/list", json!({})).await;
    let mut names: Vec<String> = listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str().map(str::to_string))
        .collect();
    names.sort_unstable();
    names
}

/// An upstream that adds a tool and says so: the node lists it again and tells its clients,
/// whose next `tools/list` has the new tool.
#[tokio::test]
async fn an_upstream_s_changed_tool_list_reaches_the_clients() {
    let python = tokio::task::spawn_blocking(python).await.unwrap();
    let upstream = http_server(&python).await;
    let s = Server::start(TASKMESH, &config(&format!("url = {:?}", upstream.url)));
    taskmesh_testkit::wait_upstreams_serving(&s, "").await;
    let c = Client::new_session(&s.url).await;
    assert!(!tool_names(&c).await.contains(&"py_extra".to_string()));
    let mut get = c.open_get().await;
    let r = c
        .ok("tools/call", json!({"name": "py_grow", "arguments": {}}))
        .await;
    assert_eq!(text(&r), "grown");
    until_list_changed(&mut get).await;
    assert!(tool_names(&c).await.contains(&"py_extra".to_string()));
    let r = c
        .ok("tools/call", json!({"name": "py_extra", "arguments": {}}))
        .await;
    assert_eq!(text(&r), "extra");
}

/// An upstream that is not there when the node starts: its tools are absent and `GET /status`
/// says why; once it listens, the node's retries find it, its tools are served and clients are
/// told. When it goes away again, a call fails naming it, and its tools are withdrawn.
#[tokio::test]
async fn an_upstream_that_is_not_there_yet_is_retried_until_it_answers() {
    let python = tokio::task::spawn_blocking(python).await.unwrap();
    let port = taskmesh_testkit::free_ports(1)[0];
    let url = format!("http://127.0.0.1:{port}/mcp");
    let s = Server::start(
        TASKMESH,
        &config_with(
            &format!("url = {url:?}"),
            "retry_initial_ms = 100\nretry_max_ms = 400",
            "",
        ),
    );
    let c = Client::new_session(&s.url).await;
    assert!(tool_names(&c).await.is_empty());
    let st = upstream_status(&s).await;
    assert_eq!(st["state"], "unreachable", "{st}");
    assert_eq!(st["transport"], "http");
    assert!(st["failedAttempts"].as_u64().unwrap() >= 1, "{st}");
    assert!(!st["lastError"].as_str().unwrap().is_empty(), "{st}");
    assert!(
        !st.to_string().contains(&port.to_string()),
        "no address in {st}"
    );

    let mut get = c.open_get().await;
    let upstream = http_server_on(&python, port).await;
    until_list_changed(&mut get).await;
    assert!(tool_names(&c).await.contains(&"py_echo".to_string()));
    let st = upstream_status(&s).await;
    assert_eq!(st["state"], "serving", "{st}");
    assert_eq!(st["tools"], 16, "{st}");
    let r = c
        .ok(
            "tools/call",
            json!({"name": "py_add", "arguments": {"a": 1, "b": 2}}),
        )
        .await;
    assert_eq!(text(&r), "3.0");

    // Gone again: the task that finds it gone fails naming it; the tools are withdrawn.
    drop(upstream);
    let id = c.start_task("py_add", json!({"a": 1, "b": 2})).await;
    let t = c.wait_status(&id, "failed").await;
    let why = t["statusMessage"].as_str().unwrap_or_default();
    assert!(why.contains("upstream py"), "{t}");
    until_list_changed(&mut get).await;
    assert!(tool_names(&c).await.is_empty());
    assert_eq!(upstream_status(&s).await["state"], "unreachable");
}

/// A stdio process that exits in the middle of a task's call: the task fails with a status
/// message naming the upstream and the exit, and the next call gets a new process. A result
/// larger than `tasks.max_result_bytes` fails its task, naming the setting.
#[tokio::test]
async fn a_stdio_upstream_that_dies_mid_task_fails_the_task_and_serves_on() {
    let python = tokio::task::spawn_blocking(python).await.unwrap();
    let s = Server::start(
        TASKMESH,
        &config_with(
            &stdio_lines(&python),
            "tools = { include = [\"crash\", \"echo\"] }",
            "[tasks]\nmax_result_bytes = 1024",
        ),
    );
    let c = Client::new_session(&s.url).await;
    assert_eq!(tool_names(&c).await, ["py_crash", "py_echo"]);
    let id = c.start_task("py_crash", json!({})).await;
    let t = c.wait_status(&id, "failed").await;
    let why = t["statusMessage"].as_str().unwrap_or_default();
    assert!(
        why.contains("upstream py") && why.contains("exit status: 3"),
        "{t}"
    );
    let r = c.call("tasks/result", json!({"taskId": id})).await;
    assert_eq!(r["error"]["code"], -32603, "{r}");

    let r = c
        .ok(
            "tools/call",
            json!({"name": "py_echo", "arguments": {"text": "again"}}),
        )
        .await;
    assert_eq!(text(&r), "again");
    let id = c
        .start_task("py_echo", json!({"text": "x".repeat(2000)}))
        .await;
    let t = c.wait_status(&id, "failed").await;
    assert!(
        t["statusMessage"]
            .as_str()
            .unwrap_or_default()
            .contains("max_result_bytes"),
        "{t}"
    );
}

/// With `forward_principal_header`, each call carries the principal of the task (or plain
/// call) to the upstream in that header; the upstream authenticates taskmesh by the
/// configured `headers`, and never sees the client's own token. Without the setting, no
/// principal is sent.
#[tokio::test]
async fn the_calling_principal_reaches_the_upstream_only_when_configured() {
    let python = tokio::task::spawn_blocking(python).await.unwrap();
    let up = http_server(&python).await;
    let token = "client-token-of-alice-0123456789";
    let auth =
        format!("[auth]\nstatus_principals = [\"alice\"]\n[auth.tokens]\n{token:?} = \"alice\"\n");
    let endpoint = format!(
        "url = {:?}\nheaders = {{ Authorization = \"Bearer taskmesh-own-credential\" }}",
        up.url
    );
    let caps = json!({"elicitation": {}, "sampling": {}});

    let forwarding = Server::start(
        TASKMESH,
        &config_with(
            &endpoint,
            "tools = { include = [\"whoami\"] }\nforward_principal_header = \"X-Principal\"",
            &auth,
        ),
    );
    taskmesh_testkit::wait_upstreams_serving(&forwarding, token).await;
    let c = Client::connect(
        &forwarding.url,
        Some(token),
        taskmesh_testkit::V,
        caps.clone(),
    )
    .await;
    let id = c.start_task("py_whoami", json!({})).await;
    c.wait_status(&id, "completed").await;
    let r = c.ok("tasks/result", json!({"taskId": id})).await;
    assert_eq!(text(&r), "alice|Bearer taskmesh-own-credential", "{r}");
    let r = c
        .ok("tools/call", json!({"name": "py_whoami", "arguments": {}}))
        .await;
    assert_eq!(text(&r), "alice|Bearer taskmesh-own-credential", "{r}");

    let plain = Server::start(
        TASKMESH,
        &config_with(&endpoint, "tools = { include = [\"whoami\"] }", &auth),
    );
    taskmesh_testkit::wait_upstreams_serving(&plain, token).await;
    let c = Client::connect(&plain.url, Some(token), taskmesh_testkit::V, caps).await;
    let r = c
        .ok("tools/call", json!({"name": "py_whoami", "arguments": {}}))
        .await;
    assert_eq!(text(&r), "none|Bearer taskmesh-own-credential", "{r}");
}

/// A `rerun` tool whose call is lost (here its stdio process exits mid-call) is called again
/// after a pause, up to `call_attempts` calls: a tool that fails once then completes; one that
/// always loses its process fails after the last attempt, saying how many there were.
#[tokio::test]
async fn a_rerun_tool_is_called_again_when_its_call_is_lost() {
    let python = tokio::task::spawn_blocking(python).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("crashed-once");
    let s = Server::start(
        TASKMESH,
        &config_with(
            &stdio_lines(&python),
            "tools = { include = [\"crash\", \"crash_once\"] }\ncall_attempts = 2\n\
             retry_initial_ms = 20\n\n[upstream.overrides.crash]\nresume = \"rerun\"\n\n\
             [upstream.overrides.crash_once]\nresume = \"rerun\"",
            "",
        ),
    );
    let c = Client::new_session(&s.url).await;
    let id = c
        .start_task(
            "py_crash_once",
            json!({"marker": marker.display().to_string()}),
        )
        .await;
    c.wait_status(&id, "completed").await;
    let r = c.ok("tasks/result", json!({"taskId": id})).await;
    assert_eq!(text(&r), "ran again", "{r}");
    assert!(marker.exists());

    let id = c.start_task("py_crash", json!({})).await;
    let t = c.wait_status(&id, "failed").await;
    let why = t["statusMessage"].as_str().unwrap_or_default();
    assert!(
        why.contains("upstream py")
            && why.contains("exit status: 3")
            && why.contains("after 2 attempts"),
        "{t}"
    );
}

/// With `[tracing]` exporting every request (`sample_ratio = 1`), a call of an upstream's tool
/// is one trace: the node's server span (a new trace: the client sent no `traceparent`), the
/// task's execution under it, the upstream call as a client span under that, and the upstream
/// server gets that span's context in its `traceparent` header. A plain call's upstream call is
/// right under the request's span.
#[tokio::test]
async fn a_traced_call_carries_its_context_to_the_upstream_server() {
    use taskmesh_testkit::otlp::Receiver;
    let receiver = Receiver::start().await;
    let python = tokio::task::spawn_blocking(python).await.unwrap();
    let upstream = http_server(&python).await;
    let tracing = format!(
        "[tracing]\notlp_endpoint = \"{}\"\nsample_ratio = 1.0\nexport_delay_ms = 100",
        receiver.url
    );
    let s = Server::start(
        TASKMESH,
        &config_with(
            &format!("url = {:?}", upstream.url),
            "tools = { include = [\"traceparent\"] }",
            &tracing,
        ),
    );
    taskmesh_testkit::wait_upstreams_serving(&s, "").await;
    let c = Client::new_session(&s.url).await;

    // As a task.
    let id = c.start_task("py_traceparent", json!({})).await;
    let done = c.wait_status(&id, "completed").await;
    assert_eq!(done["status"], "completed", "{done}");
    let r = c.ok("tasks/result", json!({"taskId": id})).await;
    let seen = text(&r).to_owned();
    let parts: Vec<&str> = seen.split('-').collect();
    assert_eq!(parts.len(), 4, "the upstream saw no traceparent: {seen}");
    let (trace, parent) = (parts[1].to_owned(), parts[2].to_owned());
    assert_eq!(parts[3], "01", "sampled: {seen}");
    let spans = receiver
        .wait_for(Duration::from_secs(30), |all| {
            all.iter().filter(|s| s.trace_id == trace).count() >= 3
        })
        .await
        .unwrap_or_else(|| panic!("the trace of {seen} never came: {:#?}", receiver.spans()));
    let t: Vec<_> = spans.into_iter().filter(|s| s.trace_id == trace).collect();
    let named = |n: &str| {
        t.iter()
            .find(|s| s.name == n)
            .unwrap_or_else(|| panic!("no span {n}: {t:#?}"))
    };
    let gateway = named("tools/call py_traceparent");
    assert_eq!(gateway.parent_span_id, "", "a new trace: {gateway:?}");
    let exec = named("execute_tool py_traceparent");
    assert_eq!(exec.parent_span_id, gateway.span_id, "{t:#?}");
    assert_eq!(exec.attr("taskmesh.task_id"), Some(id.as_str()));
    let call = named("tools/call traceparent");
    assert_eq!(call.kind, 3, "a client span: {call:?}");
    assert_eq!(call.parent_span_id, exec.span_id, "{t:#?}");
    assert_eq!(call.attr("taskmesh.upstream"), Some("py"));
    assert_eq!(
        parent, call.span_id,
        "the upstream got the client span's context"
    );

    // A plain call.
    let r = c
        .ok(
            "tools/call",
            json!({"name": "py_traceparent", "arguments": {}}),
        )
        .await;
    let seen = text(&r).to_owned();
    let parts: Vec<&str> = seen.split('-').collect();
    assert_eq!(parts.len(), 4, "the upstream saw no traceparent: {seen}");
    let (trace, parent) = (parts[1].to_owned(), parts[2].to_owned());
    let spans = receiver
        .wait_for(Duration::from_secs(30), |all| {
            all.iter().filter(|s| s.trace_id == trace).count() >= 2
        })
        .await
        .unwrap_or_else(|| panic!("the trace of {seen} never came: {:#?}", receiver.spans()));
    let gateway = spans
        .iter()
        .find(|s| s.trace_id == trace && s.name == "tools/call py_traceparent")
        .unwrap();
    let call = spans
        .iter()
        .find(|s| s.trace_id == trace && s.name == "tools/call traceparent")
        .unwrap();
    assert_eq!(call.parent_span_id, gateway.span_id);
    assert_eq!(parent, call.span_id);
}
