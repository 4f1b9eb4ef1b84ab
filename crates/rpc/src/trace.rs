//! One id per MCP request, carried to every node the request reaches, so that its log lines
//! can be found on each of them.
//!
//! The gateway opens a `tracing` span per MCP request and, when that span is enabled, gives the
//! request a fresh trace id ([`new_id`]) and runs it in [`scope`]. Every call a node makes to a
//! peer on the request's behalf carries the id: in the [`METADATA_KEY`] gRPC metadata of unary
//! and streaming calls ([`request`]), and in the `trace_id` field of each read batched onto a
//! `ReadTasks` stream (whose stream outlives any one request). The peer opens its own span with
//! the same id. With the spans disabled (the default log level) no id is made and nothing is
//! sent: following requests costs nothing until it is asked for.

use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// The gRPC metadata key of the trace id: 16 lowercase hex digits.
pub const METADATA_KEY: &str = "taskmesh-trace-id";

tokio::task_local! {
    static TRACE_ID: u64;
}

/// A fresh trace id: a per-process random start plus a counter, so ids from different nodes
/// and different requests do not collide in practice. Never 0 (0 means "none" on the wire).
pub fn new_id() -> u64 {
    static START: OnceLock<u64> = OnceLock::new();
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let start = *START.get_or_init(|| {
        std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish()
    });
    match start.wrapping_add(NEXT.fetch_add(1, Ordering::Relaxed)) {
        0 => 1,
        id => id,
    }
}

/// Run `fut` as the request traced by `id` (`None`: untraced, runs as is).
///
/// Not an `async fn`: one would hold `fut` twice (as its argument and as what it awaits), which
/// doubles the size of every request's future it wraps.
pub fn scope<F: Future>(id: Option<u64>, fut: F) -> impl Future<Output = F::Output> {
    match id {
        Some(id) => futures::future::Either::Left(TRACE_ID.scope(id, fut)),
        None => futures::future::Either::Right(fut),
    }
}

/// The trace id of the request this task is working for, if it is traced.
pub fn current() -> Option<u64> {
    TRACE_ID.try_with(|id| *id).ok()
}

/// How a trace id is written: 16 lowercase hex digits.
pub fn format(id: u64) -> String {
    format!("{id:016x}")
}

/// A request for a peer carrying the current trace id, if any, and the context of the current
/// OpenTelemetry span, if the request is sampled (`traceparent` metadata, see
/// [`taskmesh_telemetry`]).
pub fn request<T>(message: T) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    if let Some(id) = current() {
        if let Ok(value) = format(id).parse() {
            request.metadata_mut().insert(METADATA_KEY, value);
        }
    }
    if let Some(parent) = taskmesh_telemetry::current_traceparent() {
        if let Ok(value) = parent.parse() {
            request
                .metadata_mut()
                .insert(taskmesh_telemetry::HEADER, value);
        }
    }
    request
}

/// The trace id a peer's request carries, if any (an unparsable one is ignored).
pub fn of<T>(request: &tonic::Request<T>) -> Option<u64> {
    let text = request.metadata().get(METADATA_KEY)?.to_str().ok()?;
    u64::from_str_radix(text, 16).ok().filter(|id| *id != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_id_travels_in_metadata_only_inside_its_scope() {
        let outside = request(());
        assert_eq!(of(&outside), None);
        let id = new_id();
        let inside = scope(Some(id), async { request(()) }).await;
        assert_eq!(of(&inside), Some(id));
        assert_eq!(
            inside
                .metadata()
                .get(METADATA_KEY)
                .unwrap()
                .to_str()
                .unwrap(),
            format(id)
        );
        assert_eq!(scope(None, async { current() }).await, None);
    }

    #[test]
    fn ids_differ_and_are_never_zero() {
        let a = new_id();
        let b = new_id();
        assert_ne!(a, b);
        assert_ne!(a, 0);
        let mut garbage = tonic::Request::new(());
        garbage
            .metadata_mut()
            .insert(METADATA_KEY, "not-hex".parse().unwrap());
        assert_eq!(of(&garbage), None);
    }
}
