//! Compaction of an idle group: giving back the disk its log takes once the group has gone
//! quiet, so that a node's disk follows the tasks it retains rather than the work it did.
//!
//! A busy group builds a snapshot every `snapshot_logs_since_last` entries and purges its log
//! up to it, less `max_in_snapshot_log_to_keep` entries kept for lagging followers. When the
//! load stops, each group is left with up to that many entries, and the write-ahead log keeps
//! every segment one of them lies in: on a node with many shards, hundreds of MiB of entries
//! whose tasks may all have expired since.
//!
//! So when a group quiesces (see `quiesce.rs`: every member holds, has committed and has applied
//! the whole log), the replica compacts it in the background:
//! - it builds a new snapshot covering the whole log if that frees at least twice the disk it
//!   writes. It frees what the log past the latest snapshot keeps on disk
//!   ([`taskmesh_wal::Wal::held_bytes`]: every closed segment holding one of its entries, whole,
//!   and its bytes in the active one) and the latest snapshot; it writes a snapshot of the
//!   state as it is now, whose size is estimated from the latest one's by the number of items
//!   each holds. So a group whose tasks expired is rewritten small, while a large group that
//!   wakes now and then for a few writes is not rewritten each time it goes quiet (only once
//!   its log keeps about as much disk as its state);
//! - then, if the replica is still quiet, it purges the log up to the latest snapshot, all of
//!   it: no member lags behind a quiet group. The write-ahead log deletes the segments that no
//!   longer hold a live entry (see [`taskmesh_wal`]).
//!
//! At rest, a group's snapshot and the log it keeps take less than twice what a snapshot of its
//! state takes, and the write-ahead log of a node whose groups all went quiet and let go of
//! their logs is about one checkpoint.

use std::sync::atomic::Ordering;

use openraft::async_runtime::WatchReceiver;

use super::{Quiet, ShardReplica};
use crate::error::ShardError;
use crate::group::GroupState;

impl<S: GroupState> ShardReplica<S> {
    /// Compact the group's log in the background (it just quiesced), unless a compaction is
    /// under way already or there is no runtime to run one on.
    pub(super) fn compact_when_idle(&self) {
        let inner = &self.inner;
        if inner.compacting.swap(true, Ordering::AcqRel) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            inner.compacting.store(false, Ordering::Release);
            return;
        };
        let replica = self.clone();
        runtime.spawn(async move {
            if let Err(e) = replica.compact().await {
                tracing::debug!(
                    shard = replica.shard_id(),
                    error = %e,
                    "could not compact the idle group's log"
                );
            }
            replica.inner.compacting.store(false, Ordering::Release);
        });
    }

    /// Build a snapshot covering the whole log if that frees at least twice the disk it writes,
    /// then purge the log up to the latest snapshot if the group is still quiet. See the
    /// module documentation.
    async fn compact(&self) -> Result<(), ShardError> {
        let (applied, snapshot) = {
            let m = self.inner.metrics.borrow_watched();
            (
                m.last_applied.as_ref().map(|l| l.index),
                m.snapshot.as_ref().map(|l| l.index),
            )
        };
        let Some(applied) = applied else {
            return Ok(());
        };
        let mut covered = snapshot;
        if covered.is_none_or(|c| c < applied) {
            let past = covered.map_or(0, |c| c + 1);
            let held = self.inner.store.wal().held_bytes(self.shard_id(), past);
            let sm = &self.inner.sm;
            let (snapshot_bytes, estimated) = (sm.snapshot_bytes(), sm.estimated_snapshot_bytes());
            if held > 0 && held.saturating_add(snapshot_bytes) >= estimated.saturating_mul(2) {
                tracing::debug!(
                    shard = self.shard_id(),
                    log_bytes = held,
                    snapshot_bytes,
                    estimated,
                    "compacting the idle group: building a snapshot"
                );
                self.snapshot_covering(applied).await?;
                covered = Some(applied);
            }
        }
        let Some(covered) = covered else {
            return Ok(());
        };
        let (first, _) = self.inner.log.index_range()?;
        // A group that woke meanwhile may have followers that need these entries soon.
        if first.is_some_and(|f| f <= covered) && self.quiet() != Quiet::Awake {
            self.inner.raft.trigger().purge_log(covered).await?;
        }
        Ok(())
    }
}
