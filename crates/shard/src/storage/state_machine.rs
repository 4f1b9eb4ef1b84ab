//! The state machine of one group: its in-memory [`GroupState`] shared with readers, and its
//! snapshots, kept in the group's snapshot file ([`super::SnapshotDir`]). The state's durable
//! form is its latest snapshot together with the group's log: applies change memory only, and
//! opening the group restores the snapshot, after which openraft re-applies the committed
//! entries past it (see [`super`]).

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
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

/// Where earlier versions kept the applied id and membership beside the state's own keys (in
/// the group's state machine tree), and later the snapshot.
const KEY_APPLIED: &[u8] = b"meta/applied";
const KEY_MEMBERSHIP: &[u8] = b"meta/membership";
const KEY_SNAP_META: &[u8] = b"snap/meta";
const KEY_SNAP_DATA: &[u8] = b"snap/data";

/// An apply call answers its proposers after at most this many entries.
const MAX_ENTRIES_PER_BATCH: usize = 1024;

/// A consistent copy taken for a snapshot: the log position (which becomes the snapshot's
/// [`SnapshotMeta`]) and what the snapshot's bytes will hold.
struct Captured<S: GroupState> {
    last_applied: Option<LogId>,
    membership: StoredMembership,
    snapshot: S::Snapshot,
    /// How many items the state held ([`GroupState::size`]).
    items: usize,
}

/// The in-memory state and the log position it reflects, changed together under one lock.
struct SmData<S> {
    state: S,
    applied: Option<LogId>,
    membership: StoredMembership,
}

struct Shared<S: GroupState> {
    snapshots: super::SnapshotDir,
    wal: taskmesh_wal::Wal,
    group: u32,
    data: RwLock<SmData<S>>,
    events: EventFanout<S::Event>,
    /// The last log id of the latest snapshot installed from a leader (`None`: none yet).
    installed: watch::Sender<Option<LogId>>,
    /// The meta of the snapshot kept now (`None`: none yet). Its lock serialises writes and
    /// reads of the snapshot file.
    kept: Mutex<Option<SnapshotMeta>>,
    /// The size of the kept snapshot's bytes (0: none).
    kept_bytes: AtomicU64,
    /// How many items the state held in the kept snapshot.
    kept_items: AtomicU64,
    /// The group's id, the `shard` label of its snapshot metrics.
    label: String,
}

impl<S: GroupState> Shared<S> {
    /// The kept snapshot, read from its file (blocking).
    fn current_snapshot(&self) -> io::Result<Option<Snapshot>> {
        let kept = self.kept.lock();
        if kept.is_none() {
            return Ok(None);
        }
        Ok(self
            .snapshots
            .read(self.group)?
            .map(|(meta, snapshot)| Snapshot { meta, snapshot }))
    }

    /// Keep `meta` and `data` as the group's snapshot, durably (blocking). A built snapshot
    /// (`only_if_newer`) is not kept when one at least as recent already is.
    /// `items`: how many items the snapshot's state holds.
    fn keep(
        &self,
        meta: &SnapshotMeta,
        data: &[u8],
        items: usize,
        only_if_newer: bool,
    ) -> io::Result<()> {
        let mut kept = self.kept.lock();
        if only_if_newer
            && kept
                .as_ref()
                .is_some_and(|k| k.last_log_id >= meta.last_log_id)
        {
            return Ok(());
        }
        self.snapshots.write(self.group, meta, data)?;
        *kept = Some(meta.clone());
        self.kept_bytes.store(data.len() as u64, Ordering::Release);
        self.kept_items.store(items as u64, Ordering::Release);
        Ok(())
    }
}

/// Run blocking file work on tokio's blocking pool.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> io::Result<T> + Send + 'static,
) -> io::Result<T> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(io::Error::other)?
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

