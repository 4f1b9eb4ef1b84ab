//! The state machine of one group: its in-memory [`GroupState`] shared with readers, and its
//! snapshots, kept in a sled tree. The state's durable form is its latest snapshot together
//! with the group's log: applies change memory only, and opening the group restores the
//! snapshot, after which openraft re-applies the committed entries past it (see [`super`]).

use std::io;
use std::sync::Arc;

use futures::{Stream, StreamExt};
use openraft::storage::{ApplyResponder, EntryResponder, RaftSnapshotBuilder, RaftStateMachine};
use openraft::OptionalSend;
use parking_lot::{Mutex, RwLock};
use taskmesh_task::ShardState;
use tokio::sync::watch;

use super::{decode, encode, read_json, tree_name, Store};
use crate::events::{EventFanout, EventReceiver};
use crate::group::{Group, GroupState};
use crate::types::{
    Entry, EntryPayload, LogId, Snapshot, SnapshotData, SnapshotMeta, StoredMembership,
};

/// Where earlier versions kept the applied id and membership beside the state's own keys.
const KEY_APPLIED: &[u8] = b"meta/applied";
const KEY_MEMBERSHIP: &[u8] = b"meta/membership";
const KEY_SNAP_META: &[u8] = b"snap/meta";
const KEY_SNAP_DATA: &[u8] = b"snap/data";
const SNAP_PREFIX: &[u8] = b"snap/";

/// An apply call answers its proposers after at most this many entries.
const MAX_ENTRIES_PER_BATCH: usize = 1024;

/// A consistent copy taken for a snapshot: the log position (which becomes the snapshot's
/// [`SnapshotMeta`]) and what the snapshot's bytes will hold.
struct Captured<S: GroupState> {
    last_applied: Option<LogId>,
    membership: StoredMembership,
    snapshot: S::Snapshot,
}

/// The in-memory state and the log position it reflects, changed together under one lock.
struct SmData<S> {
    state: S,
    applied: Option<LogId>,
    membership: StoredMembership,
}

struct Shared<S: GroupState> {
    db: sled::Db,
    wal: taskmesh_wal::Wal,
    tree: sled::Tree,
    data: RwLock<SmData<S>>,
    events: EventFanout<S::Event>,
    /// The last log id of the latest snapshot installed from a leader (`None`: none yet).
    installed: watch::Sender<Option<LogId>>,
    /// Serialises writes and reads of the current snapshot (meta and data are two keys).
    snapshot_io: Mutex<()>,
    /// The group's id, the `shard` label of its snapshot metrics.
    label: String,
}

impl<S: GroupState> Shared<S> {
    fn current_snapshot(&self) -> io::Result<Option<Snapshot>> {
        let _guard = self.snapshot_io.lock();
        Ok(read_snapshot(&self.tree)?.map(|(meta, data)| Snapshot {
            meta,
            snapshot: data.to_vec(),
        }))
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

/// What one apply call has done in memory and not yet answered.
struct Pending<S: GroupState> {
    entries: usize,
    responses: Vec<(ApplyResponder<Group<S>>, S::Applied)>,
    events: Vec<S::Event>,
}

impl<S: GroupState> Default for Pending<S> {
    fn default() -> Self {
        Self {
            entries: 0,
            responses: Vec::new(),
            events: Vec::new(),
        }
    }
}

/// The snapshot kept in a group's tree, when it has one: its meta and its bytes.
fn read_snapshot(tree: &sled::Tree) -> io::Result<Option<(SnapshotMeta, sled::IVec)>> {
    let meta: Option<SnapshotMeta> = read_json(tree, KEY_SNAP_META)?;
    Ok(match (meta, tree.get(KEY_SNAP_DATA)?) {
        (Some(meta), Some(data)) => Some((meta, data)),
        _ => None,
    })
}

/// A stored or received state that breaks its invariants.
fn corrupt(why: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, why)
}

/// The state machine of one group (a task shard by default). Cheap to clone: clones share the
/// state.
pub struct StateMachineStore<S: GroupState = ShardState> {
    shared: Arc<Shared<S>>,
}

impl<S: GroupState> Clone for StateMachineStore<S> {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
        }
    }
}

