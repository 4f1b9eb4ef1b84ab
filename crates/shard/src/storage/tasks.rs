//! A task shard's snapshot: every record in task id order, beside the log position. Earlier
//! versions also kept one key per task record (`rec/{task id}`) in the state machine tree;
//! such a tree is read once and turned into a snapshot.

use std::io;

use serde::{Deserialize, Serialize};
use taskmesh_task::{Applied, ChangeLog, Command, ShardState, TaskRecord};

use super::decode;
use crate::events::ShardEvent;
use crate::group::GroupState;
use crate::types::{LogId, StoredMembership};

const REC_PREFIX: &[u8] = b"rec/";

/// What a task shard's snapshot holds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TaskSnapshot {
    /// Log id of the last entry the snapshot covers; `None` when none was applied yet.
    pub last_applied: Option<LogId>,
    /// The shard group's Raft membership as of `last_applied`.
    pub membership: StoredMembership,
    /// Every record, in task id order.
    #[serde(default)]
    pub records: Vec<TaskRecord>,
    /// The shard's newest status changes (absent from snapshots older than the change log).
    #[serde(default)]
    pub changes: ChangeLog,
    /// Clients' webhook subscriptions (absent from snapshots older than them).
    #[serde(default)]
    pub subscriptions: Vec<taskmesh_task::Subscription>,
}

impl GroupState for ShardState {
    type Command = Command;
    type Applied = Applied;
    type Event = ShardEvent;
    type Snapshot = TaskSnapshot;

    fn apply(&mut self, cmd: &Command, index: u64) -> Applied {
        ShardState::apply(self, cmd, index)
    }

    fn no_command() -> Applied {
        Applied::Expired {
            task_ids: Vec::new(),
        }
    }

    fn size(&self) -> usize {
        self.len()
    }

    fn load_legacy(tree: &sled::Tree) -> io::Result<Self> {
        let mut records = Vec::new();
        for item in tree.scan_prefix(REC_PREFIX) {
            let (_, value) = item?;
            records.push(decode::<TaskRecord>(&value)?);
        }
        Ok(ShardState::from_records(records))
    }

    /// Every record was last changed at or before the last applied entry.
    fn verify(&self, last_applied: Option<LogId>) -> Result<(), String> {
        let applied = last_applied.map_or(0, |l| l.index);
        match self.records().find(|r| r.updated_index > applied) {
            Some(r) => Err(format!(
                "task {} was changed at log index {}, after the last applied index {applied}",
                r.task_id, r.updated_index
            )),
            None => Ok(()),
        }
    }

    fn events(applied: &Applied, index: u64, events: &mut Vec<ShardEvent>) {
        match applied {
            Applied::Created {
                record,
                fresh: true,
            }
            | Applied::Updated { record } => {
                events.push(ShardEvent::Changed {
                    index,
                    record: std::sync::Arc::new(record.clone()),
                });
            }
            // A subscription made ended tasks owe their end: their delivery starts from the
            // change (an outbox change: its index is not the record's).
            Applied::Subscribed { owing, .. } => {
                for record in owing {
                    events.push(ShardEvent::Changed {
                        index,
                        record: std::sync::Arc::new(record.clone()),
                    });
                }
            }
            Applied::Imported { records } => {
                for record in records {
                    events.push(ShardEvent::Changed {
                        index,
                        record: std::sync::Arc::new(record.clone()),
                    });
                }
            }
            Applied::Expired { task_ids } if !task_ids.is_empty() => {
                events.push(ShardEvent::Expired {
                    index,
                    task_ids: task_ids.clone(),
                });
            }
            _ => {}
        }
    }

    fn capture(&self, last_applied: Option<LogId>, membership: StoredMembership) -> TaskSnapshot {
        TaskSnapshot {
            last_applied,
            membership,
            records: self.records().cloned().collect(),
            changes: self.changes().clone(),
            subscriptions: self.subscriptions().cloned().collect(),
        }
    }

    fn seal(snapshot: &mut TaskSnapshot) {
        snapshot.records.sort_by(|a, b| a.task_id.cmp(&b.task_id));
    }

    fn restore(snapshot: TaskSnapshot) -> Self {
        ShardState::from_parts(snapshot.records, snapshot.changes, snapshot.subscriptions)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A task shard's snapshot keeps the layout it had when one state held both kinds of
    /// group: the records beside the log position; the `cluster` key that old snapshots carry
    /// (empty) is ignored.
    #[test]
    fn a_snapshot_keeps_its_layout_and_reads_the_old_one() {
        let payload = ShardState::new().capture(None, StoredMembership::default());
        let json: serde_json::Value = serde_json::to_value(&payload).unwrap();
        assert!(json["records"].is_array(), "{json}");
        assert!(json.get("membership").is_some(), "{json}");
        let mut old = json.clone();
        old["cluster"] = serde_json::json!({"shards": 0, "hash": "", "replication": 0,
            "nodes": {}, "placement": [], "created": [], "version": 0});
        let back: TaskSnapshot = serde_json::from_value(old).unwrap();
        assert!(back.records.is_empty());
        assert!(back.last_applied.is_none());
    }

    /// A snapshot keeps the shard's change log and client subscriptions, so that a replica restored from it reads the
    /// same events after a cursor as the one that took it.
    #[test]
    fn a_snapshot_keeps_the_change_log_and_the_subscriptions() {
        let mut s = ShardState::new();
        let record = TaskRecord::sample("t1");
        s.apply(&Command::Create { record }, 1);
        s.apply(
            &Command::Cancel {
                task_id: "t1".into(),
                message: "stop".into(),
                at_ms: 5,
            },
            2,
        );
        assert_eq!(s.changes().head(), 2);
        s.apply(
            &Command::Subscribe {
                subscription: taskmesh_task::Subscription {
                    id: "sub_1".into(),
                    principal: "p".into(),
                    url: "https://hooks.example.com/".into(),
                    secret: "whsec_x".into(),
                    previous_secret: None,
                    previous_until_ms: 0,
                    task_id: None,
                    terminal_only: true,
                    expires_at_ms: 9,
                    refreshed_at_ms: 1,
                },
            },
            3,
        );
        let snapshot = s.capture(None, StoredMembership::default());
        let json = serde_json::to_vec(&snapshot).unwrap();
        let back = ShardState::restore(serde_json::from_slice(&json).unwrap());
        assert_eq!(back.changes(), s.changes());
        assert_eq!(
            back.subscriptions().collect::<Vec<_>>(),
            s.subscriptions().collect::<Vec<_>>()
        );
    }
}
