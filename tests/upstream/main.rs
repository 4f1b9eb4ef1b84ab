//! Upstream MCP servers: taskmesh's MCP client (`taskmesh-client`) against a real server on
//! the official Python SDK (`tests/upstream/server.py`, `mcp==1.30.0`), over stdio and over
//! Streamable HTTP: the handshake, the tool list, calls with their progress, elicitation,
//! sampling and log messages relayed to the caller, tool errors and JSON-RPC errors,
//! `list_changed`, cancellation reaching the server, and a server process that dies mid-call;
//! (`served`) a `taskmesh serve` process serving that server's tools as its own; and
//! (`everything`) the reference server from npm served the same way.

// A test binary: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Map, Value};
use taskmesh_client::{
    CallEvent, Client, ClientError, Endpoint, HttpSpec, Options, StdioSpec, Step,
};

mod everything;
mod failover;
mod served;
mod tasks;

fn python() -> PathBuf {
    taskmesh_testkit::python::mcp_venv(Path::new(env!("CARGO_TARGET_TMPDIR")))
}

fn server_script() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/upstream/server.py")
        .display()
        .to_string()
}

fn stdio_endpoint(python: &Path) -> Endpoint {
    Endpoint::Stdio(StdioSpec {
        command: python.display().to_string(),
        args: vec![server_script(), "stdio".into()],
        env: BTreeMap::from([("PYTHONUNBUFFERED".into(), "1".into())]),
        cwd: None,
    })
}

use taskmesh_testkit::python::UpstreamHttp as HttpServer;

async fn http_server(python: &Path) -> HttpServer {
    http_server_on(python, taskmesh_testkit::free_ports(1)[0]).await
}

/// The HTTP server on `port`, once it listens.
async fn http_server_on(python: &Path, port: u16) -> HttpServer {
    taskmesh_testkit::python::upstream_http(python, port).await
}

fn args(v: Value) -> Map<String, Value> {
    v.as_object().cloned().unwrap()
}

fn text(result: &Value) -> &str {
    result["content"][0]["text"].as_str().unwrap_or_default()
}

/// Run a call to its end, answering its requests with `answer`; its events, and its outcome.
async fn run(
    c: &Client,
    tool: &str,
    a: Value,
    answer: impl Fn(&str, &Value) -> Value,
) -> (Vec<String>, Result<Value, ClientError>) {
    let mut call = c.call_tool(tool, args(a), None).await.unwrap();
    let mut seen = vec![];
    loop {
        match call.next().await {
            Step::Event(CallEvent::Progress {
                progress, total, ..
            }) => seen.push(format!("progress {progress}/{}", total.unwrap_or(0.0))),
            Step::Event(CallEvent::Request {
                method,
                params,
                reply,
            }) => {
                seen.push(format!("request {method}"));
                let _ = reply.send(Ok(answer(&method, &params)));
            }
            Step::Event(CallEvent::Log(p)) => seen.push(format!("log {}", p["data"])),
            Step::Event(CallEvent::Status { status, .. }) => seen.push(format!("status {status}")),
            Step::Done(r) => return (seen, r),
        }
    }
}

fn no_requests(_: &str, _: &Value) -> Value {
    panic!("no request expected")
}

