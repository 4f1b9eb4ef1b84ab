//! Protocol tests over real HTTP against a real `taskmesh serve` process: the transport rules,
//! the JSON-RPC error table, the task state machine, TTL, pagination, isolation, progress,
//! input_required round trips and cancellation.

use std::time::Duration;

use serde_json::{json, Value};
use taskmesh_testkit::{Client, Server, V};

/// The server executable under test.
const TASKMESH: &str = env!("CARGO_BIN_EXE_taskmesh");

const AUTH: &str = r#"
[auth.tokens]
"alice-token-1" = "alice"
"bob-token-22" = "bob"
"#;

fn init_body(version: &str) -> String {
    json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{
        "protocolVersion": version, "capabilities": {}, "clientInfo": {"name":"t","version":"1"}}})
    .to_string()
}

#[tokio::test]
async fn initialize_negotiates_versions_and_capabilities() {
    let s = Server::start(TASKMESH, "");
    let c = Client::new(&s.url);
    let r = c.post(&init_body(V), &[]).await;
    let v = r.json();
    assert_eq!(v["result"]["protocolVersion"], V);
    assert_eq!(
        v["result"]["capabilities"]["tasks"]["requests"]["tools"]["call"],
        json!({})
    );
    assert_eq!(v["result"]["capabilities"]["tasks"]["cancel"], json!({}));
    // No authentication: tasks cannot be scoped to a requestor, so no tasks.list.
    assert!(v["result"]["capabilities"]["tasks"].get("list").is_none());
    // No log messages are sent, so no logging capability is declared.
    assert!(v["result"]["capabilities"].get("logging").is_none());
    assert!(r.headers.get("mcp-session-id").is_some());

    for old in ["2025-06-18", "2025-03-26"] {
        let v = c.post(&init_body(old), &[]).await.json();
        assert_eq!(v["result"]["protocolVersion"], old);
        assert!(v["result"]["capabilities"].get("tasks").is_none(), "{old}");
    }
    let v = c.post(&init_body("1999-01-01"), &[]).await.json();
    assert_eq!(v["result"]["protocolVersion"], V);

    // Every tool declares execution.taskSupport under 2025-11-25.
    let c = Client::new_session(&s.url).await;
    let tools = c.ok("tools/list", json!({})).await;
    let names: Vec<&str> = tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "greet",
            "slow_compute",
            "failing_job",
            "protocol_error_job",
            "confirm_delete",
            "multi_input",
            "ask_model"
        ]
    );
    let support = |n: &str| {
        tools["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == n)
            .unwrap()["execution"]["taskSupport"]
            .clone()
    };
    assert_eq!(support("greet"), "forbidden");
    assert_eq!(support("slow_compute"), "optional");
    assert_eq!(support("failing_job"), "required");
    assert_eq!(support("protocol_error_job"), "optional");
    assert_eq!(support("confirm_delete"), "required");
    assert_eq!(support("multi_input"), "required");
    assert_eq!(support("ask_model"), "required");
    assert_eq!(c.ok("ping", json!({})).await, json!({}));
}

