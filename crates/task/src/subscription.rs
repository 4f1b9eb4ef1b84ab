//! Webhook subscriptions that clients make (`events/subscribe`), kept in the shard state so
//! that they are replicated, durable and known to the leader that delivers.
//!
//! A subscription is written to every shard (one `Subscribe` entry per shard's log, the same
//! subscription in each): the leader of a shard delivers the events of the shard's tasks, so
//! it must know every subscription that covers them, from its own committed state, through
//! any failover. The `Subscribe` entry that adds one makes it watch, in the same entry, the
//! tasks of the shard it covers that are not over yet (every live task of its principal, or
//! the one task it names); a `Create` applied after it gives the new task the principal-wide
//! subscriptions of its owner. So a subscription covers every task of its principal from the
//! moment it is committed, exactly, on every replica alike.
//!
//! `Unsubscribe` removes it (refused by nobody: an unknown id changes nothing); what tasks
//! still owe it is settled by the leader as owed to a subscription that is gone.

use serde::{Deserialize, Serialize};

use crate::TaskId;

/// A client's webhook subscription to task events.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Subscription {
    /// Its id: derived from its identity (principal, URL, event name, arguments), the same on
    /// every refresh.
    pub id: String,
    /// The principal that made it; it covers only this principal's tasks.
    pub principal: String,
    /// Where its events are posted.
    pub url: String,
    /// The `whsec_` secret deliveries are signed with.
    pub secret: String,
    /// The secret a refresh replaced, still signed with (as a second signature) until
    /// `previous_until_ms`, so that a receiver that has not switched yet keeps verifying.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_secret: Option<String>,
    /// See `previous_secret`, ms since the Unix epoch.
    #[serde(default)]
    pub previous_until_ms: u64,
    /// Only this task's events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<TaskId>,
    /// Only the changes that end a task.
    #[serde(default)]
    pub terminal_only: bool,
    /// When it lapses unless refreshed, ms since the Unix epoch.
    pub expires_at_ms: u64,
    /// When it was last made or refreshed, ms since the Unix epoch.
    pub refreshed_at_ms: u64,
}

impl Subscription {
    /// Whether it covers the tasks of `owner` that have no task filter, or the task it names.
    pub fn covers(&self, owner: &str, task_id: &str) -> bool {
        self.principal == owner && self.task_id.as_deref().is_none_or(|t| t == task_id)
    }

    /// Whether it has lapsed at `now_ms`.
    pub fn lapsed(&self, now_ms: u64) -> bool {
        self.expires_at_ms <= now_ms
    }

    /// The watcher it puts on the tasks it covers.
    pub fn watcher(&self) -> crate::Watcher {
        crate::Watcher {
            id: self.id.clone(),
            terminal_only: self.terminal_only,
        }
    }
}
