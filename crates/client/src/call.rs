//! A plain `tools/call` in flight ([`ToolCall`]), as [`Client::call_tool`](crate::Client::call_tool)
//! returns it: what the server sends about the call (progress, its requests, its log messages)
//! reaches the call's event queue from the connection's incoming messages (`incoming.rs`), and
//! its result reaches the call's answer slot; [`ToolCall::next`] yields the events queued
//! before the result, then the result. [`Steps`] is that ordering, shared with a followed
//! task (`task.rs`).

use std::sync::Arc;

use serde_json::{json, Value};
use taskmesh_mcp::jsonrpc;
use tokio::sync::{mpsc, oneshot};

use crate::{CallEvent, ClientError, Inner};

/// A `tools/call` in flight.
pub struct ToolCall {
    pub(crate) id: i64,
    pub(crate) steps: Steps,
    pub(crate) inner: Arc<Inner>,
}

/// What a call yields: the events the server sent about it, then its outcome, once.
pub(crate) struct Steps {
    pub(crate) events: mpsc::Receiver<CallEvent>,
    pub(crate) result: oneshot::Receiver<Result<Value, ClientError>>,
    /// The outcome, once it came, until the events queued before it are taken.
    pub(crate) outcome: Option<Result<Value, ClientError>>,
    /// The outcome has been handed out (or the call given up).
    pub(crate) ended: bool,
}

impl Steps {
    pub(crate) fn new(
        events: mpsc::Receiver<CallEvent>,
        result: oneshot::Receiver<Result<Value, ClientError>>,
    ) -> Self {
        Self {
            events,
            result,
            outcome: None,
            ended: false,
        }
    }

    /// The next event, or the outcome (the last item); events queued before the outcome come
    /// first. `inner` says why the connection ended when the outcome was lost with it.
    pub(crate) async fn next(&mut self, inner: &Inner) -> Step {
        self.next_or(|| inner.why_closed()).await
    }

    /// [`Steps::next`], with `lost` saying why the outcome is missing when its sender went
    /// away without one.
    pub(crate) async fn next_or(&mut self, lost: impl Fn() -> ClientError) -> Step {
        loop {
            if let Some(outcome) = self.outcome.take() {
                if let Ok(ev) = self.events.try_recv() {
                    self.outcome = Some(outcome);
                    return Step::Event(ev);
                }
                self.ended = true;
                return Step::Done(outcome);
            }
            if self.ended {
                return Step::Done(Err(ClientError::Closed("the call has ended".into())));
            }
            tokio::select! {
                biased;
                Some(ev) = self.events.recv() => return Step::Event(ev),
                r = &mut self.result => {
                    self.outcome = Some(r.unwrap_or_else(|_| Err(lost())));
                }
            }
        }
    }
}

/// What [`ToolCall::next`] yields.
#[derive(Debug)]
pub enum Step {
    /// Something the server sent about the call.
    Event(CallEvent),
    /// The call's outcome: its `CallToolResult`, or why there is none.
    Done(Result<Value, ClientError>),
}

impl ToolCall {
    /// The request id of the call.
    pub fn id(&self) -> i64 {
        self.id
    }

    /// The next event of the call, or its outcome (the last item). Events the server sent
    /// before the result come first.
    pub async fn next(&mut self) -> Step {
        self.steps.next(&self.inner).await
    }

    /// Cancel the call: `notifications/cancelled` with `reason`. The call's outcome is not
    /// awaited.
    pub async fn cancel(mut self, reason: &str) {
        self.steps.ended = true;
        if self.inner.pending.lock().remove(&self.id).is_none() {
            return;
        }
        let n = jsonrpc::notification(
            "notifications/cancelled",
            &json!({ "requestId": self.id, "reason": reason }),
        );
        if let Err(e) = self.inner.notify(n).await {
            tracing::debug!(upstream = %self.inner.name, error = %e, "cancellation not sent");
        }
    }
}

impl Drop for ToolCall {
    /// A call given up before its outcome is cancelled on the server.
    fn drop(&mut self) {
        let was_pending = self.inner.pending.lock().remove(&self.id).is_some();
        if !was_pending || self.steps.ended {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let inner = self.inner.clone();
        let n = jsonrpc::notification(
            "notifications/cancelled",
            &json!({ "requestId": self.id, "reason": "the caller gave up the call" }),
        );
        rt.spawn(async move {
            let _ = inner.notify(n).await;
        });
    }
}
