//! Reading tasks: `get` and `list` answered from the in-memory state of a shard this node
//! leads, after the replica's leadership check (its read lease, or a shared confirmation).
//!
//! The router calls [`Host::get`] and [`Host::list`] (directly, or for reads forwarded by
//! another node through the task service); `cancel` and `attach` use the same owner-scoped
//! read first.

use taskmesh_task::{TaskRecord, TaskStatus, TaskView};

use crate::{now_ms, Host, HostError, TaskRead};

/// Reads of other principals' tasks audited per minute on a node; past it they are counted,
/// not logged (a scan cannot flood the log).
pub const FOREIGN_LOOKUP_AUDITS_PER_MINUTE: u64 = 60;

impl Host {
    /// A linearizable read of one of `owner`'s tasks. Another owner's task, an expired one and
    /// an unknown id all answer [`HostError::NotFound`].
    pub async fn get(
        &self,
        shard_id: u32,
        task_id: &str,
        owner: &str,
    ) -> Result<TaskView, HostError> {
        self.read_task(shard_id, task_id, owner, |r| TaskView::from(r))
            .await
    }

    /// A linearizable read of one of `owner`'s tasks with what a client that polls for
    /// everything needs (protocol 2026-07-28's `tasks/get`): a terminal task with its outcome,
    /// an `input_required` one with the requests it waits on, any other as its view. Without
    /// `detail`, just the view, as [`Host::get`].
    pub async fn read(
        &self,
        shard_id: u32,
        task_id: &str,
        owner: &str,
        detail: bool,
    ) -> Result<TaskRead, HostError> {
        if !detail {
            return self.get(shard_id, task_id, owner).await.map(TaskRead::Task);
        }
        Ok(match self.read_outcome(shard_id, task_id, owner).await? {
            TaskRead::Task(task) if task.status == TaskStatus::InputRequired => {
                let requests = self.waiting_on(task_id).await;
                TaskRead::Waiting { task, requests }
            }
            read => read,
        })
    }

    /// A linearizable read of one of `owner`'s tasks: a terminal one as its record (the only
    /// case the record is copied whole: its outcome is the answer), any other as its view.
    pub(crate) async fn read_outcome(
        &self,
        shard_id: u32,
        task_id: &str,
        owner: &str,
    ) -> Result<TaskRead, HostError> {
        self.read_task(shard_id, task_id, owner, |r| {
            if r.status.is_terminal() {
                TaskRead::Ended(Box::new(r.clone()))
            } else {
                TaskRead::Task(TaskView::from(r))
            }
        })
        .await
    }

    /// A linearizable read of one of `owner`'s tasks through `f` (which sees the whole record
    /// and keeps what it needs).
    pub(crate) async fn read_task<R>(
        &self,
        shard_id: u32,
        task_id: &str,
        owner: &str,
        f: impl FnOnce(&TaskRecord) -> R,
    ) -> Result<R, HostError> {
        let now = now_ms();
        let mut foreign = false;
        let read = |s: &taskmesh_task::ShardState| {
            let r = s.get(task_id);
            foreign = r.is_some_and(|r| r.owner != owner && !r.is_expired(now));
            visible(r, owner, now).map(f)
        };
        // Under a lease, at once and without a clone of the replica (a poll of a shard whose
        // replica is not in the cores' caches pays for every line it touches).
        let read = match self.with_replica(shard_id, |r| r.read_leased(read)) {
            None => return Err(crate::not_hosted(shard_id)),
            Some(Ok(read)) => read,
            Some(Err(read)) => {
                let shard = self.shard(shard_id)?;
                shard
                    .read(read)
                    .await
                    .map_err(|e| HostError::from_shard(shard_id, e))?
            }
        };
        if foreign {
            self.audit_foreign_lookup(task_id, owner);
        }
        read.ok_or(HostError::NotFound)
    }

    /// Audit a read of another principal's task (answered like an unknown id), at most
    /// [`FOREIGN_LOOKUP_AUDITS_PER_MINUTE`] times a minute on this node.
    fn audit_foreign_lookup(&self, task_id: &str, principal: &str) {
        let minute = now_ms() / 60_000;
        let mut seen = self.inner.foreign_lookups.lock();
        if seen.0 != minute {
            *seen = (minute, 0);
        }
        seen.1 += 1;
        if seen.1 <= FOREIGN_LOOKUP_AUDITS_PER_MINUTE {
            tracing::warn!(
                target: "audit",
                event = "foreign_task_lookup",
                principal = %principal,
                issuer = "",
                node = self.inner.cfg.node_id,
                method = "",
                request_id = "",
                task_id = %task_id,
                outcome = "refused as unknown",
                "a principal asked for another principal's task"
            );
        }
    }

    /// Up to `limit` of `owner`'s tasks on one shard with ids after `after`, in id order.
    pub async fn list(
        &self,
        shard_id: u32,
        owner: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<TaskView>, HostError> {
        let shard = self.shard(shard_id)?;
        let now = now_ms();
        shard
            .read(|s| {
                s.list(owner, after, limit, now)
                    .into_iter()
                    .map(TaskView::from)
                    .collect()
            })
            .await
            .map_err(|e| HostError::from_shard(shard_id, e))
    }
}

/// The record as `owner` may see it at `now`.
fn visible<'a>(r: Option<&'a TaskRecord>, owner: &str, now: u64) -> Option<&'a TaskRecord> {
    r.filter(|r| r.owner == owner && !r.is_expired(now))
}
