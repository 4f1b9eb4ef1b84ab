//! Protocol 2026-07-28 with the tasks extension, on the same endpoint and task store as
//! 2025-11-25: the per-request `_meta` and headers checked with the errors the spec gives,
//! `server/discover`, the server deciding on tasks, the flat `CreateTaskResult`, `tasks/get`
//! with the outcome inline (a tool error `completed`), `tasks/cancel` acknowledged (also when
//! terminal), `tasks/result` and `tasks/list` gone, the extension required for `tasks/*`; and a
//! task made through either generation read through the other by its owner.

use std::time::Duration;

use serde_json::{json, Value};
use taskmesh_testkit::{Client, Server};

use super::{AUTH, TASKMESH};

use taskmesh_testkit::modern::{Modern, EXT, V};

#[tokio::test]
async fn requests_are_checked_per_request_with_the_spec_s_errors() {
    let s = Server::start(TASKMESH, "");
    let m = Modern::new(&s.url, None, true);

    let d = m.ok("server/discover", json!({})).await;
    assert_eq!(d["resultType"], "complete");
    let versions = d["supportedVersions"].as_array().unwrap();
    assert!(
        versions.contains(&json!(V)) && versions.contains(&json!("2025-11-25")),
        "{d}"
    );
    assert_eq!(d["capabilities"]["extensions"][EXT], json!({}));
    assert!(d["ttlMs"].is_u64() && d["cacheScope"] == "public", "{d}");
    assert!(
        d["capabilities"].get("tasks").is_none(),
        "no legacy task keys: {d}"
    );

    // The version: unsupported, or the header not naming the body's.
    let a = m
        .send_with(
            "server/discover",
            json!({}),
            &[("mcp-protocol-version", Some("2025-11-25"))],
        )
        .await;
    assert_eq!((a.status, a.code()), (400, -32020), "{}", a.body);
    let a = m
        .send_with(
            "server/discover",
            json!({}),
            &[("mcp-protocol-version", None)],
        )
        .await;
    assert_eq!((a.status, a.code()), (400, -32020), "{}", a.body);
    // The body names a version the header does not: a mismatch, even when unsupported; both
    // name an unsupported one: -32022, with what is served and what was asked.
    let raw = |version: &str, header: &str, meta: Option<Value>| {
        let mut p = json!({});
        if let Some(m) = meta {
            p["_meta"] = m;
            p["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!(version);
        }
        taskmesh_testkit::http()
            .post(&s.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", header)
            .header("mcp-method", "server/discover")
            .body(
                json!({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": p})
                    .to_string(),
            )
            .send()
    };
    let r = raw("v999.0.0", V, Some(m.meta())).await.unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let e: Value = r.json().await.unwrap();
    assert_eq!(e["error"]["code"], -32020, "{e}");
    let r = raw("v999.0.0", "v999.0.0", Some(m.meta())).await.unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let e: Value = r.json().await.unwrap();
    assert_eq!(e["error"]["code"], -32022, "{e}");
    assert_eq!(e["error"]["data"]["requested"], "v999.0.0", "{e}");
    assert!(
        e["error"]["data"]["supported"]
            .as_array()
            .unwrap()
            .contains(&json!(V)),
        "{e}"
    );
    // No `_meta` at all, under the version header: malformed, -32602 with HTTP 400.
    let r = raw(V, V, None).await.unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let e: Value = r.json().await.unwrap();
    assert_eq!(e["error"]["code"], -32602, "{e}");

    // The routing headers.
    let a = m
        .send_with("tools/list", json!({}), &[("mcp-method", None)])
        .await;
    assert_eq!((a.status, a.code()), (400, -32020));
    let a = m
        .send_with(
            "tools/list",
            json!({}),
            &[("mcp-method", Some("tools/call"))],
        )
        .await;
    assert_eq!((a.status, a.code()), (400, -32020));
    let call = json!({"name": "greet", "arguments": {"name": "x"}});
    let a = m
        .send_with("tools/call", call.clone(), &[("mcp-name", Some("other"))])
        .await;
    assert_eq!((a.status, a.code()), (400, -32020));
    let a = m
        .send_with("tools/call", call.clone(), &[("mcp-name", None)])
        .await;
    assert_eq!((a.status, a.code()), (400, -32020));
    // "greet" in its base64 form.
    let a = m
        .send_with(
            "tools/call",
            call.clone(),
            &[("mcp-name", Some("=?base64?Z3JlZXQ=?="))],
        )
        .await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.result()["resultType"], "complete");

    // Capabilities must be an object.
    let mut p = json!({});
    p["_meta"] = m.meta();
    p["_meta"]
        .as_object_mut()
        .unwrap()
        .remove("io.modelcontextprotocol/clientCapabilities");
    let r = taskmesh_testkit::http()
        .post(&s.url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", V)
        .header("mcp-method", "tools/list")
        .body(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": p}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let e: Value = r.json().await.unwrap();
    assert_eq!(e["error"]["code"], -32602, "{e}");

    // Gone or unknown methods: 404 with -32601; so are the session-era methods.
    for method in [
        "tasks/result",
        "tasks/list",
        "ping",
        "initialize",
        "logging/setLevel",
        "no/such",
    ] {
        let a = m.send(method, json!({"taskId": "x"})).await;
        assert_eq!((a.status, a.code()), (404, -32601), "{method}: {}", a.body);
    }

    // tools/list: no taskSupport on this wire.
    let l = m.ok("tools/list", json!({})).await;
    assert_eq!(l["resultType"], "complete");
    let tools = l["tools"].as_array().unwrap();
    assert!(tools.iter().any(|t| t["name"] == "slow_compute"));
    assert!(tools.iter().all(|t| t.get("execution").is_none()), "{l}");
    assert!(l["ttlMs"].is_u64() && l["cacheScope"].is_string(), "{l}");
}

/// Poll until the task is `input_required` with exactly `n` requests (bounded: 30 s); they.
async fn until_asking(m: &Modern, id: &str, n: usize) -> serde_json::Map<String, Value> {
    for _ in 0..600 {
        let t = m.ok("tasks/get", json!({"taskId": id})).await;
        if t["status"] == "input_required" {
            let asked = t["inputRequests"]
                .as_object()
                .expect("inputRequests")
                .clone();
            if asked.len() == n {
                return asked;
            }
        }
        assert!(
            t["status"] == "working" || t["status"] == "input_required",
            "{t}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("task {id} never asked {n} questions");
}

#[tokio::test]
async fn input_is_asked_in_input_requests_and_answered_with_tasks_update() {
    // The conformance set's `multi_input` asks its two questions at once.
    let s = Server::start(TASKMESH, "[tools]\nconformance = true\n");
    let mut m = Modern::new(&s.url, None, true);
    m.elicitation = true;

    let id = m
        .start("confirm_delete", json!({"filename": "notes.txt"}))
        .await;
    let asked = until_asking(&m, &id, 1).await;
    let (key, request) = asked.iter().next().unwrap();
    assert_eq!(request["method"], "elicitation/create", "{request}");
    assert_eq!(
        request["params"]["message"], "Delete notes.txt?",
        "{request}"
    );
    assert!(
        request.get("jsonrpc").is_none() && request.get("id").is_none(),
        "{request}"
    );
    // Keys the task does not wait on are ignored; the answer goes to its request.
    let ack = m
        .ok(
            "tasks/update",
            json!({"taskId": id, "inputResponses": {
                "not-a-key": {"action": "decline"},
                key: {"action": "accept", "content": {"confirm": true}},
            }}),
        )
        .await;
    assert_eq!(
        ack,
        json!({"resultType": "complete", "_meta": ack["_meta"]})
    );
    let t = m.until_terminal(&id).await;
    assert_eq!(t["status"], "completed", "{t}");
    assert_eq!(
        t["result"]["content"][0]["text"], "Deleted notes.txt",
        "{t}"
    );

    // Two questions at once, answered one at a time: after the first answer the task still
    // asks, for the other one only.
    let id = m.start("multi_input", json!({})).await;
    let asked = until_asking(&m, &id, 2).await;
    let key_of = |text: &str| {
        asked
            .iter()
            .find(|(_, r)| r["params"]["message"] == text)
            .map(|(k, _)| k.clone())
            .unwrap_or_else(|| panic!("no request {text:?} in {asked:?}"))
    };
    let (name, colour) = (key_of("Your name?"), key_of("Your favourite colour?"));
    m.ok(
        "tasks/update",
        json!({"taskId": id, "inputResponses": {name.clone(): {"action": "accept", "content": {"name": "Ada"}}}}),
    )
    .await;
    let t = m.ok("tasks/get", json!({"taskId": id})).await;
    assert_eq!(t["status"], "input_required", "{t}");
    let left: Vec<&String> = t["inputRequests"].as_object().unwrap().keys().collect();
    assert_eq!(left, [&colour], "{t}");
    m.ok(
        "tasks/update",
        json!({"taskId": id, "inputResponses": {colour: {"action": "accept", "content": {"colour": "blue"}}}}),
    )
    .await;
    let t = m.until_terminal(&id).await;
    assert_eq!(t["result"]["content"][0]["text"], "Ada likes blue", "{t}");
}

#[tokio::test]
async fn the_server_decides_on_tasks_and_renders_them_for_the_extension() {
    let s = Server::start(TASKMESH, "");
    let with = Modern::new(&s.url, None, true);
    let without = Modern::new(&s.url, None, false);

    // Without the extension: plain calls; a task-only tool and tasks/* need it.
    let r = without
        .ok(
            "tools/call",
            json!({"name": "slow_compute", "arguments": {"seconds": 0}}),
        )
        .await;
    assert_eq!(r["resultType"], "complete", "{r}");
    assert!(r["content"].is_array(), "{r}");
    let a = without
        .send(
            "tools/call",
            json!({"name": "failing_job", "arguments": {}}),
        )
        .await;
    assert_eq!((a.status, a.code()), (400, -32021), "{}", a.body);
    assert_eq!(
        a.body["error"]["data"]["requiredCapabilities"]["extensions"][EXT],
        json!({})
    );
    let a = without.send("tasks/get", json!({"taskId": "x"})).await;
    assert_eq!((a.status, a.code()), (400, -32021));
    // A legacy `task` parameter changes nothing.
    let r = without
        .ok(
            "tools/call",
            json!({"name": "slow_compute", "arguments": {"seconds": 0}, "task": {"ttl": 1000}}),
        )
        .await;
    assert_eq!(r["resultType"], "complete", "{r}");

    // With it: a task, flat, with the renamed fields; its result inline once completed.
    let c = with
        .ok(
            "tools/call",
            json!({"name": "slow_compute", "arguments": {"seconds": 0.2}}),
        )
        .await;
    assert_eq!(c["resultType"], "task", "{c}");
    assert_eq!(c["status"], "working");
    assert!(
        c.get("task").is_none() && c.get("ttl").is_none() && c.get("pollInterval").is_none(),
        "{c}"
    );
    assert!(
        c["pollIntervalMs"].is_u64() && c.get("ttlMs").is_some(),
        "{c}"
    );
    let id = c["taskId"].as_str().unwrap().to_string();
    let t = with.until_terminal(&id).await;
    assert_eq!(t["status"], "completed", "{t}");
    assert!(t["result"]["content"].is_array(), "{t}");
    assert!(
        t["result"]
            .get("_meta")
            .is_none_or(|m| m.get("io.modelcontextprotocol/related-task").is_none()),
        "no related-task _meta inline: {t}"
    );
    // A forbidden tool is answered plainly even with the extension.
    let r = with
        .ok(
            "tools/call",
            json!({"name": "greet", "arguments": {"name": "ext"}}),
        )
        .await;
    assert_eq!(r["resultType"], "complete", "{r}");

    // A tool error ends completed, with the result; a JSON-RPC error ends failed.
    let id = with.start("failing_job", json!({})).await;
    let t = with.until_terminal(&id).await;
    assert_eq!(t["status"], "completed", "{t}");
    assert_eq!(t["result"]["isError"], true, "{t}");
    let id = with.start("protocol_error_job", json!({})).await;
    let t = with.until_terminal(&id).await;
    assert_eq!(t["status"], "failed", "{t}");
    assert_eq!(t["error"]["code"], -32603, "{t}");

    // tasks/cancel: acknowledged, also once terminal; unknown ids are invalid params.
    let id = with.start("slow_compute", json!({"seconds": 60})).await;
    let ack = with.ok("tasks/cancel", json!({"taskId": id})).await;
    assert_eq!(ack["resultType"], "complete", "{ack}");
    assert_eq!(with.until_terminal(&id).await["status"], "cancelled");
    with.ok("tasks/cancel", json!({"taskId": id})).await;
    let a = with
        .send("tasks/cancel", json!({"taskId": "no-such-task"}))
        .await;
    assert_eq!((a.status, a.code()), (200, -32602), "{}", a.body);
    let a = with
        .send("tasks/get", json!({"taskId": "no-such-task"}))
        .await;
    assert_eq!(a.code(), -32602);
    let a = with
        .send(
            "tasks/update",
            json!({"taskId": id, "inputResponses": {"k": {}}}),
        )
        .await;
    assert_eq!(a.status, 200, "{}", a.body);
    let a = with.send("tasks/update", json!({"taskId": id})).await;
    assert_eq!(a.code(), -32602, "inputResponses is required");
}

#[tokio::test]
async fn one_task_store_serves_both_generations_to_the_owner() {
    let s = Server::start(TASKMESH, AUTH);
    let legacy = Client::connect(&s.url, Some("alice-token-1"), "2025-11-25", json!({})).await;
    let alice = Modern::new(&s.url, Some("alice-token-1"), true);
    let bob = Modern::new(&s.url, Some("bob-token-22"), true);

    // Made through 2025-11-25, read through 2026-07-28: the tool error reads `failed` there
    // and `completed` here, from the one stored outcome.
    let id = legacy.start_task("failing_job", json!({})).await;
    legacy.wait_status(&id, "failed").await;
    let t = alice.until_terminal(&id).await;
    assert_eq!(t["status"], "completed", "{t}");
    assert_eq!(t["result"]["isError"], true, "{t}");
    let a = bob.send("tasks/get", json!({"taskId": id})).await;
    assert_eq!(
        a.code(),
        -32602,
        "another principal's task reads as unknown"
    );

    // Made through 2026-07-28, read and listed through 2025-11-25.
    let id = alice.start("slow_compute", json!({"seconds": 0.1})).await;
    legacy.wait_status(&id, "completed").await;
    let r = legacy.ok("tasks/result", json!({"taskId": id})).await;
    assert!(r["content"].is_array(), "{r}");
    let listed = legacy.ok("tasks/list", json!({})).await;
    assert!(
        listed["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["taskId"] == json!(id)),
        "{listed}"
    );
}

/// `_meta` key of the subscription a listen-stream message belongs to.
const SUBSCRIPTION: &str = "io.modelcontextprotocol/subscriptionId";

#[tokio::test]
async fn subscriptions_listen_tells_each_change_of_the_tasks_it_watches() {
    let s = Server::start(
        TASKMESH,
        "[tools]\nconformance = true\n[http]\nmax_listen_task_ids = 3\nmax_listen_streams_per_principal = 2\n",
    );
    let mut m = Modern::new(&s.url, None, true);
    m.elicitation = true;
    let id = m
        .start("confirm_delete", json!({"filename": "a.txt"}))
        .await;

    // Only what the server has is honored: a task of the caller's, not an unknown id, not
    // prompts (there are none).
    let mut l = m
        .listen(json!({"taskIds": [id, "no-such-task", id], "promptsListChanged": true}))
        .await
        .unwrap_or_else(|a| panic!("refused: {} {}", a.status, a.body));
    let ack = l.next().await.expect("the acknowledgement");
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{ack}"
    );
    assert_eq!(
        ack["params"]["notifications"],
        json!({"taskIds": [id]}),
        "{ack}"
    );
    assert_eq!(ack["params"]["_meta"][SUBSCRIPTION], 7, "{ack}");

    // The task as it stands, then each change, as tasks/get shows it, until it is terminal.
    let mut statuses = Vec::new();
    let done = loop {
        let n = l.next().await.expect("a notification");
        assert_eq!(n["method"], "notifications/tasks", "{n}");
        let t = &n["params"];
        assert_eq!(
            (&t["taskId"], &t["_meta"][SUBSCRIPTION]),
            (&json!(id), &json!(7)),
            "{n}"
        );
        let status = t["status"].as_str().expect("a status").to_string();
        if status == "input_required" {
            let (key, r) = t["inputRequests"]
                .as_object()
                .unwrap()
                .iter()
                .next()
                .unwrap();
            assert_eq!(r["params"]["message"], "Delete a.txt?", "{n}");
            m.ok(
                "tasks/update",
                json!({"taskId": id, "inputResponses": {key.clone(): {"action": "accept", "content": {"confirm": true}}}}),
            )
            .await;
        }
        statuses.push(status.clone());
        if status == "completed" {
            break t.clone();
        }
    };
    assert!(
        statuses.contains(&"input_required".to_string()),
        "{statuses:?}"
    );
    assert_eq!(
        done["result"]["content"][0]["text"], "Deleted a.txt",
        "{done}"
    );
    let polled = m.ok("tasks/get", json!({"taskId": id})).await;
    assert_eq!(polled["result"], done["result"]);
    // Nothing left to watch: the subscription ends with its response.
    let end = l.next().await.expect("the listen response");
    assert_eq!(end["id"], 7, "{end}");
    assert_eq!(end["result"]["resultType"], "complete", "{end}");
    assert_eq!(end["result"]["_meta"][SUBSCRIPTION], 7, "{end}");
    assert_eq!(l.next().await, None, "the stream ends");

    // Tool-list changes alone: the stream stays open; the principal's streams are bounded.
    let mut tools = m
        .listen(json!({"toolsListChanged": true}))
        .await
        .ok()
        .unwrap();
    let ack = tools.next().await.unwrap();
    assert_eq!(
        ack["params"]["notifications"],
        json!({"toolsListChanged": true}),
        "{ack}"
    );
    let _second = m
        .listen(json!({"toolsListChanged": true}))
        .await
        .ok()
        .unwrap();
    let third = m
        .listen(json!({"toolsListChanged": true}))
        .await
        .err()
        .unwrap();
    assert_eq!(third.status, 429, "{}", third.body);
    drop(tools);

    // Bad filters change nothing and say why.
    let a = m
        .listen(json!({"taskIds": ["a", "b", "c", "d"]}))
        .await
        .err()
        .unwrap();
    assert_eq!(
        (a.status, a.body["error"]["code"].as_i64()),
        (200, Some(-32602)),
        "{}",
        a.body
    );
    let a = m.listen(json!({"taskIds": "a"})).await.err().unwrap();
    assert_eq!(a.body["error"]["code"], -32602, "{}", a.body);
    let a = m
        .listen(json!({"toolsListChanged": "yes"}))
        .await
        .err()
        .unwrap();
    assert_eq!(a.body["error"]["code"], -32602, "{}", a.body);
    // Task notifications need the extension declared.
    let plain = Modern::new(&s.url, None, false);
    let a = plain.listen(json!({"taskIds": [id]})).await.err().unwrap();
    assert_eq!(
        (a.status, a.body["error"]["code"].as_i64()),
        (400, Some(-32021)),
        "{}",
        a.body
    );
    assert_eq!(
        a.body["error"]["data"]["requiredCapabilities"]["extensions"][EXT],
        json!({}),
        "{}",
        a.body
    );
}

/// A client of the conformance tools that declares what answers every kind of request.
fn asking_client(url: &str, token: Option<&str>) -> Modern {
    let mut m = Modern::new(url, token, false);
    m.elicitation = true;
    m
}

fn accept(field: &str, value: Value) -> Value {
    json!({"action": "accept", "content": {field: value}})
}

#[tokio::test]
async fn plain_calls_ask_in_input_rounds_whose_state_is_signed_and_bound_to_the_call() {
    let s = Server::start(TASKMESH, &format!("[tools]\nconformance = true\n{AUTH}"));
    let m = asking_client(&s.url, Some("alice-token-1"));
    let call = |name: &str, extra: Value| {
        let mut p = json!({"name": name, "arguments": {}});
        for (k, v) in extra.as_object().unwrap() {
            p[k] = v.clone();
        }
        p
    };

    // Round 1: what the tool asks, by its key, with a state to echo; no task.
    let r1 = m
        .ok(
            "tools/call",
            call("test_input_required_result_multi_round", json!({})),
        )
        .await;
    assert_eq!(r1["resultType"], "input_required", "{r1}");
    assert!(r1.get("taskId").is_none(), "{r1}");
    let asked: Vec<&String> = r1["inputRequests"].as_object().unwrap().keys().collect();
    assert_eq!(asked, ["step1"], "{r1}");
    assert_eq!(r1["inputRequests"]["step1"]["method"], "elicitation/create");
    let state1 = r1["requestState"].as_str().unwrap().to_string();

    // Round 2: the answer to step1 taken, step2 asked; the new state keeps step1's answer.
    let r2 = m
        .ok(
            "tools/call",
            call(
                "test_input_required_result_multi_round",
                json!({"inputResponses": {"step1": accept("name", json!("Ada")), "unasked": accept("x", json!(1))}, "requestState": state1}),
            ),
        )
        .await;
    let asked: Vec<&String> = r2["inputRequests"].as_object().unwrap().keys().collect();
    assert_eq!(asked, ["step2"], "{r2}");
    let state2 = r2["requestState"].as_str().unwrap().to_string();
    let r3 = m
        .ok(
            "tools/call",
            call(
                "test_input_required_result_multi_round",
                json!({"inputResponses": {"step2": accept("color", json!("green"))}, "requestState": state2.clone()}),
            ),
        )
        .await;
    assert_eq!(r3["resultType"], "complete", "{r3}");
    assert_eq!(r3["content"][0]["text"], "Ada likes green", "{r3}");
    // Without the state the earlier answer is not known: step1 is asked again.
    let again = m
        .ok(
            "tools/call",
            call(
                "test_input_required_result_multi_round",
                json!({"inputResponses": {"step2": accept("color", json!("green"))}}),
            ),
        )
        .await;
    assert_eq!(again["resultType"], "input_required", "{again}");
    assert!(again["inputRequests"].get("step1").is_some(), "{again}");

    // A state altered, of another tool, or of another caller is refused and runs nothing.
    let mut altered = state2.clone();
    altered.insert(3, 'x');
    for (who, tool, state) in [
        (
            &m,
            "test_input_required_result_multi_round",
            altered.as_str(),
        ),
        (
            &m,
            "test_input_required_result_elicitation",
            state2.as_str(),
        ),
    ] {
        let a = who
            .send("tools/call", call(tool, json!({"requestState": state})))
            .await;
        assert_eq!(a.code(), -32602, "{}", a.body);
    }
    let bob = asking_client(&s.url, Some("bob-token-22"));
    let a = bob
        .send(
            "tools/call",
            call(
                "test_input_required_result_multi_round",
                json!({"requestState": state2}),
            ),
        )
        .await;
    assert_eq!(a.code(), -32602, "{}", a.body);
    assert!(
        a.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("another call"),
        "{}",
        a.body
    );
    // Answers that are not objects are refused.
    let a = m
        .send(
            "tools/call",
            call(
                "test_input_required_result_elicitation",
                json!({"inputResponses": {"user_name": "Ada"}}),
            ),
        )
        .await;
    assert_eq!(a.code(), -32602, "{}", a.body);

    // Questions asked at once come in one round; one the client cannot answer ends the call.
    let a = m
        .send(
            "tools/call",
            call("test_input_required_result_multiple_inputs", json!({})),
        )
        .await;
    assert_eq!((a.status, a.code()), (400, -32021), "{}", a.body);
    let all = json!({"io.modelcontextprotocol/clientCapabilities": {"elicitation": {}, "sampling": {}, "roots": {}}});
    let r = m
        .ok(
            "tools/call",
            call(
                "test_input_required_result_multiple_inputs",
                json!({"_meta": all}),
            ),
        )
        .await;
    let mut asked: Vec<&String> = r["inputRequests"].as_object().unwrap().keys().collect();
    asked.sort();
    assert_eq!(asked, ["client_roots", "greeting", "user_name"], "{r}");

    // A request the client cannot answer (no sampling declared): -32021, HTTP 400.
    let a = m
        .send("tools/call", call("test_missing_capability", json!({})))
        .await;
    assert_eq!((a.status, a.code()), (400, -32021), "{}", a.body);
    assert_eq!(
        a.body["error"]["data"],
        json!({"requiredCapabilities": {"sampling": {}}}),
        "{}",
        a.body
    );
    let a = m
        .send(
            "tools/call",
            call("test_input_required_result_sampling", json!({})),
        )
        .await;
    assert_eq!((a.status, a.code()), (400, -32021), "{}", a.body);
}

#[tokio::test]
async fn a_tool_s_questions_are_settled_before_its_task_is_created() {
    let s = Server::start(TASKMESH, "[tools]\nconformance = true\n");
    let mut m = asking_client(&s.url, None);
    m.tasks = true;
    let r1 = m
        .ok(
            "tools/call",
            json!({"name": "test_tool_with_task", "arguments": {}}),
        )
        .await;
    assert_eq!(r1["resultType"], "input_required", "{r1}");
    assert!(r1.get("taskId").is_none(), "{r1}");
    assert!(r1["inputRequests"].get("user_name").is_some(), "{r1}");
    let r2 = m
        .ok(
            "tools/call",
            json!({"name": "test_tool_with_task", "arguments": {},
                "inputResponses": {"user_name": accept("name", json!("Alice"))},
                "requestState": r1["requestState"]}),
        )
        .await;
    assert_eq!(r2["resultType"], "task", "{r2}");
    assert!(
        r2.get("requestState").is_none() && r2.get("inputRequests").is_none(),
        "{r2}"
    );
    let id = r2["taskId"].as_str().unwrap();
    // The task's execution has the answer: it asks nothing more.
    let t = m.until_terminal(id).await;
    assert_eq!(t["status"], "completed", "{t}");
    assert_eq!(
        t["result"]["content"][0]["text"], "Hello, Alice! (from the task)",
        "{t}"
    );

    // A 2025-11-25 client is asked the same question by the task as it runs.
    let c = Client::connect(&s.url, None, "2025-11-25", json!({"elicitation": {}})).await;
    let id = c.start_task("test_tool_with_task", json!({})).await;
    let (_, mut stream) = c.open_stream("tasks/result", json!({"taskId": id})).await;
    let asked = stream.next().await.expect("the task asks");
    assert_eq!(asked["method"], "elicitation/create", "{asked}");
    c.answer(&asked["id"], accept("name", json!("Bea"))).await;
    let done = stream.next().await.expect("the result");
    assert_eq!(
        done["result"]["content"][0]["text"], "Hello, Bea! (from the task)",
        "{done}"
    );
}

#[tokio::test]
async fn log_messages_of_a_plain_call_follow_the_request_s_log_level() {
    let s = Server::start(TASKMESH, "[tools]\nconformance = true\n");
    let m = Modern::new(&s.url, None, false);
    let logged = |level: Option<&str>| {
        let mut p = json!({"name": "test_tool_with_logging", "arguments": {}});
        if let Some(l) = level {
            p["_meta"] = json!({"io.modelcontextprotocol/logLevel": l});
        }
        p
    };
    // With a level: the messages at or above it, then the result, on the call's stream.
    let mut sse = m
        .open("tools/call", logged(Some("info")))
        .await
        .ok()
        .expect("a stream");
    let mut messages = 0;
    let last = loop {
        let msg = sse.next().await.expect("a message");
        if msg["method"] == "notifications/message" {
            assert_eq!(msg["params"]["level"], "info", "{msg}");
            messages += 1;
        } else {
            break msg;
        }
    };
    assert_eq!(messages, 3);
    assert_eq!(last["result"]["resultType"], "complete", "{last}");
    let mut sse = m
        .open("tools/call", logged(Some("error")))
        .await
        .ok()
        .expect("a stream");
    let only = sse.next().await.unwrap();
    assert!(only.get("result").is_some(), "nothing below error: {only}");
    // Without one: no messages at all, a JSON answer.
    let a = m.send("tools/call", logged(None)).await;
    assert_eq!(a.result()["resultType"], "complete", "{}", a.body);
    let a = m.send("tools/call", logged(Some("loud"))).await;
    assert_eq!(a.code(), -32602, "{}", a.body);
}

#[tokio::test]
async fn a_listen_stream_is_told_when_the_tools_served_change() {
    let s = Server::start(TASKMESH, "[tools]\nconformance = true\n");
    let m = Modern::new(&s.url, None, false);
    let mut l = m
        .listen(json!({"toolsListChanged": true}))
        .await
        .ok()
        .expect("a stream");
    let _ack = l.next().await.unwrap();
    let names = |r: &Value| -> Vec<String> {
        r["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_string())
            .collect()
    };
    let before = names(&m.ok("tools/list", json!({})).await);
    assert!(!before.contains(&"test_dynamic_tool".to_string()));
    m.ok(
        "tools/call",
        json!({"name": "test_trigger_tool_change", "arguments": {}}),
    )
    .await;
    let n = l.next().await.expect("a notification");
    assert_eq!(n["method"], "notifications/tools/list_changed", "{n}");
    assert_eq!(n["params"]["_meta"][SUBSCRIPTION], 7, "{n}");
    let after = names(&m.ok("tools/list", json!({})).await);
    assert!(
        after.contains(&"test_dynamic_tool".to_string()),
        "{after:?}"
    );
}

#[tokio::test]
async fn mirrored_parameters_must_come_in_their_headers() {
    let s = Server::start(TASKMESH, "[tools]\nconformance = true\n");
    let m = Modern::new(&s.url, None, false);
    let listed = m.ok("tools/list", json!({})).await;
    let tool = listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "test_header_param")
        .unwrap();
    assert_eq!(
        tool["inputSchema"]["properties"]["region"]["x-mcp-header"], "Region",
        "{tool}"
    );
    let call = |region: &str| json!({"name": "test_header_param", "arguments": {"region": region, "query": "q"}});
    // The header as the value is (plain ASCII), Base64 of its UTF-8 (not plain ASCII), or
    // without both Base64 markers (read as it is).
    for (region, header) in [
        ("us-west1", "us-west1"),
        ("Zürich", "=?base64?WsO8cmljaA==?="),
        ("=?base64?SGVsbG8=", "=?base64?SGVsbG8="),
    ] {
        let a = m
            .send_with(
                "tools/call",
                call(region),
                &[("mcp-param-region", Some(header))],
            )
            .await;
        assert_eq!(
            a.result()["content"][0]["text"],
            format!("q in {region}"),
            "{}",
            a.body
        );
    }
    // Missing, different, badly encoded, or given without a value in the body: -32020, and
    // nothing runs.
    for (args, header) in [
        (call("us-west1"), None),
        (call("us-west1"), Some("eu-north1")),
        (call("Hello"), Some("=?base64?SGVsbG8?=")),
        (call("Hello"), Some("=?base64?SGVs!!!bG8=?=")),
        (
            json!({"name": "test_header_param", "arguments": {"query": "q"}}),
            Some("us-west1"),
        ),
    ] {
        let a = m
            .send_with("tools/call", args, &[("mcp-param-region", header)])
            .await;
        assert_eq!(
            (a.status, a.code()),
            (400, -32020),
            "{header:?}: {}",
            a.body
        );
    }
}

#[tokio::test]
async fn listen_streams_end_with_their_response_when_the_server_stops() {
    let mut s = Server::start(TASKMESH, "");
    let m = Modern::new(&s.url, None, false);
    let mut l = m
        .listen(json!({"toolsListChanged": true}))
        .await
        .ok()
        .expect("a stream");
    let _ack = l.next().await.unwrap();
    let stopping = tokio::task::spawn_blocking(move || {
        let stopped = s.terminate();
        (s, stopped)
    });
    let end = l.next().await.expect("the listen response");
    assert_eq!(end["id"], 7, "{end}");
    assert_eq!(end["result"]["resultType"], "complete", "{end}");
    assert_eq!(end["result"]["_meta"][SUBSCRIPTION], 7, "{end}");
    assert_eq!(l.next().await, None);
    let (_s, stopped) = stopping.await.unwrap();
    assert!(stopped, "the server stops cleanly");
}
