//! The assertions on what the Python script reported, step by step.

use std::collections::HashMap;

use serde_json::{json, Value};

use crate::{Run, ROLES};

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
pub(crate) fn check_run(run: &Run, expect_list: bool) -> HashMap<&'static str, String> {
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
