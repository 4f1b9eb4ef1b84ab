//! The read lease of a quiescent leader, which its node's beats renew: while a majority of the
//! group's voters answered a recent beat that listed the group, the leader reads its own memory
//! without waking the group. The safety argument is in docs/architecture.md ("Reads of a quiet
//! group"); in short:
//!
//! - a follower that answers a beat listing the group in term `T` without asking for it to wake
//!   is following the sender quietly in `T`, with the whole log; from then on it refuses every
//!   vote and Pre-Vote that is not a leadership transfer's, and starts no election, until at
//!   least the shortest election timeout after it heard that beat on its own clock (it stays
//!   quiet until its leader's node falls silent for that long, and a follower woken otherwise
//!   keeps refusing for what is left of that time: the promise in `quiesce.rs`);
//! - a replica that restarts, or opens anew, refuses the same votes for that long after it
//!   opens, and openraft starts no election from it sooner;
//! - so no other leader can be elected before that time, and the leader, counting from when its
//!   round read the clock *before* sending the beat, trusts it for nine tenths of it: the lease
//!   holds against any two nodes' clocks running at rates apart by up to 5 %.
//!
//! A beat counts only if it was sent in the round that quieted the group or later: a follower
//! told by an earlier beat that the group woke (and so released from its promise) vouches again
//! only by answering a later one.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use openraft::metrics::RaftMetrics;

use super::quiesce::LEADING;
use super::ShardReplica;
use crate::group::{Group, GroupState};

/// What one peer's answers to this node's beats vouch for. The transport keeps one per peer and
/// hands it to the quiescent leaders of the groups that peer is a member of.
pub trait Vouched: Send + Sync {
    /// When the peer's latest answered beat was sent (on [`super::clock_ms`], as the sending
    /// round read it before sending), if it was sent at or after `since_ms`, listed `group` as led
    /// quiescently in `term`, and was answered without asking for the group to wake.
    fn vouched(&self, group: u32, term: u64, since_ms: u64) -> Option<u64>;
}

/// The peers whose beats may vouch for a quiescent leader, and its lease.
#[derive(Default)]
pub(super) struct QuietLease {
    /// Until when (on `clock_ms`) no other leader can be elected, as last worked out; 0: unknown.
    /// Reset, under `period`, before the replica leads quietly anew.
    until_ms: AtomicU64,
    /// The term of the current quiet leadership.
    term: AtomicU64,
    period: parking_lot::Mutex<Period>,
}

#[derive(Default)]
struct Period {
    /// When the replica last began to lead quietly: the quieting round's clock reading.
    since_ms: u64,
    /// The peers that may vouch, with what they vouch for.
    vouchers: Vec<(u64, Arc<dyn Vouched>)>,
}

impl QuietLease {
    /// The replica begins to lead quietly in `term`, in the round that read `now_ms`: what was
    /// worked out before no longer holds. Called before the mode says so.
    pub(super) fn begin(&self, now_ms: u64, term: u64) {
        let mut period = self.period.lock();
        period.since_ms = now_ms;
        self.term.store(term, Ordering::SeqCst);
        self.until_ms.store(0, Ordering::SeqCst);
    }
}

impl<S: GroupState> ShardReplica<S> {
    /// The peers whose answers to this node's beats may vouch for this replica while it leads
    /// quietly (the other members; only voters count). Kept until replaced.
    pub fn vouched_by(&self, vouchers: Vec<(u64, Arc<dyn Vouched>)>) {
        self.inner.quiet_lease.period.lock().vouchers = vouchers;
    }

    /// Whether this replica leads quietly and the lease last worked out still holds at
    /// `now_ms`: two loads, no lock. Its openraft state need not be looked at: the lease says
    /// that no other leader can exist before it ends, and a replica that has led quietly since
    /// the lease's spell began has applied every write committed so far (any write after it
    /// wakes the group first).
    pub(super) fn quiet_lease_known(&self, now_ms: u64) -> bool {
        self.inner.quiet.mode() == LEADING
            && now_ms < self.inner.quiet_lease.until_ms.load(Ordering::Acquire)
    }

    /// Whether this replica leads quietly and its beats' lease holds at `now_ms`, worked out
    /// again if need be. The caller has checked that the metrics `m` show this replica leading.
    pub(super) fn quiet_lease_holds(&self, m: &RaftMetrics<Group<S>>, now_ms: u64) -> bool {
        let lease = &self.inner.quiet_lease;
        if self.inner.quiet.mode() != LEADING || m.current_term != lease.term.load(Ordering::SeqCst)
        {
            return false;
        }
        if now_ms < lease.until_ms.load(Ordering::Acquire) {
            return true;
        }
        self.renew_quiet_lease(m, now_ms)
    }

    /// Work the lease out again from what the voters' latest answers vouch for.
    fn renew_quiet_lease(&self, m: &RaftMetrics<Group<S>>, now_ms: u64) -> bool {
        let lease = &self.inner.quiet_lease;
        let period = lease.period.lock();
        // Read again under the lock: a new quiet leadership begins under it.
        let term = lease.term.load(Ordering::SeqCst);
        if self.inner.quiet.mode() != LEADING || m.current_term != term {
            return false;
        }
        let me = self.inner.cfg.node_id;
        let voters: Vec<u64> = m.membership_config.voter_ids().collect();
        if !voters.contains(&me) {
            return false;
        }
        // This replica counts for itself: a majority needs this many others.
        let needed = voters.len() / 2;
        if needed == 0 {
            return true;
        }
        let group = self.inner.cfg.shard_id;
        let mut sent: Vec<u64> = period
            .vouchers
            .iter()
            .filter(|(peer, _)| *peer != me && voters.contains(peer))
            .filter_map(|(_, v)| v.vouched(group, term, period.since_ms))
            .collect();
        if sent.len() < needed {
            return false;
        }
        sent.sort_unstable_by(|a, b| b.cmp(a));
        let until = sent[needed - 1] + self.quiet_lease_ms();
        lease.until_ms.store(until, Ordering::Release);
        now_ms < until
    }

    /// How long a beat's answers vouch for the leader: nine tenths of the shortest election
    /// timeout.
    fn quiet_lease_ms(&self) -> u64 {
        self.inner.cfg.raft.election_timeout_min_ms * 9 / 10
    }
}
