//! Quiescence: an idle cluster's groups stop their Raft timers on every replica; the first
//! proposal to a quiescent group commits without an election, and a quiescent group whose
//! leader's node dies elects a new leader among the survivors.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use taskmesh_testkit::{get_eventually, status_of, wait_cluster_ready, Server};

use crate::{connect, start_cluster, TOKEN};

/// Per node (by index in `nodes`), the `GET /status` shard rows by shard id.
async fn rows(nodes: &[&Server]) -> Vec<BTreeMap<u64, Value>> {
    let mut all = Vec::new();
    for n in nodes {
        let st = status_of(n, TOKEN).await;
        all.push(
            st["shards"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| (s["shard"].as_u64().unwrap(), s.clone()))
                .collect(),
        );
    }
    all
}

/// Wait (bounded: 30 s) until every replica of every shard on `nodes` is quiescent: the
/// leader's as `leader`, the others' as `follower`.
async fn until_all_quiet(nodes: &[&Server]) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let views = rows(nodes).await;
        let awake: Vec<(usize, u64)> = views
            .iter()
            .enumerate()
            .flat_map(|(i, v)| {
                v.iter()
                    .filter(|(_, s)| {
                        let want = if s["isLeader"] == true {
                            "leader"
                        } else {
                            "follower"
                        };
                        s["quiet"] != want
                    })
                    .map(move |(shard, _)| (i, *shard))
            })
            .collect();
        if awake.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "replicas (node index, shard) never quiesced: {awake:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiescent_group_wakes_and_commits_its_first_proposal_without_an_election() {
    let nodes = start_cluster();
    let all = [&nodes[0], &nodes[1], &nodes[2]];
    wait_cluster_ready(&all, TOKEN, crate::shards()).await;
    until_all_quiet(&all).await;
    let before = rows(&all).await;

    // The first proposal to each group it reaches: a create through node 2, which forwards it
    // to the shard's leader wherever that is.
    let c = connect(&nodes[1]).await;
    let id = c
        .start_task("slow_compute", json!({"seconds": 0.1, "label": "q"}))
        .await;
    let done = c.call("tasks/result", json!({"taskId": id})).await;
    assert_eq!(
        done["result"]["content"][0]["text"], "q: computed for 0.1 seconds",
        "{done}"
    );

    // The shard that took the task: its log grew. It woke and committed in the same term, so
    // no election was needed, and the same leader leads it.
    let after = rows(&all).await;
    let grown: Vec<u64> = before[0]
        .keys()
        .filter(|shard| {
            before
                .iter()
                .zip(&after)
                .any(|(b, a)| a[*shard]["lastLogIndex"] != b[*shard]["lastLogIndex"])
        })
        .copied()
        .collect();
    assert_eq!(grown.len(), 1, "one shard took the task: {grown:?}");
    let shard = grown[0];
    for (b, a) in before.iter().zip(&after) {
        assert_eq!(a[&shard]["term"], b[&shard]["term"], "shard {shard}");
        assert_eq!(a[&shard]["leader"], b[&shard]["leader"], "shard {shard}");
    }
    // Idle again, every group quiesces again; the task stays readable through every node.
    until_all_quiet(&all).await;
    for n in all {
        let c = connect(n).await;
        assert_eq!(get_eventually(&c, &id).await["status"], "completed");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiescent_group_whose_leader_node_dies_elects_a_new_leader() {
    let mut nodes = start_cluster();
    {
        let all = [&nodes[0], &nodes[1], &nodes[2]];
        wait_cluster_ready(&all, TOKEN, crate::shards()).await;
    }
    // A task created before the failure, readable after it.
    let c = connect(&nodes[0]).await;
    let id = c
        .start_task("slow_compute", json!({"seconds": 0.1, "label": "before"}))
        .await;
    let _ = c.call("tasks/result", json!({"taskId": id})).await;
    until_all_quiet(&[&nodes[0], &nodes[1], &nodes[2]]).await;

    // The node that leads the most groups dies while they are all quiescent.
    let views = rows(&[&nodes[0], &nodes[1], &nodes[2]]).await;
    let led = |i: usize| views[i].values().filter(|s| s["isLeader"] == true).count();
    let victim = (0..3).max_by_key(|i| led(*i)).unwrap();
    let victim_id = victim as u64 + 1;
    let orphaned: Vec<u64> = views[victim]
        .iter()
        .filter(|(_, s)| s["isLeader"] == true)
        .map(|(shard, _)| *shard)
        .collect();
    assert!(!orphaned.is_empty());
    nodes[victim].kill9();
    let killed = Instant::now();

    // Every group it led elects a leader among the survivors, and both agree on it. The bound
    // is generous: it asserts that the groups elect at all, not how fast (docs/benchmarks.md
    // has the failover figures).
    let survivors: Vec<&Server> = (0..3).filter(|i| *i != victim).map(|i| &nodes[i]).collect();
    loop {
        let views = rows(&survivors).await;
        let settled = orphaned.iter().all(|shard| {
            let leaders: Vec<&Value> = views.iter().map(|v| &v[shard]["leader"]).collect();
            leaders[0].as_u64().is_some_and(|l| l != victim_id) && leaders[0] == leaders[1]
        });
        if settled {
            break;
        }
        assert!(
            killed.elapsed() < Duration::from_secs(15),
            "the groups node {victim_id} led ({orphaned:?}) elected no leader: {views:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let c = connect(survivors[0]).await;
    assert_eq!(get_eventually(&c, &id).await["status"], "completed");
}
