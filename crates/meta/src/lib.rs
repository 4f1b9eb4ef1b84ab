//! Cluster metadata: the cluster's identity (shard count, task hash, replication factor), its
//! nodes, and where every shard's replicas live.
//!
//! A crate of its own, beside the task domain (`taskmesh-task`): a task shard's log carries
//! task commands only and the metadata group's log carries [`MetaCommand`]s only; the two
//! never share a state machine. Pure: no I/O, no clock.
//!
//! The metadata is the state of one Raft group of its own (the metadata group), changed only by
//! [`ClusterMeta::apply`] of a [`MetaCommand`] carried by that group's log, so every node that
//! holds a copy sees the same membership and placement. Placement is a pure function
//! ([`place`]) of the previous placement and the node set: it keeps every replica it can, gives
//! every shard `min(replication, nodes)` distinct replicas, keeps the number of replicas per node
//! within one of each other, and orders each shard's replicas so that the first one (the
//! preferred leader) is spread evenly too.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

pub mod place;

pub use place::place;

/// The replicated cluster metadata. `shards == 0` means the cluster was not created yet.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterMeta {
    /// Logical shards, fixed at creation.
    pub shards: u32,
    /// Name of the task id hash, fixed at creation.
    pub hash: String,
    /// Replicas per shard (fewer while the cluster has fewer nodes), fixed at creation.
    pub replication: u32,
    /// Every member node: id -> internal gRPC address.
    pub nodes: BTreeMap<u64, String>,
    /// Per shard (index = shard id): the nodes that hold a replica; the first is the preferred
    /// leader.
    pub placement: Vec<Vec<u64>>,
    /// Shards whose Raft group has been initialised. Until every shard is, the placement is
    /// frozen (a group must be initialised once, with one membership).
    pub created: BTreeSet<u32>,
    /// Nodes that were removed: their ids never join again (a node that comes back starts
    /// with a new id and an empty data directory).
    #[serde(default)]
    pub removed: BTreeSet<u64>,
    /// Bumped by every change.
    pub version: u64,
}

/// A change to the cluster metadata.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum MetaCommand {
    /// Create the cluster: its identity and first nodes (id, gRPC address). Repeating it with
    /// the same identity changes nothing.
    Create {
        /// Logical shards: a power of two.
        shards: u32,
        /// Name of the task id hash; a repeat must name the same one (and the same `shards`).
        hash: String,
        /// Replicas per shard: at least 1.
        replication: u32,
        // A list, not a map: JSON object keys are strings, and an internally tagged enum's
        // buffered form cannot turn them back into integers.
        /// The first member nodes: at least one, each an id and a non-empty gRPC address.
        nodes: Vec<(u64, String)>,
    },
    /// A node joins (or announces a new address).
    Join {
        /// The joining node's id; an id that was removed is refused.
        node_id: u64,
        /// The node's internal gRPC address, non-empty. A new address for a member node changes
        /// only the address, not the placement.
        addr: String,
    },
    /// A node leaves: its replicas move to the remaining nodes.
    Remove {
        /// The member node to remove; the last node of a cluster cannot be removed.
        node_id: u64,
    },
    /// The Raft group of `shard` has been initialised.
    ShardCreated {
        /// The shard id, below the cluster's shard count.
        shard: u32,
    },
}

/// How a command appears in log lines.
impl std::fmt::Display for MetaCommand {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MetaCommand::Create {
                shards,
                replication,
                nodes,
                ..
            } => write!(
                f,
                "create({shards} shards, replication {replication}, {} nodes)",
                nodes.len()
            ),
            MetaCommand::Join { node_id, addr } => write!(f, "join({node_id} at {addr})"),
            MetaCommand::Remove { node_id } => write!(f, "remove({node_id})"),
            MetaCommand::ShardCreated { shard } => write!(f, "shard_created({shard})"),
        }
    }
}