/// The snapshot an earlier version kept in a group's tree, when it has one: its meta and its
/// bytes.
fn read_tree_snapshot(tree: &sled::Tree) -> io::Result<Option<(SnapshotMeta, Vec<u8>)>> {
    let meta: Option<SnapshotMeta> = read_json(tree, KEY_SNAP_META)?;
    Ok(match (meta, tree.get(KEY_SNAP_DATA)?) {
        (Some(meta), Some(data)) => Some((meta, data.to_vec())),
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
    /// Open the state machine of group `shard_id` in `store` and rebuild the in-memory state
    /// from its snapshot file (openraft then re-applies the committed entries past it).
    /// `event_buffer` is the capacity of the event channel.
    ///
    /// What an earlier version kept in the group's state machine tree (the state itself, a key
    /// per item, or its snapshot) is moved into the snapshot file first, and the tree dropped.
    pub async fn open(store: &Store, shard_id: u32, event_buffer: usize) -> io::Result<Self> {
        move_out_of_tree::<S>(store, shard_id).await?;
        let snapshots = store.snapshots().clone();
        let found = blocking(move || snapshots.read(shard_id)).await?;
        let (state, applied, membership, kept, kept_bytes) = match found {
            Some((meta, data)) => {
                let state = S::restore(decode::<S::Snapshot>(&data)?);
                let (applied, membership) = (meta.last_log_id, meta.last_membership.clone());
                (state, applied, membership, Some(meta), data.len() as u64)
            }
            None => (S::default(), None, StoredMembership::default(), None, 0),
        };
        let kept_items = state.size() as u64;
        state.verify(applied).map_err(corrupt)?;
        let events = EventFanout::new(event_buffer);
        let (installed, _) = watch::channel(None);
        Ok(Self {
            shared: Arc::new(Shared {
                snapshots: store.snapshots().clone(),
                wal: store.wal().clone(),
                group: shard_id,
                data: RwLock::new(SmData {
                    state,
                    applied,
                    membership,
                }),
                events,
                installed,
                kept: Mutex::new(kept),
                kept_bytes: AtomicU64::new(kept_bytes),
                kept_items: AtomicU64::new(kept_items),
                label: shard_id.to_string(),
            }),
        })
    }

    /// The size of the latest snapshot's bytes (0: there is none yet).
    pub fn snapshot_bytes(&self) -> u64 {
        self.shared.kept_bytes.load(Ordering::Acquire)
    }

    /// About how many bytes a snapshot of the state would take now: the latest snapshot's
    /// size, scaled by how the number of items changed since it was built (its size as it is
    /// when it held none).
    pub fn estimated_snapshot_bytes(&self) -> u64 {
        let bytes = self.shared.kept_bytes.load(Ordering::Acquire);
        let items = self.shared.kept_items.load(Ordering::Acquire);
        if items == 0 {
            return bytes;
        }
        let now = self.read(|s| s.size()) as u64;
        (u128::from(bytes) * u128::from(now) / u128::from(items)) as u64
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
            items: data.state.size(),
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
        {
            let (shared, meta) = (self.shared.clone(), meta.clone());
            let items = state.size();
            blocking(move || shared.keep(&meta, &snapshot, items, false)).await?;
        }

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
        let shared = self.shared.clone();
        blocking(move || shared.current_snapshot()).await
    }
}

/// Move what an earlier version kept in group `shard_id`'s state machine tree
/// (`shard/{id}/sm`) into the group's snapshot file, then drop the tree:
/// - the state itself, a key per item beside the applied id and the membership, is kept as a
///   snapshot of that state;
/// - a snapshot kept in the tree (`snap/meta`, `snap/data`) is kept as it is.
///
/// The file is durable before the tree goes, so a crash in between only repeats this at the
/// next open (a file that holds a snapshot at least as recent is left as it is).
async fn move_out_of_tree<S: GroupState>(store: &Store, shard_id: u32) -> io::Result<()> {
    let db = store.db();
    let name = tree_name(shard_id, "sm");
    if !db.tree_names().iter().any(|n| n == name.as_bytes()) {
        return Ok(());
    }
    let tree = db.open_tree(&name)?;
    let found = if tree.get(KEY_APPLIED)?.is_some() {
        Some(snapshot_legacy_state::<S>(&tree)?)
    } else {
        read_tree_snapshot(&tree)?
    };
    if let Some((meta, data)) = found {
        let last_log_id = meta.last_log_id;
        let snapshots = store.snapshots().clone();
        blocking(move || {
            let kept = snapshots.read(shard_id)?;
            if kept.is_none_or(|(m, _)| m.last_log_id < meta.last_log_id) {
                snapshots.write(shard_id, &meta, &data)?;
            }
            Ok(())
        })
        .await?;
        tracing::info!(
            shard = shard_id,
            ?last_log_id,
            "moved the group's snapshot out of the database into its snapshot file"
        );
    }
    drop(tree);
    db.drop_tree(name)?;
    super::flush(db).await
}

/// A snapshot of the state an earlier version kept key by key in `tree` (the state's own keys,
/// the applied id and the membership): its meta and its bytes.
fn snapshot_legacy_state<S: GroupState>(tree: &sled::Tree) -> io::Result<(SnapshotMeta, Vec<u8>)> {
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
    tracing::info!(
        last_applied = ?applied,
        size = state.size(),
        "made a snapshot of the group's state kept key by key"
    );
    Ok((meta, encode(&snapshot)?))
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
        let shared = self.store.shared.clone();
        let data = {
            let meta = meta.clone();
            let items = view.items;
            blocking(move || {
                let mut snapshot = view.snapshot;
                S::seal(&mut snapshot);
                let data = encode(&snapshot)?;
                shared.keep(&meta, &data, items, true)?;
                Ok(data)
            })
            .await?
        };
        let shared = &self.store.shared;
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