#[tokio::test]
async fn transport_rules() {
    let s = Server::start(TASKMESH, "[http]\nmax_body_bytes = 2048\n");
    let c = Client::new_session(&s.url).await;
    let ping = json!({"jsonrpc":"2.0","id":5,"method":"ping"}).to_string();

    // Missing session header: 400. Unknown or forged session: 404.
    let mut anon = c.clone();
    anon.session = None;
    assert_eq!(anon.post(&ping, &[]).await.status, 400);
    let mut forged = c.clone();
    forged.session = Some(format!("{}x", c.session.as_ref().unwrap()));
    assert_eq!(forged.post(&ping, &[]).await.status, 404);
    forged.session = Some("not-a-session".into());
    assert_eq!(forged.post(&ping, &[]).await.status, 404);

    // Unsupported or mismatched protocol version header: 400.
    let mut wrong = c.clone();
    wrong.version = "2024-01-01".into();
    assert_eq!(wrong.post(&ping, &[]).await.status, 400);
    wrong.version = "2025-06-18".into();
    assert_eq!(wrong.post(&ping, &[]).await.status, 400);
    assert_eq!(c.post(&ping, &[]).await.status, 200);

    // Origin allow-list (DNS rebinding protection).
    assert_eq!(
        c.post(&ping, &[("origin", "http://evil.example")])
            .await
            .status,
        403
    );
    assert_eq!(
        c.post(&ping, &[("origin", "http://localhost:3000")])
            .await
            .status,
        200
    );
    assert_eq!(
        c.post(&ping, &[("origin", "http://localhost.evil.example")])
            .await
            .status,
        403
    );

    // Body over the limit: 413, nothing happens.
    let big = json!({"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"greet","arguments":{"name":"x".repeat(4096)}}}).to_string();
    assert_eq!(c.post(&big, &[]).await.status, 413);

    // Notifications and client responses: 202 without a body.
    let n = c
        .post(
            &json!({"jsonrpc":"2.0","method":"notifications/whatever"}).to_string(),
            &[],
        )
        .await;
    assert_eq!((n.status, n.body.as_str()), (202, ""));
    let resp = c
        .post(
            &json!({"jsonrpc":"2.0","id":"tm-unknown-1","result":{}}).to_string(),
            &[],
        )
        .await;
    assert_eq!(resp.status, 202);

    // GET without a session: 400; DELETE ends the session; afterwards 404.
    let g = taskmesh_testkit::http()
        .get(&s.url)
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(g.status().as_u16(), 400);
    let d = taskmesh_testkit::http()
        .delete(&s.url)
        .header("mcp-session-id", c.session.as_ref().unwrap())
        .header("mcp-protocol-version", V)
        .send()
        .await
        .unwrap();
    assert_eq!(d.status().as_u16(), 200);
    assert_eq!(c.post(&ping, &[]).await.status, 404);
}

#[tokio::test]
async fn jsonrpc_error_table_changes_nothing() {
    let s = Server::start(TASKMESH, AUTH);
    let c = Client::connect(&s.url, Some("alice-token-1"), V, json!({})).await;
    let raw = |body: &'static str| {
        let c = c.clone();
        async move {
            let r = c.post(body, &[]).await;
            assert_eq!(r.status, 400, "{body}: {}", r.body);
            let v = r.json();
            assert_eq!(v["id"], Value::Null);
            v["error"]["code"].as_i64().unwrap()
        }
    };
    assert_eq!(
        raw("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":").await,
        -32700
    );
    assert_eq!(
        raw("[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}]").await,
        -32600
    );
    assert_eq!(raw("{\"id\":1,\"method\":\"ping\"}").await, -32600);
    assert_eq!(
        raw("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":7}").await,
        -32600
    );
    assert_eq!(raw("42").await, -32600);

    assert_eq!(c.err_code("no/such/method", json!({})).await, -32601);
    let r = c.call("tasks/get", json!({"taskId": 5})).await;
    assert_eq!(r["error"]["code"], -32602);
    assert!(
        r["error"]["message"].as_str().unwrap().contains("taskId"),
        "{r}"
    );
    let r = c
        .call(
            "tools/call",
            json!({"name": "slow_compute", "arguments": {"seconds": "ten"}, "task": {}}),
        )
        .await;
    assert_eq!(r["error"]["code"], -32602);
    assert!(
        r["error"]["message"].as_str().unwrap().contains("seconds"),
        "{r}"
    );
    let r = c
        .call(
            "tools/call",
            json!({"name": "slow_compute", "arguments": {"seconds": 1}, "task": {"ttl": "long"}}),
        )
        .await;
    assert!(
        r["error"]["message"].as_str().unwrap().contains("ttl"),
        "{r}"
    );
    assert_eq!(c.err_code("tools/call", json!({"name": 3})).await, -32602);
    assert_eq!(
        c.err_code("tools/call", json!({"name": "nope"})).await,
        -32602
    );
    assert_eq!(
        c.err_code(
            "tools/call",
            json!({"name": "greet", "arguments": {"name": "a"}, "task": {}})
        )
        .await,
        -32601
    );
    assert_eq!(
        c.err_code(
            "tools/call",
            json!({"name": "failing_job", "arguments": {}})
        )
        .await,
        -32601
    );
    assert_eq!(
        c.err_code(
            "tools/call",
            json!({"name": "confirm_delete", "arguments": {"filename": "f"}})
        )
        .await,
        -32601
    );
    for m in ["tasks/get", "tasks/result", "tasks/cancel"] {
        assert_eq!(
            c.err_code(m, json!({"taskId": "0123456789abcdef0123456789abcdef"}))
                .await,
            -32602,
            "{m}"
        );
        assert_eq!(c.err_code(m, json!({})).await, -32602, "{m}");
    }
    assert_eq!(
        c.err_code("tasks/list", json!({"cursor": "forged"})).await,
        -32602
    );
    // None of the above created anything.
    let list = c.ok("tasks/list", json!({})).await;
    assert_eq!(list["tasks"], json!([]));
}

#[tokio::test]
async fn lifecycle_result_replay_and_failures() {
    let s = Server::start(TASKMESH, "");
    let c = Client::new_session(&s.url).await;
    let created = c.ok("tools/call", json!({"name":"slow_compute","arguments":{"seconds":0.3,"label":"L"},"task":{"ttl":60000}})).await;
    let t = &created["task"];
    assert_eq!(t["status"], "working");
    assert_eq!(t["ttl"], 60000);
    assert!(t["pollInterval"].as_u64().unwrap() > 0);
    assert!(t["createdAt"].as_str().unwrap().ends_with('Z'));
    let id = t["taskId"].as_str().unwrap().to_string();
    assert_eq!(id.len(), 32);

    let first = c.call("tasks/result", json!({"taskId": id})).await;
    let result = &first["result"];
    assert_eq!(
        result["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        id
    );
    assert_eq!(result["content"][0]["text"], "L: computed for 0.3 seconds");
    assert_eq!(result["isError"], false);
    let got = c.ok("tasks/get", json!({"taskId": id})).await;
    assert_eq!(got["status"], "completed");
    assert!(got.get("_meta").is_none());
    // Reading does not consume: the same answer again.
    let second = c.call("tasks/result", json!({"taskId": id})).await;
    assert_eq!(first["result"], second["result"]);
    // Terminal is sticky: cancel is refused and changes nothing.
    let e = c.call("tasks/cancel", json!({"taskId": id})).await;
    assert_eq!(e["error"]["code"], -32602);
    assert!(e["error"]["message"]
        .as_str()
        .unwrap()
        .contains("completed"));
    assert_eq!(c.ok("tasks/get", json!({"taskId": id})).await, got);

    // A tool result with isError: failed, with a useful statusMessage; the result is replayed.
    let f = c.start_task("failing_job", json!({})).await;
    let r = c.call("tasks/result", json!({"taskId": f})).await;
    assert_eq!(r["result"]["isError"], true);
    let g = c.ok("tasks/get", json!({"taskId": f})).await;
    assert_eq!(g["status"], "failed");
    assert!(
        g["statusMessage"].as_str().unwrap().contains("disk quota"),
        "{g}"
    );

    // A JSON-RPC error of the underlying request: failed, and tasks/result replays that error.
    let p = c.start_task("protocol_error_job", json!({})).await;
    let r = c.call("tasks/result", json!({"taskId": p})).await;
    assert_eq!(r["error"]["code"], -32603);
    assert!(r["error"]["message"]
        .as_str()
        .unwrap()
        .contains("malformed reply"));
    let g = c.ok("tasks/get", json!({"taskId": p})).await;
    assert_eq!(g["status"], "failed");
    assert!(g["statusMessage"].as_str().unwrap().contains("-32603"));
    // The plain (non-task) call of the same tool gives the same error.
    let plain = c
        .call(
            "tools/call",
            json!({"name":"protocol_error_job","arguments":{}}),
        )
        .await;
    assert_eq!(plain["error"], r["error"]);
}

#[tokio::test]
async fn cancel_stops_the_execution_and_releases_result_readers() {
    let s = Server::start(TASKMESH, "");
    let c = Client::new_session(&s.url).await;
    let created = c.ok("tools/call", json!({"name":"slow_compute","arguments":{"seconds":30},"task":{},"_meta":{"progressToken":"pc"}})).await;
    let id = created["task"]["taskId"].as_str().unwrap().to_string();
    let (rid, mut stream) = c.open_stream("tasks/result", json!({"taskId": id})).await;
    // The first progress notification shows the execution runs and the stream is attached.
    let first = stream.next().await.unwrap();
    assert_eq!(first["method"], "notifications/progress");

    let cancelled = c.ok("tasks/cancel", json!({"taskId": id})).await;
    assert_eq!(cancelled["status"], "cancelled");
    assert_eq!(cancelled["taskId"], id);
    // The pending tasks/result is released with the documented error.
    let mut last = None;
    while let Some(m) = stream.next().await {
        if m["id"] == json!(rid) {
            last = Some(m);
            break;
        }
    }
    let last = last.expect("tasks/result answered");
    assert_eq!(last["error"]["code"], -32603);
    assert!(last["error"]["message"]
        .as_str()
        .unwrap()
        .contains("cancelled"));

    // The execution stopped: no more progress for this task reaches the session's GET stream.
    let mut get = c.open_get().await;
    let watch = tokio::time::timeout(Duration::from_millis(2500), async {
        while let Some(m) = get.next().await {
            if m["method"] == "notifications/progress" {
                return Some(m);
            }
        }
        None
    })
    .await;
    assert!(
        matches!(watch, Err(_) | Ok(None)),
        "progress after cancel: {watch:?}"
    );
    assert_eq!(c.status(&id).await, "cancelled");
    assert_eq!(
        c.err_code("tasks/cancel", json!({"taskId": id})).await,
        -32602
    );
}

#[tokio::test]
async fn cancel_racing_completion_is_consistent() {
    let s = Server::start(TASKMESH, "");
    let c = Client::new_session(&s.url).await;
    let mut ids = vec![];
    for _ in 0..12 {
        ids.push(c.start_task("slow_compute", json!({"seconds": 0.02})).await);
    }
    let mut handles = vec![];
    for id in ids {
        let c = c.clone();
        handles.push(tokio::spawn(async move {
            let r = c.call("tasks/cancel", json!({"taskId": id})).await;
            (id, r)
        }));
    }
    for h in handles {
        let (id, r) = h.await.unwrap();
        let final_status = c.status(&id).await;
        if r.get("result").is_some() {
            assert_eq!(r["result"]["status"], "cancelled");
            assert_eq!(final_status, "cancelled");
        } else {
            assert_eq!(r["error"]["code"], -32602);
            assert_eq!(final_status, "completed", "{r}");
        }
        // Sticky: the answer does not change afterwards.
        tokio::time::sleep(Duration::from_millis(30)).await;
        assert_eq!(c.status(&id).await, final_status);
    }
}

#[tokio::test]
async fn ttl_default_cap_and_expiry() {
    let s = Server::start(
        TASKMESH,
        "[tasks]\ndefault_ttl_ms = 30000\nmax_ttl_ms = 60000\nexpiry_sweep_interval_ms = 100\n",
    );
    let c = Client::new_session(&s.url).await;
    let t = c
        .ok(
            "tools/call",
            json!({"name":"slow_compute","arguments":{"seconds":0},"task":{}}),
        )
        .await;
    assert_eq!(t["task"]["ttl"], 30000);
    let t = c
        .ok(
            "tools/call",
            json!({"name":"slow_compute","arguments":{"seconds":0},"task":{"ttl": 999999999}}),
        )
        .await;
    assert_eq!(t["task"]["ttl"], 60000);

    let short = c
        .ok(
            "tools/call",
            json!({"name":"slow_compute","arguments":{"seconds":0},"task":{"ttl": 400}}),
        )
        .await;
    let id = short["task"]["taskId"].as_str().unwrap().to_string();
    assert_eq!(short["task"]["ttl"], 400);
    let mut gone = false;
    for _ in 0..200 {
        let r = c.call("tasks/get", json!({"taskId": id})).await;
        if r.get("error").is_some() {
            assert_eq!(r["error"]["code"], -32602);
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(gone, "task never expired");
    assert_eq!(
        c.err_code("tasks/result", json!({"taskId": id})).await,
        -32602
    );
    assert_eq!(
        c.err_code("tasks/cancel", json!({"taskId": id})).await,
        -32602
    );
}

#[tokio::test]
async fn list_pagination_and_cursor_forgery() {
    let s = Server::start(TASKMESH, &format!("{AUTH}\n[tasks]\nlist_page_size = 3\n"));
    let alice = Client::connect(&s.url, Some("alice-token-1"), V, json!({})).await;
    let bob = Client::connect(&s.url, Some("bob-token-22"), V, json!({})).await;
    let init = alice.post(&init_body(V), &[]).await;
    assert_eq!(
        init.json()["result"]["capabilities"]["tasks"]["list"],
        json!({})
    );
    let mut mine = std::collections::BTreeSet::new();
    for _ in 0..7 {
        mine.insert(
            alice
                .start_task("slow_compute", json!({"seconds": 0}))
                .await,
        );
    }
    bob.start_task("slow_compute", json!({"seconds": 0})).await;

    let mut seen = vec![];
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    let mut cursors = vec![];
    loop {
        let params = match &cursor {
            Some(c) => json!({"cursor": c}),
            None => json!({}),
        };
        let page = alice.ok("tasks/list", params).await;
        pages += 1;
        let tasks = page["tasks"].as_array().unwrap();
        assert!(tasks.len() <= 3);
        for t in tasks {
            assert!(t.get("ttl").is_some() && t.get("createdAt").is_some());
            seen.push(t["taskId"].as_str().unwrap().to_string());
        }
        match page.get("nextCursor").and_then(Value::as_str) {
            Some(c) => {
                cursors.push(c.to_string());
                cursor = Some(c.to_string());
            }
            None => break,
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(seen.len(), 7);
    assert_eq!(
        seen.iter()
            .cloned()
            .collect::<std::collections::BTreeSet<_>>(),
        mine
    );

    // Forged, altered and foreign cursors are rejected.
    let c0 = &cursors[0];
    let mut altered = c0.clone();
    let last = altered.pop().unwrap();
    altered.push(if last == 'A' { 'B' } else { 'A' });
    assert_eq!(
        alice
            .err_code("tasks/list", json!({"cursor": altered}))
            .await,
        -32602
    );
    assert_eq!(
        alice
            .err_code("tasks/list", json!({"cursor": "eyJvIjoiYWxpY2UifQ.AAAA"}))
            .await,
        -32602
    );
    assert_eq!(
        bob.err_code("tasks/list", json!({"cursor": c0})).await,
        -32602
    );
    assert_eq!(
        alice.err_code("tasks/list", json!({"cursor": 17})).await,
        -32602
    );
}

#[tokio::test]
async fn principals_are_isolated() {
    let s = Server::start(TASKMESH, AUTH);
    let alice = Client::connect(&s.url, Some("alice-token-1"), V, json!({})).await;
    let bob = Client::connect(&s.url, Some("bob-token-22"), V, json!({})).await;
    let id = alice
        .start_task("slow_compute", json!({"seconds": 5}))
        .await;
    let unknown = "0123456789abcdef0123456789abcdef";
    for m in ["tasks/get", "tasks/result", "tasks/cancel"] {
        let foreign = bob.call(m, json!({"taskId": id})).await;
        let missing = bob.call(m, json!({"taskId": unknown})).await;
        assert_eq!(foreign["error"], missing["error"], "{m}");
        assert_eq!(foreign["error"]["code"], -32602);
    }
    assert_eq!(bob.ok("tasks/list", json!({})).await["tasks"], json!([]));
    assert_eq!(
        alice.ok("tasks/list", json!({})).await["tasks"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    // Bob's cancel did nothing.
    assert_eq!(alice.status(&id).await, "working");

    // Authentication: none or a wrong token is 401 with a challenge.
    let ping = json!({"jsonrpc":"2.0","id":1,"method":"ping"}).to_string();
    let mut anon = alice.clone();
    anon.token = None;
    let r = anon.post(&ping, &[]).await;
    assert_eq!(r.status, 401);
    assert!(r
        .headers
        .get("www-authenticate")
        .unwrap()
        .to_str()
        .unwrap()
        .starts_with("Bearer"));
    anon.token = Some("wrong-token-x".into());
    let r = anon.post(&ping, &[]).await;
    assert_eq!(r.status, 401);
    assert!(r
        .headers
        .get("www-authenticate")
        .unwrap()
        .to_str()
        .unwrap()
        .contains("invalid_token"));
    // Alice's session with Bob's token is unknown.
    let mut stolen = alice.clone();
    stolen.token = Some("bob-token-22".into());
    assert_eq!(stolen.post(&ping, &[]).await.status, 404);
    assert_eq!(
        alice.ok("tasks/cancel", json!({"taskId": id})).await["status"],
        "cancelled"
    );
}

#[tokio::test]
async fn progress_on_plain_calls_and_on_tasks() {
    let s = Server::start(TASKMESH, "");
    let c = Client::new_session(&s.url).await;
    // Plain call with a progress token: progress on the response stream, then the result.
    let (resp, before) = c
        .call_full(
            "tools/call",
            json!({"name":"slow_compute","arguments":{"seconds":2.2},"_meta":{"progressToken":7}}),
        )
        .await;
    assert_eq!(resp["result"]["isError"], false);
    let progress: Vec<&Value> = before
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .collect();
    assert!(progress.len() >= 2, "{before:?}");
    assert!(progress.iter().all(|p| p["params"]["progressToken"] == 7));
    let values: Vec<f64> = progress
        .iter()
        .map(|p| p["params"]["progress"].as_f64().unwrap())
        .collect();
    assert!(values.windows(2).all(|w| w[0] < w[1]), "{values:?}");

    // A task: progress keeps flowing on the original token after CreateTaskResult (here to the
    // GET stream, as no tasks/result is open), with the related-task _meta, and stops at terminal.
    let mut get = c.open_get().await;
    let created = c
        .ok("tools/call", json!({"name":"slow_compute","arguments":{"seconds":2.2},"task":{},"_meta":{"progressToken":"tp"}}))
        .await;
    let id = created["task"]["taskId"].as_str().unwrap().to_string();
    let mut saw_progress = 0;
    let mut saw_completed = false;
    while let Some(m) = get.next().await {
        if m["method"] == "notifications/progress" {
            assert!(!saw_completed, "progress after terminal status");
            assert_eq!(m["params"]["progressToken"], "tp");
            assert_eq!(
                m["params"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
                id
            );
            saw_progress += 1;
        }
        if m["method"] == "notifications/tasks/status" && m["params"]["taskId"] == id {
            assert!(m["params"].get("_meta").is_none());
            assert!(m["params"].get("ttl").is_some());
            if m["params"]["status"] == "completed" {
                saw_completed = true;
                break;
            }
        }
    }
    assert!(
        saw_progress >= 2 && saw_completed,
        "progress {saw_progress}, completed {saw_completed}"
    );
}

/// Drive a task that asks the client: poll until input_required, open tasks/result, answer each
/// request with `answers` in order, and return (requests seen, final response).
async fn drive_interactive(c: &Client, id: &str, answers: Vec<Value>) -> (Vec<Value>, Value) {
    c.wait_status(id, "input_required").await;
    let (rid, mut stream) = c.open_stream("tasks/result", json!({"taskId": id})).await;
    let mut answers = answers.into_iter();
    let mut requests = vec![];
    while let Some(m) = stream.next().await {
        if m["id"] == json!(rid) {
            return (requests, m);
        }
        if m.get("method").is_some() && m.get("id").is_some() {
            requests.push(m.clone());
            let a = answers.next().expect("more requests than answers");
            c.answer(&m["id"], a).await;
        }
    }
    panic!("tasks/result stream ended without a response");
}

#[tokio::test]
async fn input_required_round_trip_elicitation() {
    let s = Server::start(TASKMESH, "");
    let c = Client::new_session(&s.url).await;
    let id = c
        .start_task("confirm_delete", json!({"filename": "report.pdf"}))
        .await;
    let (reqs, resp) = drive_interactive(
        &c,
        &id,
        vec![json!({"action":"accept","content":{"confirm":true}})],
    )
    .await;
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0]["method"], "elicitation/create");
    assert_eq!(
        reqs[0]["params"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        id
    );
    assert_eq!(
        reqs[0]["params"]["requestedSchema"]["properties"]["confirm"]["type"],
        "boolean"
    );
    assert_eq!(resp["result"]["content"][0]["text"], "Deleted report.pdf");
    assert_eq!(c.status(&id).await, "completed");

    // Two elicitations; the task returns to working between them.
    let id = c.start_task("multi_input", json!({})).await;
    c.wait_status(&id, "input_required").await;
    let (rid, mut stream) = c.open_stream("tasks/result", json!({"taskId": id})).await;
    let q1 = stream.next().await.unwrap();
    assert_eq!(q1["method"], "elicitation/create");
    c.answer(
        &q1["id"],
        json!({"action":"accept","content":{"name":"Ada"}}),
    )
    .await;
    let q2 = stream.next().await.unwrap();
    assert_eq!(q2["method"], "elicitation/create");
    assert_ne!(q1["id"], q2["id"]);
    c.answer(
        &q2["id"],
        json!({"action":"accept","content":{"colour":"green"}}),
    )
    .await;
    let fin = stream.next().await.unwrap();
    assert_eq!(fin["id"], json!(rid));
    assert_eq!(fin["result"]["content"][0]["text"], "Ada likes green");

    // A request still unanswered is delivered again to a new tasks/result reader.
    let id = c
        .start_task("confirm_delete", json!({"filename": "x"}))
        .await;
    c.wait_status(&id, "input_required").await;
    let (_, mut s1) = c.open_stream("tasks/result", json!({"taskId": id})).await;
    let q = s1.next().await.unwrap();
    drop(s1);
    let (reqs, resp) = drive_interactive(&c, &id, vec![json!({"action":"decline"})]).await;
    assert_eq!(reqs[0]["id"], q["id"]);
    assert!(resp["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .starts_with("Kept"));
}

#[tokio::test]
async fn input_required_round_trip_sampling() {
    let s = Server::start(TASKMESH, "");
    let c = Client::new_session(&s.url).await;
    let id = c
        .start_task("ask_model", json!({"prompt": "What is 6 x 7?"}))
        .await;
    let (reqs, resp) = drive_interactive(
        &c,
        &id,
        vec![json!({"role":"assistant","content":{"type":"text","text":"42"},"model":"test-model","stopReason":"endTurn"})],
    )
    .await;
    assert_eq!(reqs[0]["method"], "sampling/createMessage");
    assert_eq!(
        reqs[0]["params"]["messages"][0]["content"]["text"],
        "What is 6 x 7?"
    );
    assert_eq!(
        reqs[0]["params"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        id
    );
    assert_eq!(resp["result"]["content"][0]["text"], "The model said: 42");

    // A client without the sampling capability: the task fails with a statusMessage saying why.
    let plain = Client::connect(&s.url, None, V, json!({})).await;
    let id = plain.start_task("ask_model", json!({"prompt": "q"})).await;
    let g = plain.wait_status(&id, "failed").await;
    assert!(
        g["statusMessage"].as_str().unwrap().contains("sampling"),
        "{g}"
    );
}

#[tokio::test]
async fn input_required_request_reaches_the_get_stream() {
    let s = Server::start(TASKMESH, "");
    let c = Client::new_session(&s.url).await;
    let mut get = c.open_get().await;
    let id = c
        .start_task("confirm_delete", json!({"filename": "g"}))
        .await;
    let req = loop {
        let m = get.next().await.expect("GET stream open");
        if m["method"] == "elicitation/create" {
            break m;
        }
    };
    assert_eq!(
        req["params"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        id
    );
    c.answer(
        &req["id"],
        json!({"action":"accept","content":{"confirm":false}}),
    )
    .await;
    let r = c.call("tasks/result", json!({"taskId": id})).await;
    assert!(r["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .starts_with("Kept g"));
}

#[tokio::test]
async fn live_task_cap_refuses_and_creates_nothing() {
    let s = Server::start(TASKMESH, &format!("{AUTH}\n[tasks]\nmax_live_tasks = 2\n"));
    let c = Client::connect(&s.url, Some("alice-token-1"), V, json!({})).await;
    let a = c.start_task("slow_compute", json!({"seconds": 30})).await;
    c.start_task("slow_compute", json!({"seconds": 30})).await;
    let r = c
        .call(
            "tools/call",
            json!({"name":"slow_compute","arguments":{"seconds":1},"task":{}}),
        )
        .await;
    assert_eq!(r["error"]["code"], -32001, "{r}");
    assert!(r["error"]["message"]
        .as_str()
        .unwrap()
        .contains("max_live_tasks"));
    assert_eq!(
        c.ok("tasks/list", json!({})).await["tasks"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    // A slot frees when a task ends.
    c.ok("tasks/cancel", json!({"taskId": a})).await;
    let mut created = false;
    for _ in 0..100 {
        let r = c
            .call(
                "tools/call",
                json!({"name":"slow_compute","arguments":{"seconds":0},"task":{}}),
            )
            .await;
        if r.get("result").is_some() {
            created = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(created);
}

#[tokio::test]
async fn older_protocol_versions_are_plain_tools_servers() {
    let s = Server::start(TASKMESH, "");
    let c = Client::connect(&s.url, None, "2025-06-18", json!({"elicitation":{}})).await;
    // `task` is ignored: the tool result comes back directly.
    let r = c
        .ok(
            "tools/call",
            json!({"name":"slow_compute","arguments":{"seconds":0,"label":"old"},"task":{}}),
        )
        .await;
    assert_eq!(r["content"][0]["text"], "old: computed for 0 seconds");
    assert!(r.get("task").is_none());
    assert_eq!(
        c.err_code("tasks/get", json!({"taskId": "x"})).await,
        -32601
    );
    assert_eq!(c.err_code("tasks/list", json!({})).await, -32601);
    let tools = c.ok("tools/list", json!({})).await;
    assert!(tools["tools"][0].get("execution").is_none());
    // An interactive tool runs plainly: its elicitation arrives on the POST's stream.
    let (rid, mut stream) = c
        .open_stream(
            "tools/call",
            json!({"name":"confirm_delete","arguments":{"filename":"o"}}),
        )
        .await;
    let q = stream.next().await.unwrap();
    assert_eq!(q["method"], "elicitation/create");
    c.answer(
        &q["id"],
        json!({"action":"accept","content":{"confirm":true}}),
    )
    .await;
    let fin = stream.next().await.unwrap();
    assert_eq!(fin["id"], json!(rid));
    assert_eq!(fin["result"]["content"][0]["text"], "Deleted o");
}

#[tokio::test]
async fn tools_list_pagination_no_logging_and_plain_cancellation() {
    let s = Server::start(TASKMESH, "[tools]\npage_size = 3\n");
    let c = Client::new_session(&s.url).await;
    let mut names = vec![];
    let mut cursor: Option<String> = None;
    loop {
        let p = match &cursor {
            Some(c) => json!({"cursor": c}),
            None => json!({}),
        };
        let page = c.ok("tools/list", p).await;
        for t in page["tools"].as_array().unwrap() {
            names.push(t["name"].as_str().unwrap().to_string());
        }
        match page.get("nextCursor").and_then(Value::as_str) {
            Some(n) => cursor = Some(n.to_string()),
            None => break,
        }
    }
    assert_eq!(names.len(), 7);
    assert_eq!(
        c.err_code("tools/list", json!({"cursor": "bogus"})).await,
        -32602
    );
    // The server sends no log messages, so it declares no `logging` capability and has no
    // `logging/setLevel`.
    assert_eq!(
        c.err_code("logging/setLevel", json!({"level": "warning"}))
            .await,
        -32601
    );

    // notifications/cancelled ends a plain request.
    let id = c.id();
    let body = json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":"slow_compute","arguments":{"seconds":60}}}).to_string();
    let c2 = c.clone();
    let call = tokio::spawn(async move { c2.post(&body, &[]).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let n = c.post(&json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId": id, "reason": "user"}}).to_string(), &[]).await;
    assert_eq!(n.status, 202);
    let r = call.await.unwrap();
    assert_eq!(r.json()["error"]["code"], -32800, "{}", r.body);
}

#[tokio::test]
async fn rate_limit_per_principal_and_failed_lookup_watch() {
    let s = Server::start(
        TASKMESH,
        &format!(
        "{AUTH}\n[limits]\nrequests_per_second = 1\nburst = 3\nfailed_lookup_alert_per_minute = 3\n"
    ),
    );
    let alice = Client::connect(&s.url, Some("alice-token-1"), V, json!({})).await;
    let ping = json!({"jsonrpc":"2.0","id":1,"method":"ping"}).to_string();
    let mut limited = None;
    for _ in 0..10 {
        let r = alice.post(&ping, &[]).await;
        if r.status == 429 {
            limited = Some(r);
            break;
        }
        assert_eq!(r.status, 200);
    }
    let r = limited.expect("no request was limited");
    assert_eq!(r.headers.get("retry-after").unwrap(), "1");
    // Another principal has its own budget.
    let bob = Client::connect(&s.url, Some("bob-token-22"), V, json!({})).await;
    assert_eq!(bob.post(&ping, &[]).await.status, 200);

    // Lookups of unknown ids past the alert threshold produce one audit warning.
    let mut sent = 0;
    while sent < 5 {
        let body = json!({"jsonrpc":"2.0","id":2,"method":"tasks/get","params":{"taskId": format!("{sent:032x}")}}).to_string();
        let r = bob.post(&body, &[]).await;
        if r.status == 429 {
            tokio::time::sleep(Duration::from_millis(500)).await;
            continue;
        }
        assert_eq!(r.json()["error"]["code"], -32602);
        sent += 1;
    }
    let mut warned = false;
    for _ in 0..50 {
        if s.log_text().contains("failed_lookup_burst") {
            warned = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(warned, "no audit warning in:\n{}", s.log_text());
    assert_eq!(s.log_text().matches("failed_lookup_burst").count(), 1);
}

#[tokio::test]
async fn a_result_over_the_size_limit_fails_the_task_and_names_the_limit() {
    let s = Server::start(TASKMESH, "[tasks]\nmax_result_bytes = 1024\n");
    let c = Client::new_session(&s.url).await;
    let small = c
        .start_task("slow_compute", json!({"seconds": 0, "label": "fits"}))
        .await;
    let big = c
        .start_task(
            "slow_compute",
            json!({"seconds": 0, "label": "x".repeat(2000)}),
        )
        .await;
    assert_eq!(
        c.wait_status(&small, "completed").await["status"],
        "completed"
    );
    let t = c.wait_status(&big, "failed").await;
    assert!(
        t["statusMessage"]
            .as_str()
            .is_some_and(|m| m.contains("tasks.max_result_bytes")),
        "{t}"
    );
    let r = c.call("tasks/result", json!({"taskId": big})).await;
    assert_eq!(r["error"]["code"], -32603, "{r}");
    assert!(r["error"]["message"]
        .as_str()
        .is_some_and(|m| m.contains("1024")));
}

/// A session holds at most `http.max_streams_per_session` GET streams and
/// `limits.max_inflight_per_session` cancellable requests; past either it is refused (HTTP 429,
/// JSON-RPC -32001 naming the setting), and a closed stream or an ended request frees its place.
#[tokio::test]
async fn per_session_streams_and_requests_in_flight_are_bounded() {
    let s = Server::start(
        TASKMESH,
        "[http]\nmax_streams_per_session = 2\n[limits]\nmax_inflight_per_session = 1\n",
    );
    let c = Client::new_session(&s.url).await;

    let first = c.open_get().await;
    let _second = c.open_get().await;
    assert_eq!(c.try_open_get().await.err(), Some(429));
    // Another session has its own streams.
    let other = Client::new_session(&s.url).await;
    let _theirs = other.open_get().await;
    drop(first);
    let mut reopened = None;
    for _ in 0..100 {
        if let Ok(sse) = c.try_open_get().await {
            reopened = Some(sse);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(reopened.is_some(), "a closed stream never freed its place");

    // One plain call held open; a second one is refused until the first ends.
    let id = c.id();
    let body = json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":"slow_compute","arguments":{"seconds":60}}}).to_string();
    let c2 = c.clone();
    let held = tokio::spawn(async move { c2.post(&body, &[]).await });
    let mut refused = None;
    for _ in 0..100 {
        let r = c
            .call(
                "tools/call",
                json!({"name": "slow_compute", "arguments": {"seconds": 0.01}}),
            )
            .await;
        if r.get("error").is_some() {
            refused = Some(r);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let refused = refused.expect("the second plain call was never refused");
    assert_eq!(refused["error"]["code"], -32001, "{refused}");
    let message = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("limits.max_inflight_per_session"),
        "{refused}"
    );
    // Task-augmented calls return at once and are not bounded by it.
    let t = c.start_task("slow_compute", json!({"seconds": 0.01})).await;
    assert_eq!(c.wait_status(&t, "completed").await["status"], "completed");
    // Cancelling the held call frees its place.
    let n = c
        .post(
            &json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId": id}})
                .to_string(),
            &[],
        )
        .await;
    assert_eq!(n.status, 202);
    assert_eq!(held.await.unwrap().json()["error"]["code"], -32800);
    let r = c
        .ok(
            "tools/call",
            json!({"name": "slow_compute", "arguments": {"seconds": 0.01}}),
        )
        .await;
    assert!(r["content"].is_array(), "{r}");
}