/// Why a metadata command changed nothing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum MetaRejection {
    /// A `Join`, `Remove` or `ShardCreated` came before the cluster was created.
    #[error("the cluster has not been created yet")]
    NotCreated,
    /// A `Create` whose shard count or hash differs from those of the existing cluster.
    #[error("the cluster already exists with {shards} shards and hash {hash}")]
    AlreadyCreated {
        /// The existing cluster's shard count.
        shards: u32,
        /// The existing cluster's hash name.
        hash: String,
    },
    /// A `Join` or `Remove` came before every shard group was initialised (the placement is
    /// frozen until then); it may be retried.
    #[error("the cluster is still creating its shard groups ({created} of {shards}); try again")]
    Creating {
        /// Shard groups initialised so far.
        created: u32,
        /// The cluster's shard count.
        shards: u32,
    },
    /// A `Remove` named a node that is not a member.
    #[error("no node {0} in the cluster")]
    UnknownNode(u64),
    /// A `Join` named a node id that was removed from the cluster before.
    #[error("node {0} was removed from this cluster; a node that returns needs a new node id and an empty data directory")]
    Removed(u64),
    /// The command can never apply as given (e.g. a shard count that is not a power of two,
    /// a node without an address, the removal of the last node, an unknown shard).
    #[error("invalid: {0}")]
    Invalid(String),
}

/// What applying a [`MetaCommand`] answers its proposer: the metadata after it and whether it
/// changed, or why it changed nothing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetaApplied {
    /// The whole metadata after the command, or why the command changed nothing.
    pub result: Result<Box<ClusterMeta>, MetaRejection>,
    /// Whether the command changed the metadata (its `version` was then bumped); false for a
    /// rejection and for a command that was already in effect.
    pub changed: bool,
}

impl ClusterMeta {
    /// Whether the cluster has been created (its shard count is set).
    pub fn is_created(&self) -> bool {
        self.shards > 0
    }

    /// Whether every shard's group has been initialised (placement may change from then on).
    pub fn is_complete(&self) -> bool {
        self.is_created() && self.created.len() as u32 == self.shards
    }

    /// The replicas of `shard` (empty when unknown).
    pub fn replicas(&self, shard: u32) -> &[u64] {
        self.placement
            .get(shard as usize)
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }

    /// Apply one committed command and answer with the metadata after it (the metadata
    /// group's state machine step).
    pub fn apply_command(&mut self, cmd: &MetaCommand) -> MetaApplied {
        match self.apply(cmd) {
            Ok(changed) => MetaApplied {
                result: Ok(Box::new(self.clone())),
                changed,
            },
            Err(e) => MetaApplied {
                result: Err(e),
                changed: false,
            },
        }
    }

    /// Apply one committed command. Returns whether the metadata changed.
    pub fn apply(&mut self, cmd: &MetaCommand) -> Result<bool, MetaRejection> {
        let changed = match cmd {
            MetaCommand::Create {
                shards,
                hash,
                replication,
                nodes,
            } => {
                if self.is_created() {
                    if self.shards == *shards && self.hash == *hash {
                        return Ok(false);
                    }
                    return Err(MetaRejection::AlreadyCreated {
                        shards: self.shards,
                        hash: self.hash.clone(),
                    });
                }
                if *shards == 0 || !shards.is_power_of_two() {
                    return Err(MetaRejection::Invalid(format!(
                        "the shard count must be a power of two, not {shards}"
                    )));
                }
                if *replication == 0 {
                    return Err(MetaRejection::Invalid(
                        "the replication factor must be at least 1".into(),
                    ));
                }
                if nodes.is_empty() || nodes.iter().any(|(_, a)| a.trim().is_empty()) {
                    return Err(MetaRejection::Invalid(
                        "a cluster starts with at least one node, each with an address".into(),
                    ));
                }
                self.shards = *shards;
                self.hash = hash.clone();
                self.replication = *replication;
                self.nodes = nodes.iter().cloned().collect();
                self.replace();
                true
            }
            MetaCommand::Join { node_id, addr } => {
                if self.nodes.get(node_id) == Some(addr) {
                    return Ok(false);
                }
                self.require_complete()?;
                if self.removed.contains(node_id) {
                    return Err(MetaRejection::Removed(*node_id));
                }
                if addr.trim().is_empty() {
                    return Err(MetaRejection::Invalid(format!(
                        "node {node_id} has no address"
                    )));
                }
                match self.nodes.insert(*node_id, addr.clone()) {
                    Some(old) if old == *addr => return Ok(false),
                    Some(_) => {}
                    None => self.replace(),
                }
                true
            }
            MetaCommand::Remove { node_id } => {
                self.require_complete()?;
                if !self.nodes.contains_key(node_id) {
                    return Err(MetaRejection::UnknownNode(*node_id));
                }
                if self.nodes.len() == 1 {
                    return Err(MetaRejection::Invalid(
                        "the last node of a cluster cannot be removed".into(),
                    ));
                }
                self.nodes.remove(node_id);
                self.removed.insert(*node_id);
                self.replace();
                true
            }
            MetaCommand::ShardCreated { shard } => {
                if !self.is_created() {
                    return Err(MetaRejection::NotCreated);
                }
                if *shard >= self.shards {
                    return Err(MetaRejection::Invalid(format!("no shard {shard}")));
                }
                self.created.insert(*shard)
            }
        };
        if changed {
            self.version += 1;
        }
        Ok(changed)
    }

