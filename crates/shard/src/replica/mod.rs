//! One replica of a group (a task shard, or the metadata group): its Raft, storage and state,
//! behind the API the rest of the node uses (propose, linearizable reads, leadership, events).
//!
//! Reads and their leader lease are in `read.rs`; bootstrapping, membership changes and
//! leadership hand-over in `membership.rs`; quiescence of idle groups in `quiesce.rs`, and
//! the compaction that gives back an idle group's log in `compact.rs`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use openraft::async_runtime::WatchReceiver;
use openraft::metrics::{RaftMetrics, WaitError};
use openraft::network::{NetSnapshot, RaftNetworkFactory};
use openraft::Raft;
use taskmesh_task::ShardState;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::config::ShardConfig;
use crate::error::ShardError;
use crate::events::Leadership;
use crate::group::{Group, GroupState};
use crate::network::UnreachableNetwork;
use crate::storage::{LogStore, StateMachineStore, Store};
use crate::types::{LogId, ShardRaft, SnapshotData};

mod compact;
mod membership;
mod quiesce;
mod quiet_lease;
mod read;

pub use quiesce::{quiet_transitions, Heard, Quiet, QuietLead};
pub use quiet_lease::Vouched;

use read::{ReadBatch, ReadLease};

/// Milliseconds on a clock shared by every replica of the process (from its first reading),
/// for the times replicas keep and the node's beat compares: one reading serves a whole round.
pub fn clock_ms() -> u64 {
    static EPOCH: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    EPOCH
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_millis() as u64
}

/// Leadership changes seen by every replica of the process so far: whoever acts on the
/// leaderships of all the node's groups can tell from this one number that none changed since
/// it last looked (a change of any group's leader, term or own role bumps it).
pub fn leadership_changes() -> u64 {
    LEADERSHIP_CHANGES.load(Ordering::Acquire)
}

static LEADERSHIP_CHANGES: AtomicU64 = AtomicU64::new(0);

/// How often [`ShardReplica::trigger_snapshot`] asks again while waiting for its snapshot.
const SNAPSHOT_RETRIGGER: Duration = Duration::from_millis(500);

struct Inner<S: GroupState> {
    cfg: ShardConfig,
    raft: ShardRaft<S>,
    sm: StateMachineStore<S>,
    log: LogStore<S>,
    store: Store,
    leadership: watch::Receiver<Leadership>,
    /// The leadership as plain words, for the routing of every request: no lock, no clone.
    now_leading: Arc<NowLeading>,
    members: watch::Receiver<BTreeMap<u64, String>>,
    watcher: JoinHandle<()>,
    reads: parking_lot::Mutex<ReadBatch>,
    lease: ReadLease,
    metrics: openraft::type_config::alias::WatchReceiverOf<Group<S>, RaftMetrics<Group<S>>>,
    /// When a leader's AppendEntries (entries or heartbeat), or a beat of its node, last
    /// reached this replica, on [`clock_ms`]; 0: never.
    leader_contact_ms: std::sync::atomic::AtomicU64,
    /// Proposals under way through `propose`.
    proposing: std::sync::atomic::AtomicUsize,
    /// Whether the group's timers are stopped while it is idle (see `quiesce.rs`).
    quiet: quiesce::Quiescence,
    /// The lease a quiescent leader's beats renew (see `quiet_lease.rs`).
    quiet_lease: quiet_lease::QuietLease,
    /// Whether a compaction of the idle group is under way (see `compact.rs`).
    compacting: std::sync::atomic::AtomicBool,
}

/// What [`Inner::leadership`] says, kept where a read costs one load.
#[derive(Default)]
struct NowLeading {
    /// The leader's node id; 0: none known.
    leader: AtomicU64,
    /// Whether this replica leads.
    is_leader: std::sync::atomic::AtomicBool,
}

impl NowLeading {
    fn set(&self, l: &Leadership) {
        self.leader.store(l.leader.unwrap_or(0), Ordering::Release);
        self.is_leader.store(l.is_leader, Ordering::Release);
    }
}

impl<S: GroupState> Drop for Inner<S> {
    fn drop(&mut self) {
        self.watcher.abort();
    }
}

/// A replica of one group on this node (a task shard unless `S` says otherwise). Cheap to
/// clone.
///
/// The default state applies where the type is written, not where it is inferred: open a task
/// shard's replica with `<ShardReplica>::open(..)`, the metadata group's with
/// `MetaReplica::open(..)`.
pub struct ShardReplica<S: GroupState = ShardState> {
    inner: Arc<Inner<S>>,
}

