//! The node beat: one message per node pair and beat interval for every idle group.
//!
//! An idle group quiesces (see `taskmesh_shard`'s `quiesce.rs`): its leader stops ticking and
//! sends no heartbeats, its followers stop their election timers. What keeps them safe is this
//! node-level beat instead of one heartbeat per group and follower:
//!
//! - every `interval`, [`run`] quiets the leaders whose groups settled, and sends each peer one
//!   `Beat` listing the groups this node leads quiescently that the peer is a member of;
//! - the peer ([`receive`]) quiets each listed group it follows in that term with the whole
//!   log, wakes its quiet followers of the groups its previous listing named and this one does
//!   not, and answers the listed groups it cannot follow quietly, which the sender then wakes;
//! - a quiet follower takes each beat of its leader's node as word from its leader: when that
//!   node is not heard for the follower's silence bound, the follower ticks again, and elects if
//!   the leader is gone.
//!
//! What an idle node's round costs does not grow with its groups:
//! - listings are numbered per peer, and a beat whose listing the peer already holds carries
//!   only its number (an *unchanged* beat), which the peer answers by storing one time: the
//!   [`Heard`] every quiet follower of the sender's groups shares;
//! - the round looks at every group only when one was added or removed or changed its
//!   quiescence since the last round ([`ReplicaRegistry::seen`]); otherwise it looks at the
//!   awake groups (to quiet those that settled), at the quiet leaders whose settled state is
//!   due to be checked again (every `recheck`), and at the quiet followers of peers not heard
//!   for `silence`.
//!
//! The answers also vouch for the quiet leaders' reads: a peer that answers a beat without
//! asking for a listed group to wake follows it quietly and promises to elect no one else for a
//! while, so a quiescent leader that a majority vouched for lately reads its own memory without
//! waking its group (`taskmesh_shard`'s `quiet_lease.rs`). Each peer's latest answer is a
//! [`PeerVouch`] that every quiet leader of a group the peer is a member of holds; the round
//! records in it when it read the clock before sending the beat. Rounds read the clock at
//! strictly increasing milliseconds, so that a beat of the round that quieted a group is told
//! apart from the earlier ones.
//!
//! A peer of an earlier version, which does not know the beat, has the groups listed for it
//! woken: they heartbeat it as before. One that knows the beat but not numbered listings is sent
//! the whole listing every time.
//!
//! A beat to a peer that has not answered the previous one is skipped, so a dead peer costs one
//! pending call, not a queue of them.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use taskmesh_rpc::v1 as pb;
use taskmesh_rpc::v1::raft_transport_client::RaftTransportClient;
use taskmesh_shard::{Quiet, QuietLead, Vouched};

use crate::channels::PeerChannels;

mod receive;

use crate::listings::Listing;
use crate::registry::{HostedGroup, ReplicaRegistry};
use receive::check_silences;
pub use receive::receive;

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
    /// How often a quiescent leader's group is checked again for being settled. A leader that
    /// stopped leading while quiet is normally found sooner: a member that answers a beat from a
    /// newer term asks for the group to wake.
    pub recheck: Duration,
    /// How long a peer may go unheard before the quiet followers of its groups check their
    /// silence bounds (each at least this): the shortest election timeout.
    pub silence: Duration,
}

impl BeatConfig {
    /// How `[raft]` has the node beat: the silence bound is the shortest election timeout.
    pub fn from_settings(raft: &taskmesh_shard::RaftSettings) -> Self {
        Self {
            interval: Duration::from_millis(raft.beat_interval_ms),
            quiesce_after: Duration::from_millis(raft.quiesce_after_ms),
            recheck: Duration::from_millis(raft.quiet_recheck_ms),
            silence: Duration::from_millis(raft.election_timeout_min_ms),
        }
    }
}

/// A quiescent leader, as the node's round keeps it.
struct Lead {
    group: Arc<dyn HostedGroup>,
    lead: QuietLead,
    /// The other members and their addresses. A membership change wakes the group first, so
    /// they stay right for as long as it stays quiet.
    peers: Vec<(u64, String)>,
    /// When the round last had the group check that it is still settled, on `clock_ms`.
    checked_ms: u64,
}

/// What one peer's latest answered beat vouches for (the sending side, see the module docs).
#[derive(Default)]
pub(crate) struct PeerVouch(Mutex<Answered>);

