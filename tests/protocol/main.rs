//! Protocol tests over real HTTP against a real `taskmesh serve` process: the transport rules,
//! the JSON-RPC error table, the task state machine, TTL, pagination, isolation, progress,
//! input_required round trips and cancellation.

// A test binary: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used)]

use serde_json::json;

mod client_tasks;
mod delivery;
mod descriptors;
mod events;
mod handoff;
mod hostile;
mod input;
mod logs;
mod modern;
mod ops;
mod resume;
mod session;
mod subscriptions;
mod tasks;
mod tls;
mod webhook_suspension;
mod webhooks;
mod worker_api;
mod workers;

/// The server executable under test.
const TASKMESH: &str = env!("CARGO_BIN_EXE_taskmesh");

const AUTH: &str = r#"
[auth.tokens]
"alice-token-1" = "alice"
"bob-token-22" = "bob"
"#;

/// What `taskmesh webhooks --json` prints for the server at `url` (as alice, who may read
/// `/status`), checking that it succeeded and shows no secret.
fn webhooks_listed(url: &str) -> serde_json::Value {
    let out = std::process::Command::new(TASKMESH)
        .args([
            "webhooks",
            "--json",
            "--url",
            url,
            "--token",
            "alice-token-1",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("whsec_"));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn init_body(version: &str) -> String {
    json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{
        "protocolVersion": version, "capabilities": {}, "clientInfo": {"name":"t","version":"1"}}})
    .to_string()
}
