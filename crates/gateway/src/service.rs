//! The task service under both protocol generations: each task operation a client asks for,
//! with what goes with it wherever it comes from (the creation rate, audit events, metrics,
//! the owner's scope, the count of unknown ids for the enumeration watch, the error a client
//! sees), written once. `dispatch/` (2025-11-25) and `modern/` (2026-07-28) read a request's
//! parameters, call these, and render the answer on their own wire.

use serde_json::{Map, Value};
use taskmesh_host::ops::{Cancel, Claim, Deliver};
use taskmesh_host::{Created, HostError, NewTask, TaskRead};
use taskmesh_mcp::jsonrpc::{ErrorObject, CAPACITY_EXCEEDED};
use taskmesh_mcp::params;
use taskmesh_task::TaskView;

use crate::{audit, metrics, wire, Gateway};

/// The `taskId` parameter of a task method.
pub(crate) fn task_id_param(p: &Map<String, Value>) -> Result<&str, ErrorObject> {
    params::req_str(p, "taskId")
}

impl Gateway {
    /// Create a task on its shard's leader, within its owner's creation rate
    /// (`limits.tasks_per_minute`: past it `-32001`, nothing created).
    pub(crate) async fn create_task(&self, new: NewTask) -> Result<Created, ErrorObject> {
        if !self.limits.allow_task(&new.owner) {
            let e = ErrorObject::new(
                CAPACITY_EXCEEDED,
                "too many tasks created: this principal reached limits.tasks_per_minute; retry later",
            );
            audit::record("task_created", &new.task_id, &audit::refused(e.code));
            return Err(e);
        }
        let task_id = new.task_id.clone();
        match self.router.run(new).await {
            Ok(created) => {
                if created.fresh {
                    metrics::tasks_created();
                    audit::record("task_created", &task_id, "ok");
                }
                Ok(created)
            }
            Err(e) => {
                let e = wire::host_error(&e);
                audit::record("task_created", &task_id, &audit::refused(e.code));
                Err(e)
            }
        }
    }

    /// Whether this node's GET stream of the task's session is the one to send the task's
    /// request `request_id` (asked of the shard's leader; false when it cannot be reached).
    /// With `release`, a granted claim is given back.
    pub(crate) async fn claim(&self, task_id: &str, request_id: &str, release: bool) -> bool {
        self.router
            .run(Claim {
                task_id: task_id.to_string(),
                request_id: request_id.to_string(),
                release,
            })
            .await
            .unwrap_or(false)
    }

    /// Cancel one of `principal`'s tasks (audited).
    pub(crate) async fn cancel_task(
        &self,
        task_id: &str,
        principal: &str,
    ) -> Result<TaskView, HostError> {
        let r = self
            .router
            .run(Cancel {
                task_id: task_id.to_string(),
                owner: principal.to_string(),
            })
            .await;
        let outcome = match &r {
            Ok(_) => "ok".to_string(),
            Err(e) => audit::refused(wire::host_error(e).code),
        };
        metrics::cancel(&r);
        audit::record("task_cancelled", task_id, &outcome);
        r
    }

    /// The client-facing error of `principal`'s failed operation on `task_id`; an unknown id
    /// counts for the enumeration watch (`limits.failed_lookups_per_minute`).
    pub(crate) fn task_error(&self, principal: &str, task_id: &str, e: &HostError) -> ErrorObject {
        if matches!(e, HostError::NotFound) {
            self.limits.failed_lookup(principal, task_id);
        }
        wire::host_error(e)
    }

    /// One of `principal`'s tasks as it stands (a poll).
    pub(crate) async fn get_task(
        &self,
        principal: &str,
        task_id: &str,
    ) -> Result<TaskView, ErrorObject> {
        self.read_task(principal, task_id, false)
            .await
            .map(TaskRead::into_view)
    }

    /// One of `principal`'s tasks; with `detail`, with its outcome once terminal and the
    /// requests it waits on while `input_required`, in one round trip to its leader.
    pub(crate) async fn read_task(
        &self,
        principal: &str,
        task_id: &str,
        detail: bool,
    ) -> Result<TaskRead, ErrorObject> {
        self.router
            .read(task_id, principal, detail)
            .await
            .map_err(|e| self.task_error(principal, task_id, &e))
    }

    /// Hand `principal`'s answer to request `request_id` to the task that asked; whether a
    /// live task took it (false also when its leader cannot be reached).
    pub(crate) async fn deliver(
        &self,
        principal: &str,
        task_id: &str,
        request_id: String,
        outcome: Result<Value, ErrorObject>,
    ) -> bool {
        let answer = Deliver {
            task_id: task_id.to_string(),
            owner: principal.to_string(),
            request_id,
            outcome,
        };
        self.router.run(answer).await.unwrap_or(false)
    }
}
