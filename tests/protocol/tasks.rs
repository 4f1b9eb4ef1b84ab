//! The task state machine over the wire: results and their replay, cancellation, TTL, listing
//! and cursors, isolation of principals, progress, the live-task cap and the result size limit.

use std::time::Duration;

use serde_json::{json, Value};
use taskmesh_testkit::{Client, Server, V};

use crate::{init_body, AUTH, TASKMESH};

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
    // The token is checked on the headers: a request that announces a large body and sends
    // none of it is answered 401 at once (the body is never waited for).
    let addr = s
        .url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_string();
    let head = tokio::task::spawn_blocking(move || {
        use std::io::{Read, Write};
        let mut tcp = std::net::TcpStream::connect(&addr).unwrap();
        tcp.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        write!(
            tcp,
            "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer wrong-token-x\r\nContent-Type: application/json\r\nContent-Length: 900000\r\n\r\n"
        )
        .unwrap();
        let mut got = [0u8; 64];
        let n = tcp.read(&mut got).unwrap_or(0);
        String::from_utf8_lossy(&got[..n]).to_string()
    })
    .await
    .unwrap();
    assert!(head.starts_with("HTTP/1.1 401"), "{head:?}");
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

/// One requestor cannot take every slot: past `tasks.max_live_tasks_per_principal` its
/// creates answer `-32001` and create nothing, while another principal's are served.
#[tokio::test]
async fn the_live_task_cap_per_principal_leaves_room_for_the_others() {
    let s = Server::start(
        TASKMESH,
        &format!("{AUTH}\n[tasks]\nmax_live_tasks = 5\nmax_live_tasks_per_principal = 2\n"),
    );
    let alice = Client::connect(&s.url, Some("alice-token-1"), V, json!({})).await;
    let bob = Client::connect(&s.url, Some("bob-token-22"), V, json!({})).await;
    let create = json!({"name":"slow_compute","arguments":{"seconds":30},"task":{}});
    let first = alice
        .start_task("slow_compute", json!({"seconds": 30}))
        .await;
    alice
        .start_task("slow_compute", json!({"seconds": 30}))
        .await;
    let r = alice.call("tools/call", create.clone()).await;
    assert_eq!(r["error"]["code"], -32001, "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("max_live_tasks_per_principal"),
        "{r}"
    );
    let listed = |c: &Client| {
        let c = c.clone();
        async move {
            c.ok("tasks/list", json!({})).await["tasks"]
                .as_array()
                .unwrap()
                .len()
        }
    };
    assert_eq!(listed(&alice).await, 2, "nothing was created");
    // Another principal still gets its own slots.
    bob.start_task("slow_compute", json!({"seconds": 30})).await;
    bob.start_task("slow_compute", json!({"seconds": 30})).await;
    assert_eq!(listed(&bob).await, 2);
    // A slot of alice's frees when one of her tasks ends.
    alice.ok("tasks/cancel", json!({"taskId": first})).await;
    let mut created = false;
    for _ in 0..100 {
        if alice
            .call("tools/call", create.clone())
            .await
            .get("result")
            .is_some()
        {
            created = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(created, "a freed slot serves its principal again");
}

/// A refused create takes no slot and gives none back: 40 creates in a row by one principal
/// capped at 3 (the node's cap far above) admit exactly the first 3 and refuse every other,
/// and 3 tasks live.
#[tokio::test]
async fn refused_creates_leave_the_per_principal_cap_where_it_was() {
    let s = Server::start(
        TASKMESH,
        &format!("{AUTH}\n[tasks]\nmax_live_tasks = 100\nmax_live_tasks_per_principal = 3\n"),
    );
    let alice = Client::connect(&s.url, Some("alice-token-1"), V, json!({})).await;
    let create = json!({"name":"slow_compute","arguments":{"seconds":3600},"task":{}});
    let mut outcomes = String::new();
    for _ in 0..40 {
        let r = alice.call("tools/call", create.clone()).await;
        if r.get("result").is_some() {
            outcomes.push('+');
        } else {
            assert_eq!(r["error"]["code"], -32001, "{r}");
            outcomes.push('-');
        }
    }
    assert_eq!(outcomes, format!("+++{}", "-".repeat(37)));
    let listed = alice.ok("tasks/list", json!({})).await;
    assert_eq!(listed["tasks"].as_array().unwrap().len(), 3, "{listed}");
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

/// Guessing tokens is bounded: past `limits.failed_auth_per_minute` wrong tokens, the address
/// is answered 429 whatever it sends (a right token included, so a guess cannot be told
/// right) and serves nothing.
#[tokio::test]
async fn wrong_tokens_are_bounded_per_address() {
    let s = Server::start(
        TASKMESH,
        &format!("{AUTH}\n[limits]\nfailed_auth_per_minute = 3\n"),
    );
    let alice = Client::connect(&s.url, Some("alice-token-1"), V, json!({})).await;
    let ping = json!({"jsonrpc":"2.0","id":1,"method":"ping"}).to_string();
    let mut guess = alice.clone();
    for i in 0..3 {
        guess.token = Some(format!("guess-{i}"));
        assert_eq!(guess.post(&ping, &[]).await.status, 401, "guess {i}");
    }
    guess.token = Some("guess-3".into());
    let r = guess.post(&ping, &[]).await;
    assert_eq!(r.status, 429, "{}", r.body);
    assert_eq!(r.headers["retry-after"], "60");
    let create = json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{
        "name":"slow_compute","arguments":{"seconds":1},"task":{}}})
    .to_string();
    let mut bad = alice.clone();
    bad.token = Some("guess-4".into());
    assert_eq!(bad.post(&create, &[]).await.status, 429);
    let listed = alice.ok("tasks/list", json!({})).await;
    assert_eq!(listed["tasks"].as_array().unwrap().len(), 0, "{listed}");
}

/// Many clients share one address (a proxy, a NAT): a request whose token verifies is served
/// from an address locked out for others' wrong tokens, while a wrong token from it is still
/// refused with 429, neither counted nor audited again.
#[tokio::test]
async fn a_valid_token_is_served_from_an_address_locked_for_wrong_tokens() {
    let s = Server::start(
        TASKMESH,
        &format!("{AUTH}\n[log]\nformat = \"json\"\nlevel = \"info\"\n"),
    );
    let alice = Client::connect(&s.url, Some("alice-token-1"), V, json!({})).await;
    let ping = json!({"jsonrpc":"2.0","id":1,"method":"ping"}).to_string();
    let mut guess = alice.clone();
    let mut statuses = Vec::new();
    for i in 0..30 {
        guess.token = Some(format!("wrong-token-{i}"));
        statuses.push(guess.post(&ping, &[]).await.status);
    }
    // The default limit is 20 wrong tokens a minute.
    assert_eq!(statuses[..20], [401; 20]);
    assert_eq!(statuses[20..], [429; 10]);
    let r = alice.post(&ping, &[]).await;
    assert_eq!(r.status, 200, "a valid token is served: {}", r.body);
    assert_eq!(r.json()["result"], json!({}), "{}", r.body);
    let task = alice
        .start_task("slow_compute", json!({"seconds": 0.01}))
        .await;
    alice.wait_status(&task, "completed").await;
    guess.token = Some("wrong-token-30".into());
    let r = guess.post(&ping, &[]).await;
    assert_eq!(r.status, 429, "a wrong one is still refused: {}", r.body);
    assert_eq!(r.headers["retry-after"], "60");
    // A request without a token still learns how to authenticate.
    guess.token = None;
    let r = guess.post(&ping, &[]).await;
    assert_eq!(r.status, 401, "{}", r.body);
    // The first wrong token and the lock are audited, nothing after it.
    let log = s.log_text();
    let count = |event: &str| {
        log.lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v["target"] == "audit" && v["fields"]["event"] == event)
            .count()
    };
    assert_eq!(count("auth_failed"), 1, "{log}");
    assert_eq!(count("auth_failures_locked"), 1, "{log}");
}

