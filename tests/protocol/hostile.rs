//! A hostile client against a real server, in one battery: malformed, truncated, deeply nested,
//! oversized and badly encoded bodies; every JSON type as a request id and as a parameter;
//! forged and borrowed session ids and cursors; slow and silent connections; a thousand idle
//! connections while a normal client is still answered; bodies of authenticated callers left
//! unfinished. Afterwards the server is alive, its memory is near where it was, and every task
//! made before the battery answers byte for byte as it did.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use serde_json::{json, Value};
use taskmesh_testkit::{Client, Server, V};

use crate::{AUTH, TASKMESH};

/// How much more resident memory than before the battery the server may hold after it.
const RSS_SLACK_KIB: u64 = 64 * 1024;
/// Idle connections held open at once.
const IDLE_CONNECTIONS: usize = 1000;

/// The exact bytes of the answers about tasks `ids` (their `tasks/get`, and for terminal ones
/// their `tasks/result`), each asked with the same request id.
async fn answers(c: &Client, ids: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for id in ids {
        for method in ["tasks/get", "tasks/result"] {
            let body = json!({"jsonrpc":"2.0","id":"same","method":method,"params":{"taskId":id}});
            out.push(c.post(&body.to_string(), &[]).await.body);
        }
    }
    out
}

/// What the server answers on a raw connection that sent `sent` (read until it closes).
fn raw(addr: &str, sent: &[u8]) -> String {
    let mut tcp = TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let _ = tcp.write_all(sent);
    let mut got = Vec::new();
    let _ = tcp.read_to_end(&mut got);
    String::from_utf8_lossy(&got).to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_client_changes_nothing_and_leaves_the_server_as_it_found_it() {
    let s = Server::start(
        TASKMESH,
        &format!(
            "{AUTH}\n[http]\nmax_body_bytes = 65536\nheader_read_timeout_ms = 500\nbody_read_timeout_ms = 500\n[tasks]\nlist_page_size = 1\n"
        ),
    );
    let addr = s
        .url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_string();
    let alice = Client::connect(&s.url, Some("alice-token-1"), V, json!({})).await;
    let bob = Client::connect(&s.url, Some("bob-token-22"), V, json!({})).await;

    // Tasks made before: one completed, one cancelled (both settled for good).
    let done = alice
        .start_task("slow_compute", json!({"seconds": 0.01}))
        .await;
    alice.wait_status(&done, "completed").await;
    let cancelled = alice
        .start_task("slow_compute", json!({"seconds": 600}))
        .await;
    alice.ok("tasks/cancel", json!({"taskId": cancelled})).await;
    let ids = vec![done.clone(), cancelled.clone()];
    let before = answers(&alice, &ids).await;
    assert!(before[0].contains("completed"), "{}", before[0]);
    let rss_before = s.rss_kib();

    // 1. Bodies that are not one well-formed JSON-RPC message.
    let deep_array = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let deep_object = format!("{}1{}", "{\"a\":".repeat(50_000), "}".repeat(50_000));
    let nested = "[".repeat(10_000) + &"]".repeat(10_000);
    let deep_params = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"greet","arguments":{nested}}}}}"#
    );
    let long_field = json!({"jsonrpc":"2.0","id":1,"method":"tools/call",
        "params":{"name":"x".repeat(60_000)}})
    .to_string();
    let bodies: Vec<Vec<u8>> = vec![
        b"".to_vec(),
        b"{".to_vec(),
        br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":"#.to_vec(),
        b"[]".to_vec(),
        br#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#.to_vec(),
        b"null".to_vec(),
        b"\"just a string\"".to_vec(),
        br#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#.to_vec(),
        br#"{"jsonrpc":"2.0","id":1}"#.to_vec(),
        b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"p\xffing\"}".to_vec(),
        vec![0xfe, 0xff, 0x00, 0x7b],
        deep_array.into_bytes(),
        deep_object.into_bytes(),
        deep_params.into_bytes(),
        long_field.into_bytes(),
        vec![b' '; 70_000],
    ];
    for body in bodies {
        let shown = String::from_utf8_lossy(&body[..body.len().min(60)]).to_string();
        let r = alice.post_bytes(body, &[]).await;
        assert!(
            (200..500).contains(&r.status),
            "{shown:?}: {} {}",
            r.status,
            r.body
        );
        if r.status != 413 && !r.body.is_empty() {
            let code = r.json()["error"]["code"].as_i64();
            assert!(
                matches!(code, Some(-32700 | -32600 | -32601 | -32602)),
                "{shown:?}: {}",
                r.body
            );
        }
    }

    // 2. Every JSON type as the id, and as the task id and the tool name.
    let any = [
        json!(null),
        json!(true),
        json!(-1.5),
        json!(1e300),
        json!("s"),
        json!([]),
        json!({}),
        json!({"taskId": done}),
    ];
    for id in &any {
        for p in &any {
            for (method, params) in [
                ("tasks/get", json!({ "taskId": p })),
                ("tasks/cancel", json!({ "taskId": p })),
                (
                    "tools/call",
                    json!({ "name": p, "arguments": p, "task": p }),
                ),
                ("tasks/list", json!({ "cursor": p })),
            ] {
                let body = json!({"jsonrpc":"2.0","id":id,"method":method,"params":params});
                let r = alice.post(&body.to_string(), &[]).await;
                assert!((200..500).contains(&r.status), "{body}: {}", r.status);
                if method != "tasks/list" || !p.is_null() {
                    assert!(r.body.contains("\"error\""), "{body}: {}", r.body);
                }
            }
        }
    }

    // 3. Session ids and cursors that are not the caller's.
    let bob_session = bob.session.clone().unwrap();
    let mut borrowed = alice.clone();
    borrowed.session = Some(bob_session.clone());
    let ping = json!({"jsonrpc":"2.0","id":1,"method":"ping"}).to_string();
    assert_eq!(
        borrowed.post(&ping, &[]).await.status,
        404,
        "bob's session with alice's token"
    );
    for forged in [
        "abc.def",
        "",
        "..",
        &bob_session[1..],
        &format!("{bob_session}x"),
    ] {
        let mut c = bob.clone();
        c.session = Some(forged.to_string());
        assert!(
            matches!(c.post(&ping, &[]).await.status, 400 | 404),
            "forged session {forged:?}"
        );
    }
    let page = alice.ok("tasks/list", json!({})).await;
    let cursor = page["nextCursor"]
        .as_str()
        .expect("a second page")
        .to_string();
    assert_eq!(
        bob.err_code("tasks/list", json!({"cursor": cursor})).await,
        -32602
    );
    let mut altered = cursor.clone().into_bytes();
    altered[2] ^= 1;
    let altered = String::from_utf8_lossy(&altered).to_string();
    assert_eq!(
        alice
            .err_code("tasks/list", json!({"cursor": altered}))
            .await,
        -32602
    );

    // 4. Slow and silent connections are let go; unfinished bodies of an authenticated caller
    //    get 408 or 413 and leave nothing behind.
    let slow = (0..50)
        .map(|_| {
            let a = addr.clone();
            std::thread::spawn(move || {
                let mut tcp = TcpStream::connect(&a).unwrap();
                tcp.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
                for b in b"POST /mcp HTTP/1.1\r\nHost: x\r\n" {
                    if tcp.write_all(&[*b]).is_err() {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
                let mut got = Vec::new();
                let _ = tcp.read_to_end(&mut got);
                got
            })
        })
        .collect::<Vec<_>>();
    let partial = format!(
        "POST /mcp HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer alice-token-1\r\nContent-Type: application/json\r\nContent-Length: 65000\r\n\r\n{}",
        "x".repeat(60_000)
    );
    let unfinished = (0..100)
        .map(|_| {
            let (a, p) = (addr.clone(), partial.clone());
            std::thread::spawn(move || raw(&a, p.as_bytes()))
        })
        .collect::<Vec<_>>();
    for t in slow {
        let got = tokio::task::spawn_blocking(move || t.join().unwrap())
            .await
            .unwrap();
        assert!(
            got.is_empty(),
            "a slow head gets no answer, only a closed connection"
        );
    }
    for t in unfinished {
        let got = tokio::task::spawn_blocking(move || t.join().unwrap())
            .await
            .unwrap();
        assert!(
            got.starts_with("HTTP/1.1 408"),
            "{}",
            &got[..got.len().min(80)]
        );
    }

    // 5. A thousand idle connections; a normal client is still answered meanwhile.
    let a = addr.clone();
    let idle = tokio::task::spawn_blocking(move || {
        (0..IDLE_CONNECTIONS)
            .map(|i| {
                TcpStream::connect(&a)
                    .unwrap_or_else(|e| panic!("idle connection {i} could not be opened: {e}"))
            })
            .collect::<Vec<TcpStream>>()
    })
    .await
    .unwrap();
    let fresh = Client::connect(&s.url, Some("alice-token-1"), V, json!({})).await;
    assert_eq!(fresh.status(&done).await, "completed");
    drop(idle);

    // Afterwards: alive, memory near where it was, the old tasks answered byte for byte.
    alice.ok("ping", json!({})).await;
    let rss_after = s.rss_kib();
    eprintln!("resident memory: {rss_before} KiB before the battery, {rss_after} KiB after");
    assert!(
        rss_after <= rss_before + RSS_SLACK_KIB,
        "resident memory grew from {rss_before} KiB to {rss_after} KiB"
    );
    assert_eq!(answers(&alice, &ids).await, before);
    let listed: Vec<Value> = {
        let mut all = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let params = match &cursor {
                Some(c) => json!({"cursor": c}),
                None => json!({}),
            };
            let page = alice.ok("tasks/list", params).await;
            all.extend(page["tasks"].as_array().unwrap().iter().cloned());
            match page["nextCursor"].as_str() {
                Some(c) => cursor = Some(c.to_string()),
                None => break all,
            }
        }
    };
    assert_eq!(listed.len(), 2, "the battery created nothing: {listed:?}");
}
