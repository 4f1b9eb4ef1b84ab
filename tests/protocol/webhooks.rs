//! Operator webhooks (`[[webhooks]]`, docs/events.md): each status change of a covered task
//! reaches a real HTTP receiver on loopback, signed over its raw body, with the task's outcome
//! inline once terminal; a receiver that fails is tried again with a fresh signature; a webhook
//! limited to a principal and to ends gets only those.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use parking_lot::Mutex;
use serde_json::{json, Value};
use sha2::Sha256;
use taskmesh_testkit::{Client, Server};

use crate::{AUTH, TASKMESH};

const SECRET_KEY: [u8; 32] = [0x5a; 32];

/// One request the receiver got: its path, headers and raw body.
#[derive(Clone)]
struct Got {
    path: String,
    headers: HeaderMap,
    body: Bytes,
}

/// The receiver: every request recorded; `/flaky` answers 500 to the first request of each
/// event, 2xx to the next.
#[derive(Clone, Default)]
struct Receiver {
    got: Arc<Mutex<Vec<Got>>>,
}

async fn record(path: &'static str, r: &Receiver, headers: HeaderMap, body: Bytes) -> StatusCode {
    let mut got = r.got.lock();
    let id = headers
        .get("webhook-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let seen_before = got.iter().any(|g| {
        g.path == path && g.headers.get("webhook-id").and_then(|v| v.to_str().ok()) == Some(&id)
    });
    got.push(Got {
        path: path.to_owned(),
        headers,
        body,
    });
    if path == "/flaky" && !seen_before {
        StatusCode::INTERNAL_SERVER_ERROR
    } else {
        StatusCode::NO_CONTENT
    }
}

