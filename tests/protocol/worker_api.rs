//! The worker API's edges: bad input refused with nothing changed, the gRPC service beside
//! the JSON mirror, `notifications/tools/list_changed` as worker tools come and go, the
//! per-tool queue limit and the queue timeout, and fairness across principals.

use serde_json::{json, Value};
use taskmesh_client::jsonrpc::ErrorObject;
use taskmesh_client::worker::{Declaration, Lease};
use taskmesh_testkit::{Client, Server};

use crate::workers::{alice, code, config, imaging, lease_one, register, text_result, tool_names};
use crate::TASKMESH;

/// A raw call of the JSON mirror with `token`: (HTTP status, body).
async fn raw(s: &Server, token: Option<&str>, call: &str, body: Value) -> (u16, Value) {
    let mut r = taskmesh_testkit::http().post(format!(
        "{}/worker/v1/{call}",
        s.url.trim_end_matches("/mcp")
    ));
    if let Some(t) = token {
        r = r.bearer_auth(t);
    }
    let r = r.json(&body).send().await.unwrap();
    (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn bad_worker_input_is_refused_with_a_clear_error_and_changes_nothing() {
    let s = Server::start(TASKMESH, &config());
    let c = alice(&s).await;
    let tool = json!({"name": "resize_x", "inputSchema": {"type": "object"}});
    // Credentials: none, a client's, a worker's on /mcp.
    let (st, body) = raw(&s, None, "register", json!({"tools": [tool]})).await;
    assert_eq!(
        (st, body["error"]["code"].as_str()),
        (401, Some("UNAUTHENTICATED"))
    );
    let (st, body) = raw(
        &s,
        Some("alice-token-1"),
        "register",
        json!({"tools": [tool]}),
    )
    .await;
    assert_eq!(
        (st, body["error"]["code"].as_str()),
        (403, Some("PERMISSION_DENIED"))
    );
    let worker_as_client = Client::new(&s.url).with_token("worker-token-1");
    let r = worker_as_client
        .post(&crate::init_body("2025-11-25"), &[])
        .await;
    assert_eq!(r.status, 403);

    // Registrations: a tool the identity may not serve, a built-in's name, a malformed
    // schema, a malformed body. None of them lists anything.
    let refused = [
        (
            register(
                &s,
                "worker-token-2",
                vec![Declaration::new("resize_y", json!({"type": "object"}))],
            )
            .await,
            "PERMISSION_DENIED",
        ),
        (
            register(
                &s,
                "worker-token-1",
                vec![Declaration::new("slow_compute", json!({"type": "object"}))],
            )
            .await,
            "ALREADY_EXISTS",
        ),
        (
            register(
                &s,
                "worker-token-1",
                vec![Declaration::new("resize_z", json!("string"))],
            )
            .await,
            "INVALID_ARGUMENT",
        ),
        (
            register(
                &s,
                "worker-token-1",
                vec![Declaration::new("bad name!", json!({"type": "object"}))],
            )
            .await,
            "INVALID_ARGUMENT",
        ),
    ];
    for (r, want) in refused {
        assert_eq!(code(r), want);
    }
    let (st, _) = raw(
        &s,
        Some("worker-token-1"),
        "register",
        json!({"tools": "nope"}),
    )
    .await;
    assert_eq!(st, 400);
    let names = tool_names(&c.ok("tools/list", json!({})).await);
    assert!(!names.iter().any(|n| n.starts_with("resize_")), "{names:?}");

    // Leases: an unknown token, another identity's use of a lease, an unknown task, an
    // oversized result; the task is then completed as if none of them had been tried.
    let w = imaging(
        &s,
        vec![Declaration::new("resize_ok", json!({"type": "object"}))],
    )
    .await;
    let other = register(
        &s,
        "worker-token-2",
        vec![Declaration::new("other_tool", json!({"type": "object"}))],
    )
    .await
    .unwrap();
    let id = c.start_task("resize_ok", json!({})).await;
    let lease = lease_one(&w).await;
    let forged = Lease {
        token: "00".repeat(16),
        ..lease.clone()
    };
    assert_eq!(
        code(w.heartbeat(&forged, None, None).await),
        "FAILED_PRECONDITION"
    );
    assert_eq!(
        code(w.complete(&forged, Ok(text_result("x"))).await),
        "FAILED_PRECONDITION"
    );
    assert_eq!(
        code(other.complete(&lease, Ok(text_result("x"))).await),
        "FAILED_PRECONDITION"
    );
    let unknown = Lease {
        task_id: "ab".repeat(16),
        ..lease.clone()
    };
    assert_eq!(
        code(w.complete(&unknown, Ok(text_result("x"))).await),
        "NOT_FOUND"
    );
    let big = text_result(&"x".repeat(4096));
    assert_eq!(code(w.complete(&lease, Ok(big)).await), "INVALID_ARGUMENT");
    assert_eq!(
        code(w.complete(&lease, Ok(json!({"not": "a result"}))).await),
        "INVALID_ARGUMENT"
    );
    assert_eq!(c.status(&id).await, "working");
    let e = ErrorObject {
        code: -32000,
        message: "out of ink".into(),
        data: None,
    };
    assert_eq!(w.complete(&lease, Err(e)).await.unwrap(), "failed");
    let r = c.call("tasks/result", json!({"taskId": id})).await;
    assert_eq!(r["error"]["message"], "out of ink");
    // A poll of another identity's registration is not found.
    let (st, _) = raw(
        &s,
        Some("worker-token-2"),
        "poll",
        json!({"workerId": w.worker_id}),
    )
    .await;
    assert_eq!(st, 404);
}

/// A gRPC request with `token` as its bearer.
fn grpc<T>(token: &str, msg: T) -> tonic::Request<T> {
    let mut r = tonic::Request::new(msg);
    r.metadata_mut()
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    r
}

#[tokio::test]
async fn the_grpc_service_on_the_public_listener_serves_the_same_calls() {
    use taskmesh_rpc::v1;
    use taskmesh_rpc::v1::worker_service_client::WorkerServiceClient;

    let s = Server::start(TASKMESH, &config());
    let c = alice(&s).await;
    let base = s.url.trim_end_matches("/mcp").to_string();
    let mut g = WorkerServiceClient::connect(base).await.unwrap();

    // A client's token is refused, as on the JSON mirror.
    let tool = v1::WorkerTool {
        name: "resize_grpc".into(),
        input_schema_json: r#"{"type":"object"}"#.into(),
        ..Default::default()
    };
    let register = v1::RegisterRequest {
        tools: vec![tool],
        max_concurrent_tasks: 2,
        label: "grpc".into(),
    };
    let refused = g
        .register(grpc("alice-token-1", register.clone()))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::PermissionDenied);
    let reg = g
        .register(grpc("worker-token-1", register))
        .await
        .unwrap()
        .into_inner();
    assert!(!reg.worker_id.is_empty());
    assert_eq!(reg.lease_ms, 1000);

    let id = c.start_task("resize_grpc", json!({"width": 8})).await;
    let mut lease = None;
    for _ in 0..5 {
        let poll = v1::PollRequest {
            worker_id: reg.worker_id.clone(),
            max_tasks: 1,
            wait_ms: 2000,
        };
        let got = g
            .poll(grpc("worker-token-1", poll))
            .await
            .unwrap()
            .into_inner();
        if let Some(l) = got.leases.into_iter().next() {
            lease = Some(l);
            break;
        }
    }
    let lease = lease.expect("a lease over gRPC");
    assert_eq!(lease.task_id, id);
    assert_eq!(
        serde_json::from_str::<Value>(&lease.arguments_json).unwrap(),
        json!({"width": 8})
    );
    let beat = v1::HeartbeatRequest {
        task_id: lease.task_id.clone(),
        token: lease.token.clone(),
        status_message: Some("over gRPC".into()),
        ..Default::default()
    };
    let beat = g
        .heartbeat(grpc("worker-token-1", beat))
        .await
        .unwrap()
        .into_inner();
    assert!(!beat.cancelled);
    let done = v1::CompleteRequest {
        task_id: lease.task_id.clone(),
        token: lease.token.clone(),
        outcome: Some(v1::complete_request::Outcome::ResultJson(
            text_result("8px").to_string(),
        )),
    };
    let status = g
        .complete(grpc("worker-token-1", done.clone()))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(status.status, "completed");
    let again = g.complete(grpc("worker-token-1", done)).await.unwrap_err();
    assert_eq!(again.code(), tonic::Code::FailedPrecondition);
    let result = c.ok("tasks/result", json!({"taskId": id})).await;
    assert_eq!(result["content"][0]["text"], "8px");
    g.deregister(grpc(
        "worker-token-1",
        v1::DeregisterRequest {
            worker_id: reg.worker_id,
        },
    ))
    .await
    .unwrap();
}

/// Read the GET stream until `notifications/tools/list_changed` (bounded by the stream's
/// reader).
async fn until_list_changed(get: &mut taskmesh_testkit::Sse) {
    loop {
        let m = get.next().await.expect("GET stream open");
        if m["method"] == "notifications/tools/list_changed" {
            return;
        }
    }
}

#[tokio::test]
async fn sessions_are_told_when_a_worker_tool_comes_and_goes() {
    let s = Server::start(TASKMESH, &config());
    let c = alice(&s).await;
    let mut get = c.open_get().await;
    let w = imaging(
        &s,
        vec![Declaration::new("resize_told", json!({"type": "object"}))],
    )
    .await;
    until_list_changed(&mut get).await;
    assert!(tool_names(&c.ok("tools/list", json!({})).await).contains(&"resize_told".into()));
    w.deregister().await.unwrap();
    until_list_changed(&mut get).await;
    assert!(!tool_names(&c.ok("tools/list", json!({})).await).contains(&"resize_told".into()));
}

/// At most two queued tasks per tool, and a task waits at most 1 s while no worker serves its
/// tool.
fn bounded_config() -> String {
    config().replace(
        "max_attempts = 2\n",
        "max_attempts = 2\nmax_queued_per_tool = 2\nqueue_timeout_ms = 1000\n",
    )
}

#[tokio::test]
async fn a_full_queue_refuses_creates_and_a_task_without_workers_fails_after_the_queue_timeout() {
    let s = Server::start(TASKMESH, &bounded_config());
    let c = alice(&s).await;
    let w = imaging(
        &s,
        vec![Declaration::new("resize_q", json!({"type": "object"}))],
    )
    .await;
    let a = c.start_task("resize_q", json!({})).await;
    let b = c.start_task("resize_q", json!({})).await;
    // Both wait for a poll: a third is refused with -32001, and nothing is created.
    let full = c
        .call(
            "tools/call",
            json!({"name": "resize_q", "arguments": {}, "task": {}}),
        )
        .await;
    assert_eq!(full["error"]["code"], -32001, "{full}");
    let msg = full["error"]["message"].as_str().unwrap();
    assert!(msg.contains("workers.max_queued_per_tool"), "{msg}");
    let listed = c.ok("tasks/list", json!({})).await;
    assert_eq!(listed["tasks"].as_array().unwrap().len(), 2, "{listed}");
    // The worker goes: no one serves the tool, and the queued tasks fail after the timeout.
    w.deregister().await.unwrap();
    for id in [&a, &b] {
        let t = c.wait_status(id, "failed").await;
        let m = t["statusMessage"].as_str().unwrap();
        assert!(m.contains("No worker served tool 'resize_q'"), "{m}");
    }
}

#[tokio::test]
async fn one_principals_burst_does_not_starve_another() {
    let s = Server::start(TASKMESH, &config());
    let alice = alice(&s).await;
    let bob = Client::connect(
        &s.url,
        Some("bob-token-22"),
        "2025-11-25",
        json!({"tasks": {}}),
    )
    .await;
    let w = imaging(
        &s,
        vec![Declaration::new("resize_fair", json!({"type": "object"}))],
    )
    .await;
    let mut bursts = Vec::new();
    for _ in 0..20 {
        bursts.push(alice.start_task("resize_fair", json!({})).await);
    }
    let bobs = bob.start_task("resize_fair", json!({})).await;
    // Taken one at a time, bob's task comes second: alice's burst is ahead of it only once.
    let first = lease_one(&w).await;
    let second = lease_one(&w).await;
    assert_eq!(first.principal, "alice");
    assert_eq!(
        second.task_id, bobs,
        "bob's task waited behind alice's burst"
    );
    assert_eq!(second.principal, "bob");
}

#[tokio::test]
async fn a_worker_tools_task_support_is_enforced_as_a_built_in_tools() {
    let s = Server::start(TASKMESH, &config());
    let c = alice(&s).await;
    let mut only_task = Declaration::new("resize_required", json!({"type": "object"}));
    only_task.task_support = "required";
    let mut only_plain = Declaration::new("resize_forbidden", json!({"type": "object"}));
    only_plain.task_support = "forbidden";
    let _w = imaging(&s, vec![only_task, only_plain]).await;
    let plain = c
        .call(
            "tools/call",
            json!({"name": "resize_required", "arguments": {}}),
        )
        .await;
    assert_eq!(plain["error"]["code"], -32601, "{plain}");
    let as_task = c
        .call(
            "tools/call",
            json!({"name": "resize_forbidden", "arguments": {}, "task": {}}),
        )
        .await;
    assert_eq!(as_task["error"]["code"], -32601, "{as_task}");
    let listed = c.ok("tasks/list", json!({})).await;
    assert!(listed["tasks"].as_array().unwrap().is_empty(), "{listed}");
}

#[tokio::test]
async fn heartbeats_keep_a_busy_workers_registration_alive() {
    // Registrations idle for 3 s are dropped.
    let s = Server::start(
        TASKMESH,
        &config().replace("idle_timeout_ms = 60000", "idle_timeout_ms = 3000"),
    );
    let c = alice(&s).await;
    let w = imaging(
        &s,
        vec![Declaration::new("resize_busy", json!({"type": "object"}))],
    )
    .await;
    let id = c.start_task("resize_busy", json!({})).await;
    let lease = lease_one(&w).await;
    // Busy for twice the idle timeout: no poll, only heartbeats.
    for _ in 0..12 {
        assert!(!w.heartbeat(&lease, None, None).await.unwrap().cancelled);
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    // Still registered: the tool is listed and the registration polls.
    assert!(tool_names(&c.ok("tools/list", json!({})).await).contains(&"resize_busy".into()));
    assert!(w
        .poll(1, std::time::Duration::from_millis(100))
        .await
        .unwrap()
        .is_empty());
    w.complete(&lease, Ok(text_result("done"))).await.unwrap();
    assert_eq!(c.status(&id).await, "completed");
}
