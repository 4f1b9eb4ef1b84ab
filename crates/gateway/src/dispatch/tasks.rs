//! `tasks/get`, `tasks/cancel`, `tasks/list` and `tasks/result` (2025-11-25 only).
//!
//! [`super::request`] hands these methods here when the session's version has tasks
//! (`tasks/list` only with authentication). Each one goes to the router, which finds the
//! shard's leader; a `tasks/result` of a running task is held open as an SSE stream that
//! carries the task's messages until its terminal answer.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use taskmesh_host::Attachment;
use taskmesh_mcp::jsonrpc::{ErrorObject, RequestId};
use taskmesh_mcp::time::now_ms;
use taskmesh_mcp::{params, ListTasksResult};
use taskmesh_task::TaskView;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{answer, begin_cancellable, err, Cx, Reply};
use crate::delivery::{JsonMessage, Kind};
use crate::resume::ResultOrigin;
use crate::service::task_id_param;
use crate::{wire, Gateway};

/// The longest a new `tasks/result` waits for the streams it takes over to let go of their
/// task (their producers end at once; this only bounds a stuck one).
const TAKE_OVER_BOUND: std::time::Duration = std::time::Duration::from_secs(2);

/// `tasks/cancel`: the task after the cancellation.
pub(super) async fn tasks_cancel(
    gw: &Arc<Gateway>,
    cx: &Cx,
    p: &Map<String, Value>,
) -> Result<TaskView, ErrorObject> {
    let task_id = task_id_param(p)?;
    gw.cancel_task(task_id, &cx.principal)
        .await
        .map_err(|e| gw.task_error(&cx.principal, task_id, &e))
}

/// A signed `tasks/list` cursor (one-letter JSON keys: it travels in every next-page request).
#[derive(Serialize, Deserialize)]
struct ListCursor {
    /// Principal the cursor was issued to.
    #[serde(rename = "o")]
    owner: String,
    /// Last task id of the previous page.
    #[serde(rename = "a")]
    after: String,
    /// Issued at (ms).
    #[serde(rename = "t")]
    issued_at_ms: u64,
}

pub(super) async fn tasks_list(
    gw: &Arc<Gateway>,
    cx: &Cx,
    p: &Map<String, Value>,
) -> Result<Value, ErrorObject> {
    let after = match params::opt_str(p, "cursor")? {
        None => None,
        Some(c) => {
            let now = now_ms();
            let cur = gw
                .signer
                .verify::<ListCursor>("tasks-cursor", c)
                .filter(|c| {
                    c.owner == cx.principal
                        && now <= c.issued_at_ms.saturating_add(gw.cfg.tasks.cursor_ttl_ms)
                })
                .ok_or_else(|| {
                    ErrorObject::invalid_params("Invalid params: invalid or expired cursor")
                })?;
            Some(cur.after)
        }
    };
    let (records, more) = gw
        .router
        .list(&cx.principal, after.as_deref(), gw.cfg.tasks.list_page_size)
        .await
        .map_err(|e| wire::host_error(&e))?;
    let next_cursor = match (more, records.last()) {
        (true, Some(last)) => Some(gw.signer.sign(
            "tasks-cursor",
            &ListCursor {
                owner: cx.principal.clone(),
                after: last.task_id.clone(),
                issued_at_ms: now_ms(),
            },
        )),
        _ => None,
    };
    let out = ListTasksResult {
        tasks: records.iter().map(wire::TaskObject::classic).collect(),
        next_cursor,
    };
    serde_json::to_value(out).map_err(|e| ErrorObject::internal(e.to_string()))
}

fn audit_result(task_id: &str) {
    crate::audit::record("task_result_retrieved", task_id, "ok");
}

/// `tasks/result` of `task_id`: the outcome at once when the task is terminal, else an SSE
/// stream of its messages until the outcome (also the answer to a reconnection of such a
/// stream that cannot be continued).
pub(crate) async fn tasks_result(
    gw: &Arc<Gateway>,
    cx: &Cx,
    id: RequestId,
    task_id: String,
) -> Reply {
    if let Some((session, _)) = &cx.session {
        // A client that asks again for the result has given up the streams of this task it
        // left unread: what they carried goes to this one.
        gw.hub.take_over(session, &task_id, TAKE_OVER_BOUND).await;
    }
    follow(gw, cx, id, task_id, Follow::result()).await
}

/// What a stream that follows a task answers with besides the task's outcome.
pub(super) struct Follow {
    /// After this long, answer with `still` of the task as it stands then, when it runs on.
    pub(super) until: Option<(std::time::Duration, Still)>,
    /// A `notifications/cancelled` of the request cancels the task too (a plain call that
    /// became a task); else it only ends the stream.
    pub(super) cancels_task: bool,
    /// The stream answers a `tasks/result` (its event ids name the request, so that a
    /// reconnection can answer it again, and a later `tasks/result` takes it over).
    pub(super) is_result: bool,
}

