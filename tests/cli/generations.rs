//! Both protocol generations against taskmesh, which serves both on one endpoint: by
//! default a 2025-11-25 session (live progress, `tasks/list`); with `--protocol 2026-07-28`
//! (or a profile's `protocol`) the stateless generation with the tasks extension. Each shows
//! in the wire shapes `--json` prints.

use super::{first_text, Cli, TASKMESH};
use taskmesh_testkit::Server;

#[test]
fn a_call_runs_on_either_generation() {
    let s = Server::start(TASKMESH, "");
    let cli = Cli::at(&s.url);

    // 2025-11-25: the task's result names its task (related-task `_meta`).
    let r = cli
        .ok(&["call", "slow_compute", "seconds=0.3", "--json"])
        .json();
    assert_eq!(first_text(&r), "slow_compute: computed for 0.3 seconds");
    assert!(
        r["_meta"]["io.modelcontextprotocol/related-task"]["taskId"].is_string(),
        "{r}"
    );
    assert!(r.get("resultType").is_none(), "{r}");

    // 2026-07-28: the result inline from tasks/get, with its resultType.
    let modern = ["--protocol", "2026-07-28"];
    let r = cli
        .ok(&[
            &["call", "slow_compute", "seconds=0.3", "--json"][..],
            &modern,
        ]
        .concat())
        .json();
    assert_eq!(first_text(&r), "slow_compute: computed for 0.3 seconds");
    assert_eq!(r["resultType"], "complete", "{r}");

    // A plain call there (greet never runs as a task): its answer stream, then its result.
    let r = cli
        .ok(&[&["call", "greet", "name=Zoé", "--json"][..], &modern].concat())
        .json();
    assert_eq!(first_text(&r), "Hello, Zoé!");
    assert_eq!(r["resultType"], "complete", "{r}");

    // A tool error is `completed` there, and still exit 1.
    let r = cli.run(&[&["call", "failing_job", "--json"][..], &modern].concat());
    assert_eq!(r.code, 1, "{r:?}");
    assert_eq!(r.json()["isError"], true);

    // A detached task of 2026-07-28, read on both: ttlMs there, ttl here.
    let d = cli
        .ok(&[
            &["call", "slow_compute", "seconds=60", "--detach", "--json"][..],
            &modern,
        ]
        .concat())
        .json();
    assert_eq!(d["protocol"], "2026-07-28");
    let id = d["taskId"].as_str().unwrap();
    let t = cli
        .ok(&[&["tasks", "get", id, "--json"][..], &modern].concat())
        .json();
    assert_eq!(t["status"], "working");
    assert!(t.get("ttlMs").is_some() && t.get("ttl").is_none(), "{t}");
    let t = cli.ok(&["tasks", "get", id, "--json"]).json();
    assert!(t.get("ttl").is_some() && t.get("ttlMs").is_none(), "{t}");

    // Cancelled on 2026-07-28 (an acknowledgement, then the task as it is).
    let c = cli
        .ok(&[&["tasks", "cancel", id, "--json"][..], &modern].concat())
        .json();
    assert_eq!(c["status"], "cancelled", "{c}");
    // Its result: the task was cancelled, exit 1.
    let r = cli.run(&[&["tasks", "result", id][..], &modern].concat());
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("cancelled"), "{r:?}");

    // The generation can come from the environment too; 2026-07-28 has no tasks/list.
    let env = Cli::at(&s.url).with("TASKMESH_PROTOCOL", "2026-07-28");
    let r = env.run(&["tasks", "list"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("no tasks/list"), "{r:?}");
}
