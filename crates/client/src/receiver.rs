//! The receiver side of MCP tasks (2025-11-25), for the requests a server sends its client: a
//! client that declares `tasks.requests.elicitation.create` and
//! `tasks.requests.sampling.createMessage` may get such a request task-augmented (`task:
//! {ttl}`). It then answers at once with a `CreateTaskResult`, keeps the task here, and hands
//! the request to its caller as any other ([`crate::CallEvent::Request`]); the caller's answer,
//! whenever it comes (a person may take hours), becomes the task's result. The server follows
//! the task with `tasks/get` and fetches the answer with `tasks/result`, which [`Receiver`]
//! answers; `tasks/list` and `tasks/cancel` too. The caller need not know that a request came
//! as a task.
//!
//! A task is kept until its TTL (the one the server asked for, at most [`MAX_TTL_MS`]) runs out
//! from its creation; then it reads as unknown (`-32602`).

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::{json, Map, Value};
use taskmesh_mcp::jsonrpc::ErrorObject;
use taskmesh_mcp::time::{now_ms, Rfc3339Ms};
use tokio::sync::{oneshot, watch};

/// The longest TTL a client task gets, in ms (a server asking for more gets this).
pub const MAX_TTL_MS: u64 = 7 * 24 * 3_600_000;

/// The `pollInterval` suggested for every client task, in ms.
pub const POLL_INTERVAL_MS: u64 = 1_000;

/// The most tasks `tasks/list` returns in one page.
const LIST_PAGE: usize = 100;

/// The most client tasks kept at once: a server asking for more gets an error.
pub const MAX_TASKS: usize = 10_000;

/// Where a client task stands.
#[derive(Debug, Clone, PartialEq)]
enum State {
    /// The caller has not answered yet.
    Working,
    /// The caller answered: the request's result, or its error.
    Done(Result<Value, ErrorObject>),
    /// The server cancelled it (the caller's answer, if it comes, is dropped).
    Cancelled,
}

#[derive(Debug)]
struct Entry {
    created_ms: u64,
    updated_ms: u64,
    ttl_ms: u64,
    state: State,
    /// Bumped when the state changes (a `tasks/result` waits on it).
    changed: watch::Sender<u64>,
}

impl Entry {
    fn status(&self) -> &'static str {
        match &self.state {
            State::Working => "working",
            State::Done(Ok(_)) => "completed",
            State::Done(Err(_)) => "failed",
            State::Cancelled => "cancelled",
        }
    }

    fn task(&self, id: &str) -> Value {
        let mut t = json!({
            "taskId": id,
            "status": self.status(),
            "createdAt": Rfc3339Ms(self.created_ms).to_string(),
            "lastUpdatedAt": Rfc3339Ms(self.updated_ms).to_string(),
            "ttl": self.ttl_ms,
            "pollInterval": POLL_INTERVAL_MS,
        });
        match &self.state {
            State::Done(Err(e)) => t["statusMessage"] = json!(e.message),
            State::Cancelled => t["statusMessage"] = json!("Cancelled by the server."),
            _ => {}
        }
        t
    }

    fn expired(&self, now: u64) -> bool {
        now >= self.created_ms.saturating_add(self.ttl_ms)
    }
}

/// The tasks this client runs for its server (see the module doc).
#[derive(Debug, Default)]
pub(crate) struct Receiver {
    tasks: Mutex<HashMap<String, Entry>>,
}

/// A new client task: the `CreateTaskResult` to answer the request with, and where the
/// caller's answer goes.
pub(crate) struct Created {
    pub(crate) answer: Value,
    pub(crate) result: oneshot::Sender<Result<Value, ErrorObject>>,
}

fn not_found(id: &str) -> ErrorObject {
    ErrorObject::invalid_params(format!("Failed to retrieve task: task {id} not found"))
}

