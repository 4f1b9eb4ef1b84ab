//! What the commands print: a tool's result for people (text content as text, any other
//! content and `structuredContent` as JSON), tables of tools and tasks, and JSON for scripts
//! (`--json`: one pretty-printed JSON document on standard output, nothing else there).
//!
//! The renderers are pure (they return the text), so they are tested without a terminal.

use comfy_table::{presets, ContentArrangement, Table};
use serde_json::{json, Value};
use taskmesh_client::task_support;

/// A `CallToolResult` for people.
pub fn result_text(result: &Value) -> String {
    let mut out = Vec::new();
    for item in result["content"].as_array().into_iter().flatten() {
        match (item["type"].as_str(), item["text"].as_str()) {
            (Some("text"), Some(t)) => out.push(t.to_string()),
            _ => out.push(pretty(item)),
        }
    }
    if let Some(s) = result.get("structuredContent").filter(|s| !s.is_null()) {
        out.push(pretty(s));
    }
    out.join("\n")
}

/// Whether a result is a tool error.
pub fn is_error(result: &Value) -> bool {
    result["isError"] == true
}

/// `v` as indented JSON.
pub fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string())
}

/// Print `v` for scripts.
pub fn print_json(v: &Value) {
    println!("{}", pretty(v));
}

fn table(on_terminal: bool) -> Table {
    let mut t = Table::new();
    if on_terminal {
        t.load_preset(presets::UTF8_FULL_CONDENSED)
            .set_content_arrangement(ContentArrangement::Dynamic);
    } else {
        t.load_preset(presets::ASCII_MARKDOWN)
            .set_content_arrangement(ContentArrangement::Disabled);
    }
    t
}

fn cell(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The tools as a table: name, title, task support, description (its first line).
pub fn tools_table(tools: &[Value], on_terminal: bool) -> String {
    let mut t = table(on_terminal);
    t.set_header(["NAME", "TITLE", "TASKS", "DESCRIPTION"]);
    for tool in tools {
        let title = tool["title"]
            .as_str()
            .or_else(|| tool["annotations"]["title"].as_str())
            .unwrap_or("-");
        let description = tool["description"]
            .as_str()
            .and_then(|d| d.lines().next())
            .unwrap_or("-");
        t.add_row([
            cell(&tool["name"]),
            title.to_string(),
            task_support(tool).to_string(),
            description.to_string(),
        ]);
    }
    t.to_string()
}

/// Worker registrations as a table, one a row: node, id, identity, label, tools, places.
pub fn workers_table(workers: &[Value], on_terminal: bool) -> String {
    let mut t = table(on_terminal);
    t.set_header(["NODE", "WORKER", "IDENTITY", "LABEL", "TOOLS", "MAX TASKS"]);
    for w in workers {
        let tools: Vec<&str> = w["tools"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        t.add_row([
            cell(&w["nodeId"]),
            cell(&w["workerId"]),
            cell(&w["identity"]),
            cell(&w["label"]),
            tools.join(", "),
            cell(&w["maxConcurrentTasks"]),
        ]);
    }
    t.to_string()
}

/// Webhooks as a table, one a row: where each goes and what this node's deliveries came to.
pub fn webhooks_table(hooks: &[Value], on_terminal: bool) -> String {
    let mut t = table(on_terminal);
    t.set_header([
        "KIND",
        "NAME",
        "URL",
        "ENDS ONLY",
        "ATTEMPTS",
        "ACKED",
        "REFUSED",
        "ABANDONED",
        "IN FLIGHT",
        "LAST ERROR",
    ]);
    for h in hooks {
        let d = &h["deliveries"];
        t.add_row([
            cell(&h["kind"]),
            cell(&h["name"]),
            cell(&h["url"]),
            cell(&h["terminalOnly"]),
            cell(&d["attempts"]),
            cell(&d["acked"]),
            cell(&d["refused"]),
            cell(&d["abandoned"]),
            cell(&h["inFlight"]),
            cell(&d["lastError"]),
        ]);
    }
    t.to_string()
}

/// The fields of a task shown in a table, with the name of the wire field on either
/// generation.
const TASK_FIELDS: [(&str, &str, &str); 7] = [
    ("TASK ID", "taskId", "taskId"),
    ("STATUS", "status", "status"),
    ("MESSAGE", "statusMessage", "statusMessage"),
    ("CREATED", "createdAt", "createdAt"),
    ("UPDATED", "lastUpdatedAt", "lastUpdatedAt"),
    ("TTL MS", "ttl", "ttlMs"),
    ("POLL MS", "pollInterval", "pollIntervalMs"),
];

fn task_field<'a>(task: &'a Value, classic: &str, modern: &str) -> &'a Value {
    task.get(classic)
        .or_else(|| task.get(modern))
        .unwrap_or(&Value::Null)
}

