//! The hand-off of plain calls on 2026-07-28, for requests without the tasks extension: a
//! handed-off call waits for its task ([`wait`]) and the offered tools answer from it. What
//! the generations share is in `crate::handoff`.
//!
//! Nothing is asked mid-call on this generation: a task that asks its client something
//! (`input_required`) ends the wait of a handed-off call at once (the answer says the task
//! waits for input), and the result tool answers with the task's requests as an
//! `InputRequiredResult`; the client calls the result tool again with `inputResponses` under
//! the same keys (and the `requestState` echoed), which go to the task, as `tasks/update`
//! would send them.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value};
use taskmesh_host::{Attachment, TaskRead};
use taskmesh_mcp::jsonrpc::ErrorObject;
use taskmesh_task::{TaskRecord, TaskView};
use tokio::time::Instant;

use super::{complete, rounds, tasks, Answer};
use crate::handoff::{self as shared, Offered};
use crate::{wire, Gateway};

/// How a wait for a task ended.
enum Waited {
    /// The task ended.
    Ended(Box<TaskRecord>),
    /// The task asks its client something.
    Asks,
    /// The time was up with the task running, as it stood then.
    Running(TaskView),
}

/// The most times a wait attaches to its task again after its shard moved.
const MAX_REATTACH: usize = 64;

/// Wait up to `within` for `principal`'s task `task_id` to end, or to ask its client something.
async fn wait(
    gw: &Gateway,
    principal: &str,
    task_id: &str,
    within: Duration,
) -> Result<Waited, ErrorObject> {
    let deadline = Instant::now() + within;
    for _ in 0..MAX_REATTACH {
        let attached = gw
            .router
            .attach(task_id, principal)
            .await
            .map_err(|e| gw.task_error(principal, task_id, &e))?;
        let (task, mut messages, mut done) = match attached {
            Attachment::Terminal(r) => return Ok(Waited::Ended(r)),
            Attachment::Live {
                task,
                messages,
                done,
            } => (task, messages, done),
        };
        let mut messages_open = true;
        loop {
            tokio::select! {
                m = messages.recv(), if messages_open => match m {
                    // A message with an id is a request to the client (the others are
                    // notifications: progress, log messages).
                    Some(m) if is_request(&m.json) => return Ok(Waited::Asks),
                    Some(_) => {}
                    None => messages_open = false,
                },
                r = &mut done => match r {
                    Ok(ended) => return Ok(Waited::Ended(Box::new(ended.record))),
                    // Expired, or the shard moved: attach again.
                    Err(_) => break,
                },
                () = tokio::time::sleep_until(deadline) => return Ok(Waited::Running(task)),
            }
        }
        if Instant::now() >= deadline {
            break;
        }
    }
    // Out of time or of attempts: the task as it stands.
    match gw.read_task(principal, task_id, false).await? {
        TaskRead::Ended(r) => Ok(Waited::Ended(r)),
        read => Ok(Waited::Running(read.into_view())),
    }
}

fn is_request(json: &[u8]) -> bool {
    serde_json::from_slice::<Value>(json)
        .is_ok_and(|m| m.get("id").is_some() && m.get("method").is_some())
}

/// A terminal task's outcome as the answer of a plain call: its result, or its error.
fn outcome(r: &TaskRecord) -> Result<Answer, ErrorObject> {
    match wire::terminal_answer(r)? {
        Value::Object(mut m) => {
            if let Some(Value::Object(meta)) = m.get_mut("_meta") {
                meta.remove(taskmesh_mcp::META_RELATED_TASK);
                if meta.is_empty() {
                    m.remove("_meta");
                }
            }
            Ok(Answer::Value(complete(m)))
        }
        other => Err(ErrorObject::internal(format!(
            "the task's result is not an object: {other}"
        ))),
    }
}

/// A value answer of an offered tool, or of a call handed off.
fn value(v: Value) -> Answer {
    match v {
        Value::Object(m) => Answer::Value(complete(m)),
        other => Answer::Value(other),
    }
}

/// The answer of a plain call of `tool` that became task `task_id`: its outcome when the task
/// ends within `tasks.handoff_after_ms`, else the hand-off.
pub(super) async fn call(
    gw: &Arc<Gateway>,
    principal: &str,
    tool: &str,
    task_id: &str,
) -> Result<Answer, ErrorObject> {
    // With hand-off turned off, a worker tool's plain call still runs as a task: it waits as
    // long as a call of the result tool may.
    let within = match gw.cfg.tasks.handoff_after_ms {
        0 => gw.cfg.tasks.handoff_wait_max_ms,
        ms => ms,
    };
    match wait(gw, principal, task_id, Duration::from_millis(within)).await? {
        Waited::Ended(r) => outcome(&r),
        Waited::Running(task) => Ok(value(shared::handed_off(gw, tool, &task))),
        Waited::Asks => {
            let task = gw.get_task(principal, task_id).await?;
            Ok(value(shared::handed_off(gw, tool, &task)))
        }
    }
}

/// A call of an offered tool, `p` its params (the result tool's rounds read `inputResponses`
/// and `requestState` from them).
pub(super) async fn offered(
    gw: &Arc<Gateway>,
    principal: &str,
    which: Offered,
    p: &Map<String, Value>,
) -> Result<Answer, ErrorObject> {
    let args = taskmesh_mcp::params::opt_obj(p, "arguments")?
        .cloned()
        .unwrap_or_default();
    let task_id = shared::task_id_arg(&args)?;
    match which {
        Offered::Status => {
            let task = gw.get_task(principal, task_id).await?;
            Ok(value(shared::status(gw, &task)))
        }
        Offered::Cancel => match gw.cancel_task(task_id, principal).await {
            Ok(task) => Ok(value(shared::cancelled(gw, &task))),
            Err(e) => Err(gw.task_error(principal, task_id, &e)),
        },
        Offered::Result => {
            let within = shared::wait_of(gw, &args)?;
            let round = rounds::Round::of(gw, principal, which.name(gw), &args, p)?;
            // The answers of this round go to the task's requests they are keyed by.
            for (key, answer) in &round.answers {
                if !gw
                    .deliver(principal, task_id, key.clone(), Ok(answer.clone()))
                    .await
                {
                    tracing::debug!(task_id, key = %key, "answer for no pending request; ignored");
                }
            }
            match wait(gw, principal, task_id, within).await? {
                Waited::Ended(r) => outcome(&r),
                Waited::Running(task) => Ok(value(shared::still_running(gw, &task))),
                Waited::Asks => match gw.read_task(principal, task_id, true).await? {
                    TaskRead::Waiting { requests, .. } => Ok(Answer::Value(
                        round.input_required_of(gw, tasks::input_requests(&requests)),
                    )),
                    TaskRead::Ended(r) => outcome(&r),
                    TaskRead::Task(task) => Ok(value(shared::still_running(gw, &task))),
                },
            }
        }
    }
}