/// Everything a relay needs, against one connected server.
async fn exercise(c: &Client) {
    assert_eq!(c.server().protocol_version, "2025-11-25");
    assert_eq!(c.server().server_info["name"], "upstream-under-test");
    let tools = c.list_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    for want in ["echo", "slow", "ask", "sample", "fail", "chatty", "grow"] {
        assert!(names.contains(&want), "{want} missing from {names:?}");
    }
    let echo = tools.iter().find(|t| t["name"] == "echo").unwrap();
    assert_eq!(echo["inputSchema"]["properties"]["text"]["type"], "string");

    let (seen, r) = run(c, "echo", json!({"text": "hi"}), no_requests).await;
    assert!(seen.is_empty(), "{seen:?}");
    assert_eq!(text(&r.unwrap()), "hi");

    let (seen, r) = run(c, "slow", json!({"steps": 3}), no_requests).await;
    assert_eq!(seen, ["progress 1/3", "progress 2/3", "progress 3/3"]);
    assert_eq!(text(&r.unwrap()), "slept 3 steps");

    let (seen, r) = run(c, "ask", json!({}), |method, params| {
        assert_eq!(method, "elicitation/create");
        assert_eq!(params["message"], "What is your name?");
        json!({"action": "accept", "content": {"name": "Ada"}})
    })
    .await;
    assert_eq!(seen, ["request elicitation/create"]);
    assert_eq!(text(&r.unwrap()), "hello Ada");

    let (seen, r) = run(
        c,
        "sample",
        json!({"prompt": "say hi"}),
        |method, params| {
            assert_eq!(method, "sampling/createMessage");
            assert_eq!(params["messages"][0]["content"]["text"], "say hi");
            json!({"role": "assistant", "content": {"type": "text", "text": "hi"}, "model": "m"})
        },
    )
    .await;
    assert_eq!(seen, ["request sampling/createMessage"]);
    assert_eq!(text(&r.unwrap()), "model said: hi");

    let (_, r) = run(c, "fail", json!({}), no_requests).await;
    let r = r.unwrap();
    assert_eq!(r["isError"], true, "{r}");
    assert!(text(&r).contains("the tool failed on purpose"), "{r}");

    // A JSON-RPC error is the server's answer, exactly (here: a call without a tool name).
    match c.request("tools/call", json!({"arguments": {}})).await {
        Err(ClientError::Rpc(e)) => assert_eq!(e.code, -32602, "{e:?}"),
        other => panic!("expected the JSON-RPC error, got {other:?}"),
    }

    let (seen, r) = run(c, "chatty", json!({}), no_requests).await;
    assert_eq!(seen, ["log \"thinking\""]);
    assert_eq!(text(&r.unwrap()), "done talking");

    let mut changed = c.tools_changed();
    let (_, r) = run(c, "grow", json!({}), no_requests).await;
    assert_eq!(text(&r.unwrap()), "grown");
    tokio::time::timeout(Duration::from_secs(10), changed.changed())
        .await
        .expect("list_changed within 10 s")
        .unwrap();
    let names: Vec<String> = c
        .list_tools()
        .await
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str().map(str::to_string))
        .collect();
    assert!(names.contains(&"extra".to_string()), "{names:?}");

    // A cancelled call is cancelled on the server.
    // (It reports progress once it runs: then the cancellation finds it running.)
    let mut call = c.call_tool("wait_cancel", Map::new(), None).await.unwrap();
    match call.next().await {
        Step::Event(CallEvent::Progress { progress, .. }) => assert_eq!(progress, 0.0),
        other => panic!("expected wait_cancel's progress, got {other:?}"),
    }
    call.cancel("the task was cancelled").await;
    let mut count = String::new();
    for _ in 0..100 {
        let (_, r) = run(c, "cancelled", json!({}), no_requests).await;
        count = text(&r.unwrap()).to_string();
        if count == "1" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(count, "1", "the server never saw the cancellation");
}

#[tokio::test]
async fn a_stdio_server_relays_everything_a_call_sends() {
    let python = tokio::task::spawn_blocking(python).await.unwrap();
    let c = Client::connect(&stdio_endpoint(&python), &Options::default())
        .await
        .unwrap();
    exercise(&c).await;
    c.close().await;
    assert!(c.is_closed());
}

#[tokio::test]
async fn an_http_server_relays_everything_a_call_sends() {
    let python = tokio::task::spawn_blocking(python).await.unwrap();
    let server = http_server(&python).await;
    let endpoint = Endpoint::Http(HttpSpec {
        url: server.url.clone(),
        headers: vec![("x-upstream-test".into(), "1".into())],
        oauth: None,
    });
    let c = Client::connect(&endpoint, &Options::default())
        .await
        .unwrap();
    exercise(&c).await;
    c.close().await;
}

/// A stdio process that exits in the middle of a call: the call fails with the connection's
/// end, naming the exit, and so does every later request.
#[tokio::test]
async fn a_stdio_server_that_dies_mid_call_fails_the_call() {
    let python = tokio::task::spawn_blocking(python).await.unwrap();
    let c = Client::connect(&stdio_endpoint(&python), &Options::default())
        .await
        .unwrap();
    let (_, r) = run(&c, "crash", json!({}), no_requests).await;
    match r {
        Err(ClientError::Closed(why)) => assert!(why.contains("exit status: 3"), "{why}"),
        other => panic!("expected the connection's end, got {other:?}"),
    }
    assert!(c.is_closed());
    assert!(matches!(c.list_tools().await, Err(ClientError::Closed(_))));
}

