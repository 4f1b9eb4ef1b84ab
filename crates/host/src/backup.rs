//! Backup and restore of a shard's records, on its leader: [`Host::export_page`] reads a page of
//! them (a linearizable read, so a page shows every task acknowledged before it was asked for)
//! and [`Host::import`] writes backed-up records through the shard's log (`Command::Import`).
//! The router brings both here from any node (`taskmesh backup` and `taskmesh restore` call
//! the cluster service of one node).

use taskmesh_task::{Applied, Command, TaskRecord};

use crate::{Host, HostError};

/// Records in one page of a backup at most.
pub const MAX_PAGE_RECORDS: usize = 1_000;
/// The encoded size one page of a backup aims to stay under: a page ends with the record that
/// reaches it (a single record larger than this is a page of its own).
pub const PAGE_BYTES: usize = 1 << 20;

impl Host {
    /// A page of shard `shard_id`'s records, in (owner, task id) order after `after`: at most
    /// `max_records` (capped at [`MAX_PAGE_RECORDS`]) and about [`PAGE_BYTES`]. The second
    /// value is whether it is the last page. Expired records not yet swept are included (a
    /// restore drops nothing the shard held).
    pub async fn export_page(
        &self,
        shard_id: u32,
        after: Option<(&str, &str)>,
        max_records: usize,
    ) -> Result<(Vec<TaskRecord>, bool), HostError> {
        let shard = self.shard(shard_id)?;
        let max = max_records.clamp(1, MAX_PAGE_RECORDS);
        shard
            .read(|s| s.export_page(after, max, PAGE_BYTES))
            .await
            .map_err(|e| HostError::from_shard(shard_id, e))
    }

    /// Write backed-up `records` into shard `shard_id` (those it does not hold yet); returns
    /// how many were inserted. Live ones are taken over by this leader's reconciler like the
    /// tasks of a failed leader, by their tools' resume policy.
    pub async fn import(&self, shard_id: u32, records: Vec<TaskRecord>) -> Result<u64, HostError> {
        if records.len() > MAX_PAGE_RECORDS {
            return Err(HostError::Invalid(format!(
                "at most {MAX_PAGE_RECORDS} records per import (got {})",
                records.len()
            )));
        }
        if records.is_empty() {
            return Ok(0);
        }
        let shard = self.shard(shard_id)?;
        match shard
            .propose(Command::Import { records })
            .await
            .map_err(|e| HostError::from_shard(shard_id, e))?
        {
            Applied::Imported { records } => {
                for r in records.iter().filter(|r| !r.status.is_terminal()) {
                    self.suspect(shard_id, &r.task_id);
                }
                Ok(records.len() as u64)
            }
            other => Err(HostError::Internal(format!(
                "unexpected import result {other:?}"
            ))),
        }
    }
}