/// Tasks as a table, one a row.
pub fn tasks_table(tasks: &[Value], on_terminal: bool) -> String {
    let mut t = table(on_terminal);
    t.set_header(TASK_FIELDS.iter().map(|(h, _, _)| *h));
    for task in tasks {
        t.add_row(
            TASK_FIELDS
                .iter()
                .map(|(_, c, m)| cell(task_field(task, c, m))),
        );
    }
    t.to_string()
}

/// One task as a two-column table (its inline result or error, on 2026-07-28, below it).
pub fn task_table(task: &Value, on_terminal: bool) -> String {
    let mut t = table(on_terminal);
    for (h, c, m) in TASK_FIELDS {
        t.add_row([h.to_string(), cell(task_field(task, c, m))]);
    }
    let mut out = t.to_string();
    if let Some(r) = task.get("result") {
        out.push_str("\nresult:\n");
        out.push_str(&result_text(r));
    }
    if let Some(e) = task.get("error") {
        out.push_str("\nerror: ");
        out.push_str(&pretty(e));
    }
    out
}

/// What `--detach` prints for scripts.
pub fn detached_json(task_id: &str, protocol: &str) -> Value {
    json!({ "taskId": task_id, "protocol": protocol })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_text_and_the_rest_is_json() {
        let r = json!({
            "content": [
                {"type": "text", "text": "hello"},
                {"type": "image", "data": "AA==", "mimeType": "image/png"}
            ],
            "structuredContent": {"n": 1}
        });
        let text = result_text(&r);
        assert!(text.starts_with("hello\n"), "{text}");
        assert!(text.contains("\"mimeType\": \"image/png\""), "{text}");
        assert!(text.ends_with("{\n  \"n\": 1\n}"), "{text}");
        assert!(!is_error(&r));
        assert!(is_error(&json!({"content": [], "isError": true})));
    }

    #[test]
    fn tables_show_either_generation_of_task() {
        let classic =
            json!({"taskId": "t-1", "status": "working", "ttl": 60000, "pollInterval": 500});
        let modern = json!({"taskId": "t-2", "status": "completed", "ttlMs": null, "pollIntervalMs": 500,
            "result": {"content": [{"type": "text", "text": "done"}]}});
        let list = tasks_table(&[classic, modern.clone()], false);
        assert!(
            list.contains("t-1") && list.contains("60000") && list.contains("t-2"),
            "{list}"
        );
        let one = task_table(&modern, false);
        assert!(
            one.contains("completed") && one.ends_with("result:\ndone"),
            "{one}"
        );
        assert!(!list.contains('\u{1b}'), "no escape codes off a terminal");
    }

    #[test]
    fn the_tools_table_shows_task_support() {
        let tools = [
            json!({"name": "slow", "title": "Slow", "description": "Works.\nLong.",
            "execution": {"taskSupport": "optional"}}),
            json!({"name": "plain"}),
        ];
        let t = tools_table(&tools, false);
        assert!(
            t.contains("slow") && t.contains("optional") && t.contains("Works."),
            "{t}"
        );
        assert!(!t.contains("Long."), "{t}");
        assert!(t.contains("forbidden"), "{t}");
    }
}
