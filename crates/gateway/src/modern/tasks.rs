//! The tasks extension's rendering of the task store: the same records that 2025-11-25 clients
//! read (`crate::wire`), shaped as 2026-07-28 `Task`, `CreateTaskResult` and `DetailedTask`.
//!
//! Field by field: `ttl` is `ttlMs` (`null` for unlimited), `pollInterval` is `pollIntervalMs`;
//! the created task is flat with `resultType: "task"`; a terminal task carries its outcome
//! inline (`result` once `completed`, `error` once `failed`). The one status that reads
//! differently is a tool error: stored as `failed` with a result whose `isError` is true (what
//! a 2025-11-25 client sees), it is `completed` here with that result, since the extension
//! keeps `failed` for JSON-RPC errors. The inline result carries no related-task `_meta`, and
//! `resultType: "complete"` as every result of this generation does.

use serde_json::{json, Map, Value};
use taskmesh_host::TaskRead;
use taskmesh_task::{Change, Outcome, TaskRecord, TaskStatus, TaskView};

use crate::wire::TaskObject;

/// The `resultType` of a created task.
pub(crate) const RESULT_TYPE_TASK: &str = "task";

/// The extension's `Task` object of a task view, with `status` as given, as a JSON object that
/// the caller adds to (the outcome, the pending requests, `resultType`).
fn task_object(v: &TaskView, status: TaskStatus) -> Map<String, Value> {
    match serde_json::to_value(TaskObject::extension(v, status)) {
        Ok(Value::Object(m)) => m,
        _ => unreachable!("a task object serialises as a JSON object"),
    }
}

/// `CreateTaskResult`: the new task, flat, with `resultType: "task"`.
pub(crate) fn created(v: &TaskView) -> Value {
    let mut m = task_object(v, v.status);
    m.insert("resultType".into(), json!(RESULT_TYPE_TASK));
    Value::Object(m)
}

/// The `tasks/get` result of a `working` task, serialised as it stands (the hot path of
/// polls: no intermediate JSON value). The same fields as [`live`], with `resultType` and the
/// server's info in `_meta`.
pub(crate) struct WorkingAnswer<'a> {
    task: TaskObject<'a>,
    result_type: &'static str,
    meta: ServerInfoMeta,
}

impl serde::Serialize for WorkingAnswer<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut t = s.serialize_struct("WorkingAnswer", TaskObject::FIELDS + 2)?;
        self.task.write_fields(&mut t)?;
        t.serialize_field("resultType", self.result_type)?;
        t.serialize_field("_meta", &self.meta)?;
        t.end()
    }
}

#[derive(serde::Serialize)]
pub(crate) struct ServerInfoMeta {
    #[serde(rename = "io.modelcontextprotocol/serverInfo")]
    server_info: ServerInfo,
}

#[derive(serde::Serialize)]
struct ServerInfo {
    name: &'static str,
    title: &'static str,
    version: &'static str,
}

impl<'a> WorkingAnswer<'a> {
    /// The answer for `v`.
    pub(crate) fn of(v: &'a TaskView) -> Self {
        Self {
            task: TaskObject::extension(v, v.status),
            result_type: "complete",
            meta: ServerInfoMeta {
                server_info: ServerInfo {
                    name: "taskmesh",
                    title: "taskmesh",
                    version: env!("CARGO_PKG_VERSION"),
                },
            },
        }
    }
}

/// The `DetailedTask` of a task that is not terminal.
pub(crate) fn live(v: &TaskView) -> Map<String, Value> {
    task_object(v, v.status)
}

/// The `DetailedTask` of what a read found: a live task's fields, with `inputRequests` while
/// it is `input_required`, and a terminal one's outcome inline.
pub(crate) fn detailed(read: &TaskRead) -> Map<String, Value> {
    match read {
        TaskRead::Task(task) => live(task),
        TaskRead::Waiting { task, requests } => {
            let mut d = live(task);
            d.insert("inputRequests".into(), input_requests(requests));
            d
        }
        TaskRead::Ended(record) => terminal(record),
    }
}

/// `inputRequests` of an `input_required` task: each request the task waits on, keyed by its
/// id (unique for the task's life), as `{method, params}` (the related-task `_meta` left out:
/// the key names the task's request).
pub(crate) fn input_requests(pending: &[std::sync::Arc<Vec<u8>>]) -> Value {
    let mut m = Map::new();
    for json in pending {
        let Ok(req) = serde_json::from_slice::<Value>(json) else {
            continue;
        };
        let (Some(id), Some(method)) = (req["id"].as_str(), req["method"].as_str()) else {
            continue;
        };
        let mut params = req.get("params").cloned().unwrap_or_else(|| json!({}));
        if let Some(meta) = params.get_mut("_meta").and_then(Value::as_object_mut) {
            meta.remove(taskmesh_mcp::META_RELATED_TASK);
            if meta.is_empty() {
                params.as_object_mut().map(|p| p.remove("_meta"));
            }
        }
        m.insert(
            id.to_string(),
            json!({ "method": method, "params": params }),
        );
    }
    Value::Object(m)
}