/// A program that cannot be started is refused clearly; one that writes what is not JSON-RPC
/// and never answers is given up on after `connect_timeout`, and stopped with what it started.
#[tokio::test]
async fn what_is_not_an_mcp_server_is_refused() {
    let missing = Endpoint::Stdio(StdioSpec {
        command: "/nonexistent/upstream".into(),
        ..StdioSpec::default()
    });
    match Client::connect(&missing, &Options::default()).await {
        Err(ClientError::Transport(m)) => assert!(m.contains("cannot start"), "{m}"),
        other => panic!("{:?}", other.map(|_| ())),
    }
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("child.pid");
    let silent = Endpoint::Stdio(StdioSpec {
        command: "/bin/sh".into(),
        args: vec![
            "-c".into(),
            format!(
                "sleep 300 & echo $! > {}; echo not json; wait",
                pid_file.display()
            ),
        ],
        ..StdioSpec::default()
    });
    let opts = Options {
        connect_timeout: Duration::from_secs(1),
        ..Options::default()
    };
    match Client::connect(&silent, &opts).await {
        Err(ClientError::Timeout(_)) => {}
        other => panic!("{:?}", other.map(|_| ())),
    }
    // What the process started ends with it.
    let child = std::fs::read_to_string(&pid_file).unwrap();
    let proc_dir = PathBuf::from(format!("/proc/{}", child.trim()));
    for _ in 0..100 {
        if !proc_dir.exists() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the upstream's child process {} outlived it", child.trim());
}

/// Follow a task call to its end, answering its requests with `answer`; its events, and its
/// outcome.
async fn follow(
    mut task: taskmesh_client::TaskCall,
    answer: impl Fn(&str, &Value) -> Value,
) -> (Vec<String>, Result<Value, ClientError>) {
    let mut seen = vec![];
    loop {
        match task.next().await {
            Step::Event(CallEvent::Progress { progress, .. }) => {
                seen.push(format!("progress {progress}"))
            }
            Step::Event(CallEvent::Request {
                method,
                params,
                reply,
            }) => {
                seen.push(format!("request {method}"));
                let _ = reply.send(Ok(answer(&method, &params)));
            }
            Step::Event(CallEvent::Log(_)) => seen.push("log".into()),
            Step::Event(CallEvent::Status { status, .. }) => seen.push(format!("status {status}")),
            Step::Done(r) => return (seen, r),
        }
    }
}

/// The requestor of `taskmesh-client` against a server that runs calls as tasks
/// (`tests/upstream/task_server.py` over HTTP): a task-augmented call followed to its result
/// with its progress and status changes; the task's elicitation answered through
/// `tasks/result`; a task followed from a second session by its id; a task the server does
/// not know is lost; a cancelled task.
#[tokio::test]
async fn the_requestor_follows_a_server_s_tasks_to_their_results() {
    let python = tokio::task::spawn_blocking(python).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let up = taskmesh_testkit::python::task_upstream_http(
        &python,
        taskmesh_testkit::free_ports(1)[0],
        &dir.path().join("starts"),
    )
    .await;
    let endpoint = Endpoint::Http(HttpSpec {
        url: up.url.clone(),
        headers: vec![],
        oauth: None,
    });
    let c = Client::connect(&endpoint, &Options::default())
        .await
        .unwrap();
    assert!(
        c.server().capabilities["tasks"]["requests"]["tools"]["call"].is_object(),
        "{:?}",
        c.server().capabilities
    );
    let polling = taskmesh_client::Polling {
        min: Duration::from_millis(20),
        ..taskmesh_client::Polling::default()
    };
    let task = c
        .call_tool_as_task(
            "research",
            args(json!({"seconds": 0.6, "steps": 3})),
            Some(60_000),
            &[],
            polling,
        )
        .await
        .unwrap();
    assert!(!task.task_id().is_empty());
    let (seen, r) = follow(task, |_, _| panic!("no request expected")).await;
    assert_eq!(text(&r.unwrap()), "researched for 0.6 s in 3 steps");
    let progress: Vec<&String> = seen.iter().filter(|s| s.starts_with("progress")).collect();
    assert_eq!(
        progress,
        ["progress 1", "progress 2", "progress 3"],
        "{seen:?}"
    );
    assert_eq!(
        seen.first().map(String::as_str),
        Some("status working"),
        "{seen:?}"
    );

    let task = c
        .call_tool_as_task(
            "clarify",
            args(json!({"topic": "java"})),
            None,
            &[],
            polling,
        )
        .await
        .unwrap();
    let (seen, r) = follow(task, |method, params| {
        assert_eq!(method, "elicitation/create");
        assert_eq!(params["message"], "Which java do you mean?");
        json!({"action": "accept", "content": {"meaning": "the island"}})
    })
    .await;
    assert_eq!(text(&r.unwrap()), "java as in the island");
    assert!(
        seen.contains(&"request elicitation/create".to_string()),
        "{seen:?}"
    );

    // Another session follows a task by its id.
    let task = c
        .call_tool_as_task(
            "research",
            args(json!({"seconds": 0.5})),
            None,
            &[],
            polling,
        )
        .await
        .unwrap();
    let id = task.task_id().to_string();
    drop(task);
    let other = Client::connect(&endpoint, &Options::default())
        .await
        .unwrap();
    let (_, r) = follow(other.follow_task(&id, polling), |_, _| Value::Null).await;
    assert_eq!(text(&r.unwrap()), "researched for 0.5 s in 1 steps");

    let (_, r) = follow(other.follow_task("no-such-task", polling), |_, _| {
        Value::Null
    })
    .await;
    assert!(matches!(r, Err(ClientError::TaskLost(_))), "{r:?}");

    let task = c
        .call_tool_as_task("research", args(json!({"seconds": 60})), None, &[], polling)
        .await
        .unwrap();
    let id = task.task_id().to_string();
    task.cancel("the test is done with it").await;
    let (_, r) = follow(other.follow_task(&id, polling), |_, _| Value::Null).await;
    assert!(matches!(r, Err(ClientError::TaskCancelled(_))), "{r:?}");
}
