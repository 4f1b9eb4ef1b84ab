//! The state machine of one shard: the in-memory [`ShardState`] shared with readers, kept
//! durable in a sled tree, and its snapshots.

use std::io;
use std::sync::Arc;

use futures::{Stream, StreamExt};
use openraft::storage::{ApplyResponder, EntryResponder, RaftSnapshotBuilder, RaftStateMachine};
use openraft::OptionalSend;
use parking_lot::{Mutex, RwLock};
use serde::{Deserialize, Serialize};
use taskmesh_task::{Applied, ClusterMeta, ShardState, TaskRecord};
use tokio::sync::{broadcast, watch};

use super::{decode, encode, read_json, tree_name};
use crate::events::ShardEvent;
use crate::types::{
    Entry, EntryPayload, LogId, Snapshot, SnapshotData, SnapshotMeta, StoredMembership, TypeConfig,
};

const REC_PREFIX: &[u8] = b"rec/";
const KEY_APPLIED: &[u8] = b"meta/applied";
const KEY_MEMBERSHIP: &[u8] = b"meta/membership";
/// The cluster metadata (only the metadata group has any).
const KEY_CLUSTER: &[u8] = b"meta/cluster";
const KEY_SNAP_META: &[u8] = b"snap/meta";
const KEY_SNAP_DATA: &[u8] = b"snap/data";

/// An apply call writes at most this many entries per sled batch (each batch is atomic and
/// carries the applied id of its last entry).
const MAX_ENTRIES_PER_BATCH: usize = 1024;

fn rec_key(task_id: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(REC_PREFIX.len() + task_id.len());
    key.extend_from_slice(REC_PREFIX);
    key.extend_from_slice(task_id.as_bytes());
    key
}

/// What a snapshot holds; its JSON is the snapshot's bytes.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SnapshotPayload {
    pub last_applied: Option<LogId>,
    pub membership: StoredMembership,
    /// Every record, in task id order.
    pub records: Vec<TaskRecord>,
    /// The cluster metadata (the metadata group's state; empty in shard groups).
    #[serde(default)]
    pub cluster: ClusterMeta,
}

/// The in-memory state and the log position it reflects, changed together under one lock.
struct SmData {
    state: ShardState,
    applied: Option<LogId>,
    membership: StoredMembership,
}

struct Shared {
    db: sled::Db,
    tree: sled::Tree,
    data: RwLock<SmData>,
    events: broadcast::Sender<ShardEvent>,
    /// The last log id of the latest snapshot installed from a leader (`None`: none yet).
    installed: watch::Sender<Option<LogId>>,
    /// Serialises writes and reads of the current snapshot (meta and data are two keys).
    snapshot_io: Mutex<()>,
}

impl Shared {
    fn current_snapshot(&self) -> io::Result<Option<Snapshot>> {
        let _guard = self.snapshot_io.lock();
        let meta: Option<SnapshotMeta> = read_json(&self.tree, KEY_SNAP_META)?;
        let data = self.tree.get(KEY_SNAP_DATA)?;
        Ok(match (meta, data) {
            (Some(meta), Some(data)) => Some(Snapshot {
                meta,
                snapshot: data.to_vec(),
            }),
            _ => None,
        })
    }

    /// Store a freshly built snapshot unless a newer one is already stored.
    fn store_built_snapshot(&self, meta: &SnapshotMeta, data: &[u8]) -> io::Result<()> {
        let _guard = self.snapshot_io.lock();
        let current: Option<SnapshotMeta> = read_json(&self.tree, KEY_SNAP_META)?;
        if current.is_some_and(|c| c.last_log_id >= meta.last_log_id) {
            return Ok(());
        }
        let mut batch = sled::Batch::default();
        batch.insert(KEY_SNAP_META, encode(meta)?);
        batch.insert(KEY_SNAP_DATA, data);
        self.tree.apply_batch(batch)?;
        Ok(())
    }
}

/// What one apply call has done in memory and not yet written.
#[derive(Default)]
struct Pending {
    batch: sled::Batch,
    entries: usize,
    applied: Option<LogId>,
    membership: Option<StoredMembership>,
    responses: Vec<(ApplyResponder<TypeConfig>, Applied)>,
    events: Vec<ShardEvent>,
}

/// The response given for an entry that carries no command (blank or membership entries).
/// Nobody waits for these through [`crate::ShardReplica`]; the value only has to exist.
fn no_command_response() -> Applied {
    Applied::Expired {
        task_ids: Vec::new(),
    }
}

/// The state machine of one shard. Cheap to clone: clones share the state.
#[derive(Clone)]
pub struct StateMachineStore {
    shared: Arc<Shared>,
}

