//! One tool of an upstream as a [`Tool`] of this node ([`UpstreamTool`]), made by
//! [`Upstream::discover`] for each tool the upstream lists. Its `call` runs when a task's actor
//! (or a plain call) starts the tool: it takes one of the upstream's call slots, sends the
//! principal and the trace context in headers, and makes attempts (`attempt.rs`) until one
//! ends with an outcome, calling again by the tool's resume policy and following a task the
//! upstream still runs again on a new connection.

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use serde_json::{Map, Value};
use taskmesh_client::{ClientError, HeaderName, HeaderValue};
use taskmesh_mcp::ErrorObject;
use taskmesh_tools::{ResumePolicy, Tool, ToolContext, ToolFuture, ToolSpec};

use crate::attempt::{cancelled, Call};
use crate::Upstream;

/// One tool of an upstream, served by this node.
pub struct UpstreamTool {
    pub(crate) upstream: Arc<Upstream>,
    /// The tool's name upstream (without the prefix).
    pub(crate) remote: String,
    /// The upstream runs calls of it as tasks: they are made task-augmented and followed.
    pub(crate) as_task: bool,
    pub(crate) timeout: Duration,
    pub(crate) spec: ToolSpec,
}

impl Tool for UpstreamTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    /// Its call cannot be made again for an answer of the client's.
    fn reruns_for_input(&self) -> bool {
        false
    }

    /// The upstream checks the arguments against its schema: its error is the call's outcome.
    fn validate(&self, _args: &Map<String, Value>) -> Result<(), ErrorObject> {
        Ok(())
    }

    fn call(&self, args: Map<String, Value>, ctx: ToolContext) -> ToolFuture {
        let up = self.upstream.clone();
        let remote = self.remote.clone();
        let timeout = self.timeout;
        let as_task = self.as_task;
        let attempts = match self.spec.resume {
            ResumePolicy::Rerun => up.cfg.call_attempts,
            ResumePolicy::Fail => 1,
        };
        async move {
            let _permit =
                up.calls.acquire().await.map_err(|_| {
                    ErrorObject::internal(format!("upstream {}: shut down", up.name()))
                })?;
            let mut headers = match &up.principal_header {
                Some(name) => {
                    let value = HeaderValue::try_from(ctx.principal.as_str()).map_err(|_| {
                        ErrorObject::internal(format!(
                            "upstream {}: the principal cannot be sent in header {name}",
                            up.name()
                        ))
                    })?;
                    vec![(name.clone(), value)]
                }
                None => Vec::new(),
            };
            // A traced call: a client span for the upstream's part, whose context the upstream
            // server gets in `traceparent` (every attempt, and every request following its task).
            let mut span = taskmesh_telemetry::Span::start_under(
                taskmesh_telemetry::SpanKind::Client,
                ctx.traceparent.as_deref(),
                || {
                    use taskmesh_telemetry::KeyValue;
                    (
                        format!("tools/call {remote}"),
                        vec![
                            KeyValue::new("mcp.method.name", "tools/call"),
                            KeyValue::new("gen_ai.tool.name", remote.clone()),
                            KeyValue::new("taskmesh.upstream", up.name().to_owned()),
                        ],
                    )
                },
            );
            if let Some(value) = span
                .as_ref()
                .and_then(|s| HeaderValue::try_from(s.traceparent()).ok())
            {
                headers.push((HeaderName::from_static(taskmesh_telemetry::HEADER), value));
            }
            // The upstream task to follow: one an earlier execution handed the call to, then
            // the one this execution's call created.
            let mut follow = ctx.upstream_task.clone();
            let mut attempt = 1;
            let mut follows_again = 0;
            loop {
                let call = Call {
                    remote: &remote,
                    ctx: &ctx,
                    timeout,
                    headers: &headers,
                };
                let result = if as_task {
                    up.attempt_task(&call, args.clone(), &mut follow).await
                } else {
                    up.attempt(&call, args.clone()).await
                };
                let lost = match result {
                    Ok(outcome) => {
                        if let (Some(span), Err(e)) = (span.as_mut(), &outcome) {
                            span.fail(e.message.clone());
                        }
                        return outcome;
                    }
                    Err(lost) => lost,
                };
                if let Some(span) = span.as_mut() {
                    span.set(taskmesh_telemetry::KeyValue::new(
                        "taskmesh.attempt",
                        attempt as i64,
                    ));
                }
                if matches!(lost, ClientError::Closed(_) | ClientError::Transport(_)) {
                    up.suspect();
                }
                // A task the upstream still runs is followed again on a new connection, up to
                // `call_attempts` times: that is not a new call.
                let again = follow.is_some() && follows_again + 1 < up.cfg.call_attempts;
                if !again && attempt >= attempts {
                    let after = if attempts > 1 {
                        format!(" (after {attempts} attempts)")
                    } else {
                        String::new()
                    };
                    let e = ErrorObject::internal(format!("upstream {}: {lost}{after}", up.name()));
                    if let Some(span) = span.as_mut() {
                        span.fail(e.message.clone());
                    }
                    return Err(e);
                }
                let wait = if again {
                    follows_again += 1;
                    up.backoff(follows_again)
                } else {
                    up.backoff(attempt)
                };
                tracing::warn!(upstream = %up.name(), tool = %remote, error = %lost, attempt,
                    follow_again = again, retry_in_ms = wait.as_millis() as u64,
                    "upstream call lost; trying again");
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = ctx.cancel.cancelled() => {
                        return Err(cancelled());
                    }
                }
                if !again {
                    // Calling again (`rerun`): the upstream task, if it still runs, is left.
                    follow = None;
                    attempt += 1;
                    follows_again = 0;
                }
            }
        }
        .boxed()
    }
}
