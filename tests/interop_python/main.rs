//! Interop with the official MCP Python SDK (`mcp` 1.30.0, the last release with the
//! experimental 2025-11-25 tasks client): a real `taskmesh serve` process is driven by
//! `tests/interop/python_tasks_client.py` over Streamable HTTP, and every observation the
//! script prints is asserted here. The tasks it created are then cross-checked on the wire
//! with the raw client of `taskmesh-testkit`, in the same MCP session.
//!
//! The test provisions its own virtualenv under `CARGO_TARGET_TMPDIR` (`python3 -m venv`, then
//! `pip install mcp==1.30.0`) and reuses it on later runs. It needs `python3` with the `venv`
//! module and access to PyPI the first time; when either is missing it fails, with the output.

// A test binary: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::fmt::Display;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};
use taskmesh_testkit::{run_bounded, Client, Server};

mod checks;
mod client_tasks;
mod handoff;
mod workers;

use checks::check_run;

/// The server executable under test.
const TASKMESH: &str = env!("CARGO_BIN_EXE_taskmesh");

const SCRIPT_TIMEOUT: Duration = Duration::from_secs(120);

/// The tasks the script creates, by role, with the status each one ends in.
const ROLES: [(&str, &str); 5] = [
    ("slow", "completed"),
    ("failing", "failed"),
    ("cancelled", "cancelled"),
    ("elicit_accept", "completed"),
    ("elicit_decline", "completed"),
];

const AUTH_CONFIG: &str = r#"
[auth.tokens]
"py-interop-token" = "py-interop"
"#;

fn script_path() -> PathBuf {
    interop_script("python_tasks_client.py")
}

/// A script of tests/interop.
fn interop_script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("..")
        .join("tests")
        .join("interop")
        .join(name)
}

/// One run of the Python script: its steps by name, and everything needed to explain a failure.
struct Run {
    steps: HashMap<String, Value>,
    context: String,
}

impl Run {
    fn fail(&self, what: impl Display) -> ! {
        panic!("{what}\n\n{}", self.context)
    }

    fn ensure(&self, cond: bool, what: impl Display) {
        if !cond {
            self.fail(what);
        }
    }

    fn eq(&self, got: &Value, want: Value, what: &str) {
        if *got != want {
            self.fail(format!("{what}: got {got}, want {want}"));
        }
    }

    fn step(&self, name: &str) -> &Value {
        self.steps
            .get(name)
            .unwrap_or_else(|| self.fail(format!("the script reported no step `{name}`")))
    }

    fn str_at<'a>(&self, v: &'a Value, what: &str) -> &'a str {
        v.as_str()
            .unwrap_or_else(|| self.fail(format!("{what}: not a string: {v}")))
    }
}

/// The Python of the virtualenv with the SDK (made under the test target's directory on first
/// use).
async fn sdk_python() -> PathBuf {
    tokio::task::spawn_blocking(|| {
        taskmesh_testkit::python::mcp_venv(Path::new(env!("CARGO_TARGET_TMPDIR")))
    })
    .await
    .expect("provision the virtualenv")
}

fn run_script(python: &Path, server: &Server, token: Option<&str>) -> Run {
    run_steps(python, server, token, "")
}

/// The script with `INTEROP_STEPS=steps` (`upstream`: the steps for a node fronting
/// tests/upstream/server.py).
fn run_steps(python: &Path, server: &Server, token: Option<&str>, steps: &str) -> Run {
    let args: Vec<&str> = token.into_iter().collect();
    run_file(python, &script_path(), server, &args, steps)
}

/// `script` run with the server's URL and `args`, and `INTEROP_STEPS=steps`; its steps.
fn run_file(python: &Path, script: &Path, server: &Server, args: &[&str], steps: &str) -> Run {
    let mut cmd = Command::new(python);
    cmd.env("INTEROP_STEPS", steps);
    cmd.arg("-B")
        .arg(script)
        .arg(&server.url)
        .args(args)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("PYTHONUNBUFFERED", "1")
        .env_remove("PYTHONPATH");
    let done = run_bounded(&mut cmd, SCRIPT_TIMEOUT);
    let context = format!(
        "--- python script ---\n{}\n--- server log ---\n{}",
        done.describe(),
        server.log_text()
    );
    if !done.ok() {
        panic!("the Python SDK client did not finish cleanly\n\n{context}");
    }
    let mut steps = HashMap::new();
    let mut errors = Vec::new();
    let mut finished = false;
    for line in done.stdout.lines().filter(|l| !l.trim().is_empty()) {
        let v: Value = serde_json::from_str(line).unwrap_or_else(|e| {
            panic!("script printed a line that is not JSON ({e}): {line}\n\n{context}")
        });
        if v["done"] == json!(true) {
            finished = true;
        } else if let Some(name) = v["step"].as_str() {
            match (v.get("data"), v.get("error")) {
                (Some(d), None) => {
                    steps.insert(name.to_string(), d.clone());
                }
                _ => errors.push(format!(
                    "step `{name}` raised:\n{}",
                    v["error"].as_str().unwrap_or_default()
                )),
            }
        }
    }
    let run = Run { steps, context };
    run.ensure(
        errors.is_empty(),
        format!("the Python SDK client hit errors:\n{}", errors.join("\n")),
    );
    run.ensure(finished, "the script did not report that it finished");
    run
}

