//! The groups a node hosts, by group id: where the server delivers the messages it receives.
//!
//! A node hosts groups of two kinds (task shards and the metadata group), whose Raft types
//! differ. The registry holds each as a [`HostedGroup`]: the four Raft calls on serialised
//! requests, so the server needs no knowledge of what a group replicates. Every call it
//! receives, the node beat's included, is first checked to be meant for this node
//! (`addressed_here`).

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use openraft::raft::VoteRequest;
use parking_lot::RwLock;
use serde::de::DeserializeOwned;
use serde::Serialize;
use taskmesh_shard::types::{Snapshot, Vote};
use taskmesh_shard::{Group, GroupState, Heard, Quiet, QuietLead, ShardReplica, Vouched};
use tonic::Status;

use crate::listings::PeerListings;

/// A call meant for node `target` that reached node `node_id`: refused unless they are one.
pub(crate) fn addressed_here(node_id: u64, target: u64) -> Result<(), Status> {
    if target == node_id {
        return Ok(());
    }
    Err(Status::failed_precondition(format!(
        "this is node {node_id}, not node {target}"
    )))
}

/// A hosted group as the transport server sees it: each call takes openraft's request as JSON
/// and answers openraft's response as JSON, or a status (see the proto file).
pub trait HostedGroup: Send + Sync + 'static {
    /// The group's id (a shard index, or the metadata group's id).
    fn group_id(&self) -> u32;
    /// Replicate entries (or a heartbeat).
    fn append_entries(&self, payload: Vec<u8>) -> BoxFuture<'_, Result<Vec<u8>, Status>>;
    /// A vote, or a Pre-Vote.
    fn vote(&self, payload: Vec<u8>, pre_vote: bool) -> BoxFuture<'_, Result<Vec<u8>, Status>>;
    /// Install a whole snapshot sent by the leader of term `vote`.
    fn install_snapshot(
        &self,
        vote: Vote,
        snapshot: Snapshot,
    ) -> BoxFuture<'_, Result<Vec<u8>, Status>>;
    /// Take over leadership as the current leader asks.
    fn transfer_leader(&self, payload: Vec<u8>) -> BoxFuture<'_, Result<Vec<u8>, Status>>;

    /// Whether this replica is quiescent, and how ([`ShardReplica::quiet`]).
    fn quiet(&self) -> Quiet;
    /// The node's round for this replica at `now_ms` ([`ShardReplica::tick_quiet`]): for a
    /// quiescent leader, what the node's beats list for the group.
    fn tick_quiet(&self, now_ms: u64, after: Duration) -> Option<QuietLead>;
    /// Call `f` with every other member of the group and its address.
    fn for_each_peer(&self, f: &mut dyn FnMut(u64, &str));
    /// A beat of node `leader`, heard at `heard`, lists the group
    /// ([`ShardReplica::follow_quietly`]); `false`: the leader should wake it.
    fn follow_quietly(&self, leader: u64, term: u64, commit: u64, heard: &Heard) -> bool;
    /// Node `leader` has not been heard for a while ([`ShardReplica::check_silence`]); returns
    /// whether the replica still follows it quietly.
    fn check_silence(&self, leader: u64, now_ms: u64) -> bool;
    /// A beat of node `from` says the group woke ([`ShardReplica::unlisted_by`]).
    fn unlisted_by(&self, from: u64);
    /// Tick again, heartbeating at once if leading ([`ShardReplica::wake`]).
    fn wake(&self) -> BoxFuture<'_, ()>;
    /// The peers whose beats' answers may vouch for this replica's quiet leadership
    /// ([`ShardReplica::vouched_by`]).
    fn vouched_by(&self, vouchers: Vec<(u64, Arc<dyn Vouched>)>);
}

fn decode<T: DeserializeOwned>(what: &str, payload: &[u8]) -> Result<T, Status> {
    serde_json::from_slice(payload)
        .map_err(|e| Status::invalid_argument(format!("undecodable {what}: {e}")))
}

fn encode<T: Serialize>(what: &str, value: &T) -> Result<Vec<u8>, Status> {
    serde_json::to_vec(value).map_err(|e| Status::internal(format!("cannot encode {what}: {e}")))
}

/// The group's Raft could not handle the call (it has stopped, or failed).
fn stopped(group: u32, e: impl std::fmt::Display) -> Status {
    Status::unavailable(format!("shard {group}: {e}"))
}

/// One call on a group's Raft for a peer: `request` decoded from `payload` (an error names
/// `names.0`), handed to `call`, and its answer encoded (`names.1`). A Raft that cannot take
/// the call (stopped, failed) is [`stopped`].
async fn serve<Req, Resp, E, Fut>(
    group: u32,
    names: (&str, &str),
    payload: &[u8],
    call: impl FnOnce(Req) -> Fut,
) -> Result<Vec<u8>, Status>
where
    Req: DeserializeOwned,
    Resp: Serialize,
    E: std::fmt::Display,
    Fut: Future<Output = Result<Resp, E>>,
{
    let request = decode(names.0, payload)?;
    let answer = call(request).await.map_err(|e| stopped(group, e))?;
    encode(names.1, &answer)
}

impl<S: GroupState> HostedGroup for ShardReplica<S> {
    fn group_id(&self) -> u32 {
        self.shard_id()
    }

