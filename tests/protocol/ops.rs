//! What operators and their tools read: `GET /healthz`, `GET /readyz` and `GET /metrics`
//! (Prometheus text, checked by `promtool check metrics`), on the MCP listener with the rules
//! of `/status` and on the `[metrics] listen` listener without them; counters that move with
//! the requests and tasks that happen.

use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::json;
use taskmesh_testkit::metrics::sample;
use taskmesh_testkit::{free_ports, http, Client, Server, V};

use crate::{AUTH, TASKMESH};

/// `promtool check metrics` on `text` (the Prometheus package's own linter); its verdict.
fn promtool_check(text: &str) -> Result<(), String> {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (Debian package prometheus) runs");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

async fn get(url: &str, token: Option<&str>) -> (u16, String) {
    let mut req = http().get(url);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let r = req.send().await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

#[tokio::test]
async fn health_readiness_and_metrics_that_move_with_the_work() {
    let s = Server::start(TASKMESH, "");
    let base = s.url.trim_end_matches("/mcp").to_string();
    assert_eq!(
        get(&format!("{base}/healthz"), None).await,
        (200, "ok\n".into())
    );
    assert_eq!(
        get(&format!("{base}/readyz"), None).await,
        (200, "ready\n".into())
    );

    let (status, before) = get(&format!("{base}/metrics"), None).await;
    assert_eq!(status, 200);
    promtool_check(&before).unwrap();
    let c = Client::connect(&s.url, None, V, json!({})).await;
    let id = c.start_task("slow_compute", json!({"seconds": 0.05})).await;
    c.wait_status(&id, "completed").await;
    let missing = c
        .err_code("tasks/get", json!({"taskId": "no-such-task"}))
        .await;
    assert_eq!(missing, -32602);
    let (_, after) = get(&format!("{base}/metrics"), None).await;
    promtool_check(&after).unwrap_or_else(|e| panic!("promtool: {e}\n{after}"));

    let moved = |series: &str| {
        sample(&after, series).unwrap_or(0.0) - sample(&before, series).unwrap_or(0.0)
    };
    assert_eq!(moved("taskmesh_tasks_created_total"), 1.0, "{after}");
    assert_eq!(
        moved(r#"taskmesh_tasks_terminal_total{status="completed"}"#),
        1.0
    );
    assert_eq!(
        moved(r#"taskmesh_mcp_requests_total{method="tools/call",outcome="ok"}"#),
        1.0
    );
    assert!(moved(r#"taskmesh_mcp_requests_total{method="tasks/get",outcome="ok"}"#) >= 1.0);
    assert_eq!(
        moved(r#"taskmesh_mcp_requests_total{method="tasks/get",outcome="error"}"#),
        1.0
    );
    assert!(
        moved(r#"taskmesh_mcp_request_duration_seconds_count{method="tasks/get"}"#) >= 2.0,
        "{after}"
    );
    // The state read at the scrape: every shard led here, the process's own figures.
    for shard in 0..32 {
        assert_eq!(
            sample(
                &after,
                &format!("taskmesh_raft_is_leader{{shard=\"{shard}\"}}")
            ),
            Some(1.0),
            "shard {shard}"
        );
    }
    assert_eq!(sample(&after, "taskmesh_ready"), Some(1.0));
    assert_eq!(sample(&after, "taskmesh_sessions_with_streams"), Some(0.0));
    // A session with its GET stream open is counted while the stream is.
    let stream = c.open_get().await;
    let (_, open) = get(&format!("{base}/metrics"), None).await;
    assert_eq!(sample(&open, "taskmesh_sessions_with_streams"), Some(1.0));
    assert_eq!(sample(&open, "taskmesh_sse_streams"), Some(1.0));
    drop(stream);
    assert!(sample(&after, "process_resident_memory_bytes").unwrap() > 1e6);
    assert!(sample(&after, "process_open_fds").unwrap() > 0.0);
    assert!(sample(&after, "process_cpu_seconds_total").is_some());
}

#[tokio::test]
async fn metrics_follow_the_status_rules_or_their_own_listener() {
    let port = free_ports(1)[0];
    let config = format!(
        "{AUTH}\n[auth]\nstatus_principals = [\"alice\"]\n[metrics]\nlisten = \"127.0.0.1:{port}\"\n"
    );
    let s = Server::start(TASKMESH, &config);
    let base = s.url.trim_end_matches("/mcp").to_string();
    // On the MCP listener: a token of a status principal, like /status.
    assert_eq!(get(&format!("{base}/metrics"), None).await.0, 401);
    assert_eq!(
        get(&format!("{base}/metrics"), Some("bob-token-22"))
            .await
            .0,
        403
    );
    let (status, text) = get(&format!("{base}/metrics"), Some("alice-token-1")).await;
    assert_eq!(status, 200);
    assert!(
        text.contains("# TYPE taskmesh_mcp_requests_total counter"),
        "{text}"
    );
    // The refusals just made are counted by cause.
    assert!(
        sample(
            &text,
            r#"taskmesh_http_refusals_total{status="401",cause="no_token"}"#
        )
        .is_some_and(|v| v >= 1.0),
        "{text}"
    );
    // Health and readiness need no token.
    assert_eq!(get(&format!("{base}/healthz"), None).await.0, 200);
    assert_eq!(get(&format!("{base}/readyz"), None).await.0, 200);
    // The operators' listener: no token, and nothing but these three.
    let ops = format!("http://127.0.0.1:{port}");
    let (status, text) = get(&format!("{ops}/metrics"), None).await;
    assert_eq!(status, 200);
    promtool_check(&text).unwrap();
    assert_eq!(get(&format!("{ops}/healthz"), None).await.0, 200);
    assert_eq!(get(&format!("{ops}/readyz"), None).await.0, 200);
    assert_eq!(get(&format!("{ops}/status"), None).await.0, 404);
    assert_eq!(get(&format!("{ops}/mcp"), None).await.0, 404);
}

#[tokio::test]
async fn metrics_can_be_turned_off() {
    let s = Server::start(TASKMESH, "[metrics]\nenabled = false\n");
    let base = s.url.trim_end_matches("/mcp").to_string();
    assert_eq!(get(&format!("{base}/metrics"), None).await.0, 404);
    assert_eq!(get(&format!("{base}/healthz"), None).await.0, 200);
}