#[derive(Default)]
struct Answered {
    /// When the round that sent the beat read the clock, before sending it.
    sent_ms: u64,
    /// The listing the peer held when it answered.
    listing: Arc<Listing>,
    /// The listed groups it asked to wake.
    wake: Vec<u32>,
}

impl PeerVouch {
    /// The peer answered the beat of `listing` sent at `sent_ms`, asking to wake `wake`.
    fn answered(&self, sent_ms: u64, listing: Arc<Listing>, wake: &[u32]) {
        let mut latest = self.0.lock();
        if sent_ms >= latest.sent_ms {
            *latest = Answered {
                sent_ms,
                listing,
                wake: wake.to_vec(),
            };
        }
    }
}

impl Vouched for PeerVouch {
    fn vouched(&self, group: u32, term: u64, since_ms: u64) -> Option<u64> {
        let latest = self.0.lock();
        if latest.sent_ms < since_ms || latest.wake.contains(&group) {
            return None;
        }
        // A listing holds its groups in ascending order.
        let at = latest.listing.groups.binary_search(&group).ok()?;
        (latest.listing.terms[at] == term).then_some(latest.sent_ms)
    }
}

/// What the node beats to one peer (the sending side).
#[derive(Default)]
struct Link {
    addr: String,
    /// The current listing for the peer, and its number.
    listing: Arc<Listing>,
    id: u64,
    /// The number of the listing the peer said it holds (0: none).
    acked: u64,
    /// The peer keeps listings: it may be sent unchanged beats.
    keeps: bool,
    /// Groups the peer may hold as listed: the last listing it acknowledged, and any sent to it
    /// since.
    listed: HashSet<u32>,
    /// A beat to the peer is under way.
    in_flight: bool,
}

/// The node's view of its groups between rounds.
#[derive(Default)]
struct Round {
    leads: HashMap<u32, Lead>,
    /// Groups neither leading nor following quietly when last looked at: visited every round.
    awake: Vec<Arc<dyn HostedGroup>>,
    /// Quiet followers when the groups were last all looked at.
    following: usize,
    /// [`ReplicaRegistry::seen`] before the groups were last all looked at.
    seen: Option<(u64, u64)>,
    /// What each peer's latest answer vouches for.
    vouches: HashMap<u64, Arc<PeerVouch>>,
}

impl Round {
    /// Look at the groups at `now`; returns whether the set of quiet leaders or what they list
    /// changed.
    fn visit(&mut self, registry: &ReplicaRegistry, cfg: &BeatConfig, now: u64) -> bool {
        let seen = registry.seen();
        if self.seen != Some(seen) {
            self.seen = Some(seen);
            return self.visit_all(registry, cfg, now);
        }
        let mut changed = false;
        let leads = &mut self.leads;
        let vouches = &mut self.vouches;
        self.awake
            .retain(|group| match group.tick_quiet(now, cfg.quiesce_after) {
                Some(lead) => {
                    let l = Lead::new(group.clone(), lead, now, vouches);
                    leads.insert(group.group_id(), l);
                    changed = true;
                    false
                }
                None => true,
            });
        let recheck = cfg.recheck.as_millis() as u64;
        leads.retain(|_, l| {
            if now.saturating_sub(l.checked_ms) < recheck {
                return true;
            }
            l.checked_ms = now;
            match l.group.tick_quiet(now, cfg.quiesce_after) {
                Some(lead) => {
                    changed |= lead != l.lead;
                    l.lead = lead;
                    true
                }
                None => {
                    // It woke, which the next round sees as a change of quiescence.
                    changed = true;
                    false
                }
            }
        });
        changed
    }

    fn visit_all(&mut self, registry: &ReplicaRegistry, cfg: &BeatConfig, now: u64) -> bool {
        let mut before = std::mem::take(&mut self.leads);
        let mut changed = false;
        self.awake.clear();
        self.following = 0;
        for group in registry.groups() {
            let id = group.group_id();
            match group.tick_quiet(now, cfg.quiesce_after) {
                Some(lead) => {
                    let kept = match before.remove(&id) {
                        Some(mut l) if Arc::ptr_eq(&l.group, &group) => {
                            changed |= l.lead != lead;
                            l.lead = lead;
                            l
                        }
                        _ => {
                            changed = true;
                            Lead::new(group, lead, now, &mut self.vouches)
                        }
                    };
                    self.leads.insert(id, kept);
                }
                None if matches!(group.quiet(), Quiet::Following { .. }) => self.following += 1,
                None => self.awake.push(group),
            }
        }
        changed || !before.is_empty()
    }

