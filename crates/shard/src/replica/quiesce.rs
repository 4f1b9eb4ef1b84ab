//! Quiescence: an idle group stops its Raft timers on every replica, so that it costs no
//! heartbeats and no timer wake-ups, and wakes on the first thing that needs it.
//!
//! Deciding is up to the node (the transport's node beat, which calls the methods here with one
//! reading of [`super::clock_ms`] per round): a leader whose group has settled quiets itself
//! ([`ShardReplica::tick_quiet`]) and is listed in the beats its node sends its peers; a
//! follower listed by its leader's node quiets itself ([`ShardReplica::follow_quietly`]); a
//! follower whose leader's node says the group woke ([`ShardReplica::unlisted_by`]) or falls
//! silent ([`ShardReplica::check_silence`]) ticks again and, if the leader is gone, elects as it
//! would have anyway.
//!
//! What keeps an idle node's rounds from visiting every group:
//! - a quiet follower does not record each beat that lists it: it shares its leader's node's
//!   [`Heard`] with every other group that node lists, and the beat stores one time in it;
//! - every change of any replica's mode counts in [`quiet_transitions`], so the node's round
//!   knows when what it saw of its groups last time may be out of date.
//!
//! A replica that quiesces also compacts its log in the background (see `compact.rs`).
//!
//! Why it stays safe and live:
//! - Quieting only stops openraft's ticker (`RuntimeConfig::tick(false)`): no heartbeats from a
//!   leader, no election timer on a follower. Log replication, votes and reads do not depend on
//!   it, and openraft's own vote and lease rules are untouched.
//! - A quiescent replica refuses votes and Pre-Votes other than a leadership transfer's
//!   ([`ShardReplica::quiet_vote_refusal`]): its group has a leader whose node is alive and says
//!   so, which is what openraft's lease expresses for an awake group. Refusing a vote is always
//!   safe; it only keeps a replica that lost touch (a restarted or partitioned one) from
//!   deposing a healthy leader, as the lease does.
//! - Anything that needs the group awake wakes it first ([`ShardReplica::wake`]): a proposal, a
//!   read that must confirm leadership, a membership change or a transfer. A woken leader sends
//!   a heartbeat at once, which renews its followers' view of it before the next node beat
//!   stops listing the group and their election timers run again.
//! - Reads have a lease of their own while the group is quiet (`quiet_lease.rs`): a follower
//!   that follows quietly promises to elect no one else until the shortest election timeout
//!   after it last heard its leader's node, and keeps that promise if it is woken on its own
//!   node (it refuses votes, and elections are off, until then; the node's round switches them
//!   on again). A replica that opens with a vote on disk refuses votes for as long, for what it
//!   may have promised before it stopped.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use openraft::async_runtime::WatchReceiver;

use super::ShardReplica;
use crate::group::GroupState;
use crate::types::NodeId;

/// The replica ticks as usual.
const AWAKE: u8 = 0;
/// A quiescent leader.
pub(super) const LEADING: u8 = 1;
/// A quiescent follower.
const FOLLOWING: u8 = 2;

/// What a quiescent leader lists in its node's beats: the term it leads in and where its log
/// ends (committed, applied, and matched by every member).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuietLead {
    /// The term of the leadership.
    pub term: u64,
    /// The last log index, which is also the committed index.
    pub commit: u64,
}

/// Whether, and how, a replica is quiescent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Quiet {
    /// Ticking as usual.
    Awake,
    /// A quiescent leader.
    Leading,
    /// A quiescent follower of node `leader`.
    Following {
        /// The node whose beats list the group.
        leader: NodeId,
    },
}

/// When the beats of one node were last heard, on `clock_ms` (0: never). The receiving node
/// keeps one per peer and stores the time of each beat in it; every replica that follows a group
/// of that peer quietly holds a clone, so one store refreshes them all. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Heard(Arc<AtomicU64>);

impl Heard {
    /// Never heard yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// A beat arrived at `now_ms`.
    pub fn touch(&self, now_ms: u64) {
        self.0.fetch_max(now_ms, Ordering::AcqRel);
    }

    /// When the last beat arrived (0: none yet).
    pub fn at_ms(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }
}

