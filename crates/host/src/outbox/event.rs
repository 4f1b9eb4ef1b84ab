//! A task event as it is sent and read: `{eventId, name, timestamp, data}` for one status
//! change (docs/events.md), the same bytes for a webhook and for `events/poll`.

use std::sync::Arc;

use parking_lot::RwLock;
use serde_json::{json, Map, Value};
use taskmesh_task::{Change, TaskRecord};

/// The name of the one event type: a task's status changed.
pub const TASK_EVENT: &str = "taskmesh.task.updated";

/// The `data` of a task's event: the task as `tasks/get` shows it on protocol 2026-07-28 at
/// the change, its outcome inline once terminal. Given by the node (the rendering is the
/// gateway's).
pub type Render = Arc<dyn Fn(&TaskRecord, &Change) -> Value + Send + Sync>;

/// The node's rendering of task events, set once the gateway exists; until then an event's
/// data holds only the task id. Cheap to clone: every clone sees the rendering set.
#[derive(Clone, Default)]
pub(crate) struct Renderer(Arc<RwLock<Option<Render>>>);

impl Renderer {
    pub(crate) fn set(&self, render: Render) {
        *self.0.write() = Some(render);
    }

    /// The event of `change` of `record`, as a JSON object.
    pub(crate) fn occurrence(&self, record: &TaskRecord, change: &Change) -> Map<String, Value> {
        let data = match &*self.0.read() {
            Some(render) => render(record, change),
            None => json!({ "taskId": record.task_id }),
        };
        let mut event = Map::new();
        event.insert(
            "eventId".into(),
            json!(event_id(&change.task_id, change.index)),
        );
        event.insert("name".into(), json!(TASK_EVENT));
        event.insert(
            "timestamp".into(),
            json!(taskmesh_mcp::time::rfc3339_ms(change.at_ms)),
        );
        event.insert("data".into(), data);
        event
    }
}

/// The id of the event of the change at log `index` of `task_id`: stable for a (task, status
/// change), the same on every delivery and every read, from any node.
pub fn event_id(task_id: &str, index: u64) -> String {
    format!("{task_id}-{index}")
}
