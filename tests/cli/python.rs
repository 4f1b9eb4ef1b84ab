//! The command line against a server that is not taskmesh: `tests/upstream/server.py` on the
//! official Python SDK (`mcp==1.30.0`) over Streamable HTTP. It speaks 2025-11-25 only and
//! offers no tasks, so calls run plainly, with the progress the server reports.

use std::path::Path;

use super::{first_text, Cli};

#[tokio::test]
async fn tools_and_calls_work_against_the_python_sdk_s_server() {
    let python = taskmesh_testkit::python::mcp_venv(Path::new(env!("CARGO_TARGET_TMPDIR")));
    let port = taskmesh_testkit::free_ports(1)[0];
    let server = taskmesh_testkit::python::upstream_http(&python, port).await;
    let cli = Cli::at(&server.url);

    let tools = cli.ok(&["tools", "--json"]).json();
    let names: Vec<&str> = tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    for want in ["echo", "add", "slow", "fail"] {
        assert!(names.contains(&want), "{want} missing from {names:?}");
    }
    let table = cli.ok(&["tools"]).stdout;
    assert!(table.contains("Echo the text back."), "{table}");

    // key=value: numbers as numbers, text as text.
    let r = cli.ok(&["call", "add", "a=2", "b=3.5", "--json"]).json();
    assert_eq!(first_text(&r), "5.5", "{r}");
    let r = cli.ok(&["call", "echo", "text=hello there"]);
    assert!(r.stdout.starts_with("hello there\n"), "{r:?}");

    // Progress reaches the caller (plain lines off a terminal).
    let r = cli.ok(&["call", "slow", "steps=3"]);
    assert!(r.stdout.starts_with("slept 3 steps"), "{r:?}");
    assert!(r.stderr.contains("progress: 3/3"), "{r:?}");

    // A tool error: exit 1.
    let r = cli.run(&["call", "fail"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stdout.contains("failed on purpose"), "{r:?}");

    // It has no tasks/list, and no 2026-07-28.
    assert_eq!(cli.run(&["tasks", "list"]).code, 2);
    let r = cli.run(&["tools", "--protocol", "2026-07-28"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("2026-07-28"), "{r:?}");
}