/// A stored `CallToolResult` as a result of this generation: with `resultType: "complete"`,
/// which every result carries (the extension's own client reads the inline result as one).
fn as_result(mut result: Value) -> Value {
    if let Value::Object(m) = &mut result {
        m.entry("resultType").or_insert_with(|| json!("complete"));
    }
    result
}

/// The `DetailedTask` of a terminal record: its outcome inline.
pub(crate) fn terminal(r: &TaskRecord) -> Map<String, Value> {
    let view = TaskView::from(r);
    match &r.outcome {
        Some(Outcome::Result { json }) => {
            let result: Value = serde_json::from_str(json).unwrap_or_else(|e| {
                json!({"content": [{"type": "text", "text": format!("stored result unreadable: {e}")}], "isError": true})
            });
            // A tool error is `completed` here (see the module doc).
            let mut m = task_object(&view, TaskStatus::Completed);
            m.insert("result".into(), as_result(result));
            m
        }
        Some(Outcome::Error {
            code,
            message,
            data_json,
        }) => {
            let mut m = task_object(&view, TaskStatus::Failed);
            let mut error = json!({ "code": code, "message": message });
            if let Some(d) = data_json
                .as_deref()
                .and_then(|d| serde_json::from_str::<Value>(d).ok())
            {
                error["data"] = d;
            }
            m.insert("error".into(), error);
            m
        }
        None => task_object(&view, r.status),
    }
}

/// The `data` of a task event (`taskmesh.task.updated`, docs/events.md) as JSON text: the
/// task as `tasks/get` shows it on this generation at the event's status change, with its
/// outcome inline when the change ended the task. Written straight from the record (every
/// webhook delivery renders one): the stored result's top-level fields are spliced in as they
/// are, with `resultType` added, and nothing else is parsed.
pub fn event_data_json(r: &TaskRecord, e: &Change) -> Box<serde_json::value::RawValue> {
    let ended = e.status.is_terminal() && r.status == e.status;
    let mut view = TaskView::from(r);
    if !ended {
        view.status = e.status;
        view.status_message.clone_from(&e.status_message);
        view.last_updated_at_ms = e.at_ms;
    }
    let data = EventData {
        view: &view,
        outcome: if ended { r.outcome.as_ref() } else { None },
    };
    serde_json::value::to_raw_value(&data).unwrap_or_else(|_| {
        serde_json::value::to_raw_value(&json!({ "taskId": r.task_id }))
            .unwrap_or_else(|_| unreachable!("an object of a string serialises"))
    })
}

/// A task event's `data`: the task's fields, and its outcome once it ended.
struct EventData<'a> {
    view: &'a TaskView,
    outcome: Option<&'a Outcome>,
}

impl serde::Serialize for EventData<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        // A tool error is `completed` here (see the module doc).
        let status = match self.outcome {
            Some(Outcome::Result { .. }) => TaskStatus::Completed,
            Some(Outcome::Error { .. }) => TaskStatus::Failed,
            None => self.view.status,
        };
        let mut t = s.serialize_struct("DetailedTask", TaskObject::FIELDS + 1)?;
        TaskObject::extension(self.view, status).write_fields(&mut t)?;
        match self.outcome {
            Some(Outcome::Result { json }) => t.serialize_field("result", &StoredResult(json))?,
            Some(Outcome::Error {
                code,
                message,
                data_json,
            }) => t.serialize_field(
                "error",
                &StoredError {
                    code: *code,
                    message,
                    data: data_json
                        .as_deref()
                        .and_then(|d| serde_json::from_str::<&serde_json::value::RawValue>(d).ok()),
                },
            )?,
            None => {}
        }
        t.end()
    }
}

/// A stored result as this generation shows it: its fields as stored, and `resultType`.
struct StoredResult<'a>(&'a str);

impl serde::Serialize for StoredResult<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        type Fields<'a> = std::collections::BTreeMap<String, &'a serde_json::value::RawValue>;
        match serde_json::from_str::<Fields<'_>>(self.0) {
            Ok(fields) => {
                let typed = fields.contains_key("resultType");
                let mut m = s.serialize_map(Some(fields.len() + usize::from(!typed)))?;
                for (k, v) in &fields {
                    m.serialize_entry(k, v)?;
                }
                if !typed {
                    m.serialize_entry("resultType", "complete")?;
                }
                m.end()
            }
            // Not an object: as it is, or, unreadable, said so.
            Err(e) => match serde_json::from_str::<&serde_json::value::RawValue>(self.0) {
                Ok(raw) => raw.serialize(s),
                Err(_) => json!({"content": [{"type": "text", "text": format!("stored result unreadable: {e}")}], "isError": true, "resultType": "complete"})
                    .serialize(s),
            },
        }
    }
}

