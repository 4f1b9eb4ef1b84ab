//! Audit events: one structured log event, target `audit`, for each act that creates, ends,
//! reads the outcome of, or is refused access to a task, and for each refused credential.
//!
//! Every event carries `event`, `principal`, `issuer` (empty for static tokens and open mode),
//! `node` (the node that took the request), `method`, `request_id` (the JSON-RPC id), `task_id`
//! (empty when no task is concerned) and `outcome` (`ok`, or what refused it). The facts of the
//! request are set once per request ([`scope`]) and read by [`record`], so the code that acts
//! names only what it did. With `log.format = "json"` each event is one JSON line
//! (docs/security.md, "Audit log").

use std::future::Future;
use std::sync::Arc;

/// What the request an event belongs to says about itself.
#[derive(Debug, Clone, Default)]
pub(crate) struct RequestFacts {
    pub(crate) principal: String,
    pub(crate) issuer: Option<String>,
    pub(crate) node: u64,
    pub(crate) method: String,
    pub(crate) request_id: String,
}

/// The methods whose requests record audit events, and so carry their facts ([`scope`]).
pub(crate) const AUDITED_METHODS: [&str; 3] = ["tools/call", "tasks/cancel", "tasks/result"];

tokio::task_local! {
    static REQUEST: Arc<RequestFacts>;
}

/// Run `f` as the request `facts` describe (`None`: a request that records no audit event).
///
/// Not an `async fn`: one would hold `f` twice (as its argument and as what it awaits), which
/// doubles the size of every request's future it wraps.
pub(crate) fn scope<F: Future>(
    facts: Option<RequestFacts>,
    f: F,
) -> impl Future<Output = F::Output> {
    match facts {
        Some(facts) => futures::future::Either::Left(REQUEST.scope(Arc::new(facts), f)),
        None => futures::future::Either::Right(f),
    }
}

/// The facts of the request being served (to carry into a task it spawns).
pub(crate) fn current() -> Arc<RequestFacts> {
    REQUEST.try_with(Arc::clone).unwrap_or_default()
}

/// Record `event` about `task_id` with `outcome`, for the request being served.
pub(crate) fn record(event: &'static str, task_id: &str, outcome: &str) {
    record_for(&current(), event, task_id, outcome);
}

/// Record `event` about `task_id` with `outcome`, for the request `facts` describe.
pub(crate) fn record_for(facts: &RequestFacts, event: &'static str, task_id: &str, outcome: &str) {
    tracing::info!(
        target: "audit",
        event,
        principal = %facts.principal,
        issuer = facts.issuer.as_deref().unwrap_or(""),
        node = facts.node,
        method = %facts.method,
        request_id = %facts.request_id,
        task_id,
        outcome,
        "{event}"
    );
}

/// A warning-level audit `event` that no request's facts describe (a caller whose token did
/// not verify, a burst of lookups): about `principal` (empty when unknown) and `task_id`
/// (empty when none), with `outcome`, and the caller's address when known.
pub(crate) fn warn(
    event: &'static str,
    node: u64,
    principal: &str,
    task_id: &str,
    outcome: &str,
    peer: Option<std::net::IpAddr>,
) {
    tracing::warn!(
        target: "audit",
        event,
        principal,
        issuer = "",
        node,
        method = "",
        request_id = "",
        task_id,
        outcome,
        peer = ?peer,
        "{outcome}"
    );
}

/// The outcome of a refused request: its JSON-RPC error code.
pub(crate) fn refused(code: i64) -> String {
    format!("error {code}")
}