/// Look at the same tasks on the wire, in the Python client's own session.
async fn cross_check(
    run: &Run,
    server: &Server,
    token: Option<&str>,
    ids: &HashMap<&'static str, String>,
) {
    let session_id = run
        .str_at(&run.step("session")["sessionId"], "session id")
        .to_string();
    let mut raw = Client::new(&server.url);
    raw.session = Some(session_id);
    raw.token = token.map(str::to_string);

    for (role, status) in ROLES {
        let t = raw.call("tasks/get", json!({"taskId": ids[role]})).await;
        let t = &t["result"];
        run.eq(
            &t["status"],
            json!(status),
            &format!("raw tasks/get of the {role} task"),
        );
        run.eq(
            &t["ttl"],
            json!(60000),
            &format!("raw tasks/get ttl of the {role} task"),
        );
        run.ensure(
            t.get("task").is_none(),
            format!("tasks/get must be flat: {t}"),
        );
    }

    let slow = raw
        .call("tasks/result", json!({"taskId": ids["slow"]}))
        .await;
    run.eq(
        &slow["result"]["content"],
        json!([{"type": "text", "text": "py-interop: computed for 2 seconds"}]),
        "raw tasks/result content of the slow task",
    );
    run.eq(
        &slow["result"]["isError"],
        json!(false),
        "raw tasks/result isError of the slow task",
    );
    run.eq(
        &slow["result"]["_meta"]["io.modelcontextprotocol/related-task"],
        json!({"taskId": ids["slow"]}),
        "raw tasks/result related-task _meta",
    );

    let failing = raw
        .call("tasks/result", json!({"taskId": ids["failing"]}))
        .await;
    run.eq(
        &failing["result"]["isError"],
        json!(true),
        "raw tasks/result isError of the failing task",
    );

    let accepted = raw
        .call("tasks/result", json!({"taskId": ids["elicit_accept"]}))
        .await;
    run.eq(
        &accepted["result"]["content"][0]["text"],
        json!("Deleted report.txt"),
        "raw tasks/result of the accepted confirm_delete",
    );

    // Whatever the server answers tasks/result for a cancelled task, the SDK saw the same.
    let cancelled = raw
        .call("tasks/result", json!({"taskId": ids["cancelled"]}))
        .await;
    let seen = &run.step("cancel_task")["resultAfterCancel"];
    match (seen.get("error"), cancelled.get("error")) {
        (Some(sdk), Some(wire)) => run.eq(
            &wire["code"],
            sdk["code"].clone(),
            "tasks/result error of a cancelled task",
        ),
        (None, None) => {}
        _ => run.fail(format!(
            "tasks/result of a cancelled task: the SDK saw {seen}, the wire says {cancelled}"
        )),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_tasks_client_interop() {
    let python = sdk_python().await;

    // Without authentication: tasks are scoped to the MCP session and tasks/list is not offered.
    let server = Server::start(TASKMESH, "");
    let run = tokio::task::block_in_place(|| run_script(&python, &server, None));
    let ids = check_run(&run, false);
    cross_check(&run, &server, None, &ids).await;
    drop(server);

    // With a bearer token: tasks belong to the principal and tasks/list is offered.
    let server = Server::start(TASKMESH, AUTH_CONFIG);
    let token = "py-interop-token";
    let run = tokio::task::block_in_place(|| run_script(&python, &server, Some(token)));
    let ids = check_run(&run, true);
    cross_check(&run, &server, Some(token), &ids).await;
}

/// The Python SDK client against a node whose tools are an upstream's (tests/upstream/server.py
/// on the same SDK, over Streamable HTTP, as `py_` tools): a slow tool as a task, an
/// elicitation and a sampling request of the upstream answered through `tasks/result` by the
/// SDK's callbacks exactly once (elicitation counted), a tool error as a failed task, and a plain call proxied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_client_runs_upstream_tools_as_tasks() {
    let python = sdk_python().await;
    let up =
        taskmesh_testkit::python::upstream_http(&python, taskmesh_testkit::free_ports(1)[0]).await;
    let server = Server::start(
        TASKMESH,
        &format!(
            "[tools]\nbuiltin = false\n\n[[upstream]]\nname = \"py\"\nurl = {:?}\nprefix = \"py_\"\n\
             tools = {{ include = [\"slow\", \"ask\", \"sample\", \"fail\", \"echo\"] }}\n",
            up.url
        ),
    );
    taskmesh_testkit::wait_upstreams_serving(&server, "").await;
    let run = tokio::task::block_in_place(|| run_steps(&python, &server, None, "upstream"));

    let tools = &run.step("list_tools")["taskSupport"];
    for t in ["py_slow", "py_ask", "py_sample", "py_fail", "py_echo"] {
        run.eq(&tools[t], json!("optional"), t);
    }
    // The SDK may answer a request on its GET stream while it polls, so the task can go from
    // `working` to `completed` without a poll seeing `input_required`.
    let done = |step: &str, status: &str, text: &str| {
        let d = run.step(step);
        run.eq(&d["finalStatus"], json!(status), step);
        let got = d["resultText"][0].as_str().unwrap_or_default();
        run.ensure(
            got.contains(text),
            format!("{step}: {got:?} lacks {text:?}"),
        );
        run.eq(&d["resultRelatedTaskId"], d["taskId"].clone(), step);
        d.clone()
    };
    done("upstream_slow", "completed", "slept 3 steps");
    let ask = done("upstream_ask", "completed", "hello Python SDK");
    let asked = ask["elicitations"].as_array().cloned().unwrap_or_default();
    run.ensure(asked.len() == 1, format!("one elicitation, not {asked:?}"));
    run.eq(
        &asked[0]["relatedTaskId"],
        ask["taskId"].clone(),
        "elicitation's task",
    );
    done(
        "upstream_sample",
        "completed",
        "model said: sampled by the Python SDK",
    );
    let fail = done("upstream_fail", "failed", "the tool failed on purpose");
    run.eq(&fail["isError"], json!(true), "upstream_fail isError");
    run.eq(
        &run.step("upstream_echo")["text"],
        json!(["plain through taskmesh"]),
        "upstream_echo",
    );
}
