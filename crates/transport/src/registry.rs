//! The replicas a node hosts, by shard: where the server delivers the messages it receives.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::RwLock;
use taskmesh_shard::ShardReplica;

/// The shard replicas this node hosts, keyed by shard id. Cheap to clone: clones share the map.
///
/// The node inserts a replica once it is open (a message for a shard that is not here yet is
/// answered `NOT_FOUND`, which the sender treats as an unreachable peer and retries later) and
/// removes it before shutting it down.
#[derive(Clone, Default)]
pub struct ReplicaRegistry {
    replicas: Arc<RwLock<HashMap<u32, ShardReplica>>>,
}

impl ReplicaRegistry {
    pub fn new() -> Self {
        Self::default()
    }

    /// Register `replica` under its shard id; returns the replica it replaces, if any.
    pub fn insert(&self, replica: ShardReplica) -> Option<ShardReplica> {
        self.replicas.write().insert(replica.shard_id(), replica)
    }

    /// Unregister the replica of `shard` and return it.
    pub fn remove(&self, shard: u32) -> Option<ShardReplica> {
        self.replicas.write().remove(&shard)
    }

    /// The replica of `shard`, if this node hosts one.
    pub fn get(&self, shard: u32) -> Option<ShardReplica> {
        self.replicas.read().get(&shard).cloned()
    }

    /// The shards this node hosts, in ascending order.
    pub fn shard_ids(&self) -> Vec<u32> {
        let mut ids: Vec<u32> = self.replicas.read().keys().copied().collect();
        ids.sort_unstable();
        ids
    }

    pub fn len(&self) -> usize {
        self.replicas.read().len()
    }

    pub fn is_empty(&self) -> bool {
        self.replicas.read().is_empty()
    }
}