/// A stored JSON-RPC error.
#[derive(serde::Serialize)]
struct StoredError<'a> {
    code: i64,
    message: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    data: Option<&'a serde_json::value::RawValue>,
}

/// [`event_data_json`] through JSON values: the same data, the way `tasks/get` builds it (the
/// tests hold the two equal).
#[cfg(test)]
fn event_data(r: &TaskRecord, e: &Change) -> Value {
    if e.status.is_terminal() && r.status == e.status {
        return Value::Object(terminal(r));
    }
    let mut view = TaskView::from(r);
    view.status = e.status;
    view.status_message.clone_from(&e.status_message);
    view.last_updated_at_ms = e.at_ms;
    Value::Object(task_object(&view, e.status))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(status: TaskStatus, outcome: Option<Outcome>) -> TaskRecord {
        TaskRecord {
            status,
            outcome,
            ttl_ms: None,
            ..TaskRecord::sample("t-1")
        }
    }

    /// The event data written straight from the record is the data `tasks/get` builds.
    #[test]
    fn event_data_written_directly_is_the_one_built_from_values() {
        let change = |status, at_ms| Change {
            index: 9,
            task_id: "t-1".into(),
            status,
            status_message: Some("asking".into()),
            at_ms,
        };
        let cases = [
            (record(TaskStatus::Working, None), change(TaskStatus::InputRequired, 7)),
            (
                record(
                    TaskStatus::Completed,
                    Some(Outcome::Result {
                        json: r#"{"content":[{"type":"text","text":"é\"x"}],"structuredContent":{"b":[1,2]},"isError":false}"#.into(),
                    }),
                ),
                change(TaskStatus::Completed, 8),
            ),
            (
                record(
                    TaskStatus::Failed,
                    Some(Outcome::Result {
                        json: r#"{"content":[],"isError":true,"resultType":"complete"}"#.into(),
                    }),
                ),
                change(TaskStatus::Failed, 8),
            ),
            (
                record(
                    TaskStatus::Failed,
                    Some(Outcome::Error {
                        code: -32603,
                        message: "boom".into(),
                        data_json: Some(r#"{"why":1}"#.into()),
                    }),
                ),
                change(TaskStatus::Failed, 8),
            ),
            (
                record(
                    TaskStatus::Failed,
                    Some(Outcome::Error {
                        code: -1,
                        message: "no data".into(),
                        data_json: None,
                    }),
                ),
                change(TaskStatus::Failed, 8),
            ),
            // An earlier change of a task that ended since: no outcome.
            (
                record(
                    TaskStatus::Completed,
                    Some(Outcome::Result {
                        json: "{}".into(),
                    }),
                ),
                change(TaskStatus::InputRequired, 3),
            ),
            (
                record(
                    TaskStatus::Completed,
                    Some(Outcome::Result {
                        json: "not json".into(),
                    }),
                ),
                change(TaskStatus::Completed, 8),
            ),
        ];
        for (r, c) in cases {
            let direct: Value = serde_json::from_str(event_data_json(&r, &c).get()).unwrap();
            assert_eq!(direct, event_data(&r, &c), "{r:?} {c:?}");
        }
    }

    #[test]
    fn one_stored_outcome_renders_for_the_extension() {
        let tool_error = record(
            TaskStatus::Failed,
            Some(Outcome::Result {
                json: r#"{"content":[],"isError":true}"#.into(),
            }),
        );
        let d = terminal(&tool_error);
        assert_eq!(d["status"], "completed", "a tool error is completed here");
        assert_eq!(d["result"]["isError"], true);
        assert_eq!(d["result"]["resultType"], "complete");
        assert!(d.get("error").is_none());
        assert_eq!(d["ttlMs"], Value::Null);
        assert!(d.get("ttl").is_none() && d.get("pollInterval").is_none());
        assert_eq!(d["pollIntervalMs"], 500);

        let rpc_error = record(
            TaskStatus::Failed,
            Some(Outcome::Error {
                code: -32602,
                message: "no".into(),
                data_json: Some(r#"{"why":1}"#.into()),
            }),
        );
        let d = terminal(&rpc_error);
        assert_eq!(d["status"], "failed");
        assert_eq!(
            d["error"],
            json!({"code": -32602, "message": "no", "data": {"why": 1}})
        );

        let cancelled = terminal(&record(TaskStatus::Cancelled, None));
        assert_eq!(cancelled["status"], "cancelled");
        assert!(cancelled.get("result").is_none() && cancelled.get("error").is_none());

        let c = created(&TaskView::from(&record(TaskStatus::Working, None)));
        assert_eq!(c["resultType"], "task");
        assert_eq!(c["status"], "working");
        assert!(c.get("task").is_none(), "flat");
    }
}
