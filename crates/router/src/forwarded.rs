//! The counters of requests forwarded to other nodes, by target node and outcome
//! (`taskmesh_forwarded_requests_total`): a handle per pair, taken on first use and kept, so
//! that counting a forwarded request is a map read and an atomic add.

use std::collections::HashMap;

use parking_lot::RwLock;
use taskmesh_host::HostError;
use taskmesh_metrics::metrics::{counter, Counter};
use taskmesh_metrics::names;

#[derive(Default)]
pub(crate) struct Forwarded {
    handles: RwLock<HashMap<(u64, &'static str), Counter>>,
}

impl Forwarded {
    /// Count one attempt at node `id` that ended in `result`.
    pub(crate) fn count<T>(&self, id: u64, result: &Result<T, HostError>) {
        let outcome = match result {
            Ok(_) => "ok",
            Err(HostError::NotLeader { .. }) => "not_leader",
            Err(e) if e.retryable() => "unavailable",
            Err(_) => "error",
        };
        if let Some(c) = self.handles.read().get(&(id, outcome)) {
            c.increment(1);
            return;
        }
        let c = counter!(names::FORWARDED, "node" => id.to_string(), "outcome" => outcome);
        c.increment(1);
        self.handles.write().insert((id, outcome), c);
    }
}
