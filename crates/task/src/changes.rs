//! The shard's recent status changes, kept in log order so that a client can read the task
//! events after a position (`events/poll`, `events/stream`): what changed since the position
//! its cursor names, on every replica alike.
//!
//! Every status change of any task (the ones webhooks are owed, see [`crate::outbox`]) is
//! appended by the log entry that makes it, with that entry's index, so the log's order is the
//! events' order and a position in it (a log index) means the same on every replica: a cursor
//! read on one node can be continued on another. The log keeps the newest `capacity` changes
//! (`events.retain_changes` of the node's configuration, the same on every node); what falls
//! off the front is remembered by the index of the newest change dropped, so a reader whose
//! position is older learns that it missed some ([`ChangePage::truncated`]).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde::{Deserialize, Serialize};

use crate::{TaskId, TaskStatus};

/// Changes each shard keeps unless [`set_capacity`] says otherwise.
pub const DEFAULT_CAPACITY: usize = 1_000;

/// The most changes a shard may be configured to keep.
pub const MAX_CAPACITY: usize = 1_000_000;

static CAPACITY: AtomicUsize = AtomicUsize::new(DEFAULT_CAPACITY);

/// Keep the newest `n` changes per shard from now on, in every shard of the process (a node
/// sets it once, from its configuration, before opening its shards). Must be the same on every
/// node of a cluster: replicas that keep different numbers answer the same cursor with
/// different reaches into the past.
pub fn set_capacity(n: usize) {
    CAPACITY.store(n.min(MAX_CAPACITY), Ordering::Relaxed);
}

/// The number of changes each shard keeps.
pub fn capacity() -> usize {
    CAPACITY.load(Ordering::Relaxed)
}

/// One status change of one task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    /// The log index of the entry that made it: with the task id, the event's id.
    pub index: u64,
    /// The task.
    pub task_id: TaskId,
    /// The status it changed to.
    pub status: TaskStatus,
    /// The status message the change set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_message: Option<String>,
    /// The record's `last_updated_at_ms` after the change.
    pub at_ms: u64,
}

/// The newest status changes of a shard, oldest first.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangeLog {
    /// The changes kept, in log order.
    #[serde(default)]
    changes: VecDeque<Change>,
    /// The index of the newest change no longer kept; 0 when none was dropped.
    #[serde(default)]
    dropped_through: u64,
}

/// What a reader asks of a [`ChangeLog`].
#[derive(Clone, Copy)]
pub struct ChangeQuery<'a> {
    /// Changes after this log index.
    pub after: u64,
    /// Only changes made at or after this time (ms since the epoch); older ones are skipped
    /// and the page says so.
    pub not_before_ms: u64,
    /// At most this many.
    pub max: usize,
    /// Only changes this says are wanted (owner, task, terminal only); they do not count as
    /// skipped when it says no.
    pub wanted: &'a dyn Fn(&Change) -> bool,
}

/// The changes a reader gets after its position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangePage<'a> {
    /// The changes, in log order.
    pub changes: Vec<&'a Change>,
    /// The position the reader is at once it has these: the index of the last change
    /// looked at (wanted or not), or its position when none was.
    pub through: u64,
    /// Whether changes after the reader's position were not given: dropped from the log, or
    /// older than `not_before_ms`.
    pub truncated: bool,
    /// Whether more changes follow `through`.
    pub more: bool,
}

impl ChangeLog {
    /// Append the change made at `change.index`, dropping the oldest beyond [`capacity`].
    pub fn push(&mut self, change: Change) {
        debug_assert!(self.changes.back().is_none_or(|c| c.index <= change.index));
        self.changes.push_back(change);
        self.trim(capacity());
    }

    fn trim(&mut self, keep: usize) {
        while self.changes.len() > keep {
            if let Some(c) = self.changes.pop_front() {
                self.dropped_through = c.index;
            }
        }
    }

    /// The index of the newest change made (kept or dropped); 0 when there was none. A reader
    /// that starts here gets every change made from now on.
    pub fn head(&self) -> u64 {
        self.changes
            .back()
            .map_or(self.dropped_through, |c| c.index)
    }

    /// How many changes are kept.
    pub fn len(&self) -> usize {
        self.changes.len()
    }

    /// Whether none is kept.
    pub fn is_empty(&self) -> bool {
        self.changes.is_empty()
    }

