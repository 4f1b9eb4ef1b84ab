//! A Rust worker (`taskmesh_client::worker`) serving tools in the test's own process, for the
//! tests where SDK clients call worker tools: [`Served`] registers and serves, and collects
//! what the handlers report as events (`{"event", "taskId", ...}`); [`interview`] and
//! [`wait_cancel`] are the handlers of the two tools every such test serves.

use std::future::Future;
use std::time::Duration;

use serde_json::{json, Value};
use taskmesh_client::jsonrpc::ErrorObject;
use taskmesh_client::worker::{Declaration, Job, Worker};
use tokio::sync::mpsc;

/// Where a handler reports what it saw.
pub type Events = mpsc::UnboundedSender<Value>;

/// A successful `CallToolResult` of one text.
pub fn text_result(text: &str) -> Value {
    json!({"content": [{"type": "text", "text": text}], "isError": false})
}

/// Asks the client a name (`Job::elicit`), reports the answer as event `answer`, and greets.
pub async fn interview(job: &Job, events: &Events) -> Result<Value, ErrorObject> {
    let schema = json!({
        "type": "object",
        "properties": {"name": {"type": "string"}},
        "required": ["name"],
    });
    let asked = job
        .elicit(json!({"message": "What is your name?", "requestedSchema": schema}))
        .await;
    let seen = match &asked {
        Ok(Ok(answer)) => answer.clone(),
        other => json!({"failed": format!("{other:?}")}),
    };
    let task_id = &job.lease.task_id;
    let _ = events.send(json!({"event": "answer", "taskId": task_id, "answer": seen}));
    match asked {
        Ok(Ok(answer)) => {
            let name = answer["content"]["name"].as_str().unwrap_or("nobody");
            Ok(text_result(&format!("Hello, {name}!")))
        }
        Ok(Err(e)) => Err(e),
        Err(e) => Err(ErrorObject {
            code: -32603,
            message: format!("the input request failed: {e}"),
            data: None,
        }),
    }
}

/// Sets `running` as the status message (through the low-level heartbeat: the client waits
/// for it before cancelling, so the cancellation finds the task leased), waits up to `wait`
/// to be cancelled, and reports whether it was as event `cancel`.
pub async fn wait_cancel(
    worker: &Worker,
    job: &Job,
    events: &Events,
    running: &str,
    wait: Duration,
) -> Result<Value, ErrorObject> {
    let _ = worker.heartbeat(&job.lease, None, Some(running)).await;
    let cancelled = tokio::time::timeout(wait, job.cancel.cancelled())
        .await
        .is_ok();
    let task_id = &job.lease.task_id;
    let _ = events.send(json!({"event": "cancel", "taskId": task_id, "cancelled": cancelled}));
    Ok(text_result("never cancelled"))
}

/// The error of a tool the worker does not have.
pub fn no_tool(name: &str) -> ErrorObject {
    ErrorObject {
        code: -32602,
        message: format!("no tool {name}"),
        data: None,
    }
}

/// A worker serving tools in this process, and the events of its handlers. Its serve loop
/// ends when this is dropped.
pub struct Served {
    serving: tokio::task::JoinHandle<()>,
    events: mpsc::UnboundedReceiver<Value>,
    seen: Vec<Value>,
    wait: Duration,
}

impl Served {
    /// Register `tools` at `url` with `token` (4 places, `label`), and serve them with
    /// `handle`; [`Served::event`] waits up to `wait` for each event.
    pub async fn start<F, Fut>(
        url: &str,
        token: &str,
        tools: Vec<Declaration>,
        label: &str,
        wait: Duration,
        handle: F,
    ) -> Served
    where
        F: Fn(Worker, Events, Job) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, ErrorObject>> + Send + 'static,
    {
        let worker = Worker::register(url, token, tools, 4, label)
            .await
            .expect("register the worker");
        let (tx, events) = mpsc::unbounded_channel();
        let serving = tokio::spawn(async move {
            let w = worker.clone();
            let r = worker
                .serve(move |job| handle(w.clone(), tx.clone(), job))
                .await;
            panic!("the worker stopped serving: {r:?}");
        });
        Served {
            serving,
            events,
            seen: Vec::new(),
            wait,
        }
    }

    /// The handler's event `name` of task `task_id`, waiting for it (bounded).
    pub async fn event(&mut self, name: &str, task_id: &str) -> Value {
        loop {
            if let Some(e) = self
                .seen
                .iter()
                .find(|e| e["event"] == name && e["taskId"] == task_id)
            {
                return e.clone();
            }
            match tokio::time::timeout(self.wait, self.events.recv()).await {
                Ok(Some(e)) => self.seen.push(e),
                _ => panic!(
                    "the worker reported no `{name}` event for task {task_id}; it reported {:?}",
                    self.seen
                ),
            }
        }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        self.serving.abort();
    }
}
