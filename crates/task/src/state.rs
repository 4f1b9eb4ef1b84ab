//! The state machine of one shard: the task records and the indexes that serve list and
//! expiry, changed only by [`ShardState::apply`].

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::{
    outbox, worker, Applied, Change, ChangeLog, Command, Rejection, Subscription, TaskId,
    TaskRecord, TaskStatus,
};

/// The task records of one shard, indexed by owner, expiry and liveness.
#[derive(Debug, Default, Clone)]
pub struct ShardState {
    tasks: HashMap<TaskId, TaskRecord>,
    /// (owner, task id): serves `tasks/list` in task-id order per principal.
    by_owner: BTreeSet<(String, TaskId)>,
    /// (expires at, task id): serves the expiry sweep.
    by_expiry: BTreeSet<(u64, TaskId)>,
    /// The ids of the records that are not terminal: serves the leader's reconciler, which
    /// visits them every pass, without a scan of the terminal records (most of a shard).
    live: BTreeSet<TaskId>,
    /// The ids of the records whose outbox holds events not yet settled: serves the leader's
    /// delivery of events ([`crate::outbox`]) without a scan of the shard.
    unsettled: BTreeSet<TaskId>,
    /// The newest status changes, in log order: serves `events/poll` and `events/stream`.
    changes: ChangeLog,
    /// Clients' webhook subscriptions, by id (see [`crate::subscription`]).
    subscriptions: BTreeMap<String, Subscription>,
}

impl ShardState {
    /// A state without records.
    pub fn new() -> Self {
        Self::default()
    }

    /// Rebuild from records (snapshot install, restart).
    pub fn from_records(records: impl IntoIterator<Item = TaskRecord>) -> Self {
        let mut s = Self::new();
        for r in records {
            s.insert(r);
        }
        s
    }

    /// Rebuild from a snapshot's records, change log and subscriptions.
    pub fn from_parts(
        records: impl IntoIterator<Item = TaskRecord>,
        changes: ChangeLog,
        subscriptions: impl IntoIterator<Item = Subscription>,
    ) -> Self {
        let mut s = Self::from_records(records);
        s.changes = changes;
        s.subscriptions = subscriptions
            .into_iter()
            .map(|sub| (sub.id.clone(), sub))
            .collect();
        s
    }

    /// The client subscription `id`, lapsed or not.
    pub fn subscription(&self, id: &str) -> Option<&Subscription> {
        self.subscriptions.get(id)
    }

    /// Every client subscription, in id order.
    pub fn subscriptions(&self) -> impl Iterator<Item = &Subscription> {
        self.subscriptions.values()
    }

    /// The shard's newest status changes.
    pub fn changes(&self) -> &ChangeLog {
        &self.changes
    }

    /// How many records the shard holds, terminal ones and expired ones not yet swept included.
    pub fn len(&self) -> usize {
        self.tasks.len()
    }

