//! The per-shard loops of a host:
//!
//! - leadership: when this node becomes the shard's leader it takes over the shard's live tasks
//!   (each by its tool's resume policy); when it stops being leader it stops their actors;
//! - events: every applied change is announced by the leader ([`HostEvent::Status`]), wakes `tasks/result`
//!   waiters of terminal tasks, and stops the actors of terminal and expired tasks;
//! - expiry: the leader deletes tasks whose TTL ran out, through the log.

use std::time::Duration;

use taskmesh_shard::{ShardEvent, ShardReplica};
use taskmesh_task::{Applied, Command, Outcome, TaskStatus};
use taskmesh_tools::ResumePolicy;
use tokio::sync::broadcast::error::RecvError;

use crate::{actor, now_ms, Host, HostEvent};

pub(crate) fn spawn_shard_loops(
    host: Host,
    shard: ShardReplica,
) -> Vec<tokio::task::JoinHandle<()>> {
    let mut handles = Vec::with_capacity(3);
    let mut events = shard.subscribe();
    {
        let host = host.clone();
        let shard = shard.clone();
        handles.push(tokio::spawn(async move {
            loop {
                match events.recv().await {
                    Ok(ShardEvent::Changed { record, .. }) => {
                        if record.status.is_terminal() {
                            let waiters = host.inner.waiters.lock().remove(&record.task_id);
                            for w in waiters.into_iter().flatten() {
                                let _ = w.send(record.clone());
                            }
                            host.stop_actor(&record.task_id);
                        }
                        // Every replica applies the change; only the leader announces it, so a
                        // cluster that merges all nodes' announcements sends each one once.
                        if shard.is_leader() {
                            let _ = host.inner.events.send(HostEvent::Status {
                                record: Box::new(record),
                            });
                        }
                    }
                    Ok(ShardEvent::Expired { task_ids, .. }) => {
                        for id in &task_ids {
                            // Dropping the senders tells waiters the task is gone.
                            host.inner.waiters.lock().remove(id);
                            host.stop_actor(id);
                        }
                    }
                    Err(RecvError::Lagged(n)) => {
                        tracing::warn!(
                            shard = shard.shard_id(),
                            missed = n,
                            "event fan-out lagged; rechecking waiters"
                        );
                        recheck_waiters(&host, &shard);
                    }
                    Err(RecvError::Closed) => break,
                }
            }
        }));
    }
    {
        let host = host.clone();
        let shard = shard.clone();
        handles.push(tokio::spawn(async move {
            let mut leadership = shard.leadership();
            let mut led_term: Option<u64> = None;
            loop {
                let now = leadership.borrow_and_update().clone();
                if now.is_leader && led_term != Some(now.term) {
                    led_term = Some(now.term);
                    take_over(&host, &shard, now.term, false).await;
                } else if !now.is_leader && led_term.is_some() {
                    led_term = None;
                    stop_shard_actors(&host, shard.shard_id());
                }
                if leadership.changed().await.is_err() {
                    break;
                }
            }
        }));
    }
    handles.push(tokio::spawn(async move {
        let period = Duration::from_millis(host.inner.cfg.expiry_sweep_interval_ms.max(10));
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if !shard.is_leader() {
                continue;
            }
            // Safety net: a live task of an earlier term with no actor here is taken over.
            take_over(&host, &shard, shard.current_term(), true).await;
            let now = now_ms();
            let ids = shard.read_local(|s| s.expired(now, host.inner.cfg.expiry_batch));
            if ids.is_empty() {
                continue;
            }
            match shard
                .propose(Command::Expire {
                    task_ids: ids,
                    now_ms: now,
                })
                .await
            {
                Ok(Applied::Expired { task_ids }) => {
                    tracing::info!(
                        shard = shard.shard_id(),
                        count = task_ids.len(),
                        "expired tasks deleted"
                    );
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::debug!(shard = shard.shard_id(), error = %e, "expiry sweep skipped")
                }
            }
        }
    }));
    handles
}

