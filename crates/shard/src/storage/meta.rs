//! The metadata group's snapshot: the whole [`ClusterMeta`] beside the log position. Earlier
//! versions also kept it under one key of the state machine tree (`meta/cluster`); such a
//! tree is read once and turned into a snapshot.

use std::io;

use serde::{Deserialize, Serialize};
use taskmesh_meta::{ClusterMeta, MetaApplied, MetaCommand};

use super::read_json;
use crate::group::GroupState;
use crate::types::{LogId, StoredMembership};

const KEY_CLUSTER: &[u8] = b"meta/cluster";

/// What the metadata group's snapshot holds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MetaSnapshot {
    /// Log id of the last entry the snapshot covers; `None` when none was applied yet.
    pub last_applied: Option<LogId>,
    /// The group's Raft membership as of `last_applied`.
    pub membership: StoredMembership,
    /// The cluster metadata as of `last_applied`.
    #[serde(default)]
    pub cluster: ClusterMeta,
}

impl GroupState for ClusterMeta {
    type Command = MetaCommand;
    type Applied = MetaApplied;
    /// The metadata group emits no events: its readers look at the state itself.
    type Event = ();
    type Snapshot = MetaSnapshot;

    fn apply(&mut self, cmd: &MetaCommand, _index: u64) -> MetaApplied {
        self.apply_command(cmd)
    }

    fn no_command() -> MetaApplied {
        MetaApplied {
            result: Err(taskmesh_meta::MetaRejection::Invalid(
                "a log entry without a command".into(),
            )),
            changed: false,
        }
    }

    fn size(&self) -> usize {
        self.nodes.len()
    }

    fn load_legacy(tree: &sled::Tree) -> io::Result<Self> {
        Ok(read_json(tree, KEY_CLUSTER)?.unwrap_or_default())
    }

    fn events(_applied: &MetaApplied, _index: u64, _events: &mut Vec<()>) {}

    fn capture(&self, last_applied: Option<LogId>, membership: StoredMembership) -> MetaSnapshot {
        MetaSnapshot {
            last_applied,
            membership,
            cluster: self.clone(),
        }
    }

    fn restore(snapshot: MetaSnapshot) -> Self {
        snapshot.cluster
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The metadata group's snapshot holds the metadata under `cluster`, beside the log
    /// position, as before; an old snapshot's empty `records` is ignored.
    #[test]
    fn a_snapshot_keeps_its_layout_and_reads_the_old_one() {
        let mut cluster = ClusterMeta::default();
        let created = cluster.apply_command(&MetaCommand::Create {
            shards: 4,
            hash: "fnv1a64".into(),
            replication: 1,
            nodes: vec![(1, "127.0.0.1:1".into())],
        });
        assert!(created.changed);
        let payload = cluster.capture(None, StoredMembership::default());
        let mut json: serde_json::Value = serde_json::to_value(&payload).unwrap();
        assert_eq!(json["cluster"]["shards"], 4, "{json}");
        json["records"] = serde_json::json!([]);
        let back: MetaSnapshot = serde_json::from_value(json).unwrap();
        assert_eq!(back.cluster, cluster);
    }
}
