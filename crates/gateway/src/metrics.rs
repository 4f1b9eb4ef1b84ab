//! What the gateway counts (docs/operations.md, "Metrics"): requests by method and outcome
//! with their latency, refusals by cause, tasks created and cancels; and, at each scrape, the
//! figures that are a state (live tasks, SSE streams, each shard's Raft state, readiness).
//!
//! The request path keeps one set of handles per method (taken once, after the node installed
//! the recorder), so counting a poll is two atomic adds and a histogram sample.

use std::sync::LazyLock;
use std::time::Instant;

use axum::response::Response;
use taskmesh_metrics::metrics::{counter, gauge, histogram, Counter, Histogram};
use taskmesh_metrics::names;

/// The methods counted by name; any other is counted as `other`.
const METHODS: &[&str] = &[
    "initialize",
    "ping",
    "tools/list",
    "tools/call",
    "tasks/get",
    "tasks/result",
    "tasks/list",
    "tasks/cancel",
    "tasks/update",
    "subscriptions/listen",
    "server/discover",
    "logging/setLevel",
    "notifications/initialized",
    "notifications/cancelled",
    "(response)",
    "other",
];

/// The handles of one method.
struct MethodHandles {
    ok: Counter,
    error: Counter,
    http_error: Counter,
    duration: Histogram,
}

static BY_METHOD: LazyLock<Vec<MethodHandles>> = LazyLock::new(|| {
    METHODS
        .iter()
        .map(|m| MethodHandles {
            ok: counter!(names::MCP_REQUESTS, "method" => *m, "outcome" => "ok"),
            error: counter!(names::MCP_REQUESTS, "method" => *m, "outcome" => "error"),
            http_error: counter!(names::MCP_REQUESTS, "method" => *m, "outcome" => "http_error"),
            duration: histogram!(names::MCP_REQUEST_DURATION, "method" => *m),
        })
        .collect()
});

/// Take the request path's handles now, so that every series exists (at 0) from the first
/// scrape. Effective only once the node installed the recorder.
pub(crate) fn register() {
    LazyLock::force(&BY_METHOD);
    LazyLock::force(&CREATED);
}

static CREATED: LazyLock<Counter> = LazyLock::new(|| counter!(names::TASKS_CREATED));

/// The index of `method` in [`METHODS`] (`other` when it is not listed).
pub(crate) fn method_index(method: &str) -> usize {
    METHODS
        .iter()
        .position(|m| *m == method)
        .unwrap_or(METHODS.len() - 1)
}

/// A marker in a response's extensions: its body is a JSON-RPC error.
#[derive(Clone, Copy)]
pub(crate) struct RpcError;

/// Mark `response` as a JSON-RPC error when `body` (a JSON-RPC answer this node serialised:
/// `{"jsonrpc":"2.0","id":ID,` then `"result"` or `"error"`) is one.
pub(crate) fn mark(response: &mut Response, body: &[u8]) {
    if is_error(body) {
        response.extensions_mut().insert(RpcError);
    }
}

/// Whether a JSON-RPC answer serialised by this node carries `error` (read from the key that
/// follows the id, without parsing the rest).
fn is_error(body: &[u8]) -> bool {
    const HEAD: &[u8] = b"{\"jsonrpc\":\"2.0\",\"id\":";
    let Some(rest) = body.strip_prefix(HEAD) else {
        return false;
    };
    let after_id = if rest.first() == Some(&b'"') {
        // A string id: up to its closing quote (escapes skipped).
        let mut i = 1;
        loop {
            match rest.get(i) {
                None => return false,
                Some(b'\\') => i += 2,
                Some(b'"') => break i + 1,
                Some(_) => i += 1,
            }
        }
    } else {
        match rest.iter().position(|b| *b == b',') {
            Some(i) => i,
            None => return false,
        }
    };
    rest.get(after_id..)
        .is_some_and(|r| r.starts_with(b",\"error\""))
}

/// Count the answer to a request of method number `method` that started at `started`.
pub(crate) fn answered(method: usize, started: Instant, response: &Response) {
    let Some(h) = BY_METHOD.get(method) else {
        return;
    };
    h.duration.record(started.elapsed().as_secs_f64());
    let counter = if !response.status().is_success() && response.status().as_u16() >= 400 {
        if response.extensions().get::<RpcError>().is_some() {
            &h.error
        } else {
            &h.http_error
        }
    } else if response.extensions().get::<RpcError>().is_some() {
        &h.error
    } else {
        &h.ok
    };
    counter.increment(1);
}

