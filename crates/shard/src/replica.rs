//! One replica of a group (a task shard, or the metadata group): its Raft, storage and state,
//! behind the API the rest of the node uses (propose, linearizable reads, leadership, events).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use openraft::async_runtime::WatchReceiver;
use openraft::errors::{ChangeMembershipError, ClientWriteError, RaftError};
use openraft::metrics::{RaftMetrics, WaitError};
use openraft::network::{NetSnapshot, RaftNetworkFactory};
use openraft::{Instant as _, LinearizerOption, Raft};
use taskmesh_task::ShardState;
use tokio::sync::{broadcast, oneshot, watch};
use tokio::task::JoinHandle;

use crate::config::ShardConfig;
use crate::error::ShardError;
use crate::events::Leadership;
use crate::group::{Group, GroupState};
use crate::network::UnreachableNetwork;
use crate::storage::{LogStore, StateMachineStore};
use crate::types::{LogId, Node, ShardRaft, SnapshotData};

/// How often [`ShardReplica::trigger_snapshot`] asks again while waiting for its snapshot.
const SNAPSHOT_RETRIGGER: Duration = Duration::from_millis(500);

struct Inner<S: GroupState> {
    cfg: ShardConfig,
    raft: ShardRaft<S>,
    sm: StateMachineStore<S>,
    log: LogStore<S>,
    db: sled::Db,
    leadership: watch::Receiver<Leadership>,
    members: watch::Receiver<BTreeMap<u64, String>>,
    watcher: JoinHandle<()>,
    reads: parking_lot::Mutex<ReadBatch>,
    lease: ReadLease,
    metrics: openraft::type_config::alias::WatchReceiverOf<Group<S>, RaftMetrics<Group<S>>>,
}

/// When a read may skip the leadership confirmation and read the leader's memory at once.
///
/// Safe because (a) a confirmation through openraft in term `confirmed_term` made the state
/// machine apply everything committed before it, (b) every later write of that term is applied
/// here before it is acknowledged, and (c) no other leader can exist while this one's quorum
/// lease holds: voters refuse to elect anyone within `election_timeout_max` of the last
/// heartbeat they acknowledged. A leadership transfer overrides (c), so reads take the full
/// path from the moment one is asked for until the outcome is known.
struct ReadLease {
    /// The term in which a confirmation last succeeded (0: none yet).
    confirmed_term: AtomicU64,
    /// The fast path is off until this instant (ms on `epoch`): set by a leadership transfer.
    off_until_ms: AtomicU64,
    epoch: std::time::Instant,
    /// How recent the last quorum acknowledgement must be: half the shortest election timeout,
    /// well inside the lease of `election_timeout_max`.
    max_ack_age: Duration,
    /// How long a transfer turns the fast path off.
    transfer_hold: Duration,
}

impl ReadLease {
    fn new(cfg: &ShardConfig) -> Self {
        Self {
            confirmed_term: AtomicU64::new(0),
            off_until_ms: AtomicU64::new(0),
            epoch: std::time::Instant::now(),
            max_ack_age: Duration::from_millis(cfg.election_timeout_min_ms / 2),
            transfer_hold: Duration::from_millis(cfg.election_timeout_max_ms.saturating_mul(3)),
        }
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }
}

/// Reads waiting for a leadership confirmation. One confirmation runs at a time; the reads
/// that arrive meanwhile wait for the next one, which then answers all of them together.
#[derive(Default)]
struct ReadBatch {
    running: bool,
    waiting: Vec<oneshot::Sender<Result<(), ShardError>>>,
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
    /// Open (or create) the replica's storage in trees of `db` named after the shard id, and
    /// start its Raft, without a network to peers.
    pub async fn open(db: sled::Db, cfg: ShardConfig) -> Result<Self, ShardError> {
        Self::open_with_network(db, cfg, UnreachableNetwork).await
    }

