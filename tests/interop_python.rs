//! Interop with the official MCP Python SDK (`mcp` 1.30.0, the last release with the
//! experimental 2025-11-25 tasks client): a real `taskmesh serve` process is driven by
//! `tests/interop/python_tasks_client.py` over Streamable HTTP, and every observation the
//! script prints is asserted here. The tasks it created are then cross-checked on the wire
//! with the raw client of `taskmesh-testkit`, in the same MCP session.
//!
//! The test provisions its own virtualenv under `CARGO_TARGET_TMPDIR` (`python3 -m venv`, then
//! `pip install mcp==1.30.0`) and reuses it on later runs. It needs `python3` with the `venv`
//! module and access to PyPI the first time; when either is missing it fails, with the output.

use std::collections::HashMap;
use std::fmt::Display;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use taskmesh_testkit::{Client, Server};

/// The server executable under test.
const TASKMESH: &str = env!("CARGO_BIN_EXE_taskmesh");

const MCP_PACKAGE: &str = "mcp==1.30.0";
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(120);
const VENV_TIMEOUT: Duration = Duration::from_secs(120);
const PIP_TIMEOUT: Duration = Duration::from_secs(600);

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

/// What a finished (or killed) child process left behind.
struct Finished {
    status: Option<ExitStatus>,
    timed_out: bool,
    stdout: String,
    stderr: String,
}

impl Finished {
    fn ok(&self) -> bool {
        !self.timed_out && self.status.is_some_and(|s| s.success())
    }

    fn describe(&self) -> String {
        format!(
            "exit: {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            if self.timed_out {
                "killed after time-out".to_string()
            } else {
                format!("{:?}", self.status)
            },
            self.stdout,
            self.stderr
        )
    }
}

/// Run `cmd` to completion, killing it once `limit` has passed.
fn run_bounded(cmd: &mut Command, limit: Duration) -> Finished {
    let what = format!("{cmd:?}");
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = pipe.read_to_end(&mut buf);
            String::from_utf8_lossy(&buf).into_owned()
        })
    };
    let out = drain(Box::new(child.stdout.take().expect("stdout")));
    let err = drain(Box::new(child.stderr.take().expect("stderr")));
    let start = Instant::now();
    let mut timed_out = false;
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break Some(st),
            Ok(None) if start.elapsed() >= limit => {
                timed_out = true;
                let _ = child.kill();
                break child.wait().ok();
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => panic!("waiting for {what}: {e}"),
        }
    };
    Finished {
        status,
        timed_out,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    }
}

/// The virtualenv's interpreter, with `mcp==1.30.0` installed. A marker file written after
/// a verified install lets later runs skip the provisioning.
fn provision_venv() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("py-mcp-1.30.0");
    let marker = dir.join("taskmesh-interop-installed");
    let python = dir.join("bin").join("python");
    if python.exists() && std::fs::read_to_string(&marker).ok().as_deref() == Some(MCP_PACKAGE) {
        return python;
    }
    let _ = std::fs::remove_dir_all(&dir);

    let venv = run_bounded(
        Command::new("python3").arg("-m").arg("venv").arg(&dir),
        VENV_TIMEOUT,
    );
    assert!(
        venv.ok(),
        "`python3 -m venv {}` failed:\n{}",
        dir.display(),
        venv.describe()
    );

    let pip = run_bounded(
        Command::new(dir.join("bin").join("pip"))
            .args([
                "install",
                "--quiet",
                "--disable-pip-version-check",
                MCP_PACKAGE,
            ])
            .env("PIP_NO_INPUT", "1"),
        PIP_TIMEOUT,
    );
    assert!(
        pip.ok(),
        "`pip install {MCP_PACKAGE}` failed:\n{}",
        pip.describe()
    );

    let check = run_bounded(
        Command::new(&python).arg("-c").arg(
            "import importlib.metadata as m, mcp.client.experimental; print(m.version('mcp'))",
        ),
        VENV_TIMEOUT,
    );
    assert!(
        check.ok() && check.stdout.trim() == "1.30.0",
        "the virtualenv does not import mcp 1.30.0:\n{}",
        check.describe()
    );
    std::fs::write(&marker, MCP_PACKAGE).expect("write the virtualenv marker");
    python
}

