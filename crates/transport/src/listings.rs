//! The listings of the node beat ([`crate::beat`]): which groups a node leads quiescently
//! among those one peer is a member of ([`Listing`], built by the sending side's round), and
//! what this node heard from each peer's beats ([`PeerListings`], the receiving side). The
//! receiving side's state lives in the [`ReplicaRegistry`](crate::ReplicaRegistry), beside the
//! groups it names, so that every clone of the registry shares it.

use std::collections::HashMap;

use parking_lot::Mutex;
use taskmesh_shard::{Heard, QuietLead};

/// The groups a node leads quiescently among those one peer is a member of, in group order:
/// the `groups`, `terms` and `commits` of a full beat.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Listing {
    pub(crate) groups: Vec<u32>,
    pub(crate) terms: Vec<u64>,
    pub(crate) commits: Vec<u64>,
}

impl Listing {
    pub(crate) fn push(&mut self, group: u32, lead: QuietLead) {
        self.groups.push(group);
        self.terms.push(lead.term);
        self.commits.push(lead.commit);
    }

    pub(crate) fn entries(&self) -> impl Iterator<Item = (u32, u64, u64)> + '_ {
        self.groups
            .iter()
            .zip(&self.terms)
            .zip(&self.commits)
            .map(|((g, t), c)| (*g, *t, *c))
    }
}

/// What a node heard from each peer's beats (the receiving side).
#[derive(Default)]
pub(crate) struct PeerListings {
    pub(crate) peers: Mutex<HashMap<u64, PeerListing>>,
}

/// The last listing of one peer's beats.
#[derive(Default)]
pub(crate) struct PeerListing {
    /// When the peer's beats were last heard; kept for as long as the node runs, so every
    /// replica that follows one of its groups quietly holds this one.
    pub(crate) heard: Heard,
    /// The number of `listing` (0: none held).
    pub(crate) id: u64,
    pub(crate) listing: Listing,
    /// [`ReplicaRegistry::seen`](crate::ReplicaRegistry::seen) when `listing` was last applied to the groups.
    pub(crate) seen: (u64, u64),
    /// The listed groups that could not follow quietly when `listing` was last applied: every
    /// answer repeats them until it is applied again.
    pub(crate) wake: Vec<u32>,
}
