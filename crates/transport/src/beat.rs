//! The node beat: one message per node pair and beat interval for every idle group.
//!
//! An idle group quiesces (see `taskmesh_shard`'s `quiesce.rs`): its leader stops ticking and
//! sends no heartbeats, its followers stop their election timers. What keeps them safe is this
//! node-level beat instead of one heartbeat per group and follower:
//!
//! - every `interval`, [`run`] looks at each group the node hosts (one clock reading per
//!   round): a settled leader quiets itself after `quiesce_after`, a quiescent follower whose
//!   leader's node has not listed it for its silence bound ticks again;
//! - it sends each peer one `Beat` listing the groups this node leads quiescently that the peer
//!   is a member of, and the groups its previous beat listed that woke since (a peer that was
//!   listed groups last time gets the next beat even when it lists none);
//! - the peer ([`receive`]) quiets each listed group it follows in that term with the whole
//!   log, wakes its quiet followers of the woken groups, and answers the listed groups it cannot
//!   follow quietly, which the sender then wakes. Its work is proportional to what the beat
//!   lists, not to the groups it hosts.
//!
//! A peer of an earlier version, which does not know the beat, has the groups listed for it
//! woken: they heartbeat it as before.
//!
//! A beat to a peer that has not answered the previous one is skipped, so a dead peer costs one
//! pending call, not a queue of them.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use taskmesh_rpc::v1 as pb;
use taskmesh_rpc::v1::raft_transport_client::RaftTransportClient;
use taskmesh_shard::Quiet;
use tonic::Status;

use crate::channels::PeerChannels;
use crate::registry::ReplicaRegistry;

/// How a node beats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BeatConfig {
    /// How often the node beats and checks its groups: at most half the shortest election
    /// timeout, so that a quiescent follower hears at least two beats before it would tick
    /// again.
    pub interval: Duration,
    /// How long a leader's group must stay settled before it quiesces; zero: groups never
    /// quiesce (they heartbeat as usual, and the node sends no beats).
    pub quiesce_after: Duration,
}

/// What the node beats to one peer in a round.
struct Beat {
    addr: String,
    request: pb::BeatRequest,
}