impl StateMachineStore {
    /// Open (or create) the state machine tree of `shard_id` in `db` and rebuild the in-memory
    /// state from it. `event_buffer` is the capacity of the event channel.
    pub fn open(db: &sled::Db, shard_id: u32, event_buffer: usize) -> io::Result<Self> {
        let tree = db.open_tree(tree_name(shard_id, "sm"))?;
        let applied: Option<LogId> = read_json(&tree, KEY_APPLIED)?;
        let membership: StoredMembership = read_json(&tree, KEY_MEMBERSHIP)?.unwrap_or_default();
        let cluster: ClusterMeta = read_json(&tree, KEY_CLUSTER)?.unwrap_or_default();
        let mut records = Vec::new();
        for item in tree.scan_prefix(REC_PREFIX) {
            let (_, value) = item?;
            records.push(decode::<TaskRecord>(&value)?);
        }
        let (events, _) = broadcast::channel(event_buffer.max(1));
        let (installed, _) = watch::channel(None);
        Ok(Self {
            shared: Arc::new(Shared {
                db: db.clone(),
                tree,
                data: RwLock::new(SmData {
                    state: {
                        let mut state = ShardState::from_records(records);
                        state.set_cluster(cluster);
                        state
                    },
                    applied,
                    membership,
                }),
                events,
                installed,
                snapshot_io: Mutex::new(()),
            }),
        })
    }

    /// Run `f` on the in-memory state (under a read lock held only for the call).
    pub fn read<R>(&self, f: impl FnOnce(&ShardState) -> R) -> R {
        let data = self.shared.data.read();
        f(&data.state)
    }

    /// The last log id applied to the in-memory state.
    pub fn last_applied(&self) -> Option<LogId> {
        self.shared.data.read().applied
    }

    /// Receive a [`ShardEvent`] for every change applied from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<ShardEvent> {
        self.shared.events.subscribe()
    }

    /// A watch of the last log id of the latest snapshot installed from a leader in this
    /// process. It changes every time an installed snapshot replaces the whole state, which
    /// emits no [`ShardEvent`]s.
    pub fn snapshot_installs(&self) -> watch::Receiver<Option<LogId>> {
        self.shared.installed.subscribe()
    }

    /// Apply one entry in memory and queue its durable effects.
    fn apply_entry(
        &self,
        entry: Entry,
        responder: Option<ApplyResponder<TypeConfig>>,
        pending: &mut Pending,
    ) -> io::Result<()> {
        let log_id = entry.log_id;
        let index = log_id.index;
        let applied = {
            let mut data = self.shared.data.write();
            let applied = match entry.payload {
                EntryPayload::Blank => None,
                EntryPayload::Normal(req) => Some(data.state.apply(&req.0, index)),
                EntryPayload::Membership(m) => {
                    let stored = StoredMembership::new(Some(log_id), m);
                    data.membership = stored.clone();
                    pending.membership = Some(stored);
                    None
                }
            };
            data.applied = Some(log_id);
            applied
        };
        match &applied {
            Some(Applied::Created {
                record,
                fresh: true,
            })
            | Some(Applied::Updated { record }) => {
                pending
                    .batch
                    .insert(rec_key(&record.task_id), encode(record)?);
                pending.events.push(ShardEvent::Changed {
                    index,
                    record: record.clone(),
                });
            }
            Some(Applied::Cluster {
                result: Ok(meta),
                changed: true,
            }) => {
                pending.batch.insert(KEY_CLUSTER, encode(meta.as_ref())?);
            }
            Some(Applied::Expired { task_ids }) if !task_ids.is_empty() => {
                for id in task_ids {
                    pending.batch.remove(rec_key(id));
                }
                pending.events.push(ShardEvent::Expired {
                    index,
                    task_ids: task_ids.clone(),
                });
            }
            _ => {}
        }
        pending.applied = Some(log_id);
        pending.entries += 1;
        if let Some(responder) = responder {
            pending
                .responses
                .push((responder, applied.unwrap_or_else(no_command_response)));
        }
        Ok(())
    }

    /// Write what is pending in one atomic batch with its applied id, flush, then answer the
    /// proposers and emit the events.
    async fn commit(&self, pending: &mut Pending) -> io::Result<()> {
        let p = std::mem::take(pending);
        if p.entries == 0 {
            return Ok(());
        }
        let mut batch = p.batch;
        if let Some(applied) = &p.applied {
            batch.insert(KEY_APPLIED, encode(applied)?);
        }
        if let Some(membership) = &p.membership {
            batch.insert(KEY_MEMBERSHIP, encode(membership)?);
        }
        self.shared.tree.apply_batch(batch)?;
        super::flush(&self.shared.db).await?;
        for (responder, response) in p.responses {
            responder.send(response);
        }
        for event in p.events {
            // No subscriber is not an error.
            let _ = self.shared.events.send(event);
        }
        Ok(())
    }

    /// A consistent copy of the state, taken under the read lock.
    fn capture(&self) -> SnapshotPayload {
        let data = self.shared.data.read();
        SnapshotPayload {
            last_applied: data.applied,
            membership: data.membership.clone(),
            records: data.state.records().cloned().collect(),
            cluster: data.state.cluster().clone(),
        }
    }
}

