//! A webhook whose receiver keeps failing is suspended by the node (no attempts but one probe
//! at a time), shown as such in `GET /status` and the metrics, and resumed by the first probe
//! its receiver acknowledges: then every event it missed is delivered, none abandoned.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use parking_lot::Mutex;
use serde_json::{json, Value};
use taskmesh_testkit::{Client, Server};

use crate::{AUTH, TASKMESH};

/// The receiver: 500 while `down`; counts requests in progress, and the most at once since
/// `watching` was set; records the event ids it acknowledged.
#[derive(Default)]
struct Receiver {
    down: AtomicBool,
    watching: AtomicBool,
    now_in: AtomicUsize,
    most_in: AtomicUsize,
    acked: Mutex<Vec<String>>,
}

async fn hook(State(r): State<Arc<Receiver>>, body: Bytes) -> StatusCode {
    let n = r.now_in.fetch_add(1, Ordering::SeqCst) + 1;
    if r.watching.load(Ordering::SeqCst) {
        r.most_in.fetch_max(n, Ordering::SeqCst);
    }
    // Long enough for overlapping attempts to overlap here.
    tokio::time::sleep(Duration::from_millis(50)).await;
    r.now_in.fetch_sub(1, Ordering::SeqCst);
    if r.down.load(Ordering::SeqCst) {
        return StatusCode::INTERNAL_SERVER_ERROR;
    }
    let event: Value = serde_json::from_slice(&body).unwrap();
    r.acked
        .lock()
        .push(event["eventId"].as_str().unwrap().to_owned());
    StatusCode::NO_CONTENT
}

/// `GET /status`'s entry of the one webhook.
async fn webhook_status(s: &Server) -> Value {
    taskmesh_testkit::status_of(s, "alice-token-1").await["webhooks"][0].clone()
}

async fn eventually<T>(what: &str, mut f: impl AsyncFnMut() -> Option<T>) -> T {
    for _ in 0..200 {
        if let Some(v) = f().await {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{what} did not happen within 20 s");
}

#[tokio::test]
async fn a_failing_webhook_is_suspended_probed_and_resumed_with_nothing_lost() {
    let r = Arc::new(Receiver {
        down: AtomicBool::new(true),
        ..Receiver::default()
    });
    let app = axum::Router::new()
        .route("/hook", post(hook))
        .with_state(r.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let s = Server::start(
        TASKMESH,
        &format!(
            r#"[auth]
status_principals = ["alice"]
{AUTH}
[events]
allow_addresses = ["127.0.0.0/8"]
http_hosts = ["127.0.0.1"]
retry_base_ms = 100
retry_max_ms = 200
max_attempts = 1000
suspend_after_failures = 3
suspend_after_ms = 0
probe_interval_ms = 300

[[webhooks]]
name = "down"
url = "http://127.0.0.1:{port}/hook"
secret = "whsec_KioqKioqKioqKioqKioqKioqKioqKioq"
terminal_only = true
"#
        ),
    );
    let c = Client::connect(
        &s.url,
        Some("alice-token-1"),
        "2025-11-25",
        json!({"tasks": {}}),
    )
    .await;
    let mut ids = Vec::new();
    for _ in 0..5 {
        let id = c.start_task("slow_compute", json!({"seconds": 0})).await;
        c.wait_status(&id, "completed").await;
        ids.push(id);
    }
    // Suspended after the failures: shown in the status and the metrics.
    let suspended = eventually("the suspension", async || {
        let w = webhook_status(&s).await;
        w["deliveries"]
            .get("suspendedSinceMs")
            .is_some()
            .then_some(w)
    })
    .await;
    assert_eq!(suspended["deliveries"]["lastError"], "http_5xx");
    assert_eq!(suspended["deliveries"]["acked"], 0);
    let metrics = taskmesh_testkit::metrics::metrics_of(&s.url, Some("alice-token-1")).await;
    assert!(
        metrics.contains("taskmesh_webhook_suspended{webhook=\"down\"} 1"),
        "{metrics}"
    );
    // The events stay owed meanwhile: the shards that hold them count them as queued.
    eventually("the queued deliveries", async || {
        let metrics = taskmesh_testkit::metrics::metrics_of(&s.url, Some("alice-token-1")).await;
        let queued: f64 = metrics
            .lines()
            .filter(|l| l.starts_with("taskmesh_webhook_queued{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum();
        (queued >= 1.0).then_some(())
    })
    .await;
    // While suspended, the receiver sees one request at a time: the probes. Watch a few.
    eventually("quiet", async || {
        (r.now_in.load(Ordering::SeqCst) == 0).then_some(())
    })
    .await;
    r.watching.store(true, Ordering::SeqCst);
    let attempts = |w: &Value| w["deliveries"]["attempts"].as_u64().unwrap();
    let before = attempts(&webhook_status(&s).await);
    eventually("three probes", async || {
        (attempts(&webhook_status(&s).await) >= before + 3).then_some(())
    })
    .await;
    assert_eq!(
        r.most_in.load(Ordering::SeqCst),
        1,
        "more than one attempt at once while suspended"
    );
    assert!(webhook_status(&s).await["deliveries"]
        .get("suspendedSinceMs")
        .is_some());

    // The receiver recovers: a probe is acknowledged, the webhook resumes, and every end it
    // missed arrives; nothing was abandoned.
    r.down.store(false, Ordering::SeqCst);
    let resumed = eventually("every end delivered", async || {
        let w = webhook_status(&s).await;
        (w["deliveries"]["acked"] == 5).then_some(w)
    })
    .await;
    assert!(resumed["deliveries"].get("suspendedSinceMs").is_none());
    assert_eq!(resumed["deliveries"]["abandoned"], 0);
    let acked = r.acked.lock().clone();
    for id in &ids {
        assert!(
            acked.iter().any(|e| e.starts_with(&format!("{id}-"))),
            "{id} never delivered"
        );
    }
    let metrics = taskmesh_testkit::metrics::metrics_of(&s.url, Some("alice-token-1")).await;
    assert!(
        metrics.contains("taskmesh_webhook_suspended{webhook=\"down\"} 0"),
        "{metrics}"
    );
}
