//! The span of every internal gRPC call a node serves, named after the call and carrying the
//! trace id of the MCP request it serves (`taskmesh-trace-id` metadata, see
//! [`taskmesh_rpc::trace`]), so a forwarded request can be followed from the gateway node's
//! log to the leader's. A debug span: it costs nothing unless the log filter asks for it.
//!
//! An `Apply` call names its operation in the `taskmesh-op` metadata entry ([`OPERATION_KEY`]):
//! both spans carry it (`op`, `taskmesh.operation`).
//!
//! A call that carries a sampled `traceparent` (a traced request, see [`taskmesh_telemetry`])
//! also gets an OpenTelemetry server span under it, named after the call, and is served in that
//! span's context: what the call causes (a task's executions, further calls) is traced under it.

use std::task::{Context, Poll};

use futures::future::{BoxFuture, Either};
use taskmesh_telemetry::{KeyValue, Span, SpanKind};
use tonic::codegen::http;
use tracing::instrument::Instrumented;
use tracing::Instrument;

/// The metadata entry in which a `TaskService.Apply` call names its operation (`create`,
/// `cancel`, ...; see `taskmesh_host::Op::name`).
pub const OPERATION_KEY: &str = "taskmesh-op";

/// A service whose calls run inside a `peer` span (`rpc`: the gRPC path, `trace_id`). Wrap a
/// gRPC server's services with `Server::builder().layer(tower::layer::layer_fn(Traced::new))`.
#[derive(Debug, Clone)]
pub struct Traced<S> {
    inner: S,
}

impl<S> Traced<S> {
    /// `inner`, traced.
    pub fn new(inner: S) -> Self {
        Self { inner }
    }
}

impl<S, B> tower::Service<http::Request<B>> for Traced<S>
where
    S: tower::Service<http::Request<B>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future =
        Either<Instrumented<S::Future>, BoxFuture<'static, Result<S::Response, S::Error>>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let op = request
            .headers()
            .get(OPERATION_KEY)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let span = tracing::debug_span!(
            "peer",
            rpc = request.uri().path(),
            op = op.as_deref(),
            trace_id = tracing::field::Empty
        );
        if !span.is_disabled() {
            if let Some(id) = request
                .headers()
                .get(taskmesh_rpc::trace::METADATA_KEY)
                .and_then(|v| v.to_str().ok())
            {
                span.record("trace_id", id);
            }
        }
        let otel = taskmesh_telemetry::enabled()
            .then(|| request.headers().get(taskmesh_telemetry::HEADER))
            .flatten()
            .and_then(|v| v.to_str().ok())
            .and_then(|parent| {
                Span::start_under(SpanKind::Server, Some(parent), || {
                    let path = request.uri().path();
                    let mut attributes = vec![
                        KeyValue::new("rpc.system", "grpc"),
                        KeyValue::new("rpc.method", path.to_owned()),
                    ];
                    if let Some(op) = op {
                        attributes.push(KeyValue::new("taskmesh.operation", op));
                    }
                    (path.trim_start_matches('/').to_owned(), attributes)
                })
            });
        let served = self.inner.call(request).instrument(span);
        match otel {
            None => Either::Left(served),
            Some(otel) => {
                let cx = otel.context();
                Either::Right(Box::pin(async move {
                    let _otel = otel;
                    taskmesh_telemetry::scope(Some(cx), served).await
                }))
            }
        }
    }
}
