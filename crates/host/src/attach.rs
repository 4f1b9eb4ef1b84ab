//! A live task's two ways to the client: a `tasks/result` reader attaching to it, and a
//! client's answer to a request the task sent reaching its actor.
//!
//! The router calls [`Host::attach`] and [`Host::deliver_response`] for a shard this node
//! leads (directly, or forwarded by another node through the task service).

use serde_json::Value;
use taskmesh_mcp::ErrorObject;

use tokio::sync::{mpsc, oneshot};

use crate::{Attachment, Host, HostError, TaskMsg, TaskRead};

impl Host {
    /// Attach a `tasks/result` reader to a task.
    pub async fn attach(
        &self,
        shard_id: u32,
        task_id: &str,
        owner: &str,
    ) -> Result<Attachment, HostError> {
        // Register the waiter before reading, so a completion between the two is not missed.
        let (done_tx, done_rx) = oneshot::channel();
        self.inner
            .waiters
            .lock()
            .entry(task_id.to_string())
            .or_default()
            .push(done_tx);
        let task = match self.read_outcome(shard_id, task_id, owner).await {
            Ok(TaskRead::Task(task) | TaskRead::Waiting { task, .. }) => task,
            Ok(TaskRead::Ended(terminal)) => {
                drop(done_rx);
                self.drop_closed_waiters(task_id);
                return Ok(Attachment::Terminal(terminal));
            }
            Err(e) => {
                drop(done_rx);
                self.drop_closed_waiters(task_id);
                return Err(e);
            }
        };
        // Readers that went away earlier leave closed waiters behind: sweep them.
        self.drop_closed_waiters(task_id);
        let (tx, messages) = mpsc::channel(self.inner.cfg.attach_buffer.max(1));
        if let Some(actor) = self.actor(task_id) {
            let _ = actor.cast(TaskMsg::Attach(tx));
        }
        Ok(Attachment::Live {
            task,
            messages,
            done: done_rx,
        })
    }

    /// Route a client's answer to an elicitation or sampling request to the task waiting on it.
    /// Only the task's owner may answer. Returns whether a live task took it.
    pub fn deliver_response(
        &self,
        shard_id: u32,
        task_id: &str,
        owner: &str,
        request_id: String,
        outcome: Result<Value, ErrorObject>,
    ) -> bool {
        let owned = self
            .shard(shard_id)
            .map(|s| s.read_local(|st| st.get(task_id).is_some_and(|r| r.owner == owner)))
            .unwrap_or(false);
        if !owned {
            return false;
        }
        match self.actor(task_id) {
            Some(actor) => actor
                .cast(TaskMsg::Response {
                    request_id,
                    outcome,
                })
                .is_ok(),
            None => false,
        }
    }
    /// The requests to the client that `owner`'s live task `task_id` waits on, as the JSON-RPC
    /// requests it sent, in order; none for a task that is not live here or not `owner`'s.
    /// `NotLeader` when this node does not lead the shard.
    pub async fn pending_requests(
        &self,
        shard_id: u32,
        task_id: &str,
        owner: &str,
    ) -> Result<Vec<std::sync::Arc<Vec<u8>>>, HostError> {
        let shard = self.shard(shard_id)?;
        if !shard.is_leader() {
            return Err(HostError::NotLeader {
                shard: shard_id,
                leader_hint: shard.leadership().borrow().leader,
            });
        }
        if !shard.read_local(|st| st.get(task_id).is_some_and(|r| r.owner == owner)) {
            return Ok(Vec::new());
        }
        Ok(self.waiting_on(task_id).await)
    }

    /// The requests the actor of `task_id` on this node waits on; none without an actor.
    pub(crate) async fn waiting_on(&self, task_id: &str) -> Vec<std::sync::Arc<Vec<u8>>> {
        let Some(actor) = self.actor(task_id) else {
            return Vec::new();
        };
        let (reply, answer) = oneshot::channel();
        if actor.cast(TaskMsg::Pending(reply)).is_err() {
            return Vec::new();
        }
        answer.await.unwrap_or_default()
    }

    /// A GET stream of the task's session asks to carry the task's request `request_id`;
    /// whether it is the one to send it (the first claim of a request that no other stream
    /// carries). False when the task has no execution here or the request is not pending.
    /// With `release`, a granted claim is given back (the stream could not send the request)
    /// and the answer is false.
    pub async fn claim(&self, task_id: &str, request_id: String, release: bool) -> bool {
        let Some(actor) = self.actor(task_id) else {
            return false;
        };
        let (reply, answer) = oneshot::channel();
        let msg = TaskMsg::Claim {
            request_id,
            release,
            reply,
        };
        if actor.cast(msg).is_err() {
            return false;
        }
        answer.await.unwrap_or(false)
    }

    fn drop_closed_waiters(&self, task_id: &str) {
        let mut w = self.inner.waiters.lock();
        if let Some(list) = w.get_mut(task_id) {
            list.retain(|s| !s.is_closed());
            if list.is_empty() {
                w.remove(task_id);
            }
        }
    }
}