    fn require_complete(&self) -> Result<(), MetaRejection> {
        if !self.is_created() {
            return Err(MetaRejection::NotCreated);
        }
        if !self.is_complete() {
            return Err(MetaRejection::Creating {
                created: self.created.len() as u32,
                shards: self.shards,
            });
        }
        Ok(())
    }

    fn replace(&mut self) {
        let nodes: BTreeSet<u64> = self.nodes.keys().copied().collect();
        self.placement = place(
            &self.placement,
            &nodes,
            self.shards,
            self.replication as usize,
        );
    }

    /// The voters the metadata group should have: the current ones that are still nodes, then
    /// the lowest other node ids, up to `replication` (at least one).
    pub fn meta_voters(&self, current: &[u64]) -> BTreeSet<u64> {
        let want = (self.replication.max(1) as usize).min(self.nodes.len());
        let mut voters: BTreeSet<u64> = current
            .iter()
            .copied()
            .filter(|v| self.nodes.contains_key(v))
            .take(want)
            .collect();
        for id in self.nodes.keys() {
            if voters.len() >= want {
                break;
            }
            voters.insert(*id);
        }
        voters
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn nodes(ids: &[u64]) -> BTreeSet<u64> {
        ids.iter().copied().collect()
    }

    fn counts(lists: &[Vec<u64>], first_only: bool) -> BTreeMap<u64, usize> {
        let mut c = BTreeMap::new();
        for l in lists {
            let take = if first_only { 1 } else { l.len() };
            for id in l.iter().take(take) {
                *c.entry(*id).or_default() += 1;
            }
        }
        c
    }

    fn spread(c: &BTreeMap<u64, usize>, all: &BTreeSet<u64>) -> usize {
        let v: Vec<usize> = all
            .iter()
            .map(|id| c.get(id).copied().unwrap_or(0))
            .collect();
        v.iter().max().unwrap() - v.iter().min().unwrap()
    }

    fn check(lists: &[Vec<u64>], all: &BTreeSet<u64>, shards: u32, rf: usize) {
        assert_eq!(lists.len(), shards as usize);
        let r = rf.clamp(1, all.len());
        for l in lists {
            assert_eq!(l.len(), r, "{lists:?}");
            let distinct: BTreeSet<_> = l.iter().collect();
            assert_eq!(distinct.len(), r, "{lists:?}");
            assert!(l.iter().all(|id| all.contains(id)));
        }
        assert!(spread(&counts(lists, false), all) <= 1, "{lists:?}");
    }

    #[test]
    fn three_nodes_hold_every_shard_and_lead_a_third_each() {
        let all = nodes(&[1, 2, 3]);
        let p = place(&[], &all, 32, 3);
        check(&p, &all, 32, 3);
        let leads = counts(&p, true);
        assert!(leads.values().all(|c| (10..=11).contains(c)), "{leads:?}");
    }

    #[test]
    fn a_joining_node_takes_a_fair_share_and_few_replicas_move() {
        let three = nodes(&[1, 2, 3]);
        let before = place(&[], &three, 32, 3);
        let four = nodes(&[1, 2, 3, 4]);
        let after = place(&before, &four, 32, 3);
        check(&after, &four, 32, 3);
        assert_eq!(counts(&after, false)[&4], 24);
        // Only the replicas that had to move moved: 24 of 96.
        let moved: usize = before
            .iter()
            .zip(&after)
            .map(|(b, a)| b.iter().filter(|id| !a.contains(id)).count())
            .sum();
        assert_eq!(moved, 24);
        assert!(spread(&counts(&after, true), &four) <= 1);
    }

    #[test]
    fn a_removed_node_is_replaced_everywhere() {
        let five = nodes(&[1, 2, 3, 4, 5]);
        let before = place(&[], &five, 16, 3);
        let four = nodes(&[1, 2, 4, 5]);
        let after = place(&before, &four, 16, 3);
        check(&after, &four, 16, 3);
        assert!(after.iter().all(|l| !l.contains(&3)));
        // Node 3's replicas moved, and at most a few others to even out the counts.
        let moved: usize = before
            .iter()
            .zip(&after)
            .map(|(b, a)| b.iter().filter(|id| !a.contains(id)).count())
            .sum();
        let on_3 = before.iter().filter(|b| b.contains(&3)).count();
        assert!(
            moved >= on_3 && moved <= on_3 + 4,
            "moved {moved}, node 3 had {on_3}"
        );
    }

    #[test]
    fn fewer_nodes_than_the_replication_factor_means_every_node_everywhere() {
        let one = nodes(&[7]);
        let p = place(&[], &one, 4, 3);
        assert!(p.iter().all(|l| l == &vec![7]));
        let two = nodes(&[7, 9]);
        let p2 = place(&p, &two, 4, 3);
        check(&p2, &two, 4, 3);
    }

    fn meta_with(ids: &[u64]) -> ClusterMeta {
        let mut m = ClusterMeta::default();
        let nodes = ids
            .iter()
            .map(|id| (*id, format!("10.0.0.{id}:7000")))
            .collect();
        m.apply(&MetaCommand::Create {
            shards: 8,
            hash: "fnv1a64".into(),
            replication: 3,
            nodes,
        })
        .unwrap();
        m
    }

    #[test]
    fn joins_and_removals_wait_until_every_group_exists() {
        let mut m = meta_with(&[1, 2, 3]);
        let join = MetaCommand::Join {
            node_id: 4,
            addr: "10.0.0.4:7000".into(),
        };
        assert_eq!(
            m.apply(&join),
            Err(MetaRejection::Creating {
                created: 0,
                shards: 8
            })
        );
        for s in 0..8 {
            assert_eq!(m.apply(&MetaCommand::ShardCreated { shard: s }), Ok(true));
        }
        assert_eq!(m.apply(&MetaCommand::ShardCreated { shard: 3 }), Ok(false));
        let v = m.version;
        assert_eq!(m.apply(&join), Ok(true));
        assert_eq!(m.version, v + 1);
        assert_eq!(m.apply(&join), Ok(false), "a repeated join changes nothing");
        assert!(m.placement.iter().any(|l| l.contains(&4)));
        assert_eq!(
            m.apply(&MetaCommand::Remove { node_id: 9 }),
            Err(MetaRejection::UnknownNode(9))
        );
        assert_eq!(m.apply(&MetaCommand::Remove { node_id: 1 }), Ok(true));
        assert!(m.placement.iter().all(|l| !l.contains(&1) && l.len() == 3));
        let rejoin = MetaCommand::Join {
            node_id: 1,
            addr: "10.0.0.1:7000".into(),
        };
        assert_eq!(m.apply(&rejoin), Err(MetaRejection::Removed(1)));
    }

    #[test]
    fn create_is_idempotent_and_checks_its_input() {
        let mut m = meta_with(&[1]);
        let same = MetaCommand::Create {
            shards: 8,
            hash: "fnv1a64".into(),
            replication: 3,
            nodes: vec![(2, "x:1".to_string())],
        };
        assert_eq!(m.apply(&same), Ok(false));
        let other = MetaCommand::Create {
            shards: 16,
            hash: "fnv1a64".into(),
            replication: 3,
            nodes: vec![(1, "x:1".to_string())],
        };
        let before = m.clone();
        assert!(matches!(
            m.apply(&other),
            Err(MetaRejection::AlreadyCreated { shards: 8, .. })
        ));
        assert_eq!(m, before);
        let mut fresh = ClusterMeta::default();
        let bad = MetaCommand::Create {
            shards: 12,
            hash: "fnv1a64".into(),
            replication: 3,
            nodes: vec![(1, "x:1".to_string())],
        };
        assert!(matches!(fresh.apply(&bad), Err(MetaRejection::Invalid(_))));
        assert_eq!(fresh, ClusterMeta::default());
    }

    #[test]
    fn commands_survive_the_log_encoding() {
        let cmd = MetaCommand::Create {
            shards: 8,
            hash: "fnv1a64".into(),
            replication: 3,
            nodes: vec![(1, "a:1".into()), (2, "b:2".into())],
        };
        let json = serde_json::to_string(&cmd).unwrap();
        assert_eq!(serde_json::from_str::<MetaCommand>(&json).unwrap(), cmd);
        let mut meta = ClusterMeta::default();
        let applied = meta.apply_command(&cmd);
        assert!(applied.changed);
        assert_eq!(applied.result.as_deref(), Ok(&meta));
        let json = serde_json::to_string(&applied).unwrap();
        assert_eq!(serde_json::from_str::<MetaApplied>(&json).unwrap(), applied);
        let again = meta.apply_command(&cmd);
        assert!(!again.changed, "{again:?}");
    }

    #[test]
    fn meta_voters_keep_current_ones_and_fill_with_low_ids() {
        let m = meta_with(&[1, 2, 3, 4, 5]);
        assert_eq!(m.meta_voters(&[]), nodes(&[1, 2, 3]));
        assert_eq!(m.meta_voters(&[5, 4]), nodes(&[1, 4, 5]));
        assert_eq!(m.meta_voters(&[9, 2, 3, 4]), nodes(&[2, 3, 4]));
    }

    proptest! {
        #[test]
        fn placement_stays_balanced_through_any_membership_history(
            steps in proptest::collection::vec((any::<bool>(), 1u64..12), 1..12),
            shards_log2 in 0u32..6,
            rf in 1usize..4,
        ) {
            let shards = 1u32 << shards_log2;
            let mut all = nodes(&[1]);
            let mut lists = place(&[], &all, shards, rf);
            for (add, id) in steps {
                let before = lists.clone();
                let prev_nodes = all.clone();
                if add { all.insert(id); } else if all.len() > 1 { all.remove(&id); }
                lists = place(&before, &all, shards, rf);
                check(&lists, &all, shards, rf);
                // Few replicas move: those of removed nodes, the share a new node takes, and
                // a few more to even out the counts.
                let moved: usize = before.iter().zip(&lists)
                    .map(|(b, a)| b.iter().filter(|id| !a.contains(id)).count()).sum();
                let lost: usize = before.iter()
                    .map(|b| b.iter().filter(|id| !all.contains(id)).count()).sum();
                let total = shards as usize * rf.clamp(1, all.len());
                let gained: usize = all.difference(&prev_nodes).count() * (total / all.len());
                let grown = total.saturating_sub(before.iter().map(Vec::len).sum::<usize>());
                prop_assert!(moved <= lost + gained.saturating_sub(grown) + 4 + total / 16,
                    "moved {moved}: lost {lost}, gained {gained}, grown {grown}");
                // Preferred leaders are spread evenly.
                prop_assert!(spread(&counts(&lists, true), &all) <= 1, "{lists:?}");
            }
        }
    }
}