impl<S: GroupState> Clone for ShardReplica<S> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

fn leadership_of<S: GroupState>(m: &RaftMetrics<Group<S>>) -> Leadership {
    Leadership {
        is_leader: m.state.is_leader(),
        term: m.current_term,
        leader: m.current_leader,
    }
}

/// The members of the effective membership with their addresses.
fn members_of<S: GroupState>(m: &RaftMetrics<Group<S>>) -> BTreeMap<u64, String> {
    m.membership_config
        .nodes()
        .map(|(id, node)| (*id, node.addr.clone()))
        .collect()
}

fn wait_error(e: WaitError) -> ShardError {
    match e {
        WaitError::Timeout(after, what) => {
            ShardError::Unavailable(format!("timed out after {after:?} waiting for {what}"))
        }
        WaitError::ShuttingDown => ShardError::Unavailable("the shard is shutting down".into()),
    }
}
impl<S: GroupState> ShardReplica<S> {
    /// Open (or create) the replica's storage in `store`, under the shard id, and start its
    /// Raft, without a network to peers.
    pub async fn open(store: Store, cfg: ShardConfig) -> Result<Self, ShardError> {
        Self::open_with_network(store, cfg, UnreachableNetwork).await
    }

    /// [`ShardReplica::open`] with the network the group's Raft talks to its peers through.
    pub async fn open_with_network<N>(
        store: Store,
        cfg: ShardConfig,
        network: N,
    ) -> Result<Self, ShardError>
    where
        N: RaftNetworkFactory<Group<S>>,
        N::Network: NetSnapshot<Group<S>, SnapshotData = SnapshotData>,
    {
        let raft_config = Arc::new(cfg.raft_config()?);
        let (log, created) = LogStore::open(&store, cfg.shard_id, cfg.raft.log_cache_bytes).await?;
        if created {
            // A snapshot left behind by a replica of this group that was destroyed halfway (its
            // log went first) is not the new replica's.
            store
                .db()
                .drop_tree(crate::storage::tree_name(cfg.shard_id, "sm"))
                .map_err(ShardError::storage)?;
            store.snapshots().remove(cfg.shard_id)?;
        }
        let sm = StateMachineStore::open(&store, cfg.shard_id, cfg.event_buffer).await?;
        let raft = Raft::new(cfg.node_id, raft_config, network, log.clone(), sm.clone()).await?;

        let metrics_rx = raft.metrics();
        let lease = ReadLease::new(&cfg);
        let mut metrics = raft.metrics();
        let (initial, initial_members, mut members_at, voted) = {
            let m = metrics.borrow_watched();
            (
                leadership_of(&m),
                members_of(&m),
                *m.membership_config.log_id(),
                m.vote.leader_id().term > 0,
            )
        };
        // A replica that ever voted may have answered a quiet leader's beats before it stopped:
        // it keeps what those answers promised by refusing votes for as long as they could
        // have promised (see `quiet_lease.rs`). A new one promised nothing.
        let promise_ms = if voted {
            clock_ms() + cfg.raft.election_timeout_min_ms
        } else {
            0
        };
        let now_leading = Arc::new(NowLeading::default());
        now_leading.set(&initial);
        let now_leading_w = now_leading.clone();
        let (tx, leadership) = watch::channel(initial);
        let (members_tx, members) = watch::channel(initial_members);
        let elections = taskmesh_metrics::metrics::counter!(
            taskmesh_metrics::names::RAFT_ELECTIONS,
            "shard" => cfg.shard_id.to_string()
        );
        let shard = cfg.shard_id;
        let watcher = tokio::spawn(async move {
            let mut campaigning = false;
            loop {
                let (now, membership) = {
                    let m = metrics.borrow_watched();
                    // A replica that becomes a candidate starts an election.
                    let candidate = m.state == openraft::ServerState::Candidate;
                    if candidate && !campaigning {
                        elections.increment(1);
                        tracing::debug!(shard, term = m.current_term, "election started");
                    }
                    campaigning = candidate;
                    let at = *m.membership_config.log_id();
                    // The member list is rebuilt only when the membership itself changed.
                    let membership = (at != members_at).then(|| (at, members_of(&m)));
                    (leadership_of(&m), membership)
                };
                // Members first: whoever sees a new leadership sees its membership too.
                if let Some((at, list)) = membership {
                    members_at = at;
                    members_tx.send_replace(list);
                }
                tx.send_if_modified(|current| {
                    if *current == now {
                        false
                    } else {
                        tracing::debug!(
                            shard,
                            term = now.term,
                            leader = now.leader,
                            is_leader = now.is_leader,
                            "leadership changed"
                        );
                        now_leading_w.set(&now);
                        *current = now;
                        LEADERSHIP_CHANGES.fetch_add(1, Ordering::AcqRel);
                        true
                    }
                });
                if metrics.changed().await.is_err() {
                    break;
                }
            }
        });

        tracing::debug!(
            shard = cfg.shard_id,
            node = cfg.node_id,
            size = sm.read(|s| s.size()),
            "shard replica opened"
        );
        Ok(Self {
            inner: Arc::new(Inner {
                cfg,
                raft,
                sm,
                log,
                store,
                leadership,
                now_leading,
                members,
                watcher,
                reads: parking_lot::Mutex::new(ReadBatch::default()),
                lease,
                metrics: metrics_rx,
                leader_contact_ms: std::sync::atomic::AtomicU64::new(0),
                proposing: std::sync::atomic::AtomicUsize::new(0),
                quiet: quiesce::Quiescence::opened(promise_ms),
                quiet_lease: quiet_lease::QuietLease::default(),
                compacting: std::sync::atomic::AtomicBool::new(false),
            }),
        })
    }

