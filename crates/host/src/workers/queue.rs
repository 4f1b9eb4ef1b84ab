//! The tasks that wait for a worker on this node, per tool, taken fairly across principals.
//!
//! Each tool has a queue per principal and a turn order of the principals with waiting tasks:
//! a take serves the principal whose turn it is, then moves it to the back. One principal's
//! burst of ten thousand tasks therefore delays another principal's single task by one take at
//! most per principal ahead of it, not by the burst. Pure: the dispatch holds it under a lock.

use std::collections::{HashMap, VecDeque};

/// The waiting tasks of every tool; `T` is what a take hands back for each.
pub(crate) struct Queues<T> {
    tools: HashMap<String, ToolQueue<T>>,
}

struct ToolQueue<T> {
    /// Principals with waiting tasks, the one whose turn it is first.
    turn: VecDeque<String>,
    /// Each principal's waiting tasks (task id and entry), oldest first; never empty.
    waiting: HashMap<String, VecDeque<(String, T)>>,
    len: usize,
}

impl<T> Default for Queues<T> {
    fn default() -> Self {
        Self {
            tools: HashMap::new(),
        }
    }
}

impl<T> Queues<T> {
    /// How many tasks of `tool` wait.
    pub(crate) fn len(&self, tool: &str) -> usize {
        self.tools.get(tool).map_or(0, |q| q.len)
    }

    /// The tools with waiting tasks.
    pub(crate) fn tools(&self) -> Vec<String> {
        self.tools.keys().cloned().collect()
    }

    /// Add `principal`'s task `task_id` of `tool` at the back of that principal's queue.
    pub(crate) fn push(&mut self, tool: &str, principal: &str, task_id: &str, entry: T) {
        let q = self
            .tools
            .entry(tool.to_string())
            .or_insert_with(|| ToolQueue {
                turn: VecDeque::new(),
                waiting: HashMap::new(),
                len: 0,
            });
        let mine = q.waiting.entry(principal.to_string()).or_default();
        if mine.is_empty() {
            q.turn.push_back(principal.to_string());
        }
        mine.push_back((task_id.to_string(), entry));
        q.len += 1;
    }

    /// The next task of `tool`: the oldest of the principal whose turn it is.
    pub(crate) fn pop(&mut self, tool: &str) -> Option<(String, T)> {
        let q = self.tools.get_mut(tool)?;
        let principal = q.turn.pop_front()?;
        let mine = q.waiting.get_mut(&principal)?;
        let next = mine.pop_front();
        if mine.is_empty() {
            q.waiting.remove(&principal);
        } else {
            q.turn.push_back(principal);
        }
        if next.is_some() {
            q.len -= 1;
        }
        if q.len == 0 {
            self.tools.remove(tool);
        }
        next
    }

    /// Take `principal`'s task `task_id` of `tool` out of the queue (it was cancelled, or gave
    /// up waiting); `None` when it does not wait.
    pub(crate) fn remove(&mut self, tool: &str, principal: &str, task_id: &str) -> Option<T> {
        let q = self.tools.get_mut(tool)?;
        let mine = q.waiting.get_mut(principal)?;
        let at = mine.iter().position(|(id, _)| id == task_id)?;
        let (_, entry) = mine.remove(at)?;
        if mine.is_empty() {
            q.waiting.remove(principal);
            q.turn.retain(|p| p != principal);
        }
        q.len -= 1;
        if q.len == 0 {
            self.tools.remove(tool);
        }
        Some(entry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_alternate_between_principals_whatever_their_bursts() {
        let mut q = Queues::default();
        for i in 0..100 {
            q.push("t", "bursty", &format!("b{i}"), ());
        }
        q.push("t", "quiet", "q0", ());
        q.push("t", "other", "o0", ());
        let first: Vec<String> = (0..3).map(|_| q.pop("t").unwrap().0).collect();
        assert_eq!(first, ["b0", "q0", "o0"]);
        assert_eq!(q.pop("t").unwrap().0, "b1");
        assert_eq!(q.len("t"), 98);
        assert!(q.pop("u").is_none());
    }

    #[test]
    fn each_principal_is_served_oldest_first_and_a_removed_task_is_never_taken() {
        let mut q = Queues::default();
        q.push("t", "a", "a1", 1);
        q.push("t", "a", "a2", 2);
        q.push("t", "b", "b1", 3);
        assert_eq!(q.remove("t", "a", "a1"), Some(1));
        assert_eq!(q.remove("t", "a", "a1"), None);
        assert_eq!(q.remove("t", "b", "b1"), Some(3));
        assert_eq!(q.pop("t"), Some(("a2".to_string(), 2)));
        assert_eq!(q.pop("t"), None);
        assert_eq!(q.len("t"), 0);
        assert!(q.tools.is_empty(), "an empty tool's queue is dropped");
    }
}
