//! A task's obligation to deliver its events: which subscriptions watch it and which of its
//! status changes some of them have not yet settled (delivered, or given up on), pure like the
//! rest of the state machine.
//!
//! The obligation is part of the record, so it is written by the same log entry as the status
//! change it comes from: a status change of a watched task adds an [`OutboxEvent`] owed to
//! every watcher of that moment, in the entry that makes the change. The shard's leader
//! delivers what the outbox holds and settles each (event, subscription) pair through the log
//! ([`crate::Command::Settle`]) once the receiver acknowledged it or the delivery was given up;
//! a new leader delivers again whatever it finds unsettled. Delivery is therefore at least
//! once, and an event's id (the task id and the log index of its change) is the same on every
//! attempt, so that a receiver can drop the duplicates.
//!
//! A task without watchers has no outbox (`None`): the status changes of unwatched tasks cost
//! nothing here.

use serde::{Deserialize, Serialize};

use crate::{Rejection, TaskRecord, TaskStatus};

/// Subscriptions one task may have at once; a [`crate::Command::Watch`] past it is refused.
pub const MAX_WATCHERS: usize = 16;

/// Unsettled events one task may hold. A task that changes status again while as many wait
/// drops its oldest unsettled event that is not terminal (a receiver that was down misses an
/// intermediate status, never the last one).
pub const MAX_UNSETTLED: usize = 32;

/// Who watches a task and what they are owed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Outbox {
    /// The subscriptions that receive the task's status changes from now on, in the order
    /// they started watching.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub watchers: Vec<Watcher>,
    /// The status changes not yet settled by every subscription owed them, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<OutboxEvent>,
}

/// What a [`crate::Command::Settle`] settles of one task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Settlement {
    /// The task.
    pub task_id: crate::TaskId,
    /// (event's log index, subscription) pairs delivered or given up.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<(u64, String)>,
    /// Subscriptions that stop watching the task (ended ones); what they were owed is settled.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unwatch: Vec<String>,
}

/// A subscription watching a task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Watcher {
    /// The subscription's id.
    pub id: String,
    /// Whether it is owed only the change that ends the task (`completed`, `failed`,
    /// `cancelled`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub terminal_only: bool,
}

impl Watcher {
    /// A watcher of every status change.
    pub fn every_change(id: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            terminal_only: false,
        }
    }

    /// Whether a change to `status` is owed to it.
    pub fn wants(&self, status: TaskStatus) -> bool {
        !self.terminal_only || status.is_terminal()
    }
}

/// One status change owed to subscriptions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutboxEvent {
    /// The log index of the entry that made the change: with the task id, the event's id.
    pub index: u64,
    /// The status it changed to.
    pub status: TaskStatus,
    /// The status message the change set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_message: Option<String>,
    /// The record's `last_updated_at_ms` after the change.
    pub at_ms: u64,
    /// The subscriptions that have not settled it yet; never empty while it is kept.
    pub pending: Vec<String>,
}

impl OutboxEvent {
    /// The event's id: stable for a (task, status change), the same on every delivery attempt.
    pub fn event_id(&self, task_id: &str) -> String {
        format!("{task_id}-{}", self.index)
    }
}

impl TaskRecord {
    /// Whether the record owes any event to any subscription.
    pub fn has_unsettled(&self) -> bool {
        self.outbox.as_ref().is_some_and(|o| !o.events.is_empty())
    }
}

/// After a change applied at `index`: when it changed the status (from `before`) and the task
/// is watched, owe the new status to every watcher that wants it.
pub(crate) fn on_change(r: &mut TaskRecord, before: TaskStatus, index: u64) {
    if r.status == before {
        return;
    }
    let Some(outbox) = r.outbox.as_mut() else {
        return;
    };
    let pending: Vec<String> = outbox
        .watchers
        .iter()
        .filter(|w| w.wants(r.status))
        .map(|w| w.id.clone())
        .collect();
    if pending.is_empty() {
        return;
    }
    if outbox.events.len() >= MAX_UNSETTLED {
        if let Some(at) = outbox.events.iter().position(|e| !e.status.is_terminal()) {
            outbox.events.remove(at);
        }
    }
    outbox.events.push(OutboxEvent {
        index,
        status: r.status,
        status_message: r.status_message.clone(),
        at_ms: r.last_updated_at_ms,
        pending,
    });
}

/// `watcher` starts watching `r`; whether it was not watching yet. Watching twice changes
/// nothing (the first watch's filter stays). A task that is already terminal owes its last
/// status to the new watcher at once (as the event of the change that made it terminal), so
/// that a subscription made after the end still learns how the task ended.
pub(crate) fn watch(r: &mut TaskRecord, watcher: &Watcher) -> Result<bool, Rejection> {
    let outbox = r.outbox.get_or_insert_with(Default::default);
    let subscription = watcher.id.as_str();
    if outbox.watchers.iter().any(|w| w.id == subscription) {
        return Ok(false);
    }
    if outbox.watchers.len() >= MAX_WATCHERS {
        return Err(Rejection::Invalid(format!(
            "a task has at most {MAX_WATCHERS} subscriptions"
        )));
    }
    outbox.watchers.push(watcher.clone());
    if r.status.is_terminal() {
        let last = OutboxEvent {
            index: r.updated_index,
            status: r.status,
            status_message: r.status_message.clone(),
            at_ms: r.last_updated_at_ms,
            pending: vec![subscription.to_owned()],
        };
        match outbox.events.iter_mut().find(|e| e.status.is_terminal()) {
            Some(e) => e.pending.push(subscription.to_owned()),
            None => outbox.events.push(last),
        }
    }
    Ok(true)
}

/// Settle the events at the listed log indexes for their subscription, and stop the
/// subscriptions of `unwatch` watching (what they were owed is settled with them); an event
/// settled by every subscription it was owed to leaves the outbox, and an outbox left without
/// watchers or events goes. Pairs that are not owed (settled already, or never) are ignored.
/// Whether anything changed.
pub(crate) fn settle(r: &mut TaskRecord, settled: &[(u64, String)], unwatch: &[String]) -> bool {
    let Some(outbox) = r.outbox.as_mut() else {
        return false;
    };
    // Counted, not compared with a copy: settling runs for every delivery.
    let mut changed = false;
    for (index, subscription) in settled {
        if let Some(e) = outbox.events.iter_mut().find(|e| e.index == *index) {
            let owed = e.pending.len();
            e.pending.retain(|s| s != subscription);
            changed |= e.pending.len() != owed;
        }
    }
    if !unwatch.is_empty() {
        let watching = outbox.watchers.len();
        outbox.watchers.retain(|w| !unwatch.contains(&w.id));
        changed |= outbox.watchers.len() != watching;
        for e in &mut outbox.events {
            let owed = e.pending.len();
            e.pending.retain(|s| !unwatch.contains(s));
            changed |= e.pending.len() != owed;
        }
    }
    outbox.events.retain(|e| !e.pending.is_empty());
    if outbox.watchers.is_empty() && outbox.events.is_empty() {
        r.outbox = None;
    }
    changed
}

#[cfg(test)]
mod tests;