/// Changes of any replica's quiescence in this process: quieting, waking, and following another
/// leadership. A node that saw its groups at one count knows that none changed mode while it
/// still reads the same count. Every node in the process counts in the one total, which only
/// makes a node look again sooner than it had to.
static TRANSITIONS: AtomicU64 = AtomicU64::new(0);

/// How many times a replica of this process changed its quiescence so far (see [`TRANSITIONS`]).
pub fn quiet_transitions() -> u64 {
    TRANSITIONS.load(Ordering::SeqCst)
}

/// A replica's quiescence. Transitions happen under `lock`, so the ticker's state always
/// matches `mode`; the propose path and the node's rounds read the atomics without it.
#[derive(Default)]
pub(super) struct Quiescence {
    lock: parking_lot::Mutex<Settling>,
    mode: AtomicU8,
    /// Following: the leader's node.
    leader: AtomicU64,
    /// Following: the term the leader's node listed. Leading: the term it leads in.
    term: AtomicU64,
    /// Following: the log end the leader's node listed. Leading: its log end.
    commit: AtomicU64,
    /// Leading: when the group was last found settled, on `clock_ms`.
    verified_ms: AtomicU64,
    /// Following: how long the leader's node may stay silent before the replica ticks again,
    /// drawn from the election timeout's range when it quieted.
    silence_ms: AtomicU64,
    /// Until when (on `clock_ms`) the replica refuses votes and Pre-Votes that are not a
    /// leadership transfer's, even awake: what its answers to a quiet leader's beats promised
    /// (see `quiet_lease.rs`), or, from when it opened, what its answers before a restart may
    /// have promised.
    promise_ms: AtomicU64,
    /// Elections are off until `promise_ms` (a follower woken before its promise ran out).
    elect_held: AtomicBool,
}

/// What a replica's quiescence keeps under its lock.
#[derive(Default)]
pub(super) struct Settling {
    /// Leading, or on the way to: the last log index seen settled, and since when (on
    /// `clock_ms`).
    since: Option<(u64, u64)>,
    /// Following: when the leader's node was last heard.
    heard: Option<Heard>,
}

impl Quiescence {
    /// A replica's quiescence as it opens: awake, refusing votes until `promise_ms`.
    pub(super) fn opened(promise_ms: u64) -> Self {
        Self {
            promise_ms: AtomicU64::new(promise_ms),
            ..Self::default()
        }
    }

    /// The mode (`AWAKE`, `LEADING` or `FOLLOWING`).
    pub(super) fn mode(&self) -> u8 {
        self.mode.load(Ordering::SeqCst)
    }

    /// Enter `mode`; returns the mode it left. The caller holds `lock`.
    fn enter(&self, mode: u8) -> u8 {
        let was = self.mode.swap(mode, Ordering::SeqCst);
        if was != mode {
            TRANSITIONS.fetch_add(1, Ordering::SeqCst);
        }
        was
    }

    /// Following: how long ago (at `now_ms`) the leader's node was last heard. The caller holds
    /// `lock`.
    fn silence(settling: &Settling, now_ms: u64) -> u64 {
        now_ms.saturating_sub(settling.heard.as_ref().map_or(0, Heard::at_ms))
    }
}

/// A draw in `[lo, hi]` from the clock and the replica's identity: followers of one leader quiet
/// at about the same time, and must not all wake at once when it dies (they would split the
/// vote).
fn spread(lo: u64, hi: u64, salt: u64) -> u64 {
    if hi <= lo {
        return lo;
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos() as u64);
    let mut z = nanos ^ salt.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    lo + z % (hi - lo + 1)
}

impl<S: GroupState> ShardReplica<S> {
    fn set_ticking(&self, on: bool) {
        self.inner.raft.runtime_config().tick(on);
    }

    /// How many of the latest log entries this replica keeps in memory (`raft.log_cache_bytes`),
    /// and their encoded size: none once the group is quiescent.
    pub fn recent_entries_held(&self) -> (usize, usize) {
        self.inner.log.recent_held()
    }

    /// Whether this replica is quiescent, and how.
    pub fn quiet(&self) -> Quiet {
        match self.inner.quiet.mode.load(Ordering::SeqCst) {
            LEADING => Quiet::Leading,
            FOLLOWING => Quiet::Following {
                leader: self.inner.quiet.leader.load(Ordering::Acquire),
            },
            _ => Quiet::Awake,
        }
    }

