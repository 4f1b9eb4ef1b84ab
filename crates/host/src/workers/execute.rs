//! The execution of a task that a worker runs, on the leader of its shard: it queues the task
//! until a poll leases it, watches the lease's deadline, and when the lease runs out takes it
//! back and decides by the tool's resume policy (`rerun`: queued again, up to
//! `workers.max_attempts` leases; `fail`: failed). Its result, like a tool's, ends the task;
//! a worker's completion ends it instead, through the log, and stops the execution.
//!
//! Everything it decides from is in the record (the lease, its deadline, the attempts), so a
//! new leader's execution after a failover carries on where the old one was: a held lease
//! stays held until its deadline, a queued task is queued again here.

use std::time::Duration;

use taskmesh_mcp::ErrorObject;
use taskmesh_task::{Applied, Command, Rejection};
use taskmesh_tools::ToolResult;
use tokio_util::sync::CancellationToken;

use super::Waiting;
use crate::{now_ms, Host};

/// The pause before a task whose grant failed is queued again.
const REQUEUE_PAUSE: Duration = Duration::from_millis(20);
/// The pause before a lease that could not be released is looked at again.
const RELEASE_RETRY_PAUSE: Duration = Duration::from_millis(500);

/// Run the worker task `task_id` of `owner`, calling `tool`, on `shard` under `term`, until a
/// worker completes it (the execution is then stopped through `cancel`) or it fails here: no
/// worker served its tool for `workers.queue_timeout_ms`, or its last lease ran out.
pub(crate) async fn execute(
    host: Host,
    shard: u32,
    term: u64,
    task_id: String,
    tool: String,
    owner: String,
    cancel: CancellationToken,
) -> ToolResult {
    let settings = host.inner.workers.settings.clone();
    loop {
        if cancel.is_cancelled() {
            return stopped();
        }
        let Ok(replica) = host.shard(shard) else {
            return stopped();
        };
        let Some(record) = replica.read_local(|s| s.get(&task_id).cloned()) else {
            return stopped();
        };
        if record.status.is_terminal() {
            return stopped();
        }
        let Some(job) = record.worker else {
            return Err(ErrorObject::internal("the task is not run by a worker"));
        };
        match job.lease {
            Some(lease) => {
                let now = now_ms();
                if now <= lease.deadline_ms {
                    let wait = Duration::from_millis(lease.deadline_ms - now + 1);
                    tokio::select! {
                        () = cancel.cancelled() => return stopped(),
                        () = tokio::time::sleep(wait) => continue,
                    }
                }
                let last = !job.rerun || job.attempts >= settings.max_attempts;
                let why = lost_message(&tool, &lease.worker_id, job.attempts, job.rerun, last);
                let cmd = Command::Release {
                    task_id: task_id.clone(),
                    term,
                    token: lease.token.clone(),
                    message: Some(why.clone()),
                    at_ms: now,
                };
                match replica.propose(cmd).await {
                    Ok(Applied::Updated { .. }) => {
                        tracing::info!(task_id = %task_id, worker_id = %lease.worker_id, attempt = lease.attempt, "worker lease ran out");
                        super::metrics::lease(&tool, "expired");
                        if last {
                            return Err(ErrorObject::internal(why));
                        }
                    }
                    // Renewed meanwhile: look again.
                    Ok(Applied::Rejected(Rejection::StaleLease)) => {}
                    Ok(_) => return stopped(),
                    Err(_) => {
                        tokio::select! {
                            () = cancel.cancelled() => return stopped(),
                            () = tokio::time::sleep(RELEASE_RETRY_PAUSE) => {}
                        }
                    }
                }
            }
            None if job.attempts >= settings.max_attempts || (!job.rerun && job.attempts > 0) => {
                // Released by an earlier execution that did not live to fail it.
                return Err(ErrorObject::internal(lost_message(
                    &tool,
                    "",
                    job.attempts,
                    job.rerun,
                    true,
                )));
            }
            None => {
                if let Some(failed) =
                    wait_for_lease(&host, shard, term, &task_id, &tool, &owner, &cancel).await
                {
                    return failed;
                }
            }
        }
    }
}

/// Queue the task and wait until a poll leases it (`None`: look at the record again) or the
/// execution ends (`Some`: its result).
async fn wait_for_lease(
    host: &Host,
    shard: u32,
    term: u64,
    task_id: &str,
    tool: &str,
    owner: &str,
    cancel: &CancellationToken,
) -> Option<ToolResult> {
    let w = &host.inner.workers;
    let (granted, answer) = tokio::sync::oneshot::channel();
    let first = {
        let mut queues = w.queues.lock();
        let first = queues.len(tool) == 0;
        queues.push(
            tool,
            owner,
            task_id,
            Waiting {
                shard,
                term,
                tool: tool.to_string(),
                queued_at: std::time::Instant::now(),
                granted,
            },
        );
        super::metrics::queued(tool, queues.len(tool));
        first
    };
    w.queued.notify_waiters();
    if first {
        w.changed();
    }
    let queue_timeout = Duration::from_millis(w.settings.queue_timeout_ms);
    // Whether a live worker serves the tool is looked at this often; the task fails once none
    // has for the whole queue timeout.
    let look = (queue_timeout / 4).clamp(Duration::from_millis(10), Duration::from_secs(1));
    let mut unserved_since: Option<std::time::Instant> = None;
    tokio::pin!(answer);
    loop {
        tokio::select! {
            granted = &mut answer => {
                if granted != Ok(true) {
                    tokio::select! {
                        () = cancel.cancelled() => {}
                        () = tokio::time::sleep(REQUEUE_PAUSE) => {}
                    }
                }
                return None;
            }
            () = cancel.cancelled() => {
                w.queues.lock().remove(tool, owner, task_id);
                super::metrics::queued(tool, w.queued(tool));
                return Some(stopped());
            }
            () = tokio::time::sleep(look) => {
                let served = host.inner.tools.get(tool).is_some_and(|t| t.runs_on_workers());
                if served {
                    unserved_since = None;
                    continue;
                }
                let since = *unserved_since.get_or_insert_with(std::time::Instant::now);
                if since.elapsed() < queue_timeout {
                    continue;
                }
                if w.queues.lock().remove(tool, owner, task_id).is_none() {
                    // Taken at this very moment: the grant decides.
                    continue;
                }
                super::metrics::queued(tool, w.queued(tool));
                return Some(Err(ErrorObject::internal(format!(
                    "No worker served tool '{tool}' for {} ms (workers.queue_timeout_ms); the task was not run.",
                    w.settings.queue_timeout_ms
                ))));
            }
        }
    }
}

/// Why a task's lease was taken back: what the status message says.
fn lost_message(tool: &str, worker_id: &str, attempts: u32, rerun: bool, last: bool) -> String {
    let who = if worker_id.is_empty() {
        "The worker running the task".to_string()
    } else {
        format!("Worker {worker_id}")
    };
    match (rerun, last) {
        (false, _) => format!(
            "{who} was lost (its lease ran out); tool '{tool}' has resume policy 'fail', so the task was not run again."
        ),
        (true, true) => format!(
            "{who} was lost (its lease ran out) on attempt {attempts}, the last one allowed (workers.max_attempts); the task failed."
        ),
        (true, false) => format!(
            "{who} was lost (its lease ran out) on attempt {attempts}; the task waits for a worker again."
        ),
    }
}

/// What the execution ends with when it was stopped (the task ended, or another execution
/// took over): nothing is written of it.
fn stopped() -> ToolResult {
    Err(ErrorObject::internal("the task's execution stopped"))
}