fn fresh_id() -> String {
    let mut bytes = [0u8; 16];
    if getrandom::fill(&mut bytes).is_err() {
        // No OS randomness: still unique within this process.
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        bytes[..8].copy_from_slice(&n.to_be_bytes());
        bytes[8..].copy_from_slice(&now_ms().to_be_bytes());
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl Receiver {
    /// Make a task for a request the server sent with `task` (its params), or the error to
    /// answer it with when too many are kept.
    pub(crate) fn create(self: &Arc<Self>, task: &Value) -> Result<Created, ErrorObject> {
        let now = now_ms();
        let ttl_ms = task
            .get("ttl")
            .and_then(Value::as_u64)
            .unwrap_or(MAX_TTL_MS)
            .min(MAX_TTL_MS);
        let id = fresh_id();
        let entry = Entry {
            created_ms: now,
            updated_ms: now,
            ttl_ms,
            state: State::Working,
            changed: watch::channel(0).0,
        };
        let answer = json!({ "task": entry.task(&id) });
        {
            let mut tasks = self.tasks.lock();
            tasks.retain(|_, e| !e.expired(now));
            if tasks.len() >= MAX_TASKS {
                return Err(ErrorObject::new(
                    taskmesh_mcp::jsonrpc::CAPACITY_EXCEEDED,
                    format!("this client keeps at most {MAX_TASKS} tasks"),
                ));
            }
            tasks.insert(id.clone(), entry);
        }
        let (result, rx) = oneshot::channel();
        let me = Arc::downgrade(self);
        tokio::spawn(async move {
            let outcome = rx
                .await
                .unwrap_or_else(|_| Err(ErrorObject::internal("the request was not answered")));
            if let Some(me) = me.upgrade() {
                me.finish(&id, outcome);
            }
        });
        Ok(Created { answer, result })
    }

    fn finish(&self, id: &str, outcome: Result<Value, ErrorObject>) {
        let mut tasks = self.tasks.lock();
        if let Some(e) = tasks.get_mut(id) {
            if e.state == State::Working {
                e.state = State::Done(outcome);
                e.updated_ms = now_ms();
                e.changed.send_modify(|n| *n += 1);
            }
        }
    }

    /// Answer a `tasks/*` request of the server; `None` for another method.
    pub(crate) async fn answer(
        &self,
        method: &str,
        params: &Value,
    ) -> Option<Result<Value, ErrorObject>> {
        let id = || {
            params
                .get("taskId")
                .and_then(Value::as_str)
                .ok_or_else(|| ErrorObject::invalid_params("Invalid params: 'taskId' is required"))
        };
        Some(match method {
            "tasks/get" => id().and_then(|id| self.get(id)),
            "tasks/result" => match id() {
                Ok(id) => self.result(id).await,
                Err(e) => Err(e),
            },
            "tasks/cancel" => id().and_then(|id| self.cancel(id)),
            "tasks/list" => Ok(self.list(params)),
            _ => return None,
        })
    }

    fn get(&self, id: &str) -> Result<Value, ErrorObject> {
        let now = now_ms();
        let tasks = self.tasks.lock();
        match tasks.get(id) {
            Some(e) if !e.expired(now) => Ok(e.task(id)),
            _ => Err(not_found(id)),
        }
    }

    /// The task's result once it has one (waiting for it), with the related-task `_meta`.
    async fn result(&self, id: &str) -> Result<Value, ErrorObject> {
        let mut changed = {
            let tasks = self.tasks.lock();
            match tasks.get(id) {
                Some(e) if !e.expired(now_ms()) => e.changed.subscribe(),
                _ => return Err(not_found(id)),
            }
        };
        loop {
            let state = {
                let tasks = self.tasks.lock();
                match tasks.get(id) {
                    Some(e) if !e.expired(now_ms()) => e.state.clone(),
                    _ => return Err(not_found(id)),
                }
            };
            match state {
                State::Working => {
                    if changed.changed().await.is_err() {
                        return Err(not_found(id));
                    }
                }
                State::Done(Ok(Value::Object(mut m))) => {
                    let meta = m
                        .entry("_meta")
                        .or_insert_with(|| Value::Object(Map::new()));
                    if let Value::Object(meta) = meta {
                        meta.insert(
                            taskmesh_mcp::META_RELATED_TASK.into(),
                            json!({ "taskId": id }),
                        );
                    }
                    return Ok(Value::Object(m));
                }
                State::Done(Ok(other)) => return Ok(other),
                State::Done(Err(e)) => return Err(e),
                State::Cancelled => {
                    return Err(ErrorObject::internal(format!(
                        "Task {id} was cancelled: it has no result"
                    )))
                }
            }
        }
    }

    fn cancel(&self, id: &str) -> Result<Value, ErrorObject> {
        let now = now_ms();
        let mut tasks = self.tasks.lock();
        let Some(e) = tasks.get_mut(id).filter(|e| !e.expired(now)) else {
            return Err(not_found(id));
        };
        if e.state != State::Working {
            return Err(ErrorObject::invalid_params(format!(
                "Cannot cancel task: already in terminal status '{}'",
                e.status()
            )));
        }
        e.state = State::Cancelled;
        e.updated_ms = now;
        e.changed.send_modify(|n| *n += 1);
        Ok(e.task(id))
    }

    /// One page of the tasks, in id order, after the cursor (the last id of the page before).
    fn list(&self, params: &Value) -> Value {
        let now = now_ms();
        let after = params.get("cursor").and_then(Value::as_str);
        let tasks = self.tasks.lock();
        let mut ids: Vec<&String> = tasks
            .iter()
            .filter(|(id, e)| !e.expired(now) && after.is_none_or(|a| id.as_str() > a))
            .map(|(id, _)| id)
            .collect();
        ids.sort();
        let more = ids.len() > LIST_PAGE;
        ids.truncate(LIST_PAGE);
        let page: Vec<Value> = ids.iter().map(|id| tasks[*id].task(id)).collect();
        let mut out = json!({ "tasks": page });
        if more {
            if let Some(last) = ids.last() {
                out["nextCursor"] = json!(last);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_request_s_answer_becomes_its_task_s_result() {
        let r = Arc::new(Receiver::default());
        let created = r.create(&json!({"ttl": 60_000})).unwrap();
        let task = &created.answer["task"];
        let id = task["taskId"].as_str().unwrap().to_string();
        assert_eq!(task["status"], "working");
        assert_eq!(task["ttl"], 60_000);
        let got = r.answer("tasks/get", &json!({"taskId": id})).await.unwrap();
        assert_eq!(got.unwrap()["status"], "working");

        // A tasks/result waits for the answer.
        let waiting = {
            let r = r.clone();
            let id = id.clone();
            tokio::spawn(async move { r.answer("tasks/result", &json!({"taskId": id})).await })
        };
        created
            .result
            .send(Ok(json!({"action": "accept", "content": {"ok": true}})))
            .unwrap();
        let result = waiting.await.unwrap().unwrap().unwrap();
        assert_eq!(result["action"], "accept");
        assert_eq!(
            result["_meta"][taskmesh_mcp::META_RELATED_TASK]["taskId"],
            id.as_str()
        );
        let got = r.answer("tasks/get", &json!({"taskId": id})).await.unwrap();
        assert_eq!(got.unwrap()["status"], "completed");
        let listed = r.answer("tasks/list", &json!({})).await.unwrap().unwrap();
        assert_eq!(listed["tasks"][0]["taskId"], id.as_str());
        // Terminal: not cancelled again.
        let again = r
            .answer("tasks/cancel", &json!({"taskId": id}))
            .await
            .unwrap();
        assert_eq!(again.unwrap_err().code, -32602);
    }

    #[tokio::test]
    async fn an_error_fails_the_task_and_a_cancelled_one_has_no_result() {
        let r = Arc::new(Receiver::default());
        let failed = r.create(&json!({})).unwrap();
        let id = failed.answer["task"]["taskId"]
            .as_str()
            .unwrap()
            .to_string();
        assert_eq!(failed.answer["task"]["ttl"], MAX_TTL_MS);
        failed
            .result
            .send(Err(ErrorObject::invalid_params("no")))
            .unwrap();
        let result = r
            .answer("tasks/result", &json!({"taskId": id}))
            .await
            .unwrap();
        assert_eq!(result.unwrap_err().message, "no");
        let got = r
            .answer("tasks/get", &json!({"taskId": id}))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got["status"], "failed");

        let pending = r.create(&json!({"ttl": 5_000})).unwrap();
        let id = pending.answer["task"]["taskId"]
            .as_str()
            .unwrap()
            .to_string();
        let c = r
            .answer("tasks/cancel", &json!({"taskId": id}))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(c["status"], "cancelled");
        // A late answer changes nothing.
        let _ = pending.result.send(Ok(json!({"action": "accept"})));
        tokio::task::yield_now().await;
        let result = r
            .answer("tasks/result", &json!({"taskId": id}))
            .await
            .unwrap();
        assert!(result.unwrap_err().message.contains("cancelled"));
        assert_eq!(
            r.answer("tasks/get", &json!({"taskId": "nope"}))
                .await
                .unwrap()
                .unwrap_err()
                .code,
            -32602
        );
        assert!(r.answer("ping", &json!({})).await.is_none());
    }
}
