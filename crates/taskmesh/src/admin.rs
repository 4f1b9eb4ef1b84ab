//! The operator's `taskmesh cluster leaders | transfer-leader | snapshot` commands: each asks
//! the nodes through their cluster service and prints a table, or JSON with `--json`.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{json, Value};
use taskmesh_node::cluster::{build_snapshot, fetch_metadata, move_leader, shard_leaders};
use taskmesh_rpc::dial::Dialer;

/// How long one node may take to answer `leaders`.
const VIEW_TIMEOUT: Duration = Duration::from_secs(5);

/// Where every shard is led: each member node (from the metadata of the node at `peer`) is
/// asked for its replicas' view; a shard's leader is the replica that says it leads (the
/// newest term when several do), else what its replicas of the newest term believe.
pub async fn leaders(dialer: &Dialer, peer: &str, as_json: bool) -> anyhow::Result<()> {
    let meta = fetch_metadata(dialer, peer).await?;
    let mut views: BTreeMap<u32, Vec<(u64, taskmesh_rpc::v1::ShardView)>> = BTreeMap::new();
    let mut unreachable = Vec::new();
    for (id, addr) in &meta.nodes {
        match tokio::time::timeout(VIEW_TIMEOUT, shard_leaders(dialer, addr)).await {
            Ok(Ok(r)) => {
                for v in r.shards {
                    views.entry(v.shard).or_default().push((*id, v));
                }
            }
            Ok(Err(e)) => unreachable.push(json!({"node": id, "error": e.to_string()})),
            Err(_) => unreachable.push(json!({"node": id, "error": "no answer in time"})),
        }
    }
    let mut rows = Vec::new();
    for shard in 0..meta.shards {
        let seen = views.get(&shard).map(Vec::as_slice).unwrap_or_default();
        let newest = seen.iter().map(|(_, v)| v.term).max().unwrap_or(0);
        let claimed = seen
            .iter()
            .filter(|(_, v)| v.is_leader)
            .max_by_key(|(_, v)| v.term)
            .map(|(id, v)| (*id, v.term));
        let believed = || {
            let mut votes: BTreeMap<u64, usize> = BTreeMap::new();
            for (_, v) in seen
                .iter()
                .filter(|(_, v)| v.term == newest && v.leader != 0)
            {
                *votes.entry(v.leader).or_default() += 1;
            }
            votes
                .into_iter()
                .max_by_key(|(_, n)| *n)
                .map(|(l, _)| (l, newest))
        };
        let (leader, term) = match claimed.or_else(believed) {
            Some((l, t)) => (Value::from(l), t),
            None => (Value::Null, newest),
        };
        rows.push(json!({
            "shard": shard,
            "leader": leader,
            "term": term,
            "replicas": meta.replicas(shard),
        }));
    }
    if as_json {
        let out = json!({"shards": rows, "unreachable": unreachable});
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    println!("{:>5}  {:>6}  {:>6}  replicas", "shard", "leader", "term");
    for r in &rows {
        let leader = r["leader"]
            .as_u64()
            .map_or("-".to_string(), |l| l.to_string());
        let replicas: Vec<String> = r["replicas"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|n| n.to_string())
            .collect();
        println!(
            "{:>5}  {:>6}  {:>6}  {}",
            r["shard"].as_u64().unwrap_or(0),
            leader,
            r["term"].as_u64().unwrap_or(0),
            replicas.join(",")
        );
    }
    for u in &unreachable {
        println!(
            "node {} did not answer: {}",
            u["node"],
            u["error"].as_str().unwrap_or("")
        );
    }
    Ok(())
}

/// Hand the leadership of `shard` to `node` (one of its voters).
pub async fn transfer_leader(
    dialer: &Dialer,
    peer: &str,
    shard: u32,
    node: u64,
    as_json: bool,
) -> anyhow::Result<()> {
    let r = move_leader(dialer, peer, shard, node).await?;
    let moved = r.leader == node;
    if as_json {
        let out = json!({"shard": shard, "leader": r.leader, "term": r.term, "moved": moved});
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else if moved {
        println!("shard {shard}: node {node} leads it now (term {})", r.term);
    } else {
        println!(
            "shard {shard}: asked node {node} to take over; the leader is {} (term {}) so far",
            r.leader, r.term
        );
    }
    if !moved {
        anyhow::bail!("the leadership of shard {shard} did not reach node {node} in time");
    }
    Ok(())
}

/// Build a snapshot of `shard` on every node that holds a replica of it.
pub async fn snapshot(
    dialer: &Dialer,
    peer: &str,
    shard: u32,
    as_json: bool,
) -> anyhow::Result<()> {
    let meta = fetch_metadata(dialer, peer).await?;
    anyhow::ensure!(
        shard < meta.shards,
        "the cluster has {} shards (0 to {})",
        meta.shards,
        meta.shards.saturating_sub(1)
    );
    let mut rows = Vec::new();
    let mut failed = 0;
    for node in meta.replicas(shard) {
        let Some(addr) = meta.nodes.get(node) else {
            continue;
        };
        match build_snapshot(dialer, addr, shard).await {
            Ok(r) => rows.push(json!({
                "node": node,
                "coversIndex": r.covers_index,
                "firstLogIndex": (!r.log_empty).then_some(r.first_log_index),
            })),
            Err(e) => {
                failed += 1;
                rows.push(json!({"node": node, "error": e.to_string()}));
            }
        }
    }
    if as_json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({"shard": shard, "replicas": rows}))?
        );
    } else {
        for r in &rows {
            match r.get("error") {
                Some(e) => println!(
                    "shard {shard} on node {}: failed: {}",
                    r["node"],
                    e.as_str().unwrap_or("")
                ),
                None => match r["firstLogIndex"].as_u64() {
                    Some(first) => println!(
                        "shard {shard} on node {}: snapshot covers index {}, log starts at {first}",
                        r["node"], r["coversIndex"]
                    ),
                    None => println!(
                        "shard {shard} on node {}: snapshot covers index {}, log empty",
                        r["node"], r["coversIndex"]
                    ),
                },
            }
        }
    }
    anyhow::ensure!(
        failed == 0,
        "{failed} replica(s) of shard {shard} built no snapshot"
    );
    Ok(())
}
