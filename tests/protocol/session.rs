//! The session and transport layer: version negotiation and capabilities, the Streamable HTTP rules,
//! the JSON-RPC error table, older protocol versions, tools/list paging, rate limits and the
//! per-session bounds.

use std::time::Duration;

use serde_json::{json, Value};
use taskmesh_testkit::{Client, Server, V};

use crate::{init_body, AUTH, TASKMESH};

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
    // The tool list changes when an upstream's does, and the node says so.
    assert_eq!(
        v["result"]["capabilities"]["tools"],
        json!({"listChanged": true})
    );
    // No authentication: tasks cannot be scoped to a requestor, so no tasks.list.
    assert!(v["result"]["capabilities"]["tasks"].get("list").is_none());
    // Log messages of upstream tools are relayed: the logging capability is declared.
    assert_eq!(v["result"]["capabilities"]["logging"], json!({}));
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

    // An unsupported protocol version header: 400. Another supported one than the session's
    // is served, at the session's version (its tasks methods still answer).
    let mut other = c.clone();
    other.version = "2024-01-01".into();
    assert_eq!(other.post(&ping, &[]).await.status, 400);
    other.version = "not-a-version".into();
    assert_eq!(other.post(&ping, &[]).await.status, 400);
    for v in ["2025-06-18", "2025-03-26"] {
        other.version = v.into();
        assert_eq!(other.post(&ping, &[]).await.status, 200);
        let id = other
            .start_task("slow_compute", json!({"seconds": 0}))
            .await;
        assert!(!id.is_empty());
    }
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
    // Also when it comes in chunks, without a length announced.
    assert_eq!(
        c.post_chunked(big.clone().into_bytes(), &[]).await.status,
        413
    );
    let fits = json!({"jsonrpc":"2.0","id":7,"method":"ping"}).to_string();
    assert_eq!(c.post_chunked(fits.into_bytes(), &[]).await.status, 200);

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
    // A body that is not UTF-8, wherever the bad bytes are, is not JSON.
    for body in [
        &b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"pi\xffng\"}"[..],
        &b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":{\"x\":\"\xc3\"}}"[..],
        &b"[\"\xfe\"]"[..],
    ] {
        let r = c.post_bytes(body.to_vec(), &[]).await;
        assert_eq!(r.status, 400, "{}", r.body);
        assert_eq!(r.json()["error"]["code"], -32700, "{}", r.body);
    }

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