/// Past `limits.tasks_per_minute` a principal's creates answer `-32001` on either protocol
/// generation and create nothing; another principal keeps its own budget. Past
/// `limits.sessions_per_minute` its `initialize` answers `-32001` and opens no session.
#[tokio::test]
async fn creation_rates_are_bounded_per_principal() {
    let s = Server::start(
        TASKMESH,
        &format!("{AUTH}\n[limits]\ntasks_per_minute = 2\nsessions_per_minute = 3\n"),
    );
    let alice = Client::connect(&s.url, Some("alice-token-1"), V, json!({})).await;
    let bob = Client::connect(&s.url, Some("bob-token-22"), V, json!({})).await;
    let modern = taskmesh_testkit::modern::Modern::new(&s.url, Some("alice-token-1"), true);
    alice
        .start_task("slow_compute", json!({"seconds": 0.01}))
        .await;
    modern.start("slow_compute", json!({"seconds": 0.01})).await;
    let r = alice
        .call(
            "tools/call",
            json!({"name":"slow_compute","arguments":{"seconds":0.01},"task":{}}),
        )
        .await;
    assert_eq!(r["error"]["code"], -32001, "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("limits.tasks_per_minute"),
        "{r}"
    );
    let a = modern
        .send(
            "tools/call",
            json!({"name":"slow_compute","arguments":{"seconds":0.01}}),
        )
        .await;
    assert_eq!(a.code(), -32001, "{}", a.body);
    let listed = alice.ok("tasks/list", json!({})).await;
    assert_eq!(listed["tasks"].as_array().unwrap().len(), 2, "{listed}");
    bob.start_task("slow_compute", json!({"seconds": 0.01}))
        .await;

    // Sessions: alice opened one above; two more, then the fourth is refused.
    for _ in 0..2 {
        Client::connect(&s.url, Some("alice-token-1"), V, json!({})).await;
    }
    let r = Client::new(&s.url)
        .with_token("alice-token-1")
        .post(
            &json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{
                "protocolVersion": V, "capabilities": {}, "clientInfo": {"name":"t","version":"1"}}})
            .to_string(),
            &[],
        )
        .await;
    assert_eq!(r.json()["error"]["code"], -32001, "{}", r.body);
    assert!(
        r.headers.get("mcp-session-id").is_none(),
        "no session opened"
    );
    Client::connect(&s.url, Some("bob-token-22"), V, json!({})).await;
}