    /// Tick again if quiescent. A quiescent leader also sends a heartbeat at once, so that its
    /// followers hear from it before its node's beats stop listing the group. Cheap when awake.
    pub async fn wake(&self) {
        if self.wake_now(true) == LEADING {
            // A stopped core has nothing to wake; its callers see the error themselves. Boxed:
            // the trigger's future is several KiB, and every proposal's future holds this one.
            let _ = Box::pin(self.inner.raft.trigger().heartbeat()).await;
        }
    }

    /// Tick again if quiescent (a leader's ticker heartbeats within an interval); returns the
    /// mode it left. A quiet follower keeps its promise (`keep`) unless its leader's node
    /// released it: it refuses votes, and starts no election, until the shortest election
    /// timeout has passed since it last heard that node.
    fn wake_now(&self, keep: bool) -> u8 {
        let q = &self.inner.quiet;
        if q.mode.load(Ordering::SeqCst) == AWAKE {
            return AWAKE;
        }
        let mut settling = q.lock.lock();
        settling.since = None;
        let heard = settling.heard.take();
        if keep && q.mode.load(Ordering::SeqCst) == FOLLOWING {
            let until =
                heard.map_or(0, |h| h.at_ms()) + self.inner.cfg.raft.election_timeout_min_ms;
            if until > super::clock_ms() {
                q.promise_ms.fetch_max(until, Ordering::SeqCst);
                self.inner.raft.runtime_config().elect(false);
                q.elect_held.store(true, Ordering::SeqCst);
            }
        }
        let was = q.enter(AWAKE);
        if was != AWAKE {
            self.set_ticking(true);
            tracing::debug!(shard = self.inner.cfg.shard_id, "group woke");
        }
        was
    }

    /// The node's round for this replica at `now_ms` (on `clock_ms`): a quiescent follower whose
    /// leader's node has not listed the group for its silence bound ticks again; a leader whose
    /// group has been settled for `after` quiets. Returns, for a quiescent leader, what the
    /// node's beats list for the group. `after` zero: never quiet.
    ///
    /// Settled: this replica leads, nothing is being proposed or read through it, no transfer
    /// is under way, the membership is committed and not joint, and every member holds the
    /// whole log, which is committed and applied. A quiescent leader whose group stopped being
    /// settled wakes.
    pub fn tick_quiet(&self, now_ms: u64, after: Duration) -> Option<QuietLead> {
        let q = &self.inner.quiet;
        if q.elect_held.load(Ordering::Acquire) && now_ms >= q.promise_ms.load(Ordering::SeqCst) {
            // Under the lock a waking follower holds while it makes a new promise.
            let _settling = q.lock.lock();
            if q.elect_held.load(Ordering::SeqCst) && now_ms >= q.promise_ms.load(Ordering::SeqCst)
            {
                q.elect_held.store(false, Ordering::SeqCst);
                self.inner.raft.runtime_config().elect(true);
            }
        }
        if q.mode.load(Ordering::SeqCst) == FOLLOWING {
            self.check_silence(q.leader.load(Ordering::Acquire), now_ms);
            return None;
        }
        if after.is_zero() {
            return None;
        }
        // A quiescent leader's group changes only through what wakes it (a proposal, a read, a
        // membership change, a transfer) or a higher term reaching it, which its followers'
        // answers to the beat report: its settled state is checked again only every so often.
        if q.mode.load(Ordering::SeqCst) == LEADING
            && now_ms.saturating_sub(q.verified_ms.load(Ordering::Acquire))
                < self.inner.cfg.raft.election_timeout_min_ms
        {
            return Some(QuietLead {
                term: q.term.load(Ordering::Acquire),
                commit: q.commit.load(Ordering::Acquire),
            });
        }
        let settled = self.settled();
        let mut settling = q.lock.lock();
        let mode = q.mode.load(Ordering::SeqCst);
        let Some(lead) = settled else {
            settling.since = None;
            if mode == LEADING {
                q.enter(AWAKE);
                self.set_ticking(true);
            }
            return None;
        };
        match mode {
            LEADING => {
                q.term.store(lead.term, Ordering::Release);
                q.commit.store(lead.commit, Ordering::Release);
                q.verified_ms.store(now_ms, Ordering::Release);
                return Some(lead);
            }
            FOLLOWING => {
                // It became leader while quiet (a transfer to it): it must tick to lead.
                q.enter(AWAKE);
                settling.since = None;
                settling.heard = None;
                self.set_ticking(true);
                return None;
            }
            _ => {}
        }
        match settling.since {
            Some((index, since)) if index == lead.commit => {
                if now_ms.saturating_sub(since) < after.as_millis() as u64 {
                    return None;
                }
            }
            _ => {
                settling.since = Some((lead.commit, now_ms));
                return None;
            }
        }
        // Every member holds and has applied the whole log: nothing reads its latest entries
        // soon. Let go of them first, so that a quiet replica never holds any.
        self.inner.log.forget_recent();
        // Reads may trust this round's beats and later ones only (see `quiet_lease.rs`).
        self.inner.quiet_lease.begin(now_ms, lead.term);
        // Publish the mode before checking for proposals: a proposal counts itself in before
        // it reads the mode, so one of the two sees the other.
        q.enter(LEADING);
        if self.inner.proposing.load(Ordering::SeqCst) != 0 {
            q.enter(AWAKE);
            settling.since = None;
            return None;
        }
        q.term.store(lead.term, Ordering::Release);
        q.commit.store(lead.commit, Ordering::Release);
        q.verified_ms.store(now_ms, Ordering::Release);
        self.set_ticking(false);
        tracing::debug!(
            shard = self.inner.cfg.shard_id,
            term = lead.term,
            commit = lead.commit,
            "group quiesced (leader)"
        );
        self.compact_when_idle();
        Some(lead)
    }

