//! Durability over real processes: every acknowledged task and every terminal result survives
//! kill -9 and restart byte for byte, the TTL clock keeps counting from `createdAt`, and tasks
//! that were live at the crash follow their tool's resume policy.

// A test binary: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{json, Value};
use taskmesh_testkit::{Client, Server};

/// The server executable under test.
const TASKMESH: &str = env!("CARGO_BIN_EXE_taskmesh");

const AUTH: &str = r#"
[auth.tokens]
"alice-token-1" = "alice"
[tasks]
expiry_sweep_interval_ms = 100
"#;

/// Every task's `tasks/get` and, for terminal ones, raw `tasks/result` answer.
async fn snapshot(c: &Client, ids: &[String]) -> BTreeMap<String, (Value, Option<String>)> {
    let mut out = BTreeMap::new();
    for id in ids {
        let got = c.ok("tasks/get", json!({"taskId": id})).await;
        let result =
            if ["completed", "failed", "cancelled"].contains(&got["status"].as_str().unwrap()) {
                let body =
                    json!({"jsonrpc":"2.0","id":1,"method":"tasks/result","params":{"taskId": id}})
                        .to_string();
                Some(c.post(&body, &[]).await.body)
            } else {
                None
            };
        out.insert(id.clone(), (got, result));
    }
    out
}