/// The answer of a followed task that is still running when its stream's time is up.
pub(super) type Still = Box<dyn FnOnce(&TaskView) -> Value + Send>;

impl Follow {
    fn result() -> Follow {
        Follow {
            until: None,
            cancels_task: false,
            is_result: true,
        }
    }
}

/// Answer request `id` with `task_id`'s outcome: at once when the task is terminal, else as an
/// SSE stream of its messages (its requests to the client, its progress) until the outcome,
/// or until `how.until`.
pub(super) async fn follow(
    gw: &Arc<Gateway>,
    cx: &Cx,
    id: RequestId,
    task_id: String,
    how: Follow,
) -> Reply {
    let attachment = match gw.router.attach(&task_id, &cx.principal).await {
        Ok(a) => a,
        Err(e) => return err(&id, &gw.task_error(&cx.principal, &task_id, &e)),
    };
    let (mut messages, mut done) = match attachment {
        Attachment::Terminal(r) => {
            if how.is_result {
                audit_result(&task_id);
            }
            return Reply::Json(answer(&id, wire::terminal_answer(&r)));
        }
        Attachment::Live { messages, done, .. } => (messages, done),
    };
    // Running: hold the request open as an SSE stream that carries the task's messages.
    let (tx, rx) = mpsc::channel(gw.cfg.http.sse_buffer_events.max(2));
    let cancel = match begin_cancellable(gw, cx, &id) {
        Ok(cancel) => cancel,
        Err(refused) => return refused,
    };
    let nonce = cx.nonce().to_string();
    let gw = gw.clone();
    let principal = cx.principal.clone();
    let (origin_task, origin_request) = (task_id.clone(), id.clone());
    let released = CancellationToken::new();
    let releasing = released.clone();
    let mut logs = crate::logging::LogFilter::new(cx);
    let facts = crate::audit::current();
    let (limit, mut still) = match how.until {
        Some((after, still)) => (Some(after), Some(still)),
        None => (None, None),
    };
    tokio::spawn(async move {
        let time_up = async {
            match limit {
                Some(after) => tokio::time::sleep(after).await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(time_up);
        let mut messages_open = true;
        let final_answer = loop {
            tokio::select! {
                m = messages.recv(), if messages_open => match m {
                    Some(m) => {
                        if !logs.allows(&gw, &m.json).await {
                            continue;
                        }
                        let m = JsonMessage::stamped(m.json, Kind::Message, m.at_us);
                        if tx.send(m).await.is_err() {
                            break None;
                        }
                    }
                    None => messages_open = false,
                },
                r = &mut done => match r {
                    Ok(ended) => break Some((wire::terminal_answer(&ended.record), ended.at_us)),
                    Err(_) => {
                        // The waiter was dropped: expired, or the shard moved. Look again.
                        match gw.router.attach(&task_id, &principal).await {
                            Ok(Attachment::Terminal(record)) => break Some((wire::terminal_answer(&record), 0)),
                            Ok(Attachment::Live { messages: m, done: d, .. }) => {
                                messages = m;
                                messages_open = true;
                                done = d;
                            }
                            Err(e) => break Some((Err(wire::host_error(&e)), 0)),
                        }
                    }
                },
                () = &mut time_up => {
                    // Time is up: the task as it stands, unless it ended just now.
                    let Some(still) = still.take() else { continue };
                    break Some(match gw.router.attach(&task_id, &principal).await {
                        Ok(Attachment::Terminal(record)) => (wire::terminal_answer(&record), 0),
                        Ok(Attachment::Live { task, .. }) => (Ok(still(&task)), 0),
                        Err(e) => (Err(wire::host_error(&e)), 0),
                    });
                }
                _ = cancel.cancelled() => {
                    if how.cancels_task {
                        let _ = gw.cancel_task(&task_id, &principal).await;
                    }
                    break None;
                }
                _ = tx.closed() => break None,
            }
        };
        gw.inflight.end(&nonce, &id);
        drop(messages);
        drop(done);
        releasing.cancel();
        if let Some((a, at_us)) = final_answer {
            if how.is_result {
                crate::audit::record_for(&facts, "task_result_retrieved", &task_id, "ok");
            }
            let m = JsonMessage::stamped(Arc::new(answer(&id, a)), Kind::Result, at_us);
            let _ = tx.send(m).await;
        }
    });
    Reply::Stream {
        rx,
        json_if_alone: false,
        origin: how.is_result.then_some(ResultOrigin {
            task_id: origin_task,
            request_id: origin_request,
        }),
        released: how.is_result.then_some(released),
    }
}