    /// The changes after `q.after` (see [`ChangeQuery`]).
    pub fn read(&self, q: ChangeQuery<'_>) -> ChangePage<'_> {
        let mut truncated = q.after < self.dropped_through;
        let start = self.changes.partition_point(|c| c.index <= q.after);
        let mut page = ChangePage {
            changes: Vec::new(),
            through: q.after,
            truncated: false,
            more: false,
        };
        for c in self.changes.range(start..) {
            if page.changes.len() >= q.max {
                page.more = true;
                break;
            }
            page.through = c.index;
            if !(q.wanted)(c) {
                continue;
            }
            if c.at_ms < q.not_before_ms {
                truncated = true;
                continue;
            }
            page.changes.push(c);
        }
        if !page.more && q.after < self.dropped_through {
            // Nothing kept was after the position, but some dropped change was.
            page.through = page.through.max(self.dropped_through);
        }
        page.truncated = truncated;
        page
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(index: u64, task: &str, status: TaskStatus, at_ms: u64) -> Change {
        Change {
            index,
            task_id: task.into(),
            status,
            status_message: None,
            at_ms,
        }
    }

    fn all(_: &Change) -> bool {
        true
    }

    fn query(after: u64, max: usize) -> ChangeQuery<'static> {
        ChangeQuery {
            after,
            not_before_ms: 0,
            max,
            wanted: &all,
        }
    }

    fn indexes(p: &ChangePage<'_>) -> Vec<u64> {
        p.changes.iter().map(|c| c.index).collect()
    }

    #[test]
    fn a_reader_gets_each_change_once_page_by_page() {
        let mut log = ChangeLog::default();
        assert_eq!(log.head(), 0);
        for i in 1..=5 {
            log.push(change(i * 10, "t", TaskStatus::Working, i));
        }
        assert_eq!(log.head(), 50);
        let p = log.read(query(0, 2));
        assert_eq!(
            (indexes(&p), p.through, p.more, p.truncated),
            (vec![10, 20], 20, true, false)
        );
        let p = log.read(query(20, 2));
        assert_eq!((indexes(&p), p.through, p.more), (vec![30, 40], 40, true));
        let p = log.read(query(40, 2));
        assert_eq!((indexes(&p), p.through, p.more), (vec![50], 50, false));
        let p = log.read(query(50, 2));
        assert_eq!((indexes(&p), p.through, p.more), (vec![], 50, false));
        // A position between two changes reads from the next one.
        assert_eq!(indexes(&log.read(query(35, 9))), vec![40, 50]);
    }

    #[test]
    fn unwanted_changes_advance_the_position_without_being_given() {
        let mut log = ChangeLog::default();
        log.push(change(1, "a", TaskStatus::Working, 1));
        log.push(change(2, "b", TaskStatus::Completed, 2));
        log.push(change(3, "a", TaskStatus::Failed, 3));
        let only_a = |c: &Change| c.task_id == "a";
        let p = log.read(ChangeQuery {
            wanted: &only_a,
            ..query(0, 10)
        });
        assert_eq!(
            (indexes(&p), p.through, p.truncated),
            (vec![1, 3], 3, false)
        );
        let p = log.read(ChangeQuery {
            wanted: &only_a,
            ..query(1, 10)
        });
        assert_eq!((indexes(&p), p.through), (vec![3], 3));
    }

    #[test]
    fn a_reader_behind_the_kept_changes_or_the_age_floor_is_told_it_missed_some() {
        let mut log = ChangeLog::default();
        for i in 1..=(capacity() as u64 + 3) {
            log.push(change(i, "t", TaskStatus::Working, i * 1_000));
        }
        assert_eq!(log.len(), capacity());
        let p = log.read(query(0, 2));
        assert!(p.truncated);
        assert_eq!(indexes(&p), vec![4, 5], "the oldest kept come first");
        let p = log.read(query(3, 2));
        assert!(!p.truncated, "nothing after 3 was dropped");
        let p = log.read(ChangeQuery {
            not_before_ms: 6_000,
            ..query(3, 3)
        });
        assert!(p.truncated, "4 and 5 are older than the floor");
        assert_eq!(indexes(&p), vec![6, 7, 8], "skipped changes do not count");
        assert_eq!(p.through, 8);
    }

    #[test]
    fn the_log_round_trips_through_its_serialised_form() {
        let mut log = ChangeLog::default();
        log.push(change(7, "t", TaskStatus::InputRequired, 1));
        let json = serde_json::to_string(&log).unwrap();
        let back: ChangeLog = serde_json::from_str(&json).unwrap();
        assert_eq!(back, log);
        let empty: ChangeLog = serde_json::from_str("{}").unwrap();
        assert_eq!(empty, ChangeLog::default());
    }
}
