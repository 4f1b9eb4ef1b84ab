//! The router: task id -> shard -> the node that leads it.
//!
//! The shard of a task is `stable_hash(taskId) mod shards` (see `taskmesh_task::shard_of`).
//! Requests for a shard this node leads are answered in-process by the [`Host`], with no
//! network hop. `tasks/list` fans out to every shard and merges the pages in task-id order.

use serde_json::Value;
use taskmesh_host::{Attachment, Host, HostError, NewTask};
use taskmesh_mcp::ErrorObject;
use taskmesh_task::{shard_of, TaskRecord};

/// Longest task id the router looks up; anything longer cannot be one of ours.
pub const MAX_TASK_ID_LEN: usize = 128;

#[derive(Clone)]
pub struct Router {
    host: Host,
    shards: u32,
}

/// 128 bits from the OS CSPRNG, as 32 lowercase hex digits.
pub fn mint_task_id() -> Result<String, HostError> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes)
        .map_err(|e| HostError::Internal(format!("OS random source failed: {e}")))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

impl Router {
    pub fn new(host: Host) -> Self {
        let shards = host.shard_count();
        Self { host, shards }
    }

    pub fn host(&self) -> &Host {
        &self.host
    }

    pub fn shard_of(&self, task_id: &str) -> u32 {
        shard_of(task_id, self.shards)
    }

    fn check_id(task_id: &str) -> Result<(), HostError> {
        if task_id.is_empty() || task_id.len() > MAX_TASK_ID_LEN {
            return Err(HostError::NotFound);
        }
        Ok(())
    }

    pub async fn create(&self, new: NewTask) -> Result<TaskRecord, HostError> {
        let shard = self.shard_of(&new.task_id);
        self.host.create(shard, new).await
    }

    pub async fn get(&self, task_id: &str, owner: &str) -> Result<TaskRecord, HostError> {
        Self::check_id(task_id)?;
        self.host.get(self.shard_of(task_id), task_id, owner).await
    }

    pub async fn cancel(&self, task_id: &str, owner: &str) -> Result<TaskRecord, HostError> {
        Self::check_id(task_id)?;
        self.host
            .cancel(self.shard_of(task_id), task_id, owner)
            .await
    }

    pub async fn attach(&self, task_id: &str, owner: &str) -> Result<Attachment, HostError> {
        Self::check_id(task_id)?;
        self.host
            .attach(self.shard_of(task_id), task_id, owner)
            .await
    }

    pub fn deliver_response(
        &self,
        task_id: &str,
        request_id: String,
        outcome: Result<Value, ErrorObject>,
    ) -> bool {
        Self::check_id(task_id).is_ok() && self.host.deliver_response(task_id, request_id, outcome)
    }

    /// One page of `owner`'s tasks with ids after `after`, merged over all shards in id order;
    /// the flag says whether more follow.
    pub async fn list(
        &self,
        owner: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<(Vec<TaskRecord>, bool), HostError> {
        let limit = limit.max(1);
        let mut merged = Vec::new();
        for shard in 0..self.shards {
            merged.extend(self.host.list(shard, owner, after, limit + 1).await?);
        }
        merged.sort_by(|a, b| a.task_id.cmp(&b.task_id));
        let more = merged.len() > limit;
        merged.truncate(limit);
        Ok((merged, more))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minted_ids_are_128_bit_hex_and_distinct() {
        let a = mint_task_id().unwrap();
        let b = mint_task_id().unwrap();
        assert_eq!(a.len(), 32);
        assert!(a
            .chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
        assert_ne!(a, b);
    }
}