async fn receiver() -> (u16, Receiver) {
    let r = Receiver::default();
    let app = axum::Router::new()
        .route(
            "/all",
            post(
                |State(r): State<Receiver>, h: HeaderMap, b: Bytes| async move {
                    record("/all", &r, h, b).await
                },
            ),
        )
        .route(
            "/ends",
            post(
                |State(r): State<Receiver>, h: HeaderMap, b: Bytes| async move {
                    record("/ends", &r, h, b).await
                },
            ),
        )
        .route(
            "/flaky",
            post(
                |State(r): State<Receiver>, h: HeaderMap, b: Bytes| async move {
                    record("/flaky", &r, h, b).await
                },
            ),
        )
        .with_state(r.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (port, r)
}

fn config(port: u16) -> String {
    let secret = base64::engine::general_purpose::STANDARD.encode(SECRET_KEY);
    format!(
        r#"[auth]
status_principals = ["alice"]
{AUTH}
[events]
allow_addresses = ["127.0.0.0/8"]
http_hosts = ["127.0.0.1"]
retry_base_ms = 1000

[[webhooks]]
name = "all"
url = "http://127.0.0.1:{port}/all"
secret = "whsec_{secret}"

[[webhooks]]
name = "alice-ends"
url = "http://127.0.0.1:{port}/ends"
secret = "whsec_{secret}"
terminal_only = true
principals = ["alice"]

[[webhooks]]
name = "flaky"
url = "http://127.0.0.1:{port}/flaky"
secret = "whsec_{secret}"
terminal_only = true
principals = ["bob"]
"#
    )
}

/// Verify a delivery as a receiver would, with its own HMAC: `v1,` signatures over
/// `{id}.{timestamp}.{raw body}`.
fn verified(g: &Got) -> Value {
    let h = |n: &str| g.headers.get(n).unwrap().to_str().unwrap().to_owned();
    let (id, ts) = (h("webhook-id"), h("webhook-timestamp"));
    let mut mac = Hmac::<Sha256>::new_from_slice(&SECRET_KEY).unwrap();
    mac.update(format!("{id}.{ts}.").as_bytes());
    mac.update(&g.body);
    let want = format!(
        "v1,{}",
        base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
    );
    assert!(
        h("webhook-signature").split(' ').any(|s| s == want),
        "signature of {id} does not verify"
    );
    let event: Value = serde_json::from_slice(&g.body).unwrap();
    assert_eq!(event["eventId"], id.as_str());
    event
}

/// The events of `task_id` a path got, verified, in arrival order.
fn events_of(r: &Receiver, path: &str, task_id: &str) -> Vec<(Got, Value)> {
    r.got
        .lock()
        .iter()
        .filter(|g| g.path == path)
        .map(|g| (g.clone(), verified(g)))
        .filter(|(_, e)| e["data"]["taskId"] == task_id)
        .collect()
}

async fn eventually<T>(mut f: impl FnMut() -> Option<T>) -> T {
    for _ in 0..100 {
        if let Some(v) = f() {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("not delivered within 10 s");
}

async fn session(s: &Server, token: &str) -> Client {
    Client::connect(
        &s.url,
        Some(token),
        "2025-11-25",
        json!({"tasks": {"list": {}, "cancel": {}}}),
    )
    .await
}

#[tokio::test]
async fn status_changes_reach_the_webhooks_that_cover_them_signed_and_with_the_outcome() {
    let (port, r) = receiver().await;
    let s = Server::start(TASKMESH, &config(port));
    let alice = session(&s, "alice-token-1").await;
    let done = alice
        .start_task("slow_compute", json!({"seconds": 0, "label": "hooked"}))
        .await;
    alice.wait_status(&done, "completed").await;

    // The webhook of every change: the end, as tasks/get shows it on 2026-07-28.
    let got = eventually(|| events_of(&r, "/all", &done).pop()).await;
    let (delivery, event) = got;
    assert_eq!(event["name"], "taskmesh.task.updated");
    assert_eq!(event["data"]["status"], "completed");
    assert_eq!(
        event["data"]["result"]["content"][0]["text"]
            .as_str()
            .map(|t| t.contains("hooked")),
        Some(true)
    );
    assert!(event["timestamp"].as_str().unwrap().ends_with('Z'));
    assert!(event["eventId"]
        .as_str()
        .unwrap()
        .starts_with(&format!("{done}-")));
    assert_eq!(
        delivery.headers.get("x-mcp-subscription-id").unwrap(),
        "wh_all"
    );
    assert_eq!(
        delivery.headers.get("content-type").unwrap(),
        "application/json"
    );
    // alice's webhook of ends got the same event, under its own subscription.
    let (end, end_event) = eventually(|| events_of(&r, "/ends", &done).pop()).await;
    assert_eq!(end_event["eventId"], event["eventId"]);
    assert_eq!(
        end.headers.get("x-mcp-subscription-id").unwrap(),
        "wh_alice-ends"
    );

    // A task alice cancels: its end reaches both; bob's task reaches only the webhook of all
    // (and bob's own, below), never alice's.
    let cancelled = alice
        .start_task("slow_compute", json!({"seconds": 30}))
        .await;
    alice.ok("tasks/cancel", json!({"taskId": cancelled})).await;
    let (_, e) = eventually(|| events_of(&r, "/all", &cancelled).pop()).await;
    assert_eq!(e["data"]["status"], "cancelled");
    eventually(|| events_of(&r, "/ends", &cancelled).pop()).await;

    // bob's webhook answers 500 to the first delivery of each event: it is tried again, later,
    // with a fresh timestamp and signature, and then acknowledged.
    let bob = session(&s, "bob-token-22").await;
    let his = bob.start_task("slow_compute", json!({"seconds": 0})).await;
    bob.wait_status(&his, "completed").await;
    let tries = eventually(|| {
        let t = events_of(&r, "/flaky", &his);
        (t.len() >= 2).then_some(t)
    })
    .await;
    let h = |g: &Got, n: &str| g.headers.get(n).unwrap().to_str().unwrap().to_owned();
    assert_eq!(h(&tries[0].0, "webhook-id"), h(&tries[1].0, "webhook-id"));
    assert_ne!(
        h(&tries[0].0, "webhook-timestamp"),
        h(&tries[1].0, "webhook-timestamp")
    );
    assert_ne!(
        h(&tries[0].0, "webhook-signature"),
        h(&tries[1].0, "webhook-signature")
    );
    eventually(|| events_of(&r, "/all", &his).pop()).await;
    // Settled once acknowledged: no third try.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    assert_eq!(events_of(&r, "/flaky", &his).len(), 2);
    assert!(
        events_of(&r, "/ends", &his).is_empty(),
        "alice's webhook got bob's task"
    );
    // Each acknowledged event was delivered once to each webhook.
    assert_eq!(events_of(&r, "/all", &done).len(), 1);
    assert_eq!(events_of(&r, "/ends", &done).len(), 1);

    // `taskmesh webhooks` shows each webhook and what the node's deliveries came to, never a
    // secret.
    let listed = crate::webhooks_listed(&s.url);
    let hooks = listed["webhooks"].as_array().unwrap();
    let names: Vec<&str> = hooks.iter().map(|h| h["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["alice-ends", "all", "flaky"]);
    let flaky = &hooks[2];
    assert_eq!(flaky["subscription"], "wh_flaky");
    assert_eq!(flaky["principals"], json!(["bob"]));
    assert_eq!(flaky["deliveries"]["attempts"], 2);
    assert_eq!(flaky["deliveries"]["acked"], 1);
    assert_eq!(flaky["deliveries"]["lastError"], "http_5xx");
    assert!(flaky["deliveries"].get("failingSinceMs").is_none());
    let all = &hooks[1];
    assert_eq!(all["deliveries"]["acked"], 3);
    assert_eq!(all["deliveries"]["abandoned"], 0);
    assert_eq!(all["inFlight"], 0);
}

/// The events a [`taskmesh_testkit::python::WebhookReceiver`] recorded for `task_id`, in the
/// order of their changes, each once.
fn recorded_of(lines: &[Value], task_id: &str) -> Vec<Value> {
    let mut seen = std::collections::BTreeMap::new();
    for l in lines {
        if l["event"]["data"]["taskId"] == task_id {
            let index: u64 = l["id"]
                .as_str()
                .unwrap()
                .rsplit('-')
                .next()
                .unwrap()
                .parse()
                .unwrap();
            seen.entry(index).or_insert_with(|| l["event"].clone());
        }
    }
    seen.into_values().collect()
}

#[tokio::test]
async fn a_receiver_verifying_with_the_standard_webhooks_library_gets_every_change() {
    let dir = tempfile::tempdir().unwrap();
    let python =
        taskmesh_testkit::python::webhooks_venv(std::path::Path::new(env!("CARGO_TARGET_TMPDIR")));
    let secret = format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode(SECRET_KEY)
    );
    let out = dir.path().join("events.jsonl");
    let receiver = taskmesh_testkit::python::webhook_receiver(&python, &secret, &out, None);
    let s = Server::start(
        TASKMESH,
        &format!(
            r#"{AUTH}
[events]
allow_addresses = ["127.0.0.0/8"]
http_hosts = ["127.0.0.1"]

[[webhooks]]
name = "py"
url = "http://127.0.0.1:{}/hooks"
secret = "{secret}"
"#,
            receiver.port
        ),
    );
    let c = Client::connect(
        &s.url,
        Some("alice-token-1"),
        "2025-11-25",
        json!({"tasks": {"list": {}, "cancel": {}}, "elicitation": {}}),
    )
    .await;
    let done = c.start_task("slow_compute", json!({"seconds": 0})).await;
    let tool_error = c.start_task("failing_job", json!({})).await;
    let cancelled = c.start_task("slow_compute", json!({"seconds": 30})).await;
    c.ok("tasks/cancel", json!({"taskId": cancelled})).await;
    let asked = c
        .start_task("confirm_delete", json!({"filename": "report.pdf"}))
        .await;
    crate::input::drive_interactive(
        &c,
        &asked,
        vec![json!({"action": "accept", "content": {"confirm": true}})],
    )
    .await;
    c.wait_status(&done, "completed").await;
    c.wait_status(&tool_error, "failed").await;

    let statuses = |id: &str| -> Vec<String> {
        recorded_of(&taskmesh_testkit::python::received(&out), id)
            .iter()
            .map(|e| e["data"]["status"].as_str().unwrap().to_owned())
            .collect()
    };
    let all = eventually(|| {
        let got = [
            statuses(&done),
            statuses(&tool_error),
            statuses(&cancelled),
            statuses(&asked),
        ];
        (got[3].len() == 3 && got.iter().take(3).all(|s| s.len() == 1)).then_some(got)
    })
    .await;
    assert_eq!(all[0], ["completed"]);
    // A tool error reads `completed` with its result on 2026-07-28 (what tasks/get shows).
    assert_eq!(all[1], ["completed"]);
    assert_eq!(all[2], ["cancelled"]);
    assert_eq!(all[3], ["input_required", "working", "completed"]);
    let lines = taskmesh_testkit::python::received(&out);
    assert!(
        lines.iter().all(|l| l.get("refused").is_none()),
        "a delivery failed the library's verification: {lines:?}"
    );
    let failed = recorded_of(&lines, &tool_error);
    assert_eq!(failed[0]["data"]["result"]["isError"], true);
    assert!(lines.iter().all(|l| l["subscription"] == "wh_py"));
    drop(receiver);
}
