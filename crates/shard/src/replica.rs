//! One replica of a shard group: its Raft, storage and state, behind the API the rest of the
//! node uses (propose, linearizable reads, leadership, events).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use openraft::async_runtime::WatchReceiver;
use openraft::metrics::{RaftMetrics, WaitError};
use openraft::network::{NetSnapshot, RaftNetworkFactory};
use openraft::{LinearizerOption, Raft};
use taskmesh_task::{Applied, Command, ShardState};
use tokio::sync::{broadcast, watch};
use tokio::task::JoinHandle;

use crate::config::ShardConfig;
use crate::error::ShardError;
use crate::events::{Leadership, ShardEvent};
use crate::network::UnreachableNetwork;
use crate::storage::{LogStore, StateMachineStore};
use crate::types::{LogId, Node, ShardRaft, ShardRequest, SnapshotData, TypeConfig};

/// How often [`ShardReplica::trigger_snapshot`] asks again while waiting for its snapshot.
const SNAPSHOT_RETRIGGER: Duration = Duration::from_millis(500);

struct Inner {
    cfg: ShardConfig,
    raft: ShardRaft,
    sm: StateMachineStore,
    log: LogStore,
    db: sled::Db,
    leadership: watch::Receiver<Leadership>,
    watcher: JoinHandle<()>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.watcher.abort();
    }
}

/// A replica of one shard group on this node. Cheap to clone.
#[derive(Clone)]
pub struct ShardReplica {
    inner: Arc<Inner>,
}

fn leadership_of(m: &RaftMetrics<TypeConfig>) -> Leadership {
    Leadership {
        is_leader: m.state.is_leader(),
        term: m.current_term,
        leader: m.current_leader,
    }
}

fn wait_error(e: WaitError) -> ShardError {
    match e {
        WaitError::Timeout(after, what) => {
            ShardError::Unavailable(format!("timed out after {after:?} waiting for {what}"))
        }
        WaitError::ShuttingDown => ShardError::Unavailable("the shard is shutting down".into()),
    }
}

impl ShardReplica {
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
        N: RaftNetworkFactory<TypeConfig>,
        N::Network: NetSnapshot<TypeConfig, SnapshotData = SnapshotData>,
    {
        let raft_config = Arc::new(cfg.raft_config()?);
        let log = LogStore::open(&db, cfg.shard_id)?;
        let sm = StateMachineStore::open(&db, cfg.shard_id, cfg.event_buffer)?;
        let raft = Raft::new(cfg.node_id, raft_config, network, log.clone(), sm.clone()).await?;

        let mut metrics = raft.metrics();
        let initial = leadership_of(&metrics.borrow_watched());
        let (tx, leadership) = watch::channel(initial);
        let watcher = tokio::spawn(async move {
            loop {
                let now = leadership_of(&metrics.borrow_watched());
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

        tracing::info!(
            shard = cfg.shard_id,
            node = cfg.node_id,
            records = sm.read(|s| s.len()),
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
                watcher,
            }),
        })
    }

    /// Single-voter bootstrap: when the group has never been initialised, make it a one-member
    /// group of this node. Idempotent.
    pub async fn bootstrap_single(&self) -> Result<(), ShardError> {
        let raft = &self.inner.raft;
        if raft.is_initialized().await? {
            return Ok(());
        }
        let mut members = BTreeMap::new();
        members.insert(self.inner.cfg.node_id, Node::new(&self.inner.cfg.node_addr));
        match raft.initialize(members).await {
            Ok(()) => Ok(()),
            // Initialised meanwhile (or has a log already): nothing to do.
            Err(openraft::errors::RaftError::APIError(
                openraft::errors::InitializeError::NotAllowed(_),
            )) => Ok(()),
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
    pub async fn propose(&self, cmd: Command) -> Result<Applied, ShardError> {
        let resp = self.inner.raft.client_write(ShardRequest(cmd)).await?;
        Ok(resp.data)
    }

    /// Linearizable read: confirm leadership (from the leader lease while it is valid, else by
    /// a heartbeat round shared with concurrent reads; never a log write), wait until the state
    /// machine has applied up to the read point, then run `f` on the in-memory state.
    pub async fn read<R>(&self, f: impl FnOnce(&ShardState) -> R) -> Result<R, ShardError> {
        let raft = &self.inner.raft;
        let linearizer = raft
            .get_read_linearizer(LinearizerOption::new(None, true))
            .await?;
        let timeout = Duration::from_millis(self.inner.cfg.wait_timeout_ms);
        match linearizer.try_await_ready(raft, Some(timeout)).await? {
            Ok(_) => Ok(self.read_local(f)),
            Err(state) => Err(ShardError::Unavailable(format!(
                "the state machine did not reach the read point in time: {state}"
            ))),
        }
    }

    /// Read the local in-memory state without any leadership check.
    pub fn read_local<R>(&self, f: impl FnOnce(&ShardState) -> R) -> R {
        self.inner.sm.read(f)
    }

    /// Whether this replica is the leader (from the Raft metrics).
    pub fn is_leader(&self) -> bool {
        self.inner.raft.is_leader()
    }

    /// The current Raft term (from the Raft metrics).
    pub fn current_term(&self) -> u64 {
        self.inner.raft.metrics().borrow_watched().current_term
    }

    /// A watch of this replica's leadership; it changes when the leader or the term changes.
    pub fn leadership(&self) -> watch::Receiver<Leadership> {
        self.inner.leadership.clone()
    }

    /// Receive a [`ShardEvent`] for every change applied from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<ShardEvent> {
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
    pub fn raft(&self) -> &ShardRaft {
        &self.inner.raft
    }

    /// Stop the group's Raft and flush the database. Other calls fail afterwards.
    pub async fn shutdown(&self) -> Result<(), ShardError> {
        self.inner
            .raft
            .shutdown()
            .await
            .map_err(|e| ShardError::Fatal(format!("raft shutdown failed: {e}")))?;
        self.inner.watcher.abort();
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