/// Count a request refused before any method ran (`status`, `cause`).
pub(crate) fn refused(status: u16, cause: &'static str) {
    counter!(names::HTTP_REFUSALS, "status" => status.to_string(), "cause" => cause).increment(1);
}

/// Count a plain call run as a task for a client that does not speak tasks.
pub(crate) fn plain_call_as_task() {
    counter!(names::PLAIN_CALLS_AS_TASKS).increment(1);
}

/// Count a plain call answered with its task at the hand-off.
pub(crate) fn handed_off() {
    counter!(names::HANDOFFS).increment(1);
}

/// Count a task this gateway created.
pub(crate) fn tasks_created() {
    CREATED.increment(1);
}

/// Count a `tasks/cancel` by its outcome.
pub(crate) fn cancel<T>(r: &Result<T, taskmesh_host::HostError>) {
    let outcome = match r {
        Ok(_) => "ok",
        Err(taskmesh_host::HostError::Terminal(_)) => "terminal",
        Err(taskmesh_host::HostError::NotFound) => "not_found",
        Err(_) => "error",
    };
    counter!(names::TASK_CANCELS, "outcome" => outcome).increment(1);
}

/// Set the gauges that are a state of this node, read now: live tasks, open SSE streams,
/// each hosted shard's Raft figures, and readiness.
pub(crate) fn refresh(gw: &crate::Gateway, ready: bool) {
    let host = gw.router.host();
    gauge!(names::LIVE_TASKS).set(host.live_tasks() as f64);
    gauge!(names::SSE_STREAMS).set(gw.slots.open() as f64);
    gauge!(names::INFLIGHT).set(gw.inflight.total() as f64);
    gauge!(names::SESSIONS_WITH_STREAMS).set(gw.sessions.with_streams() as f64);
    gauge!(names::READY).set(if ready { 1.0 } else { 0.0 });
    for s in host.shard_status() {
        let shard = s.shard.to_string();
        let index = |i: Option<u64>| i.unwrap_or(0) as f64;
        gauge!(names::SHARD_TASKS, "shard" => shard.clone()).set(s.tasks as f64);
        gauge!(names::RAFT_LEADER, "shard" => shard.clone()).set(if s.is_leader {
            1.0
        } else {
            0.0
        });
        gauge!(names::RAFT_TERM, "shard" => shard.clone()).set(s.term as f64);
        gauge!(names::RAFT_APPLIED_INDEX, "shard" => shard.clone())
            .set(index(s.last_applied_index));
        gauge!(names::RAFT_LAST_LOG_INDEX, "shard" => shard.clone()).set(index(s.last_log_index));
        gauge!(names::RAFT_COMMITTED_INDEX, "shard" => shard.clone()).set(index(s.committed_index));
        gauge!(names::RAFT_PROPOSALS_IN_FLIGHT, "shard" => shard.clone())
            .set(s.proposals_in_flight as f64);
        for (follower, lag) in &s.follower_lag {
            gauge!(names::RAFT_FOLLOWER_LAG, "shard" => shard.clone(), "follower" => follower.to_string())
                .set(*lag as f64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use taskmesh_mcp::jsonrpc::{error_response, response, ErrorObject, RequestId};

    #[test]
    fn an_error_answer_is_told_from_a_result_by_the_key_after_its_id() {
        let err = ErrorObject::new(-32602, "bad");
        for id in [
            RequestId::Number(7),
            RequestId::String("a\"b,\"error\"".into()),
            RequestId::String(String::new()),
        ] {
            assert!(is_error(&error_response(Some(&id), &err)), "{id:?}");
            let ok = response(&id, &serde_json::json!({"error": "inside the result"}));
            assert!(!is_error(&ok), "{id:?}");
        }
        assert!(is_error(&error_response(None, &err)));
        assert!(!is_error(b"not json"));
        assert_eq!(method_index("tasks/get"), 4);
        assert_eq!(METHODS[method_index("nope")], "other");
    }
}