impl<S: GroupState> StateMachineStore<S> {
    /// Open (or create) the state machine tree of `shard_id` in `store`'s database and rebuild
    /// the in-memory state from its snapshot (openraft then re-applies the committed entries
    /// past it). `event_buffer` is the capacity of the event channel.
    ///
    /// A tree of an earlier version, which kept the state itself (a key per item, the applied
    /// id and membership beside them), is turned into a snapshot of that state first.
    pub async fn open(store: &Store, shard_id: u32, event_buffer: usize) -> io::Result<Self> {
        let db = store.db();
        let tree = db.open_tree(tree_name(shard_id, "sm"))?;
        if tree.get(KEY_APPLIED)?.is_some() {
            snapshot_legacy_state::<S>(db, &tree).await?;
        }
        let (state, applied, membership) = match read_snapshot(&tree)? {
            Some((meta, data)) => {
                let state = S::restore(decode::<S::Snapshot>(&data)?);
                (state, meta.last_log_id, meta.last_membership)
            }
            None => (S::default(), None, StoredMembership::default()),
        };
        state.verify(applied).map_err(corrupt)?;
        let events = EventFanout::new(event_buffer);
        let (installed, _) = watch::channel(None);
        Ok(Self {
            shared: Arc::new(Shared {
                db: db.clone(),
                wal: store.wal().clone(),
                tree,
                data: RwLock::new(SmData {
                    state,
                    applied,
                    membership,
                }),
                events,
                installed,
                snapshot_io: Mutex::new(()),
                label: shard_id.to_string(),
            }),
        })
    }

    /// Run `f` on the in-memory state (under a read lock held only for the call).
    pub fn read<R>(&self, f: impl FnOnce(&S) -> R) -> R {
        let data = self.shared.data.read();
        f(&data.state)
    }

    /// The last log id applied to the in-memory state.
    pub fn last_applied(&self) -> Option<LogId> {
        self.shared.data.read().applied
    }

    /// Receive an event for every change applied from now on.
    pub fn subscribe(&self) -> EventReceiver<S::Event> {
        self.shared.events.subscribe()
    }

    /// A watch of the last log id of the latest snapshot installed from a leader in this
    /// process. It changes every time an installed snapshot replaces the whole state, which
    /// emits no events.
    pub fn snapshot_installs(&self) -> watch::Receiver<Option<LogId>> {
        self.shared.installed.subscribe()
    }

    /// Apply one entry in memory and queue its answer and events.
    fn apply_entry(
        &self,
        entry: Entry<S::Command>,
        responder: Option<ApplyResponder<Group<S>>>,
        pending: &mut Pending<S>,
    ) {
        let log_id = entry.log_id;
        let index = log_id.index;
        let applied = {
            let mut data = self.shared.data.write();
            let applied = match entry.payload {
                EntryPayload::Blank => None,
                EntryPayload::Normal(cmd) => Some(data.state.apply(&cmd, index)),
                EntryPayload::Membership(m) => {
                    data.membership = StoredMembership::new(Some(log_id), m);
                    None
                }
            };
            data.applied = Some(log_id);
            applied
        };
        if let Some(applied) = &applied {
            S::events(applied, index, &mut pending.events);
        }
        pending.entries += 1;
        if let Some(responder) = responder {
            pending
                .responses
                .push((responder, applied.unwrap_or_else(S::no_command)));
        }
    }

    /// Wait until the log holds the committed id durably (openraft saved it before this apply
    /// began), then answer the proposers and emit the events. Nothing else is written: after
    /// a restart, openraft re-applies the committed entries past the latest snapshot.
    async fn commit(&self, pending: &mut Pending<S>) -> io::Result<()> {
        let p = std::mem::take(pending);
        if p.entries == 0 {
            return Ok(());
        }
        let wal = &self.shared.wal;
        wal.sync(wal.position()).await?;
        for (responder, response) in p.responses {
            responder.send(response);
        }
        for event in p.events {
            self.shared.events.send(event);
        }
        Ok(())
    }

    /// A consistent copy of the state, taken under the read lock.
    fn capture(&self) -> Captured<S> {
        let data = self.shared.data.read();
        Captured {
            last_applied: data.applied,
            membership: data.membership.clone(),
            snapshot: data.state.capture(data.applied, data.membership.clone()),
        }
    }
}