/// Beat for node `node_id` until the task is aborted: check and quiet the groups of `registry`,
/// and send the beats to the peers over `pool`.
pub async fn run(node_id: u64, registry: ReplicaRegistry, pool: PeerChannels, cfg: BeatConfig) {
    if cfg.quiesce_after.is_zero() || cfg.interval.is_zero() {
        return;
    }
    let quiet_leaders = taskmesh_metrics::metrics::gauge!(
        taskmesh_metrics::names::RAFT_QUIESCENT,
        "role" => "leader"
    );
    let quiet_followers = taskmesh_metrics::metrics::gauge!(
        taskmesh_metrics::names::RAFT_QUIESCENT,
        "role" => "follower"
    );
    let mut ticker = tokio::time::interval(cfg.interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let in_flight: Arc<Mutex<HashSet<u64>>> = Arc::default();
    // Per peer: its address and the groups the last beat sent to it listed.
    let mut listed_before: HashMap<u64, (String, HashSet<u32>)> = HashMap::new();
    loop {
        ticker.tick().await;
        let now = taskmesh_shard::clock_ms();
        let mut beats: HashMap<u64, Beat> = HashMap::new();
        let (mut leading, mut following) = (0usize, 0usize);
        for group in registry.groups() {
            let Some(lead) = group.tick_quiet(now, cfg.quiesce_after) else {
                if matches!(group.quiet(), Quiet::Following { .. }) {
                    following += 1;
                }
                continue;
            };
            leading += 1;
            let id = group.group_id();
            group.for_each_peer(&mut |peer, addr| {
                let beat = beats.entry(peer).or_insert_with(|| Beat {
                    addr: addr.to_string(),
                    request: pb::BeatRequest {
                        from: node_id,
                        target: peer,
                        ..Default::default()
                    },
                });
                beat.request.groups.push(id);
                beat.request.terms.push(lead.term);
                beat.request.commits.push(lead.commit);
            });
        }
        quiet_leaders.set(leading as f64);
        quiet_followers.set(following as f64);
        // What each peer's previous beat listed and this one does not: woken.
        for (peer, (addr, before)) in std::mem::take(&mut listed_before) {
            let beat = beats.entry(peer).or_insert_with(|| Beat {
                addr,
                request: pb::BeatRequest {
                    from: node_id,
                    target: peer,
                    ..Default::default()
                },
            });
            let now_listed: HashSet<u32> = beat.request.groups.iter().copied().collect();
            beat.request.woken = before
                .into_iter()
                .filter(|g| !now_listed.contains(g))
                .collect();
        }
        for (peer, beat) in beats {
            let Beat { addr, request } = beat;
            if !in_flight.lock().insert(peer) {
                // The previous beat is still out: the next round tells the peer instead, and
                // what woke meanwhile reaches it then.
                let mut owed: HashSet<u32> = request.groups.iter().copied().collect();
                owed.extend(request.woken.iter().copied());
                listed_before.insert(peer, (addr, owed));
                continue;
            }
            if !request.groups.is_empty() {
                let listed = request.groups.iter().copied().collect();
                listed_before.insert(peer, (addr.clone(), listed));
            }
            let (pool, registry, in_flight) = (pool.clone(), registry.clone(), in_flight.clone());
            let timeout = cfg.interval.max(Duration::from_millis(10)) * 2;
            tokio::spawn(async move {
                send(&pool, &registry, peer, &addr, request, timeout).await;
                in_flight.lock().remove(&peer);
            });
        }
    }
}

/// Send one beat and wake the groups the peer asks for.
async fn send(
    pool: &PeerChannels,
    registry: &ReplicaRegistry,
    peer: u64,
    addr: &str,
    beat: pb::BeatRequest,
    timeout: Duration,
) {
    let outcome = |ok: bool| {
        taskmesh_metrics::metrics::counter!(
            taskmesh_metrics::names::RAFT_BEATS,
            "outcome" => if ok { "ok" } else { "failed" }
        )
        .increment(1);
    };
    let channel = match pool.channel(peer, addr) {
        Ok(channel) => channel,
        Err(e) => {
            tracing::debug!(peer, error = %e, "no channel for a beat");
            outcome(false);
            return;
        }
    };
    let listed = beat.groups.clone();
    let mut request = tonic::Request::new(beat);
    request.set_timeout(timeout);
    let mut client = RaftTransportClient::new(channel);
    let call = client.beat(request);
    let answer = match tokio::time::timeout(timeout, call).await {
        Ok(Ok(answer)) => {
            outcome(true);
            answer.into_inner()
        }
        Ok(Err(status)) if status.code() == tonic::Code::Unimplemented => {
            // A peer of an earlier version (during a rolling upgrade) cannot follow quietly:
            // the groups it is a member of keep heartbeating it.
            outcome(false);
            pb::BeatResponse { wake: listed }
        }
        Ok(Err(status)) => {
            tracing::debug!(peer, status = %status, "beat failed");
            outcome(false);
            return;
        }
        Err(_) => {
            tracing::debug!(peer, "beat timed out");
            outcome(false);
            return;
        }
    };
    for id in answer.wake {
        if let Some(group) = registry.get(id) {
            tracing::debug!(peer, group = id, "peer cannot follow quietly; waking");
            group.wake().await;
        }
    }
}

/// Handle a beat of node `req.from` on node `node_id`: quiet the listed groups this node follows
/// in that term with the whole log, wake its quiet followers of the woken groups, and answer
/// the listed groups the sender must wake.
pub fn receive(
    node_id: u64,
    registry: &ReplicaRegistry,
    req: &pb::BeatRequest,
) -> Result<pb::BeatResponse, Status> {
    crate::server::addressed_here(node_id, req.target)?;
    if req.terms.len() != req.groups.len() || req.commits.len() != req.groups.len() {
        return Err(Status::invalid_argument(format!(
            "a beat lists {} groups, {} terms and {} commits",
            req.groups.len(),
            req.terms.len(),
            req.commits.len()
        )));
    }
    let now = taskmesh_shard::clock_ms();
    let mut wake = Vec::new();
    for ((group, term), commit) in req.groups.iter().zip(&req.terms).zip(&req.commits) {
        if let Some(replica) = registry.get(*group) {
            if !replica.follow_quietly(req.from, *term, *commit, now) {
                wake.push(*group);
            }
        }
    }
    for group in &req.woken {
        if let Some(replica) = registry.get(*group) {
            replica.unlisted_by(req.from);
        }
    }
    Ok(pb::BeatResponse { wake })
}