    /// Wait until this replica is leader (or `timeout` passes: [`ShardError::Unavailable`]).
    /// Once it returns, [`ShardReplica::leadership`] shows the leadership too.
    pub async fn wait_leader(&self, timeout: Duration) -> Result<(), ShardError> {
        let me = self.inner.cfg.node_id;
        let mut rx = self.inner.leadership.clone();
        let waited = tokio::time::timeout(
            timeout,
            rx.wait_for(|l| l.is_leader && l.leader == Some(me)),
        )
        .await
        .map(|r| r.map(|_| ()));
        match waited {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) => Err(ShardError::Unavailable("the shard is shutting down".into())),
            Err(_) => Err(ShardError::Unavailable(format!(
                "not leader after {timeout:?}"
            ))),
        }
    }

    /// Propose a command; returns once it is committed, durable and applied, with what applying
    /// returned. Not leader: [`ShardError::NotLeader`].
    pub async fn propose(&self, cmd: S::Command) -> Result<S::Applied, ShardError> {
        use std::sync::atomic::Ordering;
        /// Counts a proposal out however its future ends, dropped included.
        struct Proposing<'a>(&'a std::sync::atomic::AtomicUsize);
        impl Drop for Proposing<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::SeqCst);
            }
        }
        // Counted in before the group's quiescence is read: see `ShardReplica::tick_quiet`.
        self.inner.proposing.fetch_add(1, Ordering::SeqCst);
        let _proposing = Proposing(&self.inner.proposing);
        self.wake().await;
        // openraft's write future is several KiB; boxed, it is not copied into every future
        // that awaits a proposal (a create's passes through eight of them).
        let resp = Box::pin(self.inner.raft.client_write(cmd)).await;
        Ok(resp?.data)
    }

    /// Proposals made through [`ShardReplica::propose`] on this replica that are not answered
    /// yet.
    pub fn proposals_in_flight(&self) -> usize {
        self.inner
            .proposing
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether this replica is the leader (from the Raft metrics).
    pub fn is_leader(&self) -> bool {
        self.inner.raft.is_leader()
    }

    /// Whether this replica leads, as [`ShardReplica::leadership`] says (one load: for routing;
    /// what must be the leader checks again).
    pub fn leads_now(&self) -> bool {
        self.inner.now_leading.is_leader.load(Ordering::Acquire)
    }

    /// The leader this replica knows of, as [`ShardReplica::leadership`] says (one load).
    pub fn leader_now(&self) -> Option<u64> {
        let id = self.inner.now_leading.leader.load(Ordering::Acquire);
        (id != 0).then_some(id)
    }

    /// The current Raft term (from the Raft metrics).
    pub fn current_term(&self) -> u64 {
        self.inner.metrics.borrow_watched().current_term
    }

    /// A watch of this replica's leadership; it changes when the leader or the term changes.
    pub fn leadership(&self) -> watch::Receiver<Leadership> {
        self.inner.leadership.clone()
    }

    /// Receive an event for every change applied from now on (a task shard's:
    /// [`crate::ShardEvent`]).
    pub fn subscribe(&self) -> crate::events::EventReceiver<S::Event> {
        self.inner.sm.subscribe()
    }

    /// The id of the group this replica belongs to (its shard number; the metadata group has
    /// its own).
    pub fn shard_id(&self) -> u32 {
        self.inner.cfg.shard_id
    }

    /// The id of the node this replica runs on (its Raft member id).
    pub fn node_id(&self) -> u64 {
        self.inner.cfg.node_id
    }

    /// The last log id applied to the in-memory state.
    pub fn last_applied(&self) -> Option<LogId> {
        self.inner.sm.last_applied()
    }

    /// The first and last index present in the local log (`None` when it is empty).
    pub fn log_index_range(&self) -> Result<(Option<u64>, Option<u64>), ShardError> {
        Ok(self.inner.log.index_range()?)
    }

    /// Record that a leader's AppendEntries (entries or a heartbeat) reached this replica now
    /// (the transport calls it for each one it hands to the group).
    pub fn note_leader_contact(&self) {
        self.inner
            .leader_contact_ms
            .store(clock_ms().max(1), std::sync::atomic::Ordering::Relaxed);
    }

    /// How long ago a leader's AppendEntries, or (following quietly) a beat of its node that
    /// lists the group, last reached this replica; `None` when none has since it was opened.
    pub fn since_leader_contact(&self) -> Option<std::time::Duration> {
        let at = self
            .inner
            .leader_contact_ms
            .load(std::sync::atomic::Ordering::Relaxed)
            .max(self.quiet_leader_heard_ms().unwrap_or(0));
        (at > 0).then(|| std::time::Duration::from_millis(clock_ms().saturating_sub(at)))
    }

    /// The group's Raft handle, for a network server to deliver peer RPCs to, and for
    /// membership changes.
    pub fn raft(&self) -> &ShardRaft<S> {
        &self.inner.raft
    }

    /// A watch of the last log id of the latest snapshot this replica installed from a leader
    /// (a follower that fell behind the leader's purged log catches up that way).
    ///
    /// An installed snapshot replaces the whole state and emits no events, so whoever
    /// keeps state derived from the events (waiters, live-task actors) rebuilds it from
    /// [`ShardReplica::read_local`] when this changes.
    pub fn snapshot_installs(&self) -> watch::Receiver<Option<LogId>> {
        self.inner.sm.snapshot_installs()
    }

    /// Stop the group's Raft and flush the database and the log. Other calls fail afterwards.
    pub async fn shutdown(&self) -> Result<(), ShardError> {
        self.inner
            .raft
            .shutdown()
            .await
            .map_err(|e| ShardError::Fatal(format!("the raft core failed while stopping: {e}")))?;
        self.inner.watcher.abort();
        self.inner.store.flush().await?;
        Ok(())
    }

    /// Stop the group's Raft and delete this replica's log, state and snapshot (after the group
    /// removed this node). The replica must not be used afterwards.
    pub async fn destroy(&self) -> Result<(), ShardError> {
        self.shutdown().await?;
        let shard = self.inner.cfg.shard_id;
        let store = &self.inner.store;
        store.wal().drop_group(shard)?;
        // "log" and "raft" are where earlier versions kept the log, "sm" the state.
        for kind in ["log", "raft", "sm"] {
            store
                .db()
                .drop_tree(crate::storage::tree_name(shard, kind))
                .map_err(ShardError::storage)?;
        }
        store.snapshots().remove(shard)?;
        store.flush().await?;
        Ok(())
    }

    /// Build a snapshot of everything applied so far and wait until it exists (openraft then
    /// purges the log it covers, keeping `max_in_snapshot_log_to_keep` entries).
    pub async fn trigger_snapshot(&self) -> Result<(), ShardError> {
        let target = self
            .inner
            .raft
            .metrics()
            .borrow_watched()
            .last_applied
            .as_ref()
            .map(|l| l.index);
        match target {
            Some(target) => self.snapshot_covering(target).await,
            None => Ok(()),
        }
    }

    /// Have openraft build a snapshot and wait until one covers log index `target` (asking
    /// again every so often, as a request made while a build runs is dropped).
    async fn snapshot_covering(&self, target: u64) -> Result<(), ShardError> {
        let raft = &self.inner.raft;
        let deadline =
            tokio::time::Instant::now() + Duration::from_millis(self.inner.cfg.wait_timeout_ms);
        loop {
            raft.trigger().snapshot().await?;
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let res = raft
                .wait(Some(left.min(SNAPSHOT_RETRIGGER)))
                .metrics(
                    |m| m.snapshot.as_ref().is_some_and(|s| s.index >= target),
                    format!("a snapshot covering index {target}"),
                )
                .await;
            match res {
                Ok(_) => return Ok(()),
                Err(WaitError::Timeout(..)) if !left.is_zero() => continue,
                Err(e) => return Err(wait_error(e)),
            }
        }
    }
}