#[tokio::test]
async fn kill_9_and_restart_keep_every_task_and_result() {
    let mut s = Server::start(TASKMESH, AUTH);
    let c = Client::connect(
        &s.url,
        Some("alice-token-1"),
        taskmesh_testkit::V,
        json!({"elicitation":{}}),
    )
    .await;

    let mut terminal = vec![];
    for i in 0..5 {
        let id = c
            .start_task(
                "slow_compute",
                json!({"seconds": 0, "label": format!("t{i}")}),
            )
            .await;
        terminal.push(id);
    }
    terminal.push(c.start_task("failing_job", json!({})).await);
    terminal.push(c.start_task("protocol_error_job", json!({})).await);
    let to_cancel = c.start_task("slow_compute", json!({"seconds": 60})).await;
    c.ok("tasks/cancel", json!({"taskId": to_cancel})).await;
    terminal.push(to_cancel);
    for id in &terminal {
        for _ in 0..200 {
            let st = c.status(id).await;
            if st != "working" {
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }
    // Live at the crash: a rerun tool and a fail tool (waiting for input).
    let rerun = c
        .start_task("slow_compute", json!({"seconds": 1.5, "label": "again"}))
        .await;
    let fail = c
        .start_task("confirm_delete", json!({"filename": "f"}))
        .await;
    c.wait_status(&fail, "input_required").await;
    // A short TTL whose clock must keep counting from createdAt across the restart.
    let short = c
        .ok(
            "tools/call",
            json!({"name":"slow_compute","arguments":{"seconds":0},"task":{"ttl": 4000}}),
        )
        .await["task"]["taskId"]
        .as_str()
        .unwrap()
        .to_string();

    let before = snapshot(&c, &terminal).await;
    let rerun_before = c.ok("tasks/get", json!({"taskId": rerun})).await;
    let fail_before = c.ok("tasks/get", json!({"taskId": fail})).await;
    let short_before = c.ok("tasks/get", json!({"taskId": short})).await;
    let list_before = c.ok("tasks/list", json!({})).await["tasks"]
        .as_array()
        .unwrap()
        .len();

    s.kill9_and_restart();
    let c = Client::connect(
        &s.url,
        Some("alice-token-1"),
        taskmesh_testkit::V,
        json!({"elicitation":{}}),
    )
    .await;

    let after = snapshot(&c, &terminal).await;
    assert_eq!(
        before, after,
        "terminal tasks or results changed across kill -9"
    );
    assert_eq!(
        c.ok("tasks/list", json!({})).await["tasks"]
            .as_array()
            .unwrap()
            .len(),
        list_before
    );

    // rerun: working again (same createdAt), then completes.
    let r = c.ok("tasks/get", json!({"taskId": rerun})).await;
    assert_eq!(r["createdAt"], rerun_before["createdAt"]);
    let done = c.call("tasks/result", json!({"taskId": rerun})).await;
    assert_eq!(
        done["result"]["content"][0]["text"],
        "again: computed for 1.5 seconds"
    );
    let r = c.ok("tasks/get", json!({"taskId": rerun})).await;
    assert_eq!(r["status"], "completed");

    // fail: failed, with a statusMessage that says why; its result is the documented error.
    let f = c.wait_status(&fail, "failed").await;
    assert_eq!(f["createdAt"], fail_before["createdAt"]);
    let msg = f["statusMessage"].as_str().unwrap();
    assert!(msg.contains("resume policy 'fail'"), "{msg}");
    let fr = c.call("tasks/result", json!({"taskId": fail})).await;
    assert_eq!(fr["error"]["code"], -32603);

    // TTL counted from createdAt: same ttl and createdAt, and it expires on schedule.
    let sh = c.call("tasks/get", json!({"taskId": short})).await;
    if let Some(res) = sh.get("result") {
        assert_eq!(res["createdAt"], short_before["createdAt"]);
        assert_eq!(res["ttl"], 4000);
    }
    let mut expired = false;
    for _ in 0..200 {
        if c.call("tasks/get", json!({"taskId": short}))
            .await
            .get("error")
            .is_some()
        {
            expired = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(expired, "short-ttl task did not expire after restart");

    // A graceful restart keeps everything too.
    let before = snapshot(&c, &terminal).await;
    s.restart();
    let c = Client::connect(
        &s.url,
        Some("alice-token-1"),
        taskmesh_testkit::V,
        json!({}),
    )
    .await;
    assert_eq!(before, snapshot(&c, &terminal).await);
    assert!(s.log_text().contains("data flushed"));
}

#[tokio::test]
async fn acknowledged_creates_survive_an_immediate_kill() {
    let mut s = Server::start(TASKMESH, "");
    let c = Client::new_session(&s.url).await;
    let mut ids = vec![];
    for _ in 0..20 {
        ids.push(c.start_task("slow_compute", json!({"seconds": 0.5})).await);
    }
    s.kill9_and_restart();
    let c = Client::new_session(&s.url).await;
    for id in &ids {
        let r = c.call("tasks/result", json!({"taskId": id})).await;
        assert_eq!(r["result"]["isError"], false, "{id}: {r}");
    }
}

#[tokio::test]
async fn changing_the_shard_count_is_refused() {
    let mut s = Server::start(TASKMESH, "");
    assert!(s.terminate());
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_taskmesh"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(s.data_dir().join("data"))
        .env("TASKMESH_SHARDS", "16")
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("32 shards") && err.contains("16"), "{err}");
}

/// The summed `key=N` fields of the log lines that contain `message`.
fn summed(lines: &[String], message: &str, key: &str) -> u64 {
    let field = format!("{key}=");
    lines
        .iter()
        .filter(|l| l.contains(message))
        .filter_map(|l| {
            let at = l.find(&field)? + field.len();
            let digits: String = l[at..].chars().take_while(char::is_ascii_digit).collect();
            digits.parse::<u64>().ok()
        })
        .sum()
}

#[tokio::test]
async fn a_restart_logs_its_take_overs_once_per_shard_not_once_per_task() {
    const TASKS: u64 = 200;
    const TAKEN_OVER: &str = "task executions taken over";
    let mut s = Server::start(TASKMESH, "");
    let c = Client::new_session(&s.url).await;
    let mut ids = Vec::new();
    for _ in 0..TASKS {
        ids.push(c.start_task("slow_compute", json!({"seconds": 10})).await);
    }
    s.kill9_and_restart();
    // Every live task is taken over by its shard's new leader (bounded wait).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let lines = loop {
        let lines = s.log.lock().unwrap().clone();
        let taken = summed(&lines, TAKEN_OVER, "resumed") + summed(&lines, TAKEN_OVER, "failed");
        if taken >= TASKS || tokio::time::Instant::now() > deadline {
            break lines;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(
        summed(&lines, TAKEN_OVER, "resumed"),
        TASKS,
        "slow_compute reruns"
    );
    let summaries = lines.iter().filter(|l| l.contains(TAKEN_OVER)).count();
    assert!(summaries <= 32, "{summaries} summary lines for 32 shards");
    assert!(
        !lines.iter().any(|l| l.contains("task execution resumed")),
        "a line per task at info"
    );
    // And every acknowledged task finishes after its take-over.
    let c = Client::new_session(&s.url).await;
    for id in &ids {
        let r = c.call("tasks/result", json!({"taskId": id})).await;
        assert_eq!(r["result"]["isError"], false, "{id}: {r}");
    }
}