/// A number out of range (`1e400`: valid JSON, beyond any float) in a request's params is
/// invalid params naming the field, answered with the request's id, on both protocol
/// generations alike; a notification's gets the same error without an id. Nothing is created.
#[tokio::test]
async fn numbers_out_of_range_are_invalid_params_naming_the_field() {
    use taskmesh_testkit::modern::{Modern, V as MODERN};
    let s = Server::start(TASKMESH, AUTH);
    let c = Client::connect(&s.url, Some("alice-token-1"), V, json!({})).await;
    let modern = Modern::new(&s.url, Some("alice-token-1"), true);
    // `params` as JSON text, with every 424242 (a placeholder) written as `number`.
    let call = |id: Value, params: Value, number: &str| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params})
            .to_string()
            .replace("424242", number)
    };
    let ttl = json!({"name": "slow_compute", "arguments": {"seconds": 1}, "task": {"ttl": 424242}});
    let arg = json!({"name": "slow_compute", "arguments": {"seconds": 424242}, "task": {}});
    let deep = json!({"name": "slow_compute", "arguments": {"seconds": 1, "x": [1, {"y": 424242}]}, "task": {}});
    let cases = [
        (json!(41), ttl.clone(), "1e400", "task.ttl"),
        (json!("s-2"), arg.clone(), "-1e400", "arguments.seconds"),
        (json!(43), deep.clone(), "1.5E+309", "arguments.x[1].y"),
    ];
    for (id, params, number, field) in &cases {
        // 2025-11-25, in a session.
        let r = c.post(&call(id.clone(), params.clone(), number), &[]).await;
        assert_eq!(r.status, 200, "{}", r.body);
        let v = r.json();
        assert_eq!(v["id"], *id, "{v}");
        assert_eq!(v["error"]["code"], -32602, "{v}");
        let message = v["error"]["message"].as_str().unwrap();
        assert!(message.contains(&format!("'{field}'")), "{v}");
        // 2026-07-28, without a session.
        let mut params = params.clone();
        params["_meta"] = modern.meta();
        let r = taskmesh_testkit::http()
            .post(&s.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("authorization", "Bearer alice-token-1")
            .header("mcp-protocol-version", MODERN)
            .header("mcp-method", "tools/call")
            .header("mcp-name", "slow_compute")
            .body(call(id.clone(), params, number))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 200);
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["id"], *id, "{v}");
        assert_eq!(v["error"]["code"], -32602, "{v}");
        assert_eq!(v["error"]["message"].as_str().unwrap(), message, "{v}");
    }
    // A notification has no id to answer with: HTTP 400, the same error, a null id.
    let note =
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1e400}}"#;
    let r = c.post(note, &[]).await;
    assert_eq!(r.status, 400, "{}", r.body);
    let v = r.json();
    assert_eq!(v["id"], Value::Null, "{v}");
    assert_eq!(v["error"]["code"], -32602, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("'requestId'"),
        "{v}"
    );
    // A body that is not JSON stays a parse error, whatever numbers it holds; nothing was
    // created, and the server serves on.
    let r = c
        .post(
            r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":{"a":1e400"#,
            &[],
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(r.json()["error"]["code"], -32700, "{}", r.body);
    let listed = c.ok("tasks/list", json!({})).await;
    assert_eq!(listed["tasks"].as_array().unwrap().len(), 0, "{listed}");
    assert_eq!(modern.send("server/discover", json!({})).await.status, 200);
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
async fn tools_list_pagination_log_levels_and_plain_cancellation() {
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
    // `logging/setLevel` takes MCP's eight levels; anything else is invalid params.
    assert_eq!(
        c.ok("logging/setLevel", json!({"level": "warning"})).await,
        json!({})
    );
    for bad in [json!({"level": "WARNING"}), json!({"level": 3}), json!({})] {
        assert_eq!(c.err_code("logging/setLevel", bad).await, -32602);
    }

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

    // One plain call held open (its stream's headers say it is in flight); a second one is
    // refused until the first ends.
    let (id, mut held) = c
        .open_stream(
            "tools/call",
            json!({"name": "slow_compute", "arguments": {"seconds": 60},
                   "_meta": {"progressToken": "held"}}),
        )
        .await;
    let refused = c
        .call(
            "tools/call",
            json!({"name": "slow_compute", "arguments": {"seconds": 0.01}}),
        )
        .await;
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
    // Its stream ends; a cancelled request needs no answer, and one that comes says so.
    while let Some(m) = held.next().await {
        if m["id"] == json!(id) {
            assert_eq!(m["error"]["code"], -32800, "{m}");
        }
    }
    let r = c
        .ok(
            "tools/call",
            json!({"name": "slow_compute", "arguments": {"seconds": 0.01}}),
        )
        .await;
    assert!(r["content"].is_array(), "{r}");
}

/// A connection that sends nothing, stops halfway through its headers, or does not send the
/// body it announced is let go (`http.header_read_timeout_ms`, `http.body_read_timeout_ms`);
/// past `http.max_connections` open connections, one more is closed at once, and a place
/// frees when one ends.
#[tokio::test]
async fn idle_slow_and_surplus_connections_are_let_go() {
    use std::io::{Read, Write};
    let addr_of = |s: &Server| {
        s.url
            .trim_start_matches("http://")
            .trim_end_matches("/mcp")
            .to_string()
    };
    // What the server sends on a connection that sent `sent`, until it closes it (bounded).
    fn answer_to(addr: String, sent: Vec<u8>) -> String {
        let mut tcp = std::net::TcpStream::connect(&addr).unwrap();
        tcp.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        tcp.write_all(&sent).unwrap();
        let mut got = Vec::new();
        let _ = tcp.read_to_end(&mut got);
        String::from_utf8_lossy(&got).to_string()
    }
    let s = Server::start(
        TASKMESH,
        "[http]\nheader_read_timeout_ms = 300\nbody_read_timeout_ms = 300\n",
    );
    let addr = addr_of(&s);
    let cases = [
        (Vec::new(), ""),
        (b"POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Ty".to_vec(), ""),
        (
            b"POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: 100\r\n\r\n{\"jsonrpc\"".to_vec(),
            "HTTP/1.1 408",
        ),
    ];
    for (sent, want) in cases {
        let a = addr.clone();
        let got = tokio::task::spawn_blocking(move || answer_to(a, sent))
            .await
            .unwrap();
        assert!(got.starts_with(want), "{want:?}: {got:?}");
        if want.is_empty() {
            assert_eq!(got, "", "closed without an answer");
        }
    }
    // The server still serves.
    Client::new_session(&s.url).await;

    let s = Server::start(
        TASKMESH,
        "[http]\nmax_connections = 3\nheader_read_timeout_ms = 60000\n",
    );
    let addr = addr_of(&s);
    let held: Vec<std::net::TcpStream> = (0..3)
        .map(|_| std::net::TcpStream::connect(&addr).unwrap())
        .collect();
    let a = addr.clone();
    let surplus = tokio::task::spawn_blocking(move || {
        answer_to(a, b"POST /mcp HTTP/1.1\r\nHost: x\r\n\r\n".to_vec())
    })
    .await
    .unwrap();
    assert_eq!(
        surplus, "",
        "one more than max_connections is closed at once"
    );
    drop(held);
    // The places free as the held connections end: a client gets answers again.
    let mut served = false;
    for _ in 0..100 {
        let a = addr.clone();
        let got = tokio::task::spawn_blocking(move || {
            answer_to(
                a,
                b"GET /status HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".to_vec(),
            )
        })
        .await
        .unwrap();
        if got.starts_with("HTTP/1.1 200") {
            served = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(served, "a freed place serves again");
    // The listener counted what it let go, and the connection it is serving now.
    let metrics = taskmesh_testkit::metrics::metrics_of(&s.url, None).await;
    let closed = |cause: &str| {
        taskmesh_testkit::metrics::sample(
            &metrics,
            &format!("taskmesh_http_connections_closed_total{{cause=\"{cause}\"}}"),
        )
        .unwrap_or(0.0)
    };
    assert!(closed("max_connections") >= 1.0, "{metrics}");
    assert!(
        taskmesh_testkit::metrics::sample(&metrics, "taskmesh_http_connections").unwrap_or(0.0)
            >= 1.0
    );
}

/// A request whose head is larger than `http.max_header_bytes` gets 431 and changes nothing;
/// one within it is served.
#[tokio::test]
async fn a_request_head_over_the_limit_gets_431() {
    use std::io::{Read, Write};
    let s = Server::start(TASKMESH, "[http]\nmax_header_bytes = 8192\n");
    let addr = s
        .url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_string();
    let ask = |filler: usize| {
        let addr = addr.clone();
        move || {
            let mut tcp = std::net::TcpStream::connect(&addr).unwrap();
            tcp.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
            let head = format!(
                "GET /status HTTP/1.1\r\nHost: x\r\nX-Filler: {}\r\nConnection: close\r\n\r\n",
                "a".repeat(filler)
            );
            let _ = tcp.write_all(head.as_bytes());
            let mut got = Vec::new();
            let _ = tcp.read_to_end(&mut got);
            String::from_utf8_lossy(&got).to_string()
        }
    };
    let big = tokio::task::spawn_blocking(ask(10_000)).await.unwrap();
    assert!(big.starts_with("HTTP/1.1 431"), "{big:?}");
    let small = tokio::task::spawn_blocking(ask(4_000)).await.unwrap();
    assert!(small.starts_with("HTTP/1.1 200"), "{small:?}");
    // Counted among the refusals, although it happens below the HTTP handlers.
    let metrics = taskmesh_testkit::metrics::metrics_of(&s.url, None).await;
    assert_eq!(
        taskmesh_testkit::metrics::sample(
            &metrics,
            r#"taskmesh_http_refusals_total{status="431",cause="header_too_large"}"#
        ),
        Some(1.0),
        "{metrics}"
    );
}

/// SSE answers are bounded per principal (`http.max_sse_streams_per_principal`) and per node
/// (`http.max_sse_streams`), whatever their kind: one past either gets HTTP 429 naming the
/// setting and changes nothing; requests that answer JSON are not held back; a place frees
/// when a stream's connection closes.
#[tokio::test]
async fn sse_streams_are_bounded_per_principal_and_per_node() {
    let s = Server::start(
        TASKMESH,
        &format!(
            "{AUTH}\n[auth]\nstatus_principals = [\"alice\"]\n[http]\nmax_sse_streams = 3\nmax_sse_streams_per_principal = 2\nsse_keepalive_ms = 100\n"
        ),
    );
    let alice = Client::connect(&s.url, Some("alice-token-1"), V, json!({})).await;
    let bob = Client::connect(&s.url, Some("bob-token-22"), V, json!({})).await;
    let first = alice.open_get().await;
    let _second = alice.open_get().await;
    assert_eq!(alice.try_open_get().await.err(), Some(429));
    // A held tasks/result is a stream too; a task-augmented call answers JSON and goes on.
    let id = alice
        .start_task("slow_compute", json!({"seconds": 600}))
        .await;
    let r = alice
        .post(
            &json!({"jsonrpc":"2.0","id":5,"method":"tasks/result","params":{"taskId": id}})
                .to_string(),
            &[],
        )
        .await;
    assert_eq!(r.status, 429, "{}", r.body);
    assert!(
        r.body.contains("http.max_sse_streams_per_principal"),
        "{}",
        r.body
    );
    assert_eq!(alice.status(&id).await, "working");
    // Bob takes the node's last place; his next is refused by the node's limit.
    let _bobs = bob.open_get().await;
    let r = bob
        .post(
            &json!({"jsonrpc":"2.0","id":6,"method":"tools/call","params":{
                "name":"slow_compute","arguments":{"seconds":0.01}}})
            .to_string(),
            &[],
        )
        .await;
    assert_eq!(r.status, 429, "{}", r.body);
    assert!(r.body.contains("http.max_sse_streams "), "{}", r.body);
    // Alice closes one: a place frees once the server notices.
    drop(first);
    let mut opened = None;
    for _ in 0..100 {
        if let Ok(sse) = bob.try_open_get().await {
            opened = Some(sse);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(opened.is_some(), "a closed stream frees its place");
    let status = taskmesh_testkit::status_of(&s, "alice-token-1").await;
    assert_eq!(status["sseStreams"], 3, "{status}");
}