/// Resolve waiters whose task is already terminal or gone (after a lagged event stream).
fn recheck_waiters(host: &Host, shard: &ShardReplica) {
    let ids: Vec<String> = host.inner.waiters.lock().keys().cloned().collect();
    for id in ids {
        let rec = shard.read_local(|s| s.get(&id).cloned());
        match rec {
            Some(r) if r.status.is_terminal() => {
                for w in host.inner.waiters.lock().remove(&id).into_iter().flatten() {
                    let _ = w.send(r.clone());
                }
            }
            None if taskmesh_task::shard_of(&id, host.shard_count()) == shard.shard_id() => {
                host.inner.waiters.lock().remove(&id);
            }
            _ => {}
        }
    }
}

pub(crate) fn stop_shard_actors(host: &Host, shard_id: u32) {
    let actors: Vec<_> = host
        .inner
        .actors
        .lock()
        .values()
        .filter(|(s, _)| *s == shard_id)
        .map(|(_, a)| a.clone())
        .collect();
    for a in actors {
        a.stop(Some("leadership moved".into()));
    }
}

/// This node leads the shard in `term`: run every live task whose execution is not running
/// here, by its tool's resume policy.
///
/// The live set is read through the shard's linearizable read, which waits until everything
/// committed before this leadership (including the previous leader's last creates) is applied:
/// reading the local state right at the leadership change could miss tasks. `only_older_terms`
/// limits the pass to executions started under an earlier term (the periodic safety net must
/// not race a create of this term whose actor is about to start).
async fn take_over(host: &Host, shard: &ShardReplica, term: u64, only_older_terms: bool) {
    let live: Vec<_> = match shard.read(|s| s.live().cloned().collect()).await {
        Ok(live) => live,
        Err(e) => {
            tracing::debug!(shard = shard.shard_id(), error = %e, "take-over skipped: not readable as leader");
            return;
        }
    };
    for record in live {
        if host.actor(&record.task_id).is_some() || (only_older_terms && record.exec_term >= term) {
            continue;
        }
        let tool = host.inner.tools.get(&record.request.tool).cloned();
        let policy = tool.as_ref().map(|t| t.spec().resume);
        let cmd = match policy {
            Some(ResumePolicy::Rerun) => Command::Resume {
                task_id: record.task_id.clone(),
                term,
                message: Some(
                    "The execution was interrupted (node restart or failover) and started again."
                        .into(),
                ),
                at_ms: now_ms(),
            },
            _ => {
                let why = match policy {
                    Some(_) => format!(
                        "The execution was interrupted by a node restart or failover; tool '{}' has resume policy 'fail', so it was not run again.",
                        record.request.tool
                    ),
                    None => format!(
                        "The execution was interrupted and tool '{}' is no longer configured.",
                        record.request.tool
                    ),
                };
                Command::Finish {
                    task_id: record.task_id.clone(),
                    term,
                    status: TaskStatus::Failed,
                    message: Some(why.clone()),
                    outcome: Outcome::Error {
                        code: taskmesh_mcp::jsonrpc::INTERNAL_ERROR,
                        message: why,
                        data_json: None,
                    },
                    at_ms: now_ms(),
                }
            }
        };
        match shard.propose(cmd).await {
            Ok(Applied::Updated { record }) if !record.status.is_terminal() => {
                if let Some(tool) = tool {
                    tracing::info!(task_id = %record.task_id, shard = shard.shard_id(), term, "task execution resumed");
                    actor::spawn(host.clone(), shard.shard_id(), record, term, tool, false).await;
                }
            }
            Ok(Applied::Updated { record }) => {
                crate::audit_terminal(&record, "task failed by its resume policy");
            }
            Ok(other) => {
                tracing::debug!(task_id = %record.task_id, result = ?other, "take-over skipped")
            }
            Err(e) => {
                tracing::warn!(shard = shard.shard_id(), error = %e, "take-over interrupted");
                return;
            }
        }
    }
}
