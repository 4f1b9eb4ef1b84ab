//! The running tool's side of its task ([`ToolIo`]): progress, requests to the client, log
//! messages and an upstream task to follow. The tool calls these from its own tokio task; each
//! becomes a [`TaskMsg`] cast to the task's actor, which answers through the `oneshot` the
//! message carries.

use futures::future::BoxFuture;
use futures::FutureExt;
use ractor::ActorRef;
use serde_json::Value;
use taskmesh_mcp::jsonrpc::ErrorObject;
use taskmesh_mcp::notify::LogMessage;
use taskmesh_tools::{ToolFuture, ToolIo};
use tokio::sync::oneshot;

use super::TaskMsg;

/// The [`ToolIo`] of a task's tool: each call becomes a message to the task's actor.
pub(super) struct ActorIo {
    pub(super) actor: ActorRef<TaskMsg>,
}

impl ToolIo for ActorIo {
    fn progress(&self, progress: f64, total: Option<f64>, message: Option<String>) {
        let _ = self.actor.cast(TaskMsg::Progress {
            progress,
            total,
            message,
        });
    }

    fn request(&self, method: &'static str, params: Value) -> ToolFuture {
        self.outbound(None, method, params)
    }

    fn ask(&self, key: &str, method: &'static str, params: Value) -> ToolFuture {
        self.outbound(Some(key.to_string()), method, params)
    }

    fn log(&self, message: LogMessage) -> BoxFuture<'static, ()> {
        let _ = self.actor.cast(TaskMsg::Log(message));
        Box::pin(async {})
    }

    fn record_upstream_task(
        &self,
        upstream_task: String,
    ) -> BoxFuture<'static, Result<(), String>> {
        let stopped = Err("the task stopped".to_string());
        self.send(
            |reply| TaskMsg::Follow {
                upstream_task,
                reply,
            },
            stopped,
        )
    }
}

impl ActorIo {
    /// A request to the client, under the tool's `key` when it gave one.
    fn outbound(&self, key: Option<String>, method: &'static str, params: Value) -> ToolFuture {
        let stopped = Err(ErrorObject::internal("the task stopped"));
        self.send(
            |reply| TaskMsg::Outbound {
                key,
                method,
                params,
                reply,
            },
            stopped,
        )
    }

    /// Cast the message `msg` makes around a reply channel and wait for the actor's answer;
    /// `stopped` when the actor is gone or drops the message unanswered.
    fn send<T: Send + 'static>(
        &self,
        msg: impl FnOnce(oneshot::Sender<T>) -> TaskMsg,
        stopped: T,
    ) -> BoxFuture<'static, T> {
        let (reply, rx) = oneshot::channel();
        let sent = self.actor.cast(msg(reply)).is_ok();
        async move {
            if sent {
                rx.await.unwrap_or(stopped)
            } else {
                stopped
            }
        }
        .boxed()
    }
}