    /// [`ShardReplica::open`] with the network the group's Raft talks to its peers through.
    pub async fn open_with_network<N>(
        db: sled::Db,
        cfg: ShardConfig,
        network: N,
    ) -> Result<Self, ShardError>
    where
        N: RaftNetworkFactory<Group<S>>,
        N::Network: NetSnapshot<Group<S>, SnapshotData = SnapshotData>,
    {
        let raft_config = Arc::new(cfg.raft_config()?);
        let log = LogStore::open(&db, cfg.shard_id)?;
        let sm = StateMachineStore::open(&db, cfg.shard_id, cfg.event_buffer)?;
        let raft = Raft::new(cfg.node_id, raft_config, network, log.clone(), sm.clone()).await?;

        let metrics_rx = raft.metrics();
        let lease = ReadLease::new(&cfg);
        let mut metrics = raft.metrics();
        let (initial, initial_members, mut members_at) = {
            let m = metrics.borrow_watched();
            (
                leadership_of(&m),
                members_of(&m),
                *m.membership_config.log_id(),
            )
        };
        let (tx, leadership) = watch::channel(initial);
        let (members_tx, members) = watch::channel(initial_members);
        let watcher = tokio::spawn(async move {
            loop {
                let (now, membership) = {
                    let m = metrics.borrow_watched();
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
                        *current = now;
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
                db,
                leadership,
                members,
                watcher,
                reads: parking_lot::Mutex::new(ReadBatch::default()),
                lease,
                metrics: metrics_rx,
            }),
        })
    }

    /// Single-voter bootstrap: when the group has never been initialised, make it a one-member
    /// group of this node (at [`ShardConfig::node_addr`]). Idempotent.
    pub async fn bootstrap_single(&self) -> Result<(), ShardError> {
        let mut members = BTreeMap::new();
        members.insert(self.inner.cfg.node_id, self.inner.cfg.node_addr.clone());
        self.bootstrap(members).await
    }

    /// Bootstrap the group with `members` (node id to the address its peers reach it at) as its
    /// voters, when it has never been initialised; a no-op when it has (its log or vote is not
    /// empty). Idempotent.
    ///
    /// Every initial member may call this with the same `members` (calling it on one member is
    /// enough: the others join when the elected leader replicates the membership to them), but
    /// never with different ones. This node must be a member, and a group of several members
    /// needs an address for each.
    pub async fn bootstrap(&self, members: BTreeMap<u64, String>) -> Result<(), ShardError> {
        let me = self.inner.cfg.node_id;
        if !members.contains_key(&me) {
            return Err(ShardError::Invalid(format!(
                "node {me} is not among the initial members {:?} of shard {}",
                members.keys().collect::<Vec<_>>(),
                self.inner.cfg.shard_id
            )));
        }
        if members.len() > 1 {
            if let Some((id, _)) = members.iter().find(|(_, addr)| addr.trim().is_empty()) {
                return Err(ShardError::Invalid(format!(
                    "member {id} of shard {} has no address",
                    self.inner.cfg.shard_id
                )));
            }
        }
        let raft = &self.inner.raft;
        if raft.is_initialized().await? {
            return Ok(());
        }
        let nodes: BTreeMap<u64, Node> = members
            .into_iter()
            .map(|(id, addr)| (id, Node::new(addr)))
            .collect();
        match raft.initialize(nodes).await {
            Ok(()) => Ok(()),
            // Initialised meanwhile (or has a log already): nothing to do.
            Err(RaftError::APIError(openraft::errors::InitializeError::NotAllowed(_))) => Ok(()),
            Err(e) => Err(e.into()),
        }
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
        let resp = self.inner.raft.client_write(cmd).await?;
        Ok(resp.data)
    }

    /// Linearizable read: confirm leadership (from the leader lease while it is valid, else by
    /// a heartbeat round; never a log write), wait until the state machine has applied up to
    /// the read point, then run `f` on the in-memory state.
    ///
    /// Concurrent reads share confirmations: a read joins the next confirmation that starts
    /// after it arrived (never one already under way, whose read point may predate a write the
    /// reader has seen), so under load one confirmation answers a whole batch of reads.
    pub async fn read<R>(&self, f: impl FnOnce(&S) -> R) -> Result<R, ShardError> {
        if self.lease_holds() {
            return Ok(self.read_local(f));
        }
        let (tx, rx) = oneshot::channel();
        let start = {
            let mut b = self.inner.reads.lock();
            b.waiting.push(tx);
            !std::mem::replace(&mut b.running, true)
        };
        if start {
            let me = self.clone();
            tokio::spawn(async move { me.confirm_reads().await });
        }
        match rx.await {
            Ok(Ok(())) => Ok(self.read_local(f)),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(ShardError::Unavailable("the shard is shutting down".into())),
        }
    }

