//! A history of what clients observed of tasks, with when each poll started and ended,
//! checked against the invariants a cluster must keep under faults ([`History::check`]).

use std::time::Instant;

use serde_json::Value;

use crate::{get_eventually, Client};

/// What clients observed, with when each poll started and ended, checked against the
/// invariants: an acknowledged create is always found, a terminal status never changes, and
/// no poll that started after another poll ended shows an older state than that one.
#[derive(Default)]
pub struct History {
    seen: std::collections::HashMap<String, Vec<(Instant, Instant, Value)>>,
}

/// Whether the task `t` is `completed`, `failed` or `cancelled` (false without a status).
pub fn is_terminal(t: &Value) -> bool {
    ["completed", "failed", "cancelled"].contains(&t["status"].as_str().unwrap_or(""))
}

impl History {
    /// Poll every task seen so far once more through each of `clients`, in turn.
    pub async fn poll_all(&mut self, clients: &[&Client]) {
        let mut ids: Vec<String> = self.seen.keys().cloned().collect();
        ids.sort();
        for id in ids {
            for c in clients {
                self.poll(c, &id).await;
            }
        }
    }

    /// Poll `id` through `c` (retrying while its shard elects) and record what was seen.
    pub async fn poll(&mut self, c: &Client, id: &str) -> Value {
        let t0 = Instant::now();
        let got = get_eventually(c, id).await;
        self.observe(id, t0, Instant::now(), &got);
        got
    }

    /// Record that a poll of `id` started at `start`, ended at `end` and saw `task`.
    pub fn observe(&mut self, id: &str, start: Instant, end: Instant, task: &Value) {
        self.seen
            .entry(id.to_string())
            .or_default()
            .push((start, end, task.clone()));
    }

    /// Check every pair of polls of a task where the second started after the first ended:
    /// a terminal task is unchanged and `lastUpdatedAt` (compared as text) never goes back.
    /// Panics on a violation; returns how many pairs were checked.
    pub fn check(&self) -> usize {
        let mut pairs = 0;
        for (id, obs) in &self.seen {
            for (_, end_a, a) in obs {
                for (start_b, _, b) in obs {
                    if start_b <= end_a {
                        continue;
                    }
                    pairs += 1;
                    if is_terminal(a) {
                        assert_eq!(a, b, "terminal task {id} changed");
                    }
                    let (ta, tb) = (
                        a["lastUpdatedAt"].as_str().unwrap_or(""),
                        b["lastUpdatedAt"].as_str().unwrap_or(""),
                    );
                    assert!(
                        tb >= ta,
                        "task {id}: a later poll showed an older state: {a} then {b}"
                    );
                }
            }
        }
        pairs
    }
}