    /// Whether the shard holds no record.
    pub fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }

    /// The record of `task_id`, if held; its TTL is not checked (an expired record not yet
    /// swept is returned).
    pub fn get(&self, task_id: &str) -> Option<&TaskRecord> {
        self.tasks.get(task_id)
    }

    /// Every record held, in no particular order.
    pub fn records(&self) -> impl Iterator<Item = &TaskRecord> {
        self.tasks.values()
    }

    /// A page of every record for a backup, in (owner, task id) order: those strictly after
    /// `after`, until `max_records` are taken or their encoded size passes `max_bytes` (at
    /// least one is taken). The second value is whether the page reaches the last record.
    pub fn export_page(
        &self,
        after: Option<(&str, &str)>,
        max_records: usize,
        max_bytes: usize,
    ) -> (Vec<TaskRecord>, bool) {
        use std::ops::Bound;
        let start = match after {
            Some((owner, id)) => Bound::Excluded((owner.to_owned(), id.to_owned())),
            None => Bound::Unbounded,
        };
        let mut page = Vec::new();
        let mut bytes = 0;
        let mut keys = self.by_owner.range((start, Bound::Unbounded));
        for (_, id) in keys.by_ref() {
            let Some(r) = self.tasks.get(id) else {
                continue;
            };
            bytes += r.approx_bytes();
            page.push(r.clone());
            if page.len() >= max_records.max(1) || bytes >= max_bytes {
                break;
            }
        }
        let done = keys.next().is_none();
        (page, done)
    }

    /// Records that are not terminal (their executions must be running on the leader).
    pub fn live(&self) -> impl Iterator<Item = &TaskRecord> {
        self.live.iter().filter_map(|id| self.tasks.get(id))
    }

    /// How many records are not terminal.
    pub fn live_count(&self) -> usize {
        self.live.len()
    }

    /// How many records owe an event to some subscription.
    pub fn unsettled_count(&self) -> usize {
        self.unsettled.len()
    }

    /// Records whose outbox holds events not yet settled, in task id order.
    pub fn unsettled(&self) -> impl Iterator<Item = &TaskRecord> {
        self.unsettled.iter().filter_map(|id| self.tasks.get(id))
    }

    /// Up to `limit` of `owner`'s tasks with ids strictly after `after`, in id order. Expired
    /// records (not yet swept) are skipped.
    pub fn list(
        &self,
        owner: &str,
        after: Option<&str>,
        limit: usize,
        now_ms: u64,
    ) -> Vec<&TaskRecord> {
        use std::ops::Bound;
        let lower = match after {
            Some(a) => Bound::Excluded((owner.to_string(), a.to_string())),
            None => Bound::Included((owner.to_string(), String::new())),
        };
        self.by_owner
            .range((lower, Bound::Unbounded))
            .take_while(|(o, _)| o == owner)
            .filter_map(|(_, id)| self.tasks.get(id))
            .filter(|r| !r.is_expired(now_ms))
            .take(limit)
            .collect()
    }

    /// Up to `limit` ids whose TTL has run out at `now_ms`, oldest first.
    pub fn expired(&self, now_ms: u64, limit: usize) -> Vec<TaskId> {
        self.by_expiry
            .iter()
            .take_while(|(at, _)| *at <= now_ms)
            .take(limit)
            .map(|(_, id)| id.clone())
            .collect()
    }

    fn insert(&mut self, r: TaskRecord) {
        self.by_owner.insert((r.owner.clone(), r.task_id.clone()));
        if !r.status.is_terminal() {
            self.live.insert(r.task_id.clone());
        }
        if let Some(at) = r.expires_at_ms() {
            self.by_expiry.insert((at, r.task_id.clone()));
        }
        if r.has_unsettled() {
            self.unsettled.insert(r.task_id.clone());
        }
        self.tasks.insert(r.task_id.clone(), r);
    }

    fn remove(&mut self, task_id: &str) -> Option<TaskRecord> {
        let r = self.tasks.remove(task_id)?;
        self.by_owner.remove(&(r.owner.clone(), r.task_id.clone()));
        self.live.remove(task_id);
        self.unsettled.remove(task_id);
        if let Some(at) = r.expires_at_ms() {
            self.by_expiry.remove(&(at, r.task_id.clone()));
        }
        Some(r)
    }

    /// Apply one committed command at log index `index`. Deterministic: the same state, command
    /// and index always give the same result on every replica.
    pub fn apply(&mut self, cmd: &Command, index: u64) -> Applied {
        match cmd {
            Command::Create { record } => {
                if let Some(existing) = self.tasks.get(&record.task_id) {
                    return Applied::Created {
                        record: existing.clone(),
                        fresh: false,
                    };
                }
                if record.status != TaskStatus::Working {
                    return Applied::Rejected(Rejection::Invalid(
                        "a new task starts in working".into(),
                    ));
                }
                let mut r = record.clone();
                r.updated_index = index;
                r.outcome = None;
                // The principal's subscriptions watch its new task (lapsed ones too, until
                // their removal commits: the proposer's clock is not the state's).
                for sub in self.subscriptions.values() {
                    if sub.covers(&r.owner, &r.task_id) {
                        let _ = outbox::watch(&mut r, &sub.watcher());
                    }
                }
                self.insert(r.clone());
                Applied::Created {
                    record: r,
                    fresh: true,
                }
            }
            Command::SetStatus {
                task_id,
                term,
                status,
                message,
                at_ms,
            } => {
                if status.is_terminal() {
                    return Applied::Rejected(Rejection::Invalid(
                        "terminal statuses are set by finish or cancel".into(),
                    ));
                }
                self.update(task_id, Some(*term), index, *at_ms, |r| {
                    r.status = *status;
                    r.status_message = message.clone();
                })
            }
            Command::Finish {
                task_id,
                term,
                status,
                message,
                outcome,
                at_ms,
            } => {
                if let Err(e) = ending(*status) {
                    return Applied::Rejected(e);
                }
                self.update(task_id, Some(*term), index, *at_ms, |r| {
                    r.status = *status;
                    r.status_message = message.clone();
                    r.outcome = Some(outcome.clone());
                })
            }
            Command::Cancel {
                task_id,
                message,
                at_ms,
            } => self.update(task_id, None, index, *at_ms, |r| {
                r.status = TaskStatus::Cancelled;
                r.status_message = Some(message.clone());
            }),
            Command::Resume {
                task_id,
                term,
                message,
                at_ms,
            } => {
                match self.tasks.get(task_id.as_str()) {
                    Some(r) if *term < r.exec_term => {
                        return Applied::Rejected(Rejection::StaleTerm {
                            proposed: *term,
                            current: r.exec_term,
                        })
                    }
                    _ => {}
                }
                self.update(task_id, None, index, *at_ms, |r| {
                    r.exec_term = *term;
                    r.status = TaskStatus::Working;
                    r.status_message = message.clone();
                })
            }
            Command::Follow {
                task_id,
                term,
                upstream_task,
                message,
                at_ms,
            } => self.update(task_id, Some(*term), index, *at_ms, |r| {
                r.upstream_task = Some(upstream_task.clone());
                r.status_message = message.clone();
            }),
            Command::FollowClient {
                task_id,
                term,
                client_task,
                message,
                at_ms,
            } => self.update(task_id, Some(*term), index, *at_ms, |r| {
                r.client_task = client_task.clone();
                r.status_message = message.clone();
            }),
            Command::Grant {
                task_id,
                term,
                lease,
                at_ms,
            } => {
                if let Some(Err(e)) = self.lease_check(task_id, |r| worker::check_grant(r, lease)) {
                    return Applied::Rejected(e);
                }
                self.update(task_id, Some(*term), index, *at_ms, |r| {
                    if let Some(job) = r.worker.as_mut() {
                        job.attempts = lease.attempt;
                        job.lease = Some(lease.clone());
                    }
                })
            }
            Command::Renew {
                task_id,
                token,
                deadline_ms,
                message,
                at_ms,
            } => {
                if let Some(Err(e)) = self.lease_check(task_id, |r| {
                    worker::live_lease(r, token, *at_ms).map(|_| ())
                }) {
                    return Applied::Rejected(e);
                }
                self.update(task_id, None, index, *at_ms, |r| {
                    if let Some(l) = r.worker.as_mut().and_then(|w| w.lease.as_mut()) {
                        l.deadline_ms = l.deadline_ms.max(*deadline_ms);
                    }
                    if let Some(m) = message {
                        r.status_message = Some(m.clone());
                    }
                })
            }
            Command::Complete {
                task_id,
                token,
                status,
                message,
                outcome,
                at_ms,
            } => {
                if let Err(e) = ending(*status) {
                    return Applied::Rejected(e);
                }
                if let Some(Err(e)) = self.lease_check(task_id, |r| {
                    worker::live_lease(r, token, *at_ms).map(|_| ())
                }) {
                    return Applied::Rejected(e);
                }
                self.update(task_id, None, index, *at_ms, |r| {
                    r.status = *status;
                    r.status_message = message.clone();
                    r.outcome = Some(outcome.clone());
                    if let Some(w) = r.worker.as_mut() {
                        w.lease = None;
                    }
                })
            }
            Command::Release {
                task_id,
                term,
                token,
                message,
                at_ms,
            } => {
                if let Some(Err(e)) =
                    self.lease_check(task_id, |r| worker::check_release(r, token, *at_ms))
                {
                    return Applied::Rejected(e);
                }
                self.update(task_id, Some(*term), index, *at_ms, |r| {
                    if let Some(w) = r.worker.as_mut() {
                        w.lease = None;
                    }
                    r.status_message = message.clone();
                })
            }
            Command::Watch { task_id, watcher } => {
                self.outbox_change(task_id, |r| outbox::watch(r, watcher))
            }
            Command::Subscribe { subscription } => {
                let sub = subscription.clone();
                let mut watching = 0;
                let mut owing = Vec::new();
                let targets: Vec<TaskId> = match &sub.task_id {
                    Some(t) => vec![t.clone()],
                    None => self
                        .by_owner
                        .range((sub.principal.clone(), String::new())..)
                        .take_while(|(o, _)| *o == sub.principal)
                        .map(|(_, id)| id.clone())
                        .filter(|id| self.live.contains(id))
                        .collect(),
                };
                for id in targets {
                    let Some(r) = self.tasks.get_mut(&id) else {
                        continue;
                    };
                    if r.owner != sub.principal {
                        continue;
                    }
                    if let Ok(true) = outbox::watch(r, &sub.watcher()) {
                        watching += 1;
                    }
                    if r.has_unsettled() {
                        owing.push(r.clone());
                        self.unsettled.insert(id);
                    }
                }
                self.subscriptions.insert(sub.id.clone(), sub);
                Applied::Subscribed { watching, owing }
            }
            Command::Unsubscribe { ids } => {
                for id in ids {
                    self.subscriptions.remove(id);
                }
                Applied::Subscribed {
                    watching: 0,
                    owing: Vec::new(),
                }
            }
            Command::Settle { settled } => {
                let mut changed = 0;
                for s in settled {
                    let Some(r) = self.tasks.get_mut(&s.task_id) else {
                        continue;
                    };
                    if outbox::settle(r, &s.events, &s.unwatch) {
                        changed += 1;
                    }
                    if !r.has_unsettled() {
                        self.unsettled.remove(&s.task_id);
                    }
                }
                Applied::Settled { changed }
            }
            Command::Import { records } => {
                let mut inserted = Vec::new();
                for record in records {
                    if self.tasks.contains_key(&record.task_id) {
                        continue;
                    }
                    let mut r = record.clone();
                    r.updated_index = index;
                    if !r.status.is_terminal() {
                        r.exec_term = 0;
                    }
                    self.insert(r.clone());
                    inserted.push(r);
                }
                Applied::Imported { records: inserted }
            }
            Command::Expire { task_ids, now_ms } => {
                let mut gone = Vec::new();
                for id in task_ids {
                    if self.tasks.get(id).is_some_and(|r| r.is_expired(*now_ms)) {
                        self.remove(id);
                        gone.push(id.clone());
                    }
                }
                Applied::Expired { task_ids: gone }
            }
        }
    }

    /// `check` of the live record `task_id`, if there is one: a missing or terminal record is
    /// left to [`ShardState::update`] to reject.
    fn lease_check(
        &self,
        task_id: &str,
        check: impl FnOnce(&TaskRecord) -> Result<(), Rejection>,
    ) -> Option<Result<(), Rejection>> {
        self.tasks
            .get(task_id)
            .filter(|r| !r.status.is_terminal())
            .map(check)
    }

    /// Change a live record, made at `at_ms` (its `last_updated_at_ms` never moves backwards).
    /// `term` (when given) must not be older than the record's execution term; terminal records
    /// never change.
    fn update(
        &mut self,
        task_id: &str,
        term: Option<u64>,
        index: u64,
        at_ms: u64,
        change: impl FnOnce(&mut TaskRecord),
    ) -> Applied {
        let Some(r) = self.tasks.get_mut(task_id) else {
            return Applied::Rejected(Rejection::NotFound);
        };
        if r.status.is_terminal() {
            return Applied::Rejected(Rejection::Terminal(r.status));
        }
        if let Some(term) = term {
            if term < r.exec_term {
                return Applied::Rejected(Rejection::StaleTerm {
                    proposed: term,
                    current: r.exec_term,
                });
            }
        }
        // Entries apply in log order, each once: a change always comes after the record's last.
        assert!(
            index > r.updated_index,
            "task {task_id}: change at log index {index} after one at {}",
            r.updated_index
        );
        let before = r.status;
        change(r);
        r.last_updated_at_ms = r.last_updated_at_ms.max(at_ms);
        r.updated_index = index;
        outbox::on_change(r, before, index);
        if r.status != before {
            self.changes.push(Change {
                index,
                task_id: r.task_id.clone(),
                status: r.status,
                status_message: r.status_message.clone(),
                at_ms: r.last_updated_at_ms,
            });
        }
        if r.status.is_terminal() {
            self.live.remove(task_id);
        }
        if r.has_unsettled() {
            self.unsettled.insert(r.task_id.clone());
        }
        Applied::Updated { record: r.clone() }
    }

    /// Change the outbox of a record, terminal or not. Not a change of the task as clients see
    /// it: its `updated_index` and `last_updated_at_ms` stay, so that the index of the change
    /// that made a task terminal stays the id of its last event.
    fn outbox_change(
        &mut self,
        task_id: &str,
        change: impl FnOnce(&mut TaskRecord) -> Result<bool, crate::Rejection>,
    ) -> Applied {
        let Some(r) = self.tasks.get_mut(task_id) else {
            return Applied::Rejected(crate::Rejection::NotFound);
        };
        if let Err(e) = change(r) {
            return Applied::Rejected(e);
        }
        if r.has_unsettled() {
            self.unsettled.insert(r.task_id.clone());
        } else {
            self.unsettled.remove(task_id);
        }
        Applied::Updated { record: r.clone() }
    }
}

/// Whether `status` may end an execution (`Finish`, `Complete`): `completed` or `failed`.
fn ending(status: TaskStatus) -> Result<(), Rejection> {
    match status {
        TaskStatus::Completed | TaskStatus::Failed => Ok(()),
        _ => Err(Rejection::Invalid(
            "an execution ends in completed or failed".into(),
        )),
    }
}

#[cfg(test)]
mod tests;
