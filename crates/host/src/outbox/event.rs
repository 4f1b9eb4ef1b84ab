//! A task event as it is sent and read: `{eventId, name, timestamp, data}` for one status
//! change (docs/events.md), the same bytes for a webhook and for `events/poll`.

use std::sync::Arc;

use parking_lot::RwLock;
use serde_json::value::RawValue;
use taskmesh_task::{Change, TaskRecord};

/// The name of the one event type: a task's status changed.
pub const TASK_EVENT: &str = "taskmesh.task.updated";

/// The `data` of a task's event: the task as `tasks/get` shows it on protocol 2026-07-28 at
/// the change, its outcome inline once terminal, as JSON text. Given by the node (the
/// rendering is the gateway's).
pub type Render = Arc<dyn Fn(&TaskRecord, &Change) -> Box<RawValue> + Send + Sync>;

/// The node's rendering of task events, set once the gateway exists; until then an event's
/// data holds only the task id. Cheap to clone: every clone sees the rendering set.
#[derive(Clone, Default)]
pub(crate) struct Renderer(Arc<RwLock<Option<Render>>>);

impl Renderer {
    pub(crate) fn set(&self, render: Render) {
        *self.0.write() = Some(render);
    }

    /// The event of `change` of `record`, as the text of a JSON object.
    pub(crate) fn occurrence(&self, record: &TaskRecord, change: &Change) -> String {
        let data = match &*self.0.read() {
            Some(render) => render(record, change),
            None => serde_json::value::to_raw_value(&serde_json::json!({
                "taskId": record.task_id
            }))
            .unwrap_or_else(|_| unreachable!("an object of a string serialises")),
        };
        let event = Occurrence {
            event_id: &event_id(&change.task_id, change.index),
            name: TASK_EVENT,
            timestamp: taskmesh_mcp::time::Rfc3339Ms(change.at_ms),
            data: &data,
        };
        serde_json::to_string(&event).unwrap_or_else(|_| unreachable!("an event serialises"))
    }
}

/// A task event as it is sent.
#[derive(serde::Serialize)]
struct Occurrence<'a> {
    #[serde(rename = "eventId")]
    event_id: &'a str,
    name: &'a str,
    timestamp: taskmesh_mcp::time::Rfc3339Ms,
    data: &'a RawValue,
}

/// The id of the event of the change at log `index` of `task_id`: stable for a (task, status
/// change), the same on every delivery and every read, from any node.
pub fn event_id(task_id: &str, index: u64) -> String {
    format!("{task_id}-{index}")
}