impl<S: GroupState> RaftStateMachine<Group<S>> for StateMachineStore<S> {
    type SnapshotData = SnapshotData;
    type SnapshotBuilder = ShardSnapshotBuilder<S>;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), io::Error> {
        let data = self.shared.data.read();
        Ok((data.applied, data.membership.clone()))
    }

    async fn apply<Strm>(&mut self, mut entries: Strm) -> Result<(), io::Error>
    where
        Strm: Stream<Item = Result<EntryResponder<Group<S>>, io::Error>> + Unpin + OptionalSend,
    {
        let mut pending = Pending::default();
        while let Some(item) = entries.next().await {
            let (entry, responder) = item?;
            self.apply_entry(entry, responder, &mut pending);
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
        let started = std::time::Instant::now();
        let bytes = snapshot.len() as u64;
        let (payload, snapshot) = tokio::task::spawn_blocking(move || {
            decode::<S::Snapshot>(&snapshot).map(|p| (p, snapshot))
        })
        .await
        .map_err(io::Error::other)??;

        let state = S::restore(payload);
        state.verify(meta.last_log_id).map_err(corrupt)?;
        let mut batch = sled::Batch::default();
        batch.insert(KEY_SNAP_META, encode(meta)?);
        batch.insert(KEY_SNAP_DATA, snapshot);
        {
            let _guard = self.shared.snapshot_io.lock();
            self.shared.tree.apply_batch(batch)?;
        }
        super::flush(&self.shared.db).await?;

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
            size = self.read(|s| s.size()),
            "installed a snapshot from the leader"
        );
        {
            use taskmesh_metrics::{metrics, names};
            let shard = self.shared.label.clone();
            metrics::counter!(names::SNAPSHOT_INSTALLS, "shard" => shard.clone()).increment(1);
            metrics::counter!(names::SNAPSHOT_INSTALLED_BYTES, "shard" => shard).increment(bytes);
            metrics::histogram!(names::SNAPSHOT_INSTALL_DURATION)
                .record(started.elapsed().as_secs_f64());
        }
        self.shared.installed.send_replace(meta.last_log_id);
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot>, io::Error> {
        self.shared.current_snapshot()
    }
}

/// Turn a state machine tree of an earlier version (the state's own keys, the applied id and
/// the membership) into a snapshot of that state, kept as the current one, and delete the old
/// keys. The snapshot is made durable before the keys go, so a crash in between only repeats
/// this at the next open.
async fn snapshot_legacy_state<S: GroupState>(db: &sled::Db, tree: &sled::Tree) -> io::Result<()> {
    let applied: Option<LogId> = read_json(tree, KEY_APPLIED)?;
    let membership: StoredMembership = read_json(tree, KEY_MEMBERSHIP)?.unwrap_or_default();
    let state = S::load_legacy(tree)?;
    state.verify(applied).map_err(corrupt)?;
    let meta = SnapshotMeta {
        last_log_id: applied,
        last_membership: membership.clone(),
    };
    let mut snapshot = state.capture(applied, membership);
    S::seal(&mut snapshot);
    let mut batch = sled::Batch::default();
    batch.insert(KEY_SNAP_META, encode(&meta)?);
    batch.insert(KEY_SNAP_DATA, encode(&snapshot)?);
    tree.apply_batch(batch)?;
    super::flush(db).await?;
    let mut batch = sled::Batch::default();
    for key in tree.iter().keys() {
        let key = key?;
        if !key.starts_with(SNAP_PREFIX) {
            batch.remove(key);
        }
    }
    tree.apply_batch(batch)?;
    super::flush(db).await?;
    tracing::info!(
        last_applied = ?applied,
        size = state.size(),
        "kept the group's state as a snapshot"
    );
    Ok(())
}

/// Builds a snapshot from a copy of the state taken when the builder was made; serialising
/// happens on a blocking thread, away from the state machine.
pub struct ShardSnapshotBuilder<S: GroupState = ShardState> {
    store: StateMachineStore<S>,
    view: Option<Captured<S>>,
}

impl<S: GroupState> RaftSnapshotBuilder<Group<S>> for ShardSnapshotBuilder<S> {
    type SnapshotData = SnapshotData;

    async fn build_snapshot(&mut self) -> Result<Snapshot, io::Error> {
        let started = std::time::Instant::now();
        let view = match self.view.take() {
            Some(view) => view,
            None => self.store.capture(),
        };
        let meta = SnapshotMeta {
            last_log_id: view.last_applied,
            last_membership: view.membership.clone(),
        };
        let data = tokio::task::spawn_blocking(move || {
            let mut snapshot = view.snapshot;
            S::seal(&mut snapshot);
            encode(&snapshot)
        })
        .await
        .map_err(io::Error::other)??;

        let shared = &self.store.shared;
        shared.store_built_snapshot(&meta, &data)?;
        super::flush(&shared.db).await?;
        {
            use taskmesh_metrics::{metrics, names};
            let shard = shared.label.clone();
            metrics::counter!(names::SNAPSHOT_BUILDS, "shard" => shard.clone()).increment(1);
            metrics::counter!(names::SNAPSHOT_BUILT_BYTES, "shard" => shard)
                .increment(data.len() as u64);
            metrics::histogram!(names::SNAPSHOT_BUILD_DURATION)
                .record(started.elapsed().as_secs_f64());
        }
        Ok(Snapshot {
            meta,
            snapshot: data,
        })
    }
}