fn script_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("..")
        .join("tests")
        .join("interop")
        .join("python_tasks_client.py")
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

fn run_script(python: &Path, server: &Server, token: Option<&str>) -> Run {
    let mut cmd = Command::new(python);
    cmd.arg("-B")
        .arg(script_path())
        .arg(&server.url)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("PYTHONUNBUFFERED", "1")
        .env_remove("PYTHONPATH");
    if let Some(t) = token {
        cmd.arg(t);
    }
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

/// Assertions on the Task fields the SDK parsed.
fn check_task(run: &Run, t: &Value, status: &str, what: &str) {
    run.eq(&t["status"], json!(status), &format!("{what}: status"));
    run.eq(&t["ttl"], json!(60000), &format!("{what}: ttl"));
    run.ensure(
        t["pollInterval"].as_i64().is_some_and(|p| p > 0),
        format!("{what}: pollInterval should be a positive number: {t}"),
    );
    run.ensure(
        t["createdAt"].is_string(),
        format!("{what}: createdAt missing: {t}"),
    );
    run.ensure(
        t["lastUpdatedAt"].is_string(),
        format!("{what}: lastUpdatedAt missing: {t}"),
    );
    run.ensure(
        t["taskId"].as_str().is_some_and(|s| !s.is_empty()),
        format!("{what}: taskId missing: {t}"),
    );
}

/// Polled statuses: one or more, all non-terminal except the last, which is `last`.
fn check_statuses(run: &Run, statuses: &Value, allowed: &[&str], last: &str, what: &str) {
    let list: Vec<&str> = statuses
        .as_array()
        .unwrap_or_else(|| run.fail(format!("{what}: no status list: {statuses}")))
        .iter()
        .map(|s| run.str_at(s, what))
        .collect();
    run.ensure(
        list.last() == Some(&last),
        format!("{what}: polling should end at {last}: {list:?}"),
    );
    run.ensure(
        list[..list.len() - 1].iter().all(|s| allowed.contains(s)),
        format!("{what}: unexpected status before {last}: {list:?}"),
    );
}

/// Assert every step the script reported; returns the task ids by role.
fn check_run(run: &Run, expect_list: bool) -> HashMap<&'static str, String> {
    // initialize
    let init = run.step("initialize");
    run.eq(
        &init["protocolVersion"],
        json!("2025-11-25"),
        "negotiated protocol version",
    );
    run.eq(
        &init["toolsCallDeclared"],
        json!(true),
        "capabilities.tasks.requests.tools.call",
    );
    run.eq(
        &init["cancelDeclared"],
        json!(true),
        "capabilities.tasks.cancel",
    );
    run.eq(
        &init["listDeclared"],
        json!(expect_list),
        "capabilities.tasks.list",
    );

    // tools/list: execution.taskSupport as the SDK parsed it
    let support = &run.step("list_tools")["taskSupport"];
    for (tool, want) in [
        ("slow_compute", "optional"),
        ("failing_job", "required"),
        ("greet", "forbidden"),
        ("confirm_delete", "required"),
    ] {
        run.eq(
            &support[tool],
            json!(want),
            &format!("execution.taskSupport of {tool}"),
        );
    }

    // slow_compute as a task: working -> completed, result replayed with the related-task _meta
    let slow = run.step("slow_task");
    check_task(
        run,
        &slow["created"],
        "working",
        "slow_compute CreateTaskResult",
    );
    let slow_id = run
        .str_at(&slow["created"]["taskId"], "slow task id")
        .to_string();
    check_statuses(
        run,
        &slow["statuses"],
        &["working"],
        "completed",
        "slow_compute poll_task",
    );
    check_task(
        run,
        &slow["final"],
        "completed",
        "slow_compute final tasks/get",
    );
    run.eq(
        &slow["final"]["taskId"],
        json!(slow_id),
        "slow_compute final task id",
    );
    run.eq(
        &slow["resultText"],
        json!(["py-interop: computed for 2 seconds"]),
        "slow_compute result text",
    );
    run.eq(&slow["isError"], json!(false), "slow_compute isError");
    run.eq(
        &slow["resultRelatedTaskId"],
        json!(slow_id),
        "slow_compute tasks/result related-task _meta",
    );

    // failing_job: isError true -> status failed (2025-11-25), tasks/result replays the tool result
    let failing = run.step("failing_task");
    check_task(
        run,
        &failing["created"],
        "working",
        "failing_job CreateTaskResult",
    );
    let failing_id = run
        .str_at(&failing["created"]["taskId"], "failing task id")
        .to_string();
    check_statuses(
        run,
        &failing["statuses"],
        &["working"],
        "failed",
        "failing_job poll_task",
    );
    check_task(
        run,
        &failing["final"],
        "failed",
        "failing_job final tasks/get",
    );
    run.ensure(
        failing["final"]["statusMessage"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        format!(
            "a failed task should carry a diagnostic statusMessage: {}",
            failing["final"]
        ),
    );
    run.ensure(
        failing.get("resultError").is_none(),
        format!("tasks/result of a tool-error task must replay the CallToolResult, not an error: {failing}"),
    );
    run.eq(
        &failing["isError"],
        json!(true),
        "failing_job result isError",
    );
    run.ensure(
        failing["resultText"][0]
            .as_str()
            .is_some_and(|t| t.starts_with("failing_job: the job failed")),
        format!("failing_job result text: {}", failing["resultText"]),
    );
    run.eq(
        &failing["resultRelatedTaskId"],
        json!(failing_id),
        "failing_job tasks/result related-task _meta",
    );

    // tasks/cancel on a long slow_compute
    let cancel = run.step("cancel_task");
    check_task(
        run,
        &cancel["created"],
        "working",
        "long slow_compute CreateTaskResult",
    );
    let cancelled_id = run
        .str_at(&cancel["created"]["taskId"], "cancelled task id")
        .to_string();
    run.eq(
        &cancel["before"],
        json!("working"),
        "status before tasks/cancel",
    );
    check_task(
        run,
        &cancel["cancelResult"],
        "cancelled",
        "tasks/cancel result",
    );
    run.eq(
        &cancel["cancelResult"]["taskId"],
        json!(cancelled_id),
        "tasks/cancel result task id",
    );
    run.eq(
        &cancel["cancelResultRelatedTaskId"],
        Value::Null,
        "tasks/cancel result related-task _meta (SHOULD NOT)",
    );
    check_task(
        run,
        &cancel["getAfter"],
        "cancelled",
        "tasks/get after tasks/cancel",
    );
    run.eq(
        &cancel["getLater"],
        json!("cancelled"),
        "tasks/get 1.5 s after tasks/cancel",
    );
    run.eq(
        &cancel["pollStatuses"],
        json!(["cancelled"]),
        "poll_task on a cancelled task",
    );
    run.eq(
        &cancel["secondCancel"]["code"],
        json!(-32602),
        "tasks/cancel of a terminal task",
    );
    let after = &cancel["resultAfterCancel"];
    run.ensure(
        after.get("timeout").is_none(),
        "tasks/result of a cancelled task must answer, not block",
    );

    // greet, a plain (forbidden) tool call
    let greet = run.step("greet");
    run.eq(&greet["text"], json!(["Hello, Python SDK!"]), "greet text");
    run.eq(&greet["isError"], json!(false), "greet isError");

    // confirm_delete: input_required, elicitation/create (on the tasks/result stream or the GET
    // stream) answered by the SDK's elicitation_callback
    let mut elicit_ids = Vec::new();
    for (step, file, want_text) in [
        ("elicit_accept", "report.txt", "Deleted report.txt"),
        ("elicit_decline", "keep.txt", "Kept keep.txt"),
    ] {
        let e = run.step(step);
        check_task(
            run,
            &e["created"],
            "working",
            &format!("{step} CreateTaskResult"),
        );
        let id = run
            .str_at(&e["taskId"], "confirm_delete task id")
            .to_string();
        // The server delivers the elicitation on the open tasks/result stream, or on the
        // session's GET stream when none is open. The SDK keeps a GET stream and answers from
        // it, so polling may see input_required or, when that answer came first, the end.
        let before: Vec<&str> = e["statusesBeforeResult"]
            .as_array()
            .unwrap_or_else(|| run.fail(format!("{step}: no status list")))
            .iter()
            .map(|s| run.str_at(s, step))
            .collect();
        run.ensure(
            matches!(before.last(), Some(&"input_required") | Some(&"completed"))
                && before[..before.len() - 1]
                    .iter()
                    .all(|s| *s == "working" || *s == "input_required"),
            format!("{step}: unexpected statuses before tasks/result: {before:?}"),
        );
        // Delivery is at least once: a request still unanswered when a tasks/result reader
        // attaches is sent again on that stream, with the same id (the SDK may have got it on
        // the GET stream already). Every copy must be the same request.
        let asked = e["elicitations"].as_array().cloned().unwrap_or_default();
        run.ensure(
            !asked.is_empty()
                && asked
                    .iter()
                    .all(|q| q["requestId"] == asked[0]["requestId"]),
            format!(
                "{step}: expected one elicitation/create request (possibly re-sent): {}",
                e["elicitations"]
            ),
        );
        let q = &asked[0];
        run.eq(
            &q["mode"],
            json!("form"),
            &format!("{step}: elicitation mode"),
        );
        run.eq(
            &q["message"],
            json!(format!("Delete {file}?")),
            &format!("{step}: elicitation message"),
        );
        run.eq(
            &q["requestedSchema"]["properties"]["confirm"]["type"],
            json!("boolean"),
            &format!("{step}: requested schema"),
        );
        run.eq(
            &q["relatedTaskId"],
            json!(id),
            &format!("{step}: elicitation/create related-task _meta"),
        );
        run.ensure(
            e["resultText"][0]
                .as_str()
                .is_some_and(|t| t.starts_with(want_text)),
            format!(
                "{step}: result text {} should start with {want_text:?}",
                e["resultText"]
            ),
        );
        run.eq(&e["isError"], json!(false), &format!("{step}: isError"));
        run.eq(
            &e["resultRelatedTaskId"],
            json!(id),
            &format!("{step}: tasks/result related-task _meta"),
        );
        run.eq(
            &e["finalStatus"],
            json!("completed"),
            &format!("{step}: final status"),
        );
        elicit_ids.push(id);
    }

    let mut ids = HashMap::new();
    ids.insert("slow", slow_id);
    ids.insert("failing", failing_id);
    ids.insert("cancelled", cancelled_id);
    ids.insert("elicit_accept", elicit_ids[0].clone());
    ids.insert("elicit_decline", elicit_ids[1].clone());

    // tasks/list: only when declared; otherwise the method does not exist
    let list = run.step("list_tasks");
    if expect_list {
        run.eq(&list["outcome"], json!("listed"), "tasks/list outcome");
        for (role, status) in ROLES {
            run.eq(
                &list["statuses"][&ids[role]],
                json!(status),
                &format!("tasks/list entry of the {role} task"),
            );
        }
    } else {
        run.eq(
            &list["outcome"],
            json!("error"),
            "tasks/list without the tasks.list capability",
        );
        run.eq(
            &list["error"]["code"],
            json!(-32601),
            "tasks/list without the tasks.list capability",
        );
    }

    run.eq(
        &run.step("unknown_task")["error"]["code"],
        json!(-32602),
        "tasks/get of an unknown task",
    );

    // The ids the script kept for the cross-check are the ones it saw.
    let kept = &run.step("session")["tasks"];
    for (role, _) in ROLES {
        run.eq(
            &kept[format!("{role}_task")],
            json!(ids[role]),
            &format!("task id of the {role} task as kept"),
        );
    }
    ids
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
    let python = tokio::task::spawn_blocking(provision_venv)
        .await
        .expect("provision the virtualenv");

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
