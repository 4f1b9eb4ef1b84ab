//! What the leader of a shard answers, one interface for both places it can be: this node's
//! [`Host`] (in-process) or another node reached through [`Peers`] (`taskmesh.v1.TaskService`).
//! The router picks a [`Target`] and makes one call; a new task operation is written once here
//! and once on each side, never per route.

use std::future::Future;

use serde_json::Value;
use taskmesh_host::{Attachment, Created, Host, HostError, NewTask};
use taskmesh_mcp::ErrorObject;
use taskmesh_task::TaskView;

use crate::remote::Peers;

/// The task operations of a shard's leader. Every error is a [`HostError`] with the same
/// meaning wherever the leader runs (see [`HostError::retryable`]).
pub trait ShardLeader {
    /// Create `new` (idempotent by its task id) and start its execution.
    fn create(
        &self,
        shard: u32,
        new: &NewTask,
    ) -> impl Future<Output = Result<Created, HostError>> + Send;

    /// A linearizable read of one of `owner`'s tasks.
    fn get(
        &self,
        shard: u32,
        task_id: &str,
        owner: &str,
    ) -> impl Future<Output = Result<TaskView, HostError>> + Send;

    /// Cancel one of `owner`'s tasks; `cancelled` is committed before this returns.
    fn cancel(
        &self,
        shard: u32,
        task_id: &str,
        owner: &str,
    ) -> impl Future<Output = Result<TaskView, HostError>> + Send;

    /// Up to `limit` of `owner`'s tasks on `shard` with ids after `after`, in id order.
    fn list(
        &self,
        shard: u32,
        owner: &str,
        after: Option<&str>,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<TaskView>, HostError>> + Send;

    /// Attach a `tasks/result` reader to one of `owner`'s tasks.
    fn attach(
        &self,
        shard: u32,
        task_id: &str,
        owner: &str,
    ) -> impl Future<Output = Result<Attachment, HostError>> + Send;

    /// Hand a client's answer to request `request_id` to the task that asked; whether a live
    /// task took it.
    fn deliver_response(
        &self,
        shard: u32,
        task_id: &str,
        owner: &str,
        request_id: &str,
        outcome: Result<Value, ErrorObject>,
    ) -> impl Future<Output = Result<bool, HostError>> + Send;

    /// The voters and learners of `shard`'s group.
    fn members(
        &self,
        shard: u32,
    ) -> impl Future<Output = Result<(Vec<u64>, Vec<u64>), HostError>> + Send;
}

impl ShardLeader for Host {
    async fn create(&self, shard: u32, new: &NewTask) -> Result<Created, HostError> {
        Host::create(self, shard, new.clone()).await
    }

    async fn get(&self, shard: u32, task_id: &str, owner: &str) -> Result<TaskView, HostError> {
        Host::get(self, shard, task_id, owner).await
    }

    async fn cancel(&self, shard: u32, task_id: &str, owner: &str) -> Result<TaskView, HostError> {
        Host::cancel(self, shard, task_id, owner).await
    }

    async fn list(
        &self,
        shard: u32,
        owner: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<TaskView>, HostError> {
        Host::list(self, shard, owner, after, limit).await
    }

    async fn attach(
        &self,
        shard: u32,
        task_id: &str,
        owner: &str,
    ) -> Result<Attachment, HostError> {
        Host::attach(self, shard, task_id, owner).await
    }

    async fn deliver_response(
        &self,
        shard: u32,
        task_id: &str,
        owner: &str,
        request_id: &str,
        outcome: Result<Value, ErrorObject>,
    ) -> Result<bool, HostError> {
        Ok(Host::deliver_response(
            self,
            shard,
            task_id,
            owner,
            request_id.to_string(),
            outcome,
        ))
    }

    async fn members(&self, shard: u32) -> Result<(Vec<u64>, Vec<u64>), HostError> {
        Host::members(self, shard)
    }
}

/// Another node, as a shard's leader: its `TaskService` through `peers`.
#[derive(Clone, Copy)]
pub struct RemoteNode<'a> {
    /// The channels to the other nodes that the calls go through.
    pub peers: &'a Peers,
    /// Id of the node the calls go to (the one believed to lead the shard).
    pub id: u64,
}

impl ShardLeader for RemoteNode<'_> {
    async fn create(&self, shard: u32, new: &NewTask) -> Result<Created, HostError> {
        self.peers.create(self.id, shard, new).await
    }