    /// The settled state of a leader's group, if it is settled now.
    fn settled(&self) -> Option<QuietLead> {
        let me = self.inner.cfg.node_id;
        let m = self.inner.metrics.borrow_watched();
        if !m.state.is_leader() || m.current_leader != Some(me) || m.running_state.is_err() {
            return None;
        }
        if self.inner.proposing.load(Ordering::SeqCst) != 0
            || self.reads_waiting()
            || self.inner.lease.transfer_pending()
        {
            return None;
        }
        let last = m.last_log_index?;
        let index = |l: &Option<crate::types::LogId>| l.as_ref().map(|l| l.index);
        if index(&m.cluster_committed) != Some(last) || index(&m.last_applied) != Some(last) {
            return None;
        }
        let membership = &m.membership_config;
        if membership.log_id().as_ref().map(|l| l.index) > Some(last)
            || membership.membership().get_joint_config().len() != 1
        {
            return None;
        }
        let replication = m.replication.as_ref()?;
        for id in membership.membership().nodes().map(|(id, _)| id) {
            if *id != me && replication.get(id).and_then(index) != Some(last) {
                return None;
            }
        }
        Some(QuietLead {
            term: m.current_term,
            commit: last,
        })
    }

    /// On a follower, for a beat of node `leader` heard at `heard` that lists the group as led
    /// quiescently in `term` with its log ending at `commit`: quiet this replica if it follows
    /// that leader in that term and holds, has committed and has applied exactly that log; from
    /// then on it takes `heard` as the time it last heard of its leader. Otherwise it ticks (it
    /// is behind, or sees another leader or term) and `false` asks the leader to wake.
    pub fn follow_quietly(&self, leader: NodeId, term: u64, commit: u64, heard: &Heard) -> bool {
        let q = &self.inner.quiet;
        if q.mode.load(Ordering::SeqCst) == FOLLOWING
            && q.leader.load(Ordering::Acquire) == leader
            && q.term.load(Ordering::Acquire) == term
            && q.commit.load(Ordering::Acquire) == commit
        {
            // Already following that leadership quietly: nothing reached the replica since, as
            // a quiescent leader sends nothing, and `heard` is the leader's node's.
            return true;
        }
        let ok = {
            let m = self.inner.metrics.borrow_watched();
            let index = |l: &Option<crate::types::LogId>| l.as_ref().map_or(0, |l| l.index);
            m.running_state.is_ok()
                && !m.state.is_leader()
                && m.current_leader == Some(leader)
                && m.current_term == term
                && m.last_log_index.unwrap_or(0) == commit
                && index(&m.cluster_committed) == commit
                && index(&m.last_applied) == commit
        };
        if !ok {
            self.wake_now(true);
            return false;
        }
        let cfg = &self.inner.cfg;
        let mut settling = q.lock.lock();
        settling.heard = Some(heard.clone());
        q.leader.store(leader, Ordering::Release);
        q.term.store(term, Ordering::Release);
        q.commit.store(commit, Ordering::Release);
        q.silence_ms.store(
            spread(
                cfg.raft.election_timeout_min_ms,
                cfg.raft.election_timeout_max_ms,
                (u64::from(cfg.shard_id) << 32) ^ cfg.node_id,
            ),
            Ordering::Release,
        );
        self.inner.log.forget_recent();
        if q.enter(FOLLOWING) != FOLLOWING {
            self.set_ticking(false);
            tracing::debug!(
                shard = cfg.shard_id,
                leader,
                term,
                "group quiesced (follower)"
            );
            self.compact_when_idle();
        }
        true
    }