    /// Run confirmations until no read waits: each answers the reads that waited when it began.
    async fn confirm_reads(&self) {
        loop {
            let batch = {
                let mut b = self.inner.reads.lock();
                if b.waiting.is_empty() {
                    b.running = false;
                    return;
                }
                std::mem::take(&mut b.waiting)
            };
            let term = self.inner.metrics.borrow_watched().current_term;
            let r = self.read_point().await;
            if r.is_ok() {
                self.inner
                    .lease
                    .confirmed_term
                    .store(term, Ordering::Release);
            }
            for tx in batch {
                let _ = tx.send(r.clone());
            }
        }
    }

    /// Whether a read may use the leader's memory without a confirmation (see [`ReadLease`]).
    fn lease_holds(&self) -> bool {
        let lease = &self.inner.lease;
        if lease.now_ms() < lease.off_until_ms.load(Ordering::Acquire) {
            return false;
        }
        let me = self.inner.cfg.node_id;
        let m = self.inner.metrics.borrow_watched();
        if !(m.state.is_leader()
            && m.current_leader == Some(me)
            && m.current_term == lease.confirmed_term.load(Ordering::Acquire))
        {
            return false;
        }
        let mut voters = m.membership_config.voter_ids();
        let alone = voters.next() == Some(me) && voters.next().is_none();
        alone
            || m.last_quorum_acked
                .as_ref()
                .is_some_and(|at| at.elapsed() < lease.max_ack_age)
    }

    /// Confirm leadership and wait until the state machine applied up to the read point.
    async fn read_point(&self) -> Result<(), ShardError> {
        let raft = &self.inner.raft;
        let linearizer = raft
            .get_read_linearizer(LinearizerOption::new(None, true))
            .await?;
        let timeout = Duration::from_millis(self.inner.cfg.wait_timeout_ms);
        match linearizer.try_await_ready(raft, Some(timeout)).await? {
            Ok(_) => Ok(()),
            Err(state) => Err(ShardError::Unavailable(format!(
                "the state machine did not reach the read point in time: {state}"
            ))),
        }
    }

    /// Read the local in-memory state without any leadership check.
    pub fn read_local<R>(&self, f: impl FnOnce(&S) -> R) -> R {
        self.inner.sm.read(f)
    }

