//! The hand-off of plain calls on 2025-11-25 (and the versions before tasks): a handed-off
//! call and the calls of the offered tools, whose requests follow their task like a
//! `tasks/result` (the task's progress and its requests to the client travel on the call's
//! stream). What the generations share is in `crate::handoff`.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value};
use taskmesh_mcp::jsonrpc::RequestId;
use taskmesh_task::{ClientCaps, TaskView};

use super::tasks::{follow, Follow};
use super::{err, ok, Cx, Reply};
use crate::handoff::{self as shared, Offered};
use crate::Gateway;

/// Whether the plain calls of this session are handed off (and it is offered the tools).
pub(super) fn applies(gw: &Gateway, cx: &Cx) -> bool {
    gw.cfg.tasks.handoff_after_ms > 0 && !cx.speaks_tasks()
}

/// A plain call of `name` run as a task: the task is created, and the request follows it until
/// it ends or, when `hand_off`, `tasks.handoff_after_ms` passes (a worker tool's plain call
/// from a client that speaks tasks waits for the end). A `notifications/cancelled` of the
/// request cancels the task; a client that goes away leaves it running.
#[allow(clippy::too_many_arguments)]
pub(super) async fn call(
    gw: &Arc<Gateway>,
    cx: &Cx,
    id: RequestId,
    tool: &Arc<dyn taskmesh_tools::Tool>,
    args: Map<String, Value>,
    progress_token: Option<Value>,
    client: ClientCaps,
    hand_off: bool,
) -> Reply {
    let name = tool.spec().name.as_str();
    let new = match super::tools::new_task(cx, tool.as_ref(), args, None, progress_token, client) {
        Ok(n) => n,
        Err(e) => return err(&id, &e),
    };
    let created = match gw.create_task(new).await {
        Ok(created) => created,
        Err(e) => return err(&id, &e),
    };
    crate::metrics::plain_call_as_task();
    let (gw2, tool) = (gw.clone(), name.to_string());
    let how = Follow {
        until: hand_off.then(|| {
            let at = Duration::from_millis(gw.cfg.tasks.handoff_after_ms);
            let still: super::tasks::Still =
                Box::new(move |task: &TaskView| shared::handed_off(&gw2, &tool, task));
            (at, still)
        }),
        cancels_task: true,
        is_result: false,
    };
    follow(gw, cx, id, created.task.task_id, how).await
}

/// A call of an offered tool.
pub(super) async fn offered(
    gw: &Arc<Gateway>,
    cx: &Cx,
    id: RequestId,
    which: Offered,
    args: &Map<String, Value>,
) -> Reply {
    let task_id = match shared::task_id_arg(args) {
        Ok(t) => t.to_string(),
        Err(e) => return err(&id, &e),
    };
    match which {
        Offered::Status => match gw.get_task(&cx.principal, &task_id).await {
            Ok(task) => ok(&id, &shared::status(gw, &task)),
            Err(e) => err(&id, &e),
        },
        Offered::Cancel => match gw.cancel_task(&task_id, &cx.principal).await {
            Ok(task) => ok(&id, &shared::cancelled(gw, &task)),
            Err(e) => err(&id, &gw.task_error(&cx.principal, &task_id, &e)),
        },
        Offered::Result => {
            let wait = match shared::wait_of(gw, args) {
                Ok(w) => w,
                Err(e) => return err(&id, &e),
            };
            let gw2 = gw.clone();
            let how = Follow {
                until: Some((
                    wait,
                    Box::new(move |task: &TaskView| shared::still_running(&gw2, task)),
                )),
                cancels_task: false,
                is_result: false,
            };
            follow(gw, cx, id, task_id, how).await
        }
    }
}