    /// The listing for each peer of the quiet leaders, with its address.
    fn listings(&self) -> HashMap<u64, (String, Listing)> {
        let mut ids: Vec<u32> = self.leads.keys().copied().collect();
        ids.sort_unstable();
        let mut out: HashMap<u64, (String, Listing)> = HashMap::new();
        for id in ids {
            let l = &self.leads[&id];
            for (peer, addr) in &l.peers {
                out.entry(*peer)
                    .or_insert_with(|| (addr.clone(), Listing::default()))
                    .1
                    .push(id, l.lead);
            }
        }
        out
    }
}

impl Lead {
    /// A quiet leader found at `now`; its peers' answers (`vouches`) vouch for it from now on.
    fn new(
        group: Arc<dyn HostedGroup>,
        lead: QuietLead,
        now: u64,
        vouches: &mut HashMap<u64, Arc<PeerVouch>>,
    ) -> Self {
        let mut peers = Vec::new();
        group.for_each_peer(&mut |peer, addr| peers.push((peer, addr.to_string())));
        group.vouched_by(
            peers
                .iter()
                .map(|(peer, _)| {
                    let v: Arc<dyn Vouched> = vouches.entry(*peer).or_default().clone();
                    (*peer, v)
                })
                .collect(),
        );
        Self {
            group,
            lead,
            peers,
            checked_ms: now,
        }
    }
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
    let links: Arc<Mutex<HashMap<u64, Link>>> = Arc::default();
    let mut round = Round::default();
    let timeout = cfg.interval.max(Duration::from_millis(10)) * 2;
    let mut last = None;
    loop {
        ticker.tick().await;
        let now = taskmesh_shard::clock_ms();
        // One round per millisecond at most (see the module docs).
        if last.is_some_and(|l| now <= l) {
            continue;
        }
        last = Some(now);
        check_silences(&registry, &cfg, now);
        let changed = round.visit(&registry, &cfg, now);
        quiet_leaders.set(round.leads.len() as f64);
        quiet_followers.set(round.following as f64);
        let mut links_now = links.lock();
        if changed {
            let mut fresh = round.listings();
            for (peer, link) in links_now.iter_mut() {
                let listing = fresh.remove(peer).map(|(_, l)| l).unwrap_or_default();
                link.set(listing);
            }
            for (peer, (addr, listing)) in fresh {
                let link = links_now.entry(peer).or_default();
                link.addr = addr;
                link.set(listing);
            }
        }
        // A peer with nothing listed, nothing to unlist and nothing under way needs no beats.
        links_now
            .retain(|_, l| l.in_flight || !l.listing.groups.is_empty() || !l.listed.is_empty());
        for (peer, link) in links_now.iter_mut() {
            if link.in_flight {
                // The previous beat is still out: the next round tells the peer instead.
                continue;
            }
            link.in_flight = true;
            let beat = Outgoing {
                peer: *peer,
                sent_ms: now,
                vouch: round.vouches.entry(*peer).or_default().clone(),
                addr: link.addr.clone(),
                listing: link.listing.clone(),
                id: link.id,
                unchanged: link.keeps && link.acked == link.id,
                woken: link
                    .listed
                    .iter()
                    .filter(|g| !link.listing.groups.contains(g))
                    .copied()
                    .collect(),
            };
            let (pool, registry, links) = (pool.clone(), registry.clone(), links.clone());
            tokio::spawn(async move {
                send(node_id, &pool, &registry, &links, beat, timeout).await;
            });
        }
    }
}

impl Link {
    /// Make `listing` the current listing, numbered anew if it differs.
    fn set(&mut self, listing: Listing) {
        if *self.listing != listing {
            self.listing = Arc::new(listing);
            self.id += 1;
        }
    }
}

