//! The loops of a host. Per shard, two tasks that sleep until something happens:
//!
//! - the reconciler ([`crate::reconcile`]): on the shard's leader, every live task has exactly
//!   one execution here;
//! - events: every applied change is announced by the leader ([`HostEvent::Status`]), wakes
//!   `tasks/result` waiters of terminal tasks, and stops the actors of terminal and expired
//!   tasks.
//!
//! And one housekeeping task for the whole host ([`spawn_housekeeping`]), so that an idle shard
//! costs no timer of its own:
//!
//! - every `tasks.reconcile_interval_ms` it nudges the reconciler of each shard that has
//!   something to check (it leads it and it has live tasks, suspects or actors here, or it
//!   does not lead it and actors of it still run here);
//! - every `tasks.expiry_sweep_interval_ms` it deletes, through the log of each shard it leads,
//!   the tasks whose TTL ran out (a lookup in the shard's expiry index, so a shard with nothing
//!   due costs next to nothing).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Weak};
use std::time::Duration;

use taskmesh_shard::{ShardEvent, ShardReplica};
use taskmesh_task::{Applied, Command, TaskRecord};
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::Notify;

use crate::{now_ms, now_us, Ended, Host, HostEvent, Inner};

pub(crate) fn spawn_shard_loops(
    host: Host,
    shard: ShardReplica,
    nudge: Arc<Notify>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let mut handles = Vec::with_capacity(2);
    let mut events = shard.subscribe();
    {
        let host = host.clone();
        let shard = shard.clone();
        handles.push(tokio::spawn(async move {
            loop {
                match events.recv().await {
                    // A change of the outbox alone (a watch, a settled delivery) is not a change
                    // of the task: nothing waits for it, and nothing to announce.
                    Ok(ShardEvent::Changed { index, record }) if record.updated_index != index => {}
                    Ok(ShardEvent::Changed { record, .. }) => {
                        let at_us = now_us();
                        if record.status.is_terminal() {
                            let waiters = host.inner.waiters.lock().remove(&record.task_id);
                            for w in waiters.into_iter().flatten() {
                                let _ = w.send(Ended {
                                    record: TaskRecord::clone(&record),
                                    at_us,
                                });
                            }
                            host.stop_actor(&record.task_id);
                        }
                        // Every replica applies the change; only the leader announces it, so a
                        // cluster that merges all nodes' announcements sends each one once.
                        if shard.is_leader() {
                            let task = taskmesh_task::TaskView::from(&*record);
                            let session = record.session.clone();
                            let _ = host.inner.events.send(HostEvent::Status {
                                task,
                                session,
                                at_us,
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
    if let Some(delivery) = host.inner.delivery.clone() {
        handles.push(delivery.spawn_loop(shard.clone()));
    }
    handles.push(tokio::spawn(crate::reconcile::reconcile_loop(
        host, shard, nudge,
    )));
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
                    let _ = w.send(Ended {
                        record: r.clone(),
                        at_us: 0,
                    });
                }
            }
            None if taskmesh_task::shard_of(&id, host.shard_count()) == shard.shard_id() => {
                host.inner.waiters.lock().remove(&id);
            }
            _ => {}
        }
    }
}

/// Start the host's housekeeping task (see the module doc). It ends once the host is dropped.
pub(crate) fn spawn_housekeeping(host: &Host) -> tokio::task::JoinHandle<()> {
    let weak = Arc::downgrade(&host.inner);
    let cfg = &host.inner.cfg;
    let reconcile = Duration::from_millis(cfg.tasks.reconcile_interval_ms.max(1));
    let expiry = Duration::from_millis(cfg.tasks.expiry_sweep_interval_ms.max(10));
    tokio::spawn(async move {
        let mut reconcile = tokio::time::interval(reconcile);
        reconcile.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut expiry = tokio::time::interval(expiry);
        expiry.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // The shards whose expired tasks are being deleted now.
        let sweeping: Arc<parking_lot::Mutex<HashSet<u32>>> = Arc::default();
        loop {
            let sweep = tokio::select! {
                _ = reconcile.tick() => false,
                _ = expiry.tick() => true,
            };
            let Some(host) = upgrade(&weak) else {
                return;
            };
            if sweep {
                sweep_expired(&host, &sweeping);
                host.sweep_idle_workers();
            } else {
                nudge_reconcilers(&host);
            }
        }
    })
}

fn upgrade(weak: &Weak<Inner>) -> Option<Host> {
    weak.upgrade().map(|inner| Host { inner })
}

/// Nudge the reconciler of every shard with something to check.
fn nudge_reconcilers(host: &Host) {
    let mut actors: HashMap<u32, usize> = HashMap::new();
    for r in host.inner.actors.lock().values() {
        *actors.entry(r.shard).or_default() += 1;
    }
    let suspected: HashSet<u32> = host
        .inner
        .suspects
        .lock()
        .iter()
        .filter(|(_, ids)| !ids.is_empty())
        .map(|(shard, _)| *shard)
        .collect();
    for (shard, nudge) in host.nudges() {
        let running = actors.get(&shard.shard_id()).copied().unwrap_or(0) > 0;
        let check = if shard.is_leader() {
            running
                || suspected.contains(&shard.shard_id())
                || shard.read_local(|s| s.live_count()) > 0
        } else {
            running
        };
        if check {
            nudge.notify_one();
        }
    }
}

/// On every shard this node leads, delete the tasks whose TTL ran out (a batch per shard and
/// sweep; one deletion per shard at a time).
fn sweep_expired(host: &Host, sweeping: &Arc<parking_lot::Mutex<HashSet<u32>>>) {
    let now = now_ms();
    let batch = host.inner.cfg.expiry_batch;
    for (shard, _) in host.nudges() {
        let leads = shard.is_leader();
        // The tasks that owe their webhooks an event, where the leader delivers them (0
        // elsewhere).
        let queued = if leads {
            shard.read_local(|s| s.unsettled_count())
        } else {
            0
        };
        taskmesh_metrics::metrics::gauge!(taskmesh_metrics::names::WEBHOOK_QUEUED, "shard" => shard.shard_id().to_string())
            .set(queued as f64);
        if !leads {
            continue;
        }
        let (ids, lapsed) = shard.read_local(|s| {
            let lapsed: Vec<String> = s
                .subscriptions()
                .filter(|sub| sub.lapsed(now))
                .map(|sub| sub.id.clone())
                .collect();
            (s.expired(now, batch), lapsed)
        });
        if !lapsed.is_empty() {
            // Lapsed subscriptions go with the next sweep; what tasks owe them is settled as
            // owed to a subscription that is gone.
            let shard = shard.clone();
            tokio::spawn(async move {
                if let Err(e) = shard.propose(Command::Unsubscribe { ids: lapsed }).await {
                    tracing::debug!(shard = shard.shard_id(), error = %e, "removing lapsed subscriptions skipped");
                }
            });
        }
        if ids.is_empty() || !sweeping.lock().insert(shard.shard_id()) {
            continue;
        }
        let sweeping = sweeping.clone();
        tokio::spawn(async move {
            let id = shard.shard_id();
            match shard
                .propose(Command::Expire {
                    task_ids: ids,
                    now_ms: now,
                })
                .await
            {
                Ok(Applied::Expired { task_ids }) => {
                    taskmesh_metrics::metrics::counter!(taskmesh_metrics::names::TASKS_EXPIRED)
                        .increment(task_ids.len() as u64);
                    tracing::info!(shard = id, count = task_ids.len(), "expired tasks deleted");
                }
                Ok(_) => {}
                Err(e) => tracing::debug!(shard = id, error = %e, "expiry sweep skipped"),
            }
            sweeping.lock().remove(&id);
        });
    }
}
