//! The membership side of a replica: bootstrapping a group, adding learners, changing voters
//! and addresses through the log, and handing the leadership over.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use openraft::async_runtime::WatchReceiver;
use openraft::errors::{ChangeMembershipError, ClientWriteError, RaftError};
use tokio::sync::watch;

use super::{members_of, ShardReplica};
use crate::error::ShardError;
use crate::group::GroupState;
use crate::types::Node;

impl<S: GroupState> ShardReplica<S> {
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
        let pause = Duration::from_millis((self.inner.cfg.raft.heartbeat_interval_ms / 2).max(10));
        let mut retry = crate::Retry::new(
            Duration::from_millis(self.inner.cfg.wait_timeout_ms),
            pause,
            pause,
        );
        self.wake().await;
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
        self.wake().await;
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

    /// The index the group has committed, as this replica knows it (a follower learns it from
    /// the leader); `None` before it knows any.
    pub fn committed_index(&self) -> Option<u64> {
        let m = self.inner.metrics.borrow_watched();
        let committed = m.cluster_committed.as_ref().map(|l| l.index);
        committed
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
        self.inner.lease.hold_for_transfer();
        self.wake().await;
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
}
