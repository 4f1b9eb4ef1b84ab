//! Placement: which nodes hold a replica of each shard, as a pure function of the previous
//! placement and the node set (see [`place`]).

use std::collections::{BTreeMap, BTreeSet};

/// Place `shards` shards with `replication` replicas each on `nodes`, keeping as much of
/// `previous` as the balance allows.
///
/// Guarantees: each shard gets `min(replication, nodes)` distinct nodes; replica counts per
/// node differ by at most one; preferred leaders (the first of each list) are moved only to
/// even out the leader counts. Deterministic.
pub fn place(
    previous: &[Vec<u64>],
    nodes: &BTreeSet<u64>,
    shards: u32,
    replication: usize,
) -> Vec<Vec<u64>> {
    let shards = shards as usize;
    if nodes.is_empty() {
        return vec![Vec::new(); shards];
    }
    let order: Vec<u64> = nodes.iter().copied().collect();
    let n = order.len();
    let r = replication.clamp(1, n);
    let mut load: BTreeMap<u64, usize> = order.iter().map(|id| (*id, 0)).collect();
    let mut lists: Vec<Vec<u64>> = (0..shards)
        .map(|s| {
            let mut kept = Vec::with_capacity(r);
            for id in previous.get(s).into_iter().flatten() {
                if nodes.contains(id) && !kept.contains(id) && kept.len() < r {
                    kept.push(*id);
                }
            }
            kept
        })
        .collect();
    for list in &lists {
        for id in list {
            *load.entry(*id).or_default() += 1;
        }
    }
    // Fill: the least loaded node not yet in the list, ties rotated by shard so a fresh
    // placement spreads preferred leaders round-robin.
    for (s, list) in lists.iter_mut().enumerate() {
        while list.len() < r {
            let pick = (0..n)
                .map(|k| order[(s + k) % n])
                .filter(|id| !list.contains(id))
                .min_by_key(|id| load[id])
                .expect("fewer replicas than nodes");
            list.push(pick);
            *load.get_mut(&pick).expect("known node") += 1;
        }
    }
    // Even out replica counts: move one replica at a time from a node with the most to a node
    // with at least two fewer. Each move lowers the sum of squared loads, so this ends, and it
    // ends only when the counts are within one (a fuller node always has a shard the emptier
    // one lacks). Moves made above are undone first, then replicas of shards the node does not
    // lead, so existing replicas and preferred leaders stay put where they can.
    loop {
        let max = *load.values().max().expect("nodes");
        // (preference key, shard, from, to): the smallest key wins.
        type Move = ((bool, bool, usize), usize, u64, u64);
        let mut best: Option<Move> = None;
        for (s, l) in lists.iter().enumerate() {
            for (pos, from) in l.iter().enumerate() {
                if load[from] != max {
                    continue;
                }
                let was_there = previous.get(s).is_some_and(|p| p.contains(from));
                for to in &order {
                    if load[to] + 2 > max || l.contains(to) {
                        continue;
                    }
                    let key = (was_there, pos == 0, load[to]);
                    if best.as_ref().is_none_or(|b| key < b.0) {
                        best = Some((key, s, *from, *to));
                    }
                }
            }
        }
        let Some((_, s, from, to)) = best else { break };
        for id in lists[s].iter_mut() {
            if *id == from {
                *id = to;
            }
        }
        *load.get_mut(&from).expect("known") -= 1;
        *load.get_mut(&to).expect("known") += 1;
    }
    balance_leaders(&mut lists, &order);
    lists
}

/// Reorder replica lists so that every node is the preferred leader of about the same number
/// of shards. While some node leads at least two more shards than another, find the shortest
/// chain of hand-overs from a node that leads most to one that leads at least two fewer
/// (node u can hand a shard it leads to any other replica v of it) and apply it: the ends
/// change by one, the nodes in between keep their count. Each chain lowers the sum of squared
/// lead counts, so this ends.
fn balance_leaders(lists: &mut [Vec<u64>], order: &[u64]) {
    let mut leads: BTreeMap<u64, usize> = order.iter().map(|id| (*id, 0)).collect();
    for l in lists.iter() {
        if let Some(first) = l.first() {
            *leads.get_mut(first).expect("placed on a node") += 1;
        }
    }
    loop {
        let max = *leads.values().max().expect("nodes");
        let mut chain = None;
        for start in order.iter().filter(|id| leads[*id] == max) {
            chain = leader_chain(lists, &leads, *start, max);
            if chain.is_some() {
                break;
            }
        }
        let Some(chain) = chain else { break };
        let (first_shard, _) = chain[0];
        let from = lists[first_shard][0];
        let mut to = from;
        for (s, pos) in chain {
            lists[s].swap(0, pos);
            to = lists[s][0];
        }
        *leads.get_mut(&from).expect("known") -= 1;
        *leads.get_mut(&to).expect("known") += 1;
    }
}

/// Breadth-first search for hand-overs (shard, position of the new leader in its list) leading
/// from `start` to a node that leads at most `max - 2` shards.
fn leader_chain(
    lists: &[Vec<u64>],
    leads: &BTreeMap<u64, usize>,
    start: u64,
    max: usize,
) -> Option<Vec<(usize, usize)>> {
    let mut came_from: BTreeMap<u64, (u64, usize, usize)> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([start]);
    while let Some(u) = queue.pop_front() {
        for (s, l) in lists.iter().enumerate() {
            if l.first() != Some(&u) {
                continue;
            }
            for (pos, v) in l.iter().enumerate().skip(1) {
                if *v == start || came_from.contains_key(v) {
                    continue;
                }
                came_from.insert(*v, (u, s, pos));
                if leads[v] + 2 <= max {
                    let mut chain = Vec::new();
                    let mut at = *v;
                    while at != start {
                        let (prev, s, pos) = came_from[&at];
                        chain.push((s, pos));
                        at = prev;
                    }
                    chain.reverse();
                    return Some(chain);
                }
                queue.push_back(*v);
            }
        }
    }
    None
}