    async fn get(&self, shard: u32, task_id: &str, owner: &str) -> Result<TaskView, HostError> {
        self.peers.get(self.id, shard, task_id, owner).await
    }

    async fn cancel(&self, shard: u32, task_id: &str, owner: &str) -> Result<TaskView, HostError> {
        self.peers.cancel(self.id, shard, task_id, owner).await
    }

    async fn list(
        &self,
        shard: u32,
        owner: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<TaskView>, HostError> {
        self.peers.list(self.id, shard, owner, after, limit).await
    }

    async fn attach(
        &self,
        shard: u32,
        task_id: &str,
        owner: &str,
    ) -> Result<Attachment, HostError> {
        self.peers.attach(self.id, shard, task_id, owner).await
    }

    async fn deliver_response(
        &self,
        shard: u32,
        task_id: &str,
        owner: &str,
        request_id: &str,
        outcome: Result<Value, ErrorObject>,
    ) -> Result<bool, HostError> {
        self.peers
            .deliver_response(self.id, shard, task_id, owner, request_id, outcome)
            .await
    }

    async fn members(&self, shard: u32) -> Result<(Vec<u64>, Vec<u64>), HostError> {
        self.peers.members(self.id, shard).await
    }
}

/// Where the router sends one attempt of a request.
#[derive(Clone, Copy)]
pub enum Target<'a> {
    /// This node leads the shard (or the router has no peers).
    Local(&'a Host),
    /// Another node leads it (as far as the router knows).
    Remote(RemoteNode<'a>),
}

impl ShardLeader for Target<'_> {
    async fn create(&self, shard: u32, new: &NewTask) -> Result<Created, HostError> {
        match self {
            Target::Local(h) => ShardLeader::create(*h, shard, new).await,
            Target::Remote(r) => r.create(shard, new).await,
        }
    }

    async fn get(&self, shard: u32, task_id: &str, owner: &str) -> Result<TaskView, HostError> {
        match self {
            Target::Local(h) => ShardLeader::get(*h, shard, task_id, owner).await,
            Target::Remote(r) => r.get(shard, task_id, owner).await,
        }
    }

    async fn cancel(&self, shard: u32, task_id: &str, owner: &str) -> Result<TaskView, HostError> {
        match self {
            Target::Local(h) => ShardLeader::cancel(*h, shard, task_id, owner).await,
            Target::Remote(r) => r.cancel(shard, task_id, owner).await,
        }
    }

    async fn list(
        &self,
        shard: u32,
        owner: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<TaskView>, HostError> {
        match self {
            Target::Local(h) => ShardLeader::list(*h, shard, owner, after, limit).await,
            Target::Remote(r) => r.list(shard, owner, after, limit).await,
        }
    }

    async fn attach(
        &self,
        shard: u32,
        task_id: &str,
        owner: &str,
    ) -> Result<Attachment, HostError> {
        match self {
            Target::Local(h) => ShardLeader::attach(*h, shard, task_id, owner).await,
            Target::Remote(r) => r.attach(shard, task_id, owner).await,
        }
    }

    async fn deliver_response(
        &self,
        shard: u32,
        task_id: &str,
        owner: &str,
        request_id: &str,
        outcome: Result<Value, ErrorObject>,
    ) -> Result<bool, HostError> {
        match self {
            Target::Local(h) => {
                ShardLeader::deliver_response(*h, shard, task_id, owner, request_id, outcome).await
            }
            Target::Remote(r) => {
                r.deliver_response(shard, task_id, owner, request_id, outcome)
                    .await
            }
        }
    }

    async fn members(&self, shard: u32) -> Result<(Vec<u64>, Vec<u64>), HostError> {
        match self {
            Target::Local(h) => ShardLeader::members(*h, shard).await,
            Target::Remote(r) => r.members(shard).await,
        }
    }
}