/// One beat to send.
struct Outgoing {
    peer: u64,
    /// The round's clock reading.
    sent_ms: u64,
    /// Where the peer's answer is recorded.
    vouch: Arc<PeerVouch>,
    addr: String,
    listing: Arc<Listing>,
    id: u64,
    /// Send only the listing's number.
    unchanged: bool,
    /// What to list as woken in a full beat.
    woken: Vec<u32>,
}

impl Outgoing {
    fn request(&self, from: u64, unchanged: bool) -> pb::BeatRequest {
        let mut request = pb::BeatRequest {
            from,
            target: self.peer,
            listing: self.id,
            unchanged,
            ..Default::default()
        };
        if !unchanged {
            request.groups = self.listing.groups.clone();
            request.terms = self.listing.terms.clone();
            request.commits = self.listing.commits.clone();
            request.woken = self.woken.clone();
        }
        request
    }
}

/// Send one beat (and the whole listing at once if the peer asks for it), record what the peer
/// now holds, and wake the groups it asks for.
async fn send(
    node_id: u64,
    pool: &PeerChannels,
    registry: &ReplicaRegistry,
    links: &Mutex<HashMap<u64, Link>>,
    beat: Outgoing,
    timeout: Duration,
) {
    let mut unchanged = beat.unchanged;
    let mut answer = call(pool, &beat, beat.request(node_id, unchanged), timeout).await;
    if unchanged && answer.as_ref().is_some_and(|a| a.resend) {
        unchanged = false;
        answer = call(pool, &beat, beat.request(node_id, unchanged), timeout).await;
    }
    if let Some(a) = answer.as_ref().filter(|a| a.vouches && !a.resend) {
        beat.vouch
            .answered(beat.sent_ms, beat.listing.clone(), &a.wake);
    }
    {
        let mut links = links.lock();
        if let Some(link) = links.get_mut(&beat.peer) {
            link.in_flight = false;
            if let Some(a) = &answer {
                // Every answer says it again: a peer rolled back to a version that does not
                // keep listings gets whole listings from the next beat on.
                link.keeps = a.keeps_listings;
            }
            match &answer {
                Some(_) if !unchanged => {
                    link.acked = beat.id;
                    link.listed = beat.listing.groups.iter().copied().collect();
                }
                Some(_) => {}
                // Whether it arrived is unknown: the peer may hold these as listed.
                None if !unchanged => link.listed.extend(beat.listing.groups.iter().copied()),
                None => {}
            }
        }
    }
    for id in answer.map(|a| a.wake).unwrap_or_default() {
        if let Some(group) = registry.get(id) {
            tracing::debug!(
                peer = beat.peer,
                group = id,
                "peer cannot follow quietly; waking"
            );
            group.wake().await;
        }
    }
}

/// One beat call; `None` when it failed.
async fn call(
    pool: &PeerChannels,
    beat: &Outgoing,
    request: pb::BeatRequest,
    timeout: Duration,
) -> Option<pb::BeatResponse> {
    let outcome = |ok: bool| {
        taskmesh_metrics::metrics::counter!(
            taskmesh_metrics::names::RAFT_BEATS,
            "outcome" => if ok { "ok" } else { "failed" }
        )
        .increment(1);
    };
    let peer = beat.peer;
    let channel = match pool.channel(peer, &beat.addr) {
        Ok(channel) => channel,
        Err(e) => {
            tracing::debug!(peer, error = %e, "no channel for a beat");
            outcome(false);
            return None;
        }
    };
    let listed = request.groups.clone();
    let mut request = tonic::Request::new(request);
    request.set_timeout(timeout);
    let mut client = RaftTransportClient::new(channel);
    match tokio::time::timeout(timeout, client.beat(request)).await {
        Ok(Ok(answer)) => {
            outcome(true);
            Some(answer.into_inner())
        }
        Ok(Err(status)) if status.code() == tonic::Code::Unimplemented => {
            // A peer of an earlier version (during a rolling upgrade) cannot follow quietly:
            // the groups it is a member of keep heartbeating it.
            outcome(false);
            Some(pb::BeatResponse {
                wake: listed,
                ..Default::default()
            })
        }
        Ok(Err(status)) => {
            tracing::debug!(peer, status = %status, "beat failed");
            outcome(false);
            None
        }
        Err(_) => {
            tracing::debug!(peer, "beat timed out");
            outcome(false);
            None
        }
    }
}
