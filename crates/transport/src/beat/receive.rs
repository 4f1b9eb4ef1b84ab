//! The receiving side of the node beat (see the parent module): a peer's beat quiets the
//! groups this node follows in the listed term, wakes those its previous listing named and this
//! one does not, and is answered with the listed groups that cannot follow quietly; the quiet
//! followers of a peer that falls silent tick again.

use std::collections::HashSet;

use taskmesh_rpc::v1 as pb;
use taskmesh_shard::Heard;
use tonic::Status;

use super::BeatConfig;
use crate::listings::Listing;
use crate::registry::{addressed_here, ReplicaRegistry};

/// The quiet followers of peers not heard for `cfg.silence` check their silence bounds (each
/// is at least that); a peer none of whose groups this node still follows quietly has its
/// listing dropped, so that its next unchanged beat is answered `resend`.
pub(super) fn check_silences(registry: &ReplicaRegistry, cfg: &BeatConfig, now: u64) {
    let silence = cfg.silence.as_millis() as u64;
    let mut peers = registry.listings().peers.lock();
    for (peer, heard) in peers.iter_mut() {
        if heard.listing.groups.is_empty() || now.saturating_sub(heard.heard.at_ms()) <= silence {
            continue;
        }
        let mut following = false;
        for id in &heard.listing.groups {
            if let Some(group) = registry.get(*id) {
                following |= group.check_silence(*peer, now);
            }
        }
        if !following {
            heard.id = 0;
            heard.listing = Listing::default();
        }
    }
}

/// Handle a beat of node `req.from` on node `node_id`: quiet the listed groups this node follows
/// in that term with the whole log, wake its quiet followers of the groups the sender's previous
/// listing named and this one does not (or that it lists as woken), and answer the listed groups
/// the sender must wake. An unchanged beat of the listing held stores the time it was heard,
/// and applies the listing again only if the groups changed since it was last applied.
pub fn receive(
    node_id: u64,
    registry: &ReplicaRegistry,
    req: &pb::BeatRequest,
) -> Result<pb::BeatResponse, Status> {
    addressed_here(node_id, req.target)?;
    if req.terms.len() != req.groups.len() || req.commits.len() != req.groups.len() {
        return Err(Status::invalid_argument(format!(
            "a beat lists {} groups, {} terms and {} commits",
            req.groups.len(),
            req.terms.len(),
            req.commits.len()
        )));
    }
    let now = taskmesh_shard::clock_ms();
    let seen = registry.seen();
    let mut peers = registry.listings().peers.lock();
    let mut answer = pb::BeatResponse {
        keeps_listings: true,
        vouches: true,
        ..Default::default()
    };
    if req.unchanged {
        let held = peers
            .get_mut(&req.from)
            .filter(|p| req.listing != 0 && p.id == req.listing);
        let Some(peer) = held else {
            answer.resend = true;
            return Ok(answer);
        };
        peer.heard.touch(now);
        if peer.seen != seen {
            peer.seen = seen;
            peer.wake = follow(registry, req.from, &peer.listing, &peer.heard);
        }
        // No replica changed its quiescence since the listing was applied: what followed
        // quietly then still does, and what could not is named again.
        answer.wake = peer.wake.clone();
        return Ok(answer);
    }
    let listing = Listing {
        groups: req.groups.clone(),
        terms: req.terms.clone(),
        commits: req.commits.clone(),
    };
    let peer = peers.entry(req.from).or_default();
    peer.heard.touch(now);
    peer.wake = follow(registry, req.from, &listing, &peer.heard);
    answer.wake = peer.wake.clone();
    let listed: HashSet<u32> = listing.groups.iter().copied().collect();
    let unlisted = peer.listing.groups.iter().chain(&req.woken);
    for id in unlisted.filter(|g| !listed.contains(g)) {
        if let Some(group) = registry.get(*id) {
            group.unlisted_by(req.from);
        }
    }
    peer.id = req.listing;
    peer.listing = listing;
    peer.seen = seen;
    Ok(answer)
}

/// Quiet this node's followers of the groups in node `leader`'s `listing`, heard at `heard`;
/// returns the groups that cannot follow quietly.
fn follow(registry: &ReplicaRegistry, leader: u64, listing: &Listing, heard: &Heard) -> Vec<u32> {
    let mut wake = Vec::new();
    for (id, term, commit) in listing.entries() {
        if let Some(group) = registry.get(id) {
            if !group.follow_quietly(leader, term, commit, heard) {
                wake.push(id);
            }
        }
    }
    wake
}
