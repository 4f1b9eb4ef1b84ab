//! `--json` for scripts: each command prints one JSON document with the fields a script
//! reads, and the exit code says how the call went.

use serde_json::json;
use taskmesh_testkit::Server;

use super::{first_text, Cli, ALICE, AUTH, TASKMESH};

#[test]
fn every_command_prints_json_with_the_expected_fields() {
    let s = Server::start(TASKMESH, AUTH);
    let cli = Cli::at(&s.url).with("TASKMESH_TOKEN", ALICE);

    let tools = cli.ok(&["tools", "--json"]).json();
    let slow = tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "slow_compute")
        .unwrap_or_else(|| panic!("{tools}"));
    assert_eq!(slow["execution"]["taskSupport"], "optional");
    assert!(slow["inputSchema"]["properties"]["seconds"].is_object());

    // A call run as a task: the result as tasks/result gave it.
    let r = cli
        .ok(&[
            "call",
            "slow_compute",
            "seconds=0.2",
            "label=json",
            "--json",
        ])
        .json();
    assert_eq!(first_text(&r), "json: computed for 0.2 seconds", "{r}");
    assert_eq!(r["isError"], false);
    let done_id = r["_meta"]["io.modelcontextprotocol/related-task"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("a task's result names its task: {r}"))
        .to_string();

    // --args and key=value together; a plain call (greet runs without a task).
    let r = cli
        .ok(&[
            "call",
            "greet",
            "--args",
            r#"{"name": "x"}"#,
            "name=Ada",
            "--json",
        ])
        .json();
    assert_eq!(first_text(&r), "Hello, Ada!");

    // Detached: the task's id at once, then the task read, listed, cancelled.
    let d = cli
        .ok(&["call", "slow_compute", "seconds=60", "--detach", "--json"])
        .json();
    assert_eq!(d["protocol"], "2025-11-25");
    let id = d["taskId"].as_str().unwrap().to_string();
    let t = cli.ok(&["tasks", "get", &id, "--json"]).json();
    assert_eq!(t["taskId"], id.as_str());
    assert_eq!(t["status"], "working");
    assert!(t["createdAt"].is_string() && t.get("ttl").is_some(), "{t}");

    let list = cli.ok(&["tasks", "list", "--json"]).json();
    let ids: Vec<&str> = list["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["taskId"].as_str())
        .collect();
    assert!(
        ids.contains(&id.as_str()) && ids.contains(&done_id.as_str()),
        "{list}"
    );

    let c = cli.ok(&["tasks", "cancel", &id, "--json"]).json();
    assert_eq!(c["taskId"], id.as_str());
    assert_eq!(c["status"], "cancelled");
    let t = cli.ok(&["tasks", "get", &id, "--json"]).json();
    assert_eq!(t["status"], "cancelled");

    // The result of the finished task, again.
    let r = cli.ok(&["tasks", "result", &done_id, "--json"]).json();
    assert_eq!(first_text(&r), "json: computed for 0.2 seconds");

    // The same commands for people are not JSON, and hold the same facts.
    let table = cli.ok(&["tasks", "list"]).stdout;
    assert!(
        table.contains(&id) && table.contains("cancelled"),
        "{table}"
    );
    let table = cli.ok(&["tools"]).stdout;
    assert!(
        table.contains("slow_compute") && table.contains("optional"),
        "{table}"
    );
    assert!(!table.contains('\u{1b}'), "no escape codes off a terminal");
}

#[test]
fn exit_codes_tell_a_result_from_a_failure_from_a_usage_error() {
    let s = Server::start(TASKMESH, "");
    let cli = Cli::at(&s.url);

    let ok = cli.run(&["call", "greet", "name=Ada"]);
    assert_eq!((ok.code, ok.stdout.trim()), (0, "Hello, Ada!"), "{ok:?}");

    // A tool error (a failed task on 2025-11-25): 1, with the tool's text.
    let failed = cli.run(&["call", "failing_job", "--json"]);
    assert_eq!(failed.code, 1, "{failed:?}");
    assert_eq!(failed.json()["isError"], true);

    // A JSON-RPC error from the tool: 1.
    let rpc = cli.run(&["call", "protocol_error_job"]);
    assert_eq!(rpc.code, 1, "{rpc:?}");
    assert!(rpc.stderr.contains("-32603"), "{rpc:?}");

    // Usage: a bad key=value, an unknown task, a server that is not there.
    let bad = cli.run(&["call", "greet", "name"]);
    assert_eq!(bad.code, 2, "{bad:?}");
    assert!(bad.stderr.contains("key=value"), "{bad:?}");
    let unknown = cli.run(&["tasks", "get", "no-such-task"]);
    assert_eq!(unknown.code, 2, "{unknown:?}");
    let unknown = cli.run(&["tasks", "result", "no-such-task"]);
    assert_eq!(unknown.code, 2, "{unknown:?}");
    let unknown = cli.run(&["call", "no_such_tool"]);
    assert_eq!(unknown.code, 2, "{unknown:?}");
    let refused = cli.run(&["call", "slow_compute", "seconds=-1"]);
    assert_eq!(refused.code, 2, "arguments the tool refuses: {refused:?}");
    let port = taskmesh_testkit::free_ports(1)[0];
    let down = Cli::at(&format!("http://127.0.0.1:{port}/mcp")).run(&["tools"]);
    assert_eq!(down.code, 2, "{down:?}");
    assert!(down.stderr.contains("cannot connect"), "{down:?}");

    // Without a terminal there is no progress bar: plain lines on stderr, no escape codes.
    let r = cli.run(&["call", "slow_compute", "seconds=1.5"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stderr.contains("status: completed"), "{r:?}");
    assert!(
        !r.stderr.contains('\u{1b}') && !r.stdout.contains('\u{1b}'),
        "{r:?}"
    );
    let quiet = cli.run(&["call", "slow_compute", "seconds=0.1", "--json"]);
    assert_eq!(quiet.stderr, "", "--json prints no progress: {quiet:?}");
    assert_eq!(
        quiet.json()["content"],
        json!([{"type": "text", "text": "slow_compute: computed for 0.1 seconds"}])
    );
}
