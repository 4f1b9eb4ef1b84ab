//! Creating a task: admission (leadership, the tool, a live-task slot), the `Create`
//! proposal through the shard's Raft log, and the actor spawned once it commits.
//!
//! The router calls [`Host::create`] for a shard this node leads (directly, or for a create
//! forwarded by another node through the task service).

use taskmesh_task::{Applied, Command, TaskRecord, TaskStatus, TaskView};

use crate::{actor, now_ms, Created, Host, HostError, NewTask};

impl Host {
    /// Create a task: durable (committed and flushed) before this returns, then its actor
    /// runs. A repeated create with the same id returns the existing record.
    pub async fn create(&self, shard_id: u32, new: NewTask) -> Result<Created, HostError> {
        let shard = self.shard(shard_id)?;
        if !shard.is_leader() {
            return Err(HostError::NotLeader {
                shard: shard_id,
                leader_hint: shard.leadership().borrow().leader,
            });
        }
        let tool = match (self.inner.tools.get(&new.request.tool), new.worker_rerun) {
            (Some(t), _) => t,
            // Served by workers registered elsewhere, not yet told of here.
            (None, Some(rerun)) => crate::workers::placeholder(&new.request.tool, rerun),
            (None, None) => {
                let name = &new.request.tool;
                return Err(HostError::Misconfigured(format!(
                    "tool '{name}' is not served by this node"
                )));
            }
        };
        let worker = match new.worker_rerun {
            Some(rerun) => Some(rerun),
            None if tool.runs_on_workers() => {
                Some(tool.spec().resume == taskmesh_tools::ResumePolicy::Rerun)
            }
            None => None,
        }
        .map(|rerun| taskmesh_task::WorkerJob {
            rerun,
            attempts: 0,
            lease: None,
        });
        if worker.is_some() {
            let limit = self.inner.workers.settings.max_queued_per_tool;
            if self.inner.workers.queued(&new.request.tool) >= limit {
                return Err(HostError::QueueFull(format!(
                    "{limit} tasks of tool '{}' wait for a worker (workers.max_queued_per_tool); retry later",
                    new.request.tool
                )));
            }
        }
        // Reserve a live-task slot before anything is written.
        self.take_slot(&new.owner, true)?;
        // From here until its actor runs the task is this create's: the reconciler leaves it
        // alone. Whatever ends this future (an error, or the caller dropping it), the guard
        // gives the slot back unless an actor took it, and a committed task without an actor
        // is then the reconciler's to run.
        let starting = Starting::new(self, shard_id, &new.task_id, &new.owner);
        let now = now_ms();
        let term = shard.current_term();
        // The operator's webhooks that cover the owner watch the task from its start.
        let outbox = self.inner.delivery.as_ref().and_then(|d| {
            let watchers = d.watchers_for(&new.owner);
            (!watchers.is_empty()).then(|| {
                Box::new(taskmesh_task::Outbox {
                    watchers,
                    events: Vec::new(),
                })
            })
        });
        let record = TaskRecord {
            task_id: new.task_id.clone(),
            owner: new.owner,
            session: new.session,
            status: TaskStatus::Working,
            status_message: Some("The task is in progress.".into()),
            created_at_ms: now,
            last_updated_at_ms: now,
            ttl_ms: self.inner.cfg.grant_ttl(new.ttl_ms),
            poll_interval_ms: self.inner.cfg.tasks.poll_interval_ms,
            request: new.request,
            outcome: None,
            exec_term: term,
            updated_index: 0,
            upstream_task: None,
            client_task: None,
            worker,
            outbox,
        };
        let applied = shard.propose(Command::Create { record }).await;
        match applied {
            Ok(Applied::Created {
                record,
                fresh: true,
            }) => {
                tracing::debug!(task_id = %record.task_id, shard = shard_id, tool = %record.request.tool, "task created");
                let task = TaskView::from(&record);
                // Boxed: spawning an actor is a future of a few KiB, which every future that
                // awaits a create would otherwise hold.
                Box::pin(actor::spawn(
                    self.clone(),
                    shard_id,
                    record,
                    term,
                    tool,
                    true,
                ))
                .await;
                starting.slot_taken();
                Ok(Created { task, fresh: true })
            }
            Ok(Applied::Created {
                record,
                fresh: false,
            }) => Ok(Created {
                task: TaskView::from(&record),
                fresh: false,
            }),
            Ok(other) => Err(HostError::Internal(format!(
                "unexpected create result {other:?}"
            ))),
            Err(e) => Err(HostError::from_shard(shard_id, e)),
        }
    }
}

/// A task being created on this node, from its proposal until its actor runs (see
/// [`Inner::starting`](crate::Inner::starting)); holds the live-task slot reserved for it
/// until an actor takes it.
struct Starting<'a> {
    host: &'a Host,
    shard: u32,
    task_id: String,
    owner: String,
    holds_slot: bool,
}

impl<'a> Starting<'a> {
    fn new(host: &'a Host, shard: u32, task_id: &str, owner: &str) -> Self {
        host.inner.starting.lock().insert(task_id.to_string());
        Self {
            host,
            shard,
            task_id: task_id.to_string(),
            owner: owner.to_string(),
            holds_slot: true,
        }
    }

    /// The task's actor was spawned with the slot (or gave it back when it could not start).
    fn slot_taken(mut self) {
        self.holds_slot = false;
    }
}

impl Drop for Starting<'_> {
    fn drop(&mut self) {
        self.host.inner.starting.lock().remove(&self.task_id);
        // Committed or not, running or not: the reconciler looks.
        self.host.suspect(self.shard, &self.task_id);
        if self.holds_slot {
            self.host.give_slot(&self.owner);
        }
    }
}