/// With `log.format = "json"`, every audit event is one JSON line (target `audit`) with the
/// same fields: event, principal, issuer, node, method, request_id, task_id and outcome.
/// Creates, results, cancels (also refused ones), a read of another principal's task and a
/// wrong token are each audited.
#[tokio::test]
async fn audit_events_carry_who_what_where_and_how_it_ended() {
    let s = Server::start(
        TASKMESH,
        &format!("{AUTH}\n[log]\nformat = \"json\"\nlevel = \"info\"\n"),
    );
    let alice = Client::connect(&s.url, Some("alice-token-1"), V, json!({})).await;
    let bob = Client::connect(&s.url, Some("bob-token-22"), V, json!({})).await;
    let done = alice
        .start_task("slow_compute", json!({"seconds": 0.01}))
        .await;
    alice.wait_status(&done, "completed").await;
    alice.ok("tasks/result", json!({"taskId": done})).await;
    let long = alice
        .start_task("slow_compute", json!({"seconds": 600}))
        .await;
    assert_eq!(
        bob.err_code("tasks/get", json!({"taskId": long})).await,
        -32602
    );
    alice.ok("tasks/cancel", json!({"taskId": long})).await;
    assert_eq!(
        alice
            .err_code("tasks/cancel", json!({"taskId": long}))
            .await,
        -32602
    );
    let wrong = Client::new(&s.url).with_token("not-a-token-0000");
    assert_eq!(wrong.post(&crate::init_body(V), &[]).await.status, 401);

    let wanted = [
        ("task_created", "alice", done.as_str(), "ok"),
        ("task_result_retrieved", "alice", done.as_str(), "ok"),
        ("task_terminal", "alice", done.as_str(), "completed"),
        ("task_created", "alice", long.as_str(), "ok"),
        (
            "foreign_task_lookup",
            "bob",
            long.as_str(),
            "refused as unknown",
        ),
        ("task_cancelled", "alice", long.as_str(), "ok"),
        ("task_cancelled", "alice", long.as_str(), "error -32602"),
        ("auth_failed", "", "", "not a configured token"),
    ];
    let mut events = Vec::new();
    for _ in 0..100 {
        events = s
            .log
            .lock()
            .unwrap()
            .iter()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v["target"] == "audit")
            .collect::<Vec<Value>>();
        let found = |(e, p, t, o): &(&str, &str, &str, &str)| {
            events.iter().any(|v| {
                let f = &v["fields"];
                f["event"] == *e && f["principal"] == *p && f["task_id"] == *t && f["outcome"] == *o
            })
        };
        if wanted.iter().all(found) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for w in &wanted {
        let (e, p, t, o) = w;
        assert!(
            events.iter().any(|v| {
                let f = &v["fields"];
                f["event"] == *e && f["principal"] == *p && f["task_id"] == *t && f["outcome"] == *o
            }),
            "no audit event {w:?} in {events:#?}"
        );
    }
    for v in &events {
        let f = &v["fields"];
        for key in [
            "event",
            "principal",
            "issuer",
            "node",
            "method",
            "request_id",
            "task_id",
            "outcome",
        ] {
            assert!(f.get(key).is_some(), "audit event without {key}: {v}");
        }
        if f["event"] == "task_created" || f["event"] == "task_cancelled" {
            assert_ne!(f["request_id"], "", "a request's event names its id: {v}");
            assert_ne!(f["method"], "", "{v}");
        }
        assert_eq!(f["node"], 1, "{v}");
    }
}