    /// Whether this replica is the leader (from the Raft metrics).
    pub fn is_leader(&self) -> bool {
        self.inner.raft.is_leader()
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
    pub fn subscribe(&self) -> broadcast::Receiver<S::Event> {
        self.inner.sm.subscribe()
    }

    pub fn shard_id(&self) -> u32 {
        self.inner.cfg.shard_id
    }

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

    /// The group's Raft handle, for a network server to deliver peer RPCs to, and for
    /// membership changes.
    pub fn raft(&self) -> &ShardRaft<S> {
        &self.inner.raft
    }

    /// The members of the group's effective membership (voters and learners) with the address
    /// each is reached at, as this replica knows them.
    pub fn members(&self) -> BTreeMap<u64, String> {
        members_of(&self.inner.metrics.borrow_watched())
    }

    /// A watch of [`ShardReplica::members`]: it changes when the group's effective membership
    /// changes (a member added or removed, or an address updated by
    /// [`ShardReplica::set_node_addr`]). A network resolves member addresses through it, since
    /// openraft keeps its open connections to a member whose address changed.
    pub fn members_watch(&self) -> watch::Receiver<BTreeMap<u64, String>> {
        self.inner.members.clone()
    }

    /// The voters of the group's effective membership, as this replica knows them.
    pub fn voters(&self) -> Vec<u64> {
        let m = self.inner.metrics.borrow_watched();
        m.membership_config.voter_ids().collect()
    }

    /// Change the address member `node_id` is reached at, through the log (leader only; the
    /// node keeps its id and its role). Returns once the new membership is committed.
    pub async fn set_node_addr(&self, node_id: u64, addr: String) -> Result<(), ShardError> {
        if addr.trim().is_empty() {
            return Err(ShardError::Invalid(format!(
                "empty address for node {node_id} of shard {}",
                self.inner.cfg.shard_id
            )));
        }
        if !self.members().contains_key(&node_id) {
            return Err(ShardError::Invalid(format!(
                "node {node_id} is not a member of shard {}",
                self.inner.cfg.shard_id
            )));
        }
        let mut nodes = BTreeMap::new();
        nodes.insert(node_id, Node::new(addr));
        // Keep the node in its role: `retain` leaves voters voters.
        self.change_members(openraft::ChangeMembers::SetNodes(nodes), true)
            .await
    }

    /// Membership changes a new leader cannot make until its first entry (or the previous
    /// change) has committed are retried for a short while; other errors are returned.
    async fn change_members(
        &self,
        change: openraft::ChangeMembers<u64, Node>,
        retain: bool,
    ) -> Result<(), ShardError> {
        // Half a heartbeat between attempts: the commit the change waits for comes with one.
        let pause = Duration::from_millis((self.inner.cfg.heartbeat_interval_ms / 2).max(10));
        let mut retry = crate::Retry::new(
            Duration::from_millis(self.inner.cfg.wait_timeout_ms),
            pause,
            pause,
        );
        loop {
            match self
                .inner
                .raft
                .change_membership(change.clone(), retain)
                .await
            {
                Ok(_) => return Ok(()),
                Err(RaftError::APIError(ClientWriteError::ChangeMembershipError(
                    ChangeMembershipError::InProgress(_)
                    | ChangeMembershipError::UncommittedLeaderLog(_),
                ))) if !retry.expired() => {
                    retry.pause().await;
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Add node `id` (reached at `addr`) as a learner and return once that is committed,
    /// without waiting for it to catch up (see [`ShardReplica::replication`]). Leader only.
    pub async fn add_learner(&self, id: u64, addr: String) -> Result<(), ShardError> {
        if addr.trim().is_empty() {
            return Err(ShardError::Invalid(format!("node {id} has no address")));
        }
        match self
            .inner
            .raft
            .add_learner(id, Node::new(addr), false)
            .await
        {
            Ok(_) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Make `voters` the group's voters (each must already be a member); voters not in the set
    /// leave the group. Returns once the new membership is committed. Leader only.
    pub async fn set_voters(&self, voters: BTreeSet<u64>) -> Result<(), ShardError> {
        if voters.is_empty() {
            return Err(ShardError::Invalid(
                "a group needs at least one voter".into(),
            ));
        }
        self.change_members(openraft::ChangeMembers::ReplaceAllVoters(voters), false)
            .await
    }

    /// Remove learners from the group. Leader only.
    pub async fn remove_learners(&self, ids: BTreeSet<u64>) -> Result<(), ShardError> {
        if ids.is_empty() {
            return Ok(());
        }
        self.change_members(openraft::ChangeMembers::RemoveNodes(ids), false)
            .await
    }

    /// On the leader: the last log index and, per follower and learner, the index of the last
    /// entry it is known to hold (`None`: not known yet). Not leader: `None`.
    pub fn replication(&self) -> Option<(u64, BTreeMap<u64, Option<u64>>)> {
        let m = self.inner.metrics.borrow_watched();
        let matched = m.replication.as_ref()?;
        let last = m.last_log_index.unwrap_or(0);
        Some((
            last,
            matched
                .iter()
                .map(|(id, l)| (*id, l.as_ref().map(|l| l.index)))
                .collect(),
        ))
    }

    /// Whether the group has a membership on this replica (it was initialised here, or a
    /// leader has replicated to it).
    pub fn has_membership(&self) -> bool {
        let m = self.inner.metrics.borrow_watched();
        let any = m.membership_config.nodes().next().is_some();
        any
    }

    /// Ask openraft to hand this group's leadership to voter `to` and return at once.
    ///
    /// The leader stops accepting proposals, tells every voter (they drop their leader lease so
    /// that `to` can win at once) and `to` starts an election as soon as it has flushed the
    /// leader's log. [`ShardReplica::leadership`] shows the outcome. Not leader:
    /// [`ShardError::NotLeader`]; `to` is this node: nothing to do.
    pub async fn transfer_leader(&self, to: u64) -> Result<(), ShardError> {
        let me = self.inner.cfg.node_id;
        let (is_leader, leader_hint) = {
            let m = self.inner.metrics.borrow_watched();
            (m.state.is_leader(), m.current_leader)
        };
        if !is_leader {
            return Err(ShardError::NotLeader { leader_hint });
        }
        if to == me {
            return Ok(());
        }
        if !self.voters().contains(&to) {
            return Err(ShardError::Invalid(format!(
                "node {to} is not a voter of shard {}",
                self.inner.cfg.shard_id
            )));
        }
        // Voters give up their lease for the transfer: reads must confirm until it is decided.
        let lease = &self.inner.lease;
        lease.off_until_ms.store(
            lease.now_ms() + lease.transfer_hold.as_millis() as u64,
            Ordering::Release,
        );
        lease.confirmed_term.store(0, Ordering::Release);
        self.inner.raft.trigger().transfer_leader(to).await?;
        Ok(())
    }

    /// Hand the leadership over to the most up-to-date other voter and wait (at most
    /// `timeout`) until this replica sees another leader, which is returned. `Ok(None)`: this
    /// replica is not the leader, or it is the group's only voter.
    pub async fn step_down(&self, timeout: Duration) -> Result<Option<u64>, ShardError> {
        let me = self.inner.cfg.node_id;
        let target = {
            let m = self.inner.metrics.borrow_watched();
            if !(m.state.is_leader() && m.current_leader == Some(me)) {
                return Ok(None);
            }
            let voters: Vec<u64> = m.membership_config.voter_ids().collect();
            let matched = m.replication.clone().unwrap_or_default();
            voters
                .into_iter()
                .filter(|v| *v != me)
                .max_by_key(|v| (matched.get(v).cloned().flatten(), std::cmp::Reverse(*v)))
        };
        let Some(target) = target else {
            return Ok(None);
        };
        self.transfer_leader(target).await?;
        let mut rx = self.inner.leadership.clone();
        let waited = tokio::time::timeout(
            timeout,
            rx.wait_for(|l| !l.is_leader && l.leader.is_some_and(|id| id != me)),
        )
        .await;
        match waited {
            Ok(Ok(l)) => Ok(l.leader),
            Ok(Err(_)) => Err(ShardError::Unavailable("the shard is shutting down".into())),
            Err(_) => Err(ShardError::Unavailable(format!(
                "no other leader after {timeout:?} of handing over to node {target}"
            ))),
        }
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

    /// Stop the group's Raft and flush the database. Other calls fail afterwards.
    pub async fn shutdown(&self) -> Result<(), ShardError> {
        self.inner
            .raft
            .shutdown()
            .await
            .map_err(|e| ShardError::Fatal(format!("the raft core failed while stopping: {e}")))?;
        self.inner.watcher.abort();
        crate::storage::flush(&self.inner.db).await?;
        Ok(())
    }

    /// Stop the group's Raft and delete this replica's log, state and snapshot (after the group
    /// removed this node). The replica must not be used afterwards.
    pub async fn destroy(&self) -> Result<(), ShardError> {
        self.shutdown().await?;
        let shard = self.inner.cfg.shard_id;
        for kind in ["log", "raft", "sm"] {
            self.inner
                .db
                .drop_tree(crate::storage::tree_name(shard, kind))
                .map_err(ShardError::storage)?;
        }
        crate::storage::flush(&self.inner.db).await?;
        Ok(())
    }

    /// Build a snapshot of everything applied so far and wait until it exists (openraft then
    /// purges the log it covers, keeping `max_in_snapshot_log_to_keep` entries).
    pub async fn trigger_snapshot(&self) -> Result<(), ShardError> {
        let raft = &self.inner.raft;
        let target = raft
            .metrics()
            .borrow_watched()
            .last_applied
            .as_ref()
            .map(|l| l.index);
        let Some(target) = target else {
            return Ok(());
        };
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
