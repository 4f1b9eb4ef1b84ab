//! What the server sends, as the connection hands it over (the stdio reader's lines, the
//! HTTP responses' and GET stream's SSE events): an answer goes to its request, progress to
//! the call or followed task its token names, a log message or a request to the call it
//! belongs to (see the crate doc), `notifications/tools/list_changed` to
//! [`Client::tools_changed`](crate::Client::tools_changed); `ping` is answered at once, and a
//! request no call takes is answered with an error.

use std::sync::Arc;

use serde_json::{json, Value};
use taskmesh_mcp::jsonrpc::{self, ErrorObject, Message, RequestId};
use tokio::sync::{mpsc, oneshot};

use crate::{CallEvent, ClientError, Inner};

impl Inner {
    /// One message from the server; `origin` is the request whose HTTP response carried it.
    pub(crate) fn handle(self: &Arc<Self>, raw: &[u8], origin: Option<i64>) {
        let msg = match jsonrpc::parse_message(raw) {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(upstream = %self.name, error = %e, "the upstream sent a message that is not JSON-RPC; ignored");
                return;
            }
        };
        match msg {
            Message::Response { id, outcome } => {
                let RequestId::Number(n) = id else {
                    tracing::debug!(upstream = %self.name, %id, "answer to no request of ours");
                    return;
                };
                if let Some(p) = self.pending.lock().remove(&n) {
                    let _ = p.reply.send(outcome.map_err(ClientError::Rpc));
                }
            }
            Message::Notification { method, params } => {
                let params = params.unwrap_or(Value::Null);
                match method.as_str() {
                    "notifications/progress" => self.progress(&params),
                    "notifications/message" => {
                        let follower = self.follows.lock().of_params(&params);
                        if let Some(tx) = follower.or_else(|| self.call_of(origin)) {
                            let _ = tx.try_send(CallEvent::Log(params));
                        } else {
                            tracing::info!(upstream = %self.name, message = %params, "upstream log message");
                        }
                    }
                    "notifications/tasks/status" => {
                        if let Some(id) = params["taskId"].as_str() {
                            self.follows.lock().wake(id);
                        }
                    }
                    "notifications/tools/list_changed" => {
                        self.tools_changed.send_modify(|n| *n += 1);
                    }
                    other => {
                        tracing::debug!(upstream = %self.name, method = other, "upstream notification ignored")
                    }
                }
            }
            Message::Request { id, method, params } => {
                self.server_request(id, method, params, origin)
            }
        }
    }

    fn progress(&self, params: &Value) {
        let token = match &params["progressToken"] {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let Some(progress) = params["progress"].as_f64() else {
            return;
        };
        let tx = self
            .pending
            .lock()
            .values()
            .find(|p| p.token.as_deref() == Some(token.as_str()))
            .and_then(|p| p.events.clone());
        let tx = tx.or_else(|| self.follows.lock().of_token(&token));
        if let Some(tx) = tx {
            let _ = tx.try_send(CallEvent::Progress {
                progress,
                total: params["total"].as_f64(),
                message: params["message"].as_str().map(str::to_string),
            });
        }
    }

    /// The call a request or log message belongs to: the one whose response stream carried
    /// it, else the only call in flight.
    fn call_of(&self, origin: Option<i64>) -> Option<mpsc::Sender<CallEvent>> {
        let pending = self.pending.lock();
        if let Some(p) = origin.and_then(|o| pending.get(&o)) {
            return p.events.clone();
        }
        let mut calls = pending.values().filter_map(|p| p.events.as_ref());
        match (calls.next(), calls.next()) {
            (Some(only), None) => Some(only.clone()),
            _ => None,
        }
    }

    fn server_request(
        self: &Arc<Self>,
        id: RequestId,
        method: String,
        params: Option<Value>,
        origin: Option<i64>,
    ) {
        if method == "ping" {
            let inner = self.clone();
            tokio::spawn(async move {
                let _ = inner.notify(jsonrpc::response(&id, &json!({}))).await;
            });
            return;
        }
        let params = params.unwrap_or(json!({}));
        if let Some(receiver) = self.receiver.clone() {
            if method.starts_with("tasks/") {
                // About a task this client runs for the server.
                let inner = self.clone();
                tokio::spawn(async move {
                    let outcome = receiver
                        .answer(&method, &params)
                        .await
                        .unwrap_or_else(|| Err(ErrorObject::method_not_found(&method)));
                    inner.answer(&id, outcome).await;
                });
                return;
            }
            let asks = matches!(
                method.as_str(),
                "elicitation/create" | "sampling/createMessage"
            );
            if let (true, Some(task)) = (asks, params.get("task").filter(|t| t.is_object())) {
                // Run it as a task: answered now with the task, its result the caller's answer.
                let created = receiver.create(task);
                let inner = self.clone();
                let answer = created
                    .as_ref()
                    .map(|c| c.answer.clone())
                    .map_err(Clone::clone);
                tokio::spawn(async move { inner.answer(&id, answer).await });
                if let Ok(created) = created {
                    self.hand_over(method, params, created.result, origin);
                }
                return;
            }
        }
        let (reply, answer) = oneshot::channel();
        let taken = self.hand_over(method.clone(), params, reply, origin);
        let inner = self.clone();
        tokio::spawn(async move {
            let outcome = if taken {
                answer
                    .await
                    .unwrap_or_else(|_| Err(ErrorObject::internal("the request was not answered")))
            } else {
                Err(ErrorObject::method_not_found(&method))
            };
            inner.answer(&id, outcome).await;
        });
    }

    /// Hand a request of the server to the call it belongs to, whose answer goes to `reply`;
    /// whether a call took it (else `reply` gets `-32601`). A request about a task that no
    /// follower follows yet waits up to [`crate::task::PARK_GRACE`] for its follower to start.
    fn hand_over(
        self: &Arc<Self>,
        method: String,
        params: Value,
        reply: oneshot::Sender<Result<Value, ErrorObject>>,
        origin: Option<i64>,
    ) -> bool {
        let handler = self.handler.lock().clone();
        if let Some(handler) = handler {
            tokio::spawn(async move {
                let _ = reply.send(handler(method, params).await);
            });
            return true;
        }
        let follower = self.follows.lock().of_params(&params);
        let target = follower.or_else(|| self.call_of(origin));
        let not_found = ErrorObject::method_not_found(&method);
        let event = CallEvent::Request {
            method,
            params,
            reply,
        };
        let Some(tx) = target else {
            return self.park(event, not_found);
        };
        match tx.try_send(event) {
            Ok(()) => true,
            Err(
                mpsc::error::TrySendError::Full(event) | mpsc::error::TrySendError::Closed(event),
            ) => {
                refuse(event, not_found);
                false
            }
        }
    }

    /// Keep a request that no call took for the follower of the task it is about, which may not
    /// have started yet (the server can ask as soon as it created the task, on another stream
    /// than the one that carries the creation's answer); refused after
    /// [`crate::task::PARK_GRACE`] if none starts. Whether it was kept (else it is refused now).
    fn park(self: &Arc<Self>, event: CallEvent, not_found: ErrorObject) -> bool {
        let CallEvent::Request { params, .. } = &event else {
            return false;
        };
        let Some(task_id) = crate::task::related_task(params).map(str::to_owned) else {
            refuse(event, not_found);
            return false;
        };
        self.follows.lock().park(&task_id, event);
        let inner = Arc::downgrade(self);
        tokio::spawn(async move {
            tokio::time::sleep(crate::task::PARK_GRACE).await;
            if let Some(inner) = inner.upgrade() {
                for late in inner.follows.lock().unpark(&task_id) {
                    refuse(late, not_found.clone());
                }
            }
        });
        true
    }

    /// Send the answer to the server's request `id`.
    async fn answer(&self, id: &RequestId, outcome: Result<Value, ErrorObject>) {
        let json = match outcome {
            Ok(v) => jsonrpc::response(id, &v),
            Err(e) => jsonrpc::error_response(Some(id), &e),
        };
        if let Err(e) = self.notify(json).await {
            tracing::debug!(upstream = %self.name, error = %e, "answer to the server's request not sent");
        }
    }
}

/// Answer a request no call took with `error`.
pub(crate) fn refuse(event: CallEvent, error: ErrorObject) {
    if let CallEvent::Request { reply, .. } = event {
        let _ = reply.send(Err(error));
    }
}