    /// On a quiescent follower of node `leader` at `now_ms`: if that node has not been heard for
    /// longer than the replica's silence bound, tick again. Returns whether the replica still
    /// follows `leader` quietly.
    pub fn check_silence(&self, leader: NodeId, now_ms: u64) -> bool {
        let q = &self.inner.quiet;
        if q.mode.load(Ordering::SeqCst) != FOLLOWING || q.leader.load(Ordering::Acquire) != leader
        {
            return false;
        }
        let silent = {
            let settling = q.lock.lock();
            Quiescence::silence(&settling, now_ms) > q.silence_ms.load(Ordering::Acquire)
        };
        if !silent {
            return true;
        }
        tracing::debug!(
            shard = self.inner.cfg.shard_id,
            leader,
            "the leader's node fell silent; ticking again"
        );
        // Silent for longer than the promise: nothing is left of it.
        self.wake_now(true);
        false
    }

    /// Following quietly: when the leader's node was last heard, on `clock_ms`.
    pub(super) fn quiet_leader_heard_ms(&self) -> Option<u64> {
        let q = &self.inner.quiet;
        if q.mode.load(Ordering::SeqCst) != FOLLOWING {
            return None;
        }
        q.lock.lock().heard.as_ref().map(Heard::at_ms)
    }

    /// Node `from` says the group woke (or it no longer leads it quietly): if this replica
    /// followed it quietly under that node, it ticks again.
    pub fn unlisted_by(&self, from: NodeId) {
        let q = &self.inner.quiet;
        if q.mode.load(Ordering::SeqCst) == FOLLOWING && q.leader.load(Ordering::Acquire) == from {
            // The leader's node says the group woke: it no longer trusts the promise.
            self.wake_now(false);
        }
    }

    /// How a quiescent replica answers a vote or Pre-Vote that is not a leadership transfer's:
    /// refused, with its own vote and last log id (see the module docs). `None`: the replica is
    /// awake and openraft decides.
    pub fn quiet_vote_refusal(&self) -> Option<openraft::raft::VoteResponse<crate::Group<S>>> {
        let q = &self.inner.quiet;
        if q.mode.load(Ordering::SeqCst) == AWAKE {
            if super::clock_ms() >= q.promise_ms.load(Ordering::SeqCst) {
                return None;
            }
            // Awake, but bound by a promise: refused all the same. The answer names the last
            // applied log id, which is no later than the last one held: a candidate that reads
            // it as smaller than its own loses nothing by it.
            let m = self.inner.metrics.borrow_watched();
            return Some(openraft::raft::VoteResponse::new(
                &m.vote,
                m.last_applied,
                false,
            ));
        }
        let m = self.inner.metrics.borrow_watched();
        // The answer names the voter's last log id; a quiescent replica's is its last applied
        // one. A replica with entries beyond it (its leader woke and is replicating) lets
        // openraft answer instead.
        let last = m.last_applied;
        if last.as_ref().map(|l| l.index) != m.last_log_index {
            return None;
        }
        Some(openraft::raft::VoteResponse::new(&m.vote, last, false))
    }
}

#[cfg(test)]
mod tests {
    use super::spread;

    #[test]
    fn spread_stays_in_its_range() {
        for salt in 0..1000u64 {
            let v = spread(300, 600, salt);
            assert!((300..=600).contains(&v), "{v}");
        }
        assert_eq!(spread(5, 5, 1), 5);
        assert_eq!(spread(7, 3, 1), 7);
    }
}
