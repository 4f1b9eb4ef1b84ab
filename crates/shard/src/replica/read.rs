//! Linearizable reads of a replica: the leader lease that lets a read use the leader's memory
//! at once, and the batch of reads that share one leadership confirmation otherwise. The
//! safety argument is on [`ReadLease`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use openraft::async_runtime::WatchReceiver;
use openraft::{Instant as _, LinearizerOption};
use tokio::sync::oneshot;

use super::ShardReplica;
use crate::config::ShardConfig;
use crate::error::ShardError;
use crate::group::GroupState;

/// When a read may skip the leadership confirmation and read the leader's memory at once.
///
/// Safe because (a) a confirmation through openraft in term `confirmed_term` made the state
/// machine apply everything committed before it, (b) every later write of that term is applied
/// here before it is acknowledged, and (c) no other leader can exist while this one's quorum
/// lease holds: voters refuse to elect anyone within `election_timeout_max` of the last
/// heartbeat they acknowledged, and a voter that restarted since refuses for
/// `election_timeout_min` after it opens (openraft forgets its lease in a restart; the
/// refusal is `quiesce.rs`'s promise). A leadership transfer overrides (c), so reads take the
/// full path from the moment one is asked for until the outcome is known.
///
/// A quiescent group (see `quiesce.rs`) sends no heartbeats, so its leader's last quorum
/// acknowledgement ages past `max_ack_age`; its reads use the lease its node's beats renew
/// instead (`quiet_lease.rs`), and only when that one lapsed too does a read take the full
/// path, which wakes the group and confirms with a heartbeat round.
pub(super) struct ReadLease {
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
    pub(super) fn new(cfg: &ShardConfig) -> Self {
        Self {
            confirmed_term: AtomicU64::new(0),
            off_until_ms: AtomicU64::new(0),
            epoch: std::time::Instant::now(),
            max_ack_age: Duration::from_millis(cfg.raft.election_timeout_min_ms / 2),
            transfer_hold: Duration::from_millis(
                cfg.raft.election_timeout_max_ms.saturating_mul(3),
            ),
        }
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// Whether a leadership transfer asked for lately may still be under way.
    pub(super) fn transfer_pending(&self) -> bool {
        self.now_ms() < self.off_until_ms.load(Ordering::Acquire)
    }

    /// Turn the fast path off for a leadership transfer: from now until `transfer_hold` has
    /// passed, and until a confirmation succeeds again after that.
    pub(super) fn hold_for_transfer(&self) {
        self.off_until_ms.store(
            self.now_ms() + self.transfer_hold.as_millis() as u64,
            Ordering::Release,
        );
        self.confirmed_term.store(0, Ordering::Release);
    }
}

/// Reads waiting for a leadership confirmation. One confirmation runs at a time; the reads
/// that arrive meanwhile wait for the next one, which then answers all of them together.
#[derive(Default)]
pub(super) struct ReadBatch {
    running: bool,
    waiting: Vec<oneshot::Sender<Result<(), ShardError>>>,
}

impl<S: GroupState> ShardReplica<S> {
    /// Linearizable read: confirm leadership (from the leader lease while it is valid, else by
    /// a heartbeat round; never a log write), wait until the state machine has applied up to
    /// the read point, then run `f` on the in-memory state.
    ///
    /// Concurrent reads share confirmations: a read joins the next confirmation that starts
    /// after it arrived (never one already under way, whose read point may predate a write the
    /// reader has seen), so under load one confirmation answers a whole batch of reads.
    pub async fn read<R>(&self, f: impl FnOnce(&S) -> R) -> Result<R, ShardError> {
        let f = match self.read_leased(f) {
            Ok(r) => return Ok(r),
            Err(f) => f,
        };
        // A quiescent leader's lease has lapsed: this read confirms leadership with a heartbeat
        // round, and the group ticks again so that the reads after it find the lease renewed.
        self.wake().await;
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

    /// The linearizable read of [`ShardReplica::read`] at once, if a lease lets this replica
    /// read its memory now; otherwise `f` back, for [`ShardReplica::read`].
    pub fn read_leased<R, F: FnOnce(&S) -> R>(&self, f: F) -> Result<R, F> {
        if self.lease_holds() {
            Ok(self.read_local(f))
        } else {
            Err(f)
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

    /// Whether reads wait for (or run) a leadership confirmation.
    pub(super) fn reads_waiting(&self) -> bool {
        self.inner.reads.lock().running
    }

    /// Whether a read may use the leader's memory without a confirmation (see [`ReadLease`],
    /// and `quiet_lease.rs` for a quiescent leader's).
    fn lease_holds(&self) -> bool {
        let lease = &self.inner.lease;
        if lease.now_ms() < lease.off_until_ms.load(Ordering::Acquire) {
            return false;
        }
        let now_ms = super::clock_ms();
        if self.quiet_lease_known(now_ms) {
            return true;
        }
        let me = self.inner.cfg.node_id;
        let m = self.inner.metrics.borrow_watched();
        if !(m.state.is_leader() && m.current_leader == Some(me)) {
            return false;
        }
        if self.quiet_lease_holds(&m, now_ms) {
            return true;
        }
        if m.current_term != lease.confirmed_term.load(Ordering::Acquire) {
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
}