    fn append_entries(&self, payload: Vec<u8>) -> BoxFuture<'_, Result<Vec<u8>, Status>> {
        let names = ("AppendEntriesRequest", "AppendEntriesResponse");
        Box::pin(async move {
            let answer = serve(self.shard_id(), names, &payload, |rpc| {
                self.raft().append_entries(rpc)
            })
            .await;
            if answer.is_ok() {
                self.note_leader_contact();
            }
            answer
        })
    }

    fn vote(&self, payload: Vec<u8>, pre_vote: bool) -> BoxFuture<'_, Result<Vec<u8>, Status>> {
        let names = ("VoteRequest", "VoteResponse");
        Box::pin(async move {
            serve(
                self.shard_id(),
                names,
                &payload,
                |rpc: VoteRequest<Group<S>>| async move {
                    // A quiescent replica's leader is alive by its node's beats: only a
                    // transfer it asked for may elect another (see `quiesce.rs`).
                    if !rpc.leadership_transfer {
                        if let Some(refused) = self.quiet_vote_refusal() {
                            return Ok(refused);
                        }
                    }
                    if pre_vote {
                        self.raft().pre_vote(rpc).await
                    } else {
                        self.raft().vote(rpc).await
                    }
                },
            )
            .await
        })
    }

    fn install_snapshot(
        &self,
        vote: Vote,
        snapshot: Snapshot,
    ) -> BoxFuture<'_, Result<Vec<u8>, Status>> {
        Box::pin(async move {
            let answer = self
                .raft()
                .install_full_snapshot(vote, snapshot)
                .await
                .map_err(|e| stopped(self.shard_id(), e))?;
            encode("SnapshotResponse", &answer)
        })
    }

    fn transfer_leader(&self, payload: Vec<u8>) -> BoxFuture<'_, Result<Vec<u8>, Status>> {
        let names = ("TransferLeaderRequest", "TransferLeaderResponse");
        Box::pin(async move {
            // The new leader must tick to lead.
            ShardReplica::wake(self).await;
            serve(self.shard_id(), names, &payload, |rpc| {
                self.raft().handle_transfer_leader(rpc)
            })
            .await
        })
    }

    fn quiet(&self) -> Quiet {
        ShardReplica::quiet(self)
    }

    fn tick_quiet(&self, now_ms: u64, after: Duration) -> Option<QuietLead> {
        ShardReplica::tick_quiet(self, now_ms, after)
    }

    fn for_each_peer(&self, f: &mut dyn FnMut(u64, &str)) {
        let me = self.node_id();
        let members = self.members_watch();
        for (id, addr) in members.borrow().iter() {
            if *id != me {
                f(*id, addr);
            }
        }
    }

    fn follow_quietly(&self, leader: u64, term: u64, commit: u64, heard: &Heard) -> bool {
        ShardReplica::follow_quietly(self, leader, term, commit, heard)
    }

    fn check_silence(&self, leader: u64, now_ms: u64) -> bool {
        ShardReplica::check_silence(self, leader, now_ms)
    }

    fn unlisted_by(&self, from: u64) {
        ShardReplica::unlisted_by(self, from)
    }

    fn wake(&self) -> BoxFuture<'_, ()> {
        Box::pin(ShardReplica::wake(self))
    }

    fn vouched_by(&self, vouchers: Vec<(u64, Arc<dyn Vouched>)>) {
        ShardReplica::vouched_by(self, vouchers)
    }
}

/// The groups this node hosts, keyed by group id, and what the node's beats heard about them
/// from its peers. Cheap to clone: clones share both.
///
/// The node inserts a replica once it is open (a message for a group that is not here yet is
/// answered `NOT_FOUND`, which the sender treats as an unreachable peer and retries later) and
/// removes it before shutting it down.
#[derive(Clone, Default)]
pub struct ReplicaRegistry {
    groups: Arc<RwLock<HashMap<u32, Arc<dyn HostedGroup>>>>,
    /// Counts the insertions and removals.
    generation: Arc<AtomicU64>,
    /// The last listing of each peer's beats (see `beat/receive.rs` and `listings.rs`).
    listings: Arc<PeerListings>,
}

impl ReplicaRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Register `replica` under its group id; returns whether it replaced another.
    pub fn insert<S: GroupState>(&self, replica: ShardReplica<S>) -> bool {
        let id = replica.shard_id();
        let replaced = self.groups.write().insert(id, Arc::new(replica)).is_some();
        self.generation.fetch_add(1, Ordering::SeqCst);
        replaced
    }

    /// Unregister the group `id`; returns whether it was registered.
    pub fn remove(&self, id: u32) -> bool {
        let removed = self.groups.write().remove(&id).is_some();
        self.generation.fetch_add(1, Ordering::SeqCst);
        removed
    }

    /// Where the groups stand as a whole: while it reads the same, no group was added or
    /// removed and no replica changed its quiescence (it pairs the registry's count of
    /// insertions and removals with [`taskmesh_shard::quiet_transitions`], read in that order).
    pub(crate) fn seen(&self) -> (u64, u64) {
        let generation = self.generation.load(Ordering::SeqCst);
        (generation, taskmesh_shard::quiet_transitions())
    }

    /// What this node's beats heard from each peer.
    pub(crate) fn listings(&self) -> &PeerListings {
        &self.listings
    }

    /// The group `id`, if this node hosts it.
    pub fn get(&self, id: u32) -> Option<Arc<dyn HostedGroup>> {
        self.groups.read().get(&id).cloned()
    }

    /// Every group this node hosts (in no particular order).
    pub fn groups(&self) -> Vec<Arc<dyn HostedGroup>> {
        self.groups.read().values().cloned().collect()
    }

    /// The groups this node hosts, in ascending order.
    pub fn shard_ids(&self) -> Vec<u32> {
        let mut ids: Vec<u32> = self.groups.read().keys().copied().collect();
        ids.sort_unstable();
        ids
    }

    /// How many groups are registered.
    pub fn len(&self) -> usize {
        self.groups.read().len()
    }

    /// Whether no group is registered.
    pub fn is_empty(&self) -> bool {
        self.groups.read().is_empty()
    }
}