impl RaftStateMachine<TypeConfig> for StateMachineStore {
    type SnapshotData = SnapshotData;
    type SnapshotBuilder = ShardSnapshotBuilder;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), io::Error> {
        let data = self.shared.data.read();
        Ok((data.applied, data.membership.clone()))
    }

    async fn apply<Strm>(&mut self, mut entries: Strm) -> Result<(), io::Error>
    where
        Strm: Stream<Item = Result<EntryResponder<TypeConfig>, io::Error>> + Unpin + OptionalSend,
    {
        let mut pending = Pending::default();
        while let Some(item) = entries.next().await {
            let (entry, responder) = item?;
            self.apply_entry(entry, responder, &mut pending)?;
            if pending.entries >= MAX_ENTRIES_PER_BATCH {
                self.commit(&mut pending).await?;
            }
        }
        self.commit(&mut pending).await
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        // Called on the state machine task, between applies: the copy is consistent with the
        // applied id, and later applies do not change it.
        ShardSnapshotBuilder {
            store: self.clone(),
            view: Some(self.capture()),
        }
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: SnapshotData,
    ) -> Result<(), io::Error> {
        let (payload, snapshot) = tokio::task::spawn_blocking(move || {
            decode::<SnapshotPayload>(&snapshot).map(|p| (p, snapshot))
        })
        .await
        .map_err(io::Error::other)??;

        let mut batch = sled::Batch::default();
        for key in self.shared.tree.scan_prefix(REC_PREFIX).keys() {
            batch.remove(key?);
        }
        for record in &payload.records {
            batch.insert(rec_key(&record.task_id), encode(record)?);
        }
        match &meta.last_log_id {
            Some(id) => batch.insert(KEY_APPLIED, encode(id)?),
            None => batch.remove(KEY_APPLIED),
        }
        batch.insert(KEY_MEMBERSHIP, encode(&meta.last_membership)?);
        batch.insert(KEY_CLUSTER, encode(&payload.cluster)?);
        batch.insert(KEY_SNAP_META, encode(meta)?);
        batch.insert(KEY_SNAP_DATA, snapshot);
        {
            let _guard = self.shared.snapshot_io.lock();
            self.shared.tree.apply_batch(batch)?;
        }
        super::flush(&self.shared.db).await?;

        let mut state = ShardState::from_records(payload.records);
        state.set_cluster(payload.cluster);
        {
            let mut data = self.shared.data.write();
            *data = SmData {
                state,
                applied: meta.last_log_id,
                membership: meta.last_membership.clone(),
            };
        }
        tracing::info!(
            last_log_id = ?meta.last_log_id,
            records = self.read(|s| s.len()),
            "installed a snapshot from the leader"
        );
        self.shared.installed.send_replace(meta.last_log_id);
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot>, io::Error> {
        self.shared.current_snapshot()
    }
}

/// Builds a snapshot from a copy of the state taken when the builder was made; serialising
/// happens on a blocking thread, away from the state machine.
pub struct ShardSnapshotBuilder {
    store: StateMachineStore,
    view: Option<SnapshotPayload>,
}

impl RaftSnapshotBuilder<TypeConfig> for ShardSnapshotBuilder {
    type SnapshotData = SnapshotData;

    async fn build_snapshot(&mut self) -> Result<Snapshot, io::Error> {
        let view = match self.view.take() {
            Some(view) => view,
            None => self.store.capture(),
        };
        let meta = SnapshotMeta {
            last_log_id: view.last_applied,
            last_membership: view.membership.clone(),
        };
        let data = tokio::task::spawn_blocking(move || {
            let mut view = view;
            view.records.sort_by(|a, b| a.task_id.cmp(&b.task_id));
            encode(&view)
        })
        .await
        .map_err(io::Error::other)??;

        let shared = &self.store.shared;
        shared.store_built_snapshot(&meta, &data)?;
        super::flush(&shared.db).await?;
        Ok(Snapshot {
            meta,
            snapshot: data,
        })
    }
}
