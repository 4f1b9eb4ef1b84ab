//! Shards that lose their quorum: an outcome the leader could not write is recorded once the
//! replicas return, and on five nodes only the shards that lost two replicas stop serving.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use taskmesh_testkit::get_eventually;

use crate::{connect, shard_views, start_cluster, wait_terminal, SERIAL};

/// The defect this file was written for: with both other replicas of its shard gone, a leader
/// keeps its leadership and term but cannot commit, so a task finishing then could not record
/// its outcome, and nothing took it over when the replicas came back: it stayed `working`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outcome_refused_while_the_shard_has_no_quorum_is_recorded_when_the_replicas_return() {
    let _serial = SERIAL.lock().await;
    // Leaderships stay where elections put them, so the leader chosen below keeps its shard.
    let mut nodes = start_cluster(3, 4, "leader_settle_ms = 3600000").await;
    let view = shard_views(&nodes, 4).await;
    let leader = view[0].leader.expect("shard 0 has a leader");
    let l = leader as usize - 1;
    let c = connect(&nodes[l]).await;

    // A 3 s task on a shard that node `leader` leads (ids are random: create until one lands
    // there; the others are checked too).
    let mut ids = vec![];
    let mut target = None;
    for i in 0..64 {
        let label = format!("q{i}");
        let id = c
            .start_task("slow_compute", json!({"seconds": 3, "label": label}))
            .await;
        let shard = taskmesh_task::shard_of(&id, 4) as usize;
        ids.push((id.clone(), label.clone()));
        if view[shard].leader == Some(leader) {
            target = Some((id, shard));
            break;
        }
    }
    let (task, shard) = target.expect("a task on a shard the chosen node leads");

    // Both other nodes die at once; the task finishes while its shard cannot commit.
    for (i, n) in nodes.iter_mut().enumerate() {
        if i != l {
            n.kill9();
        }
    }
    tokio::time::sleep(Duration::from_secs(6)).await;
    for (i, n) in nodes.iter_mut().enumerate() {
        if i != l {
            tokio::task::block_in_place(|| n.start_again());
        }
    }
    let returned = Instant::now();

    // Within a bound (far below its TTL of an hour), the task is completed on every node,
    // with its result.
    for n in &nodes {
        let cn = connect(n).await;
        let t = wait_terminal(&cn, &task, Duration::from_secs(30)).await;
        assert_eq!(
            t["status"], "completed",
            "task {task} on shard {shard} after the replicas returned: {t}"
        );
        assert_ne!(t["lastUpdatedAt"], t["createdAt"], "{t}");
    }
    println!(
        "task completed on every node {:?} after the replicas returned; shard {shard}: \
         leader {leader} term {} before, {:?} after",
        returned.elapsed(),
        view[shard].term,
        shard_views(&nodes, 4).await[shard]
    );
    for line in nodes[l]
        .log_text()
        .lines()
        .filter(|l| l.contains(task.as_str()))
    {
        println!("leader's log: {line}");
    }
    for (id, label) in &ids {
        let r = c.call("tasks/result", json!({"taskId": id})).await;
        assert_eq!(
            r["result"]["content"][0]["text"],
            format!("{label}: computed for 3 seconds"),
            "task {id}: {r}"
        );
    }
}

/// Two of five nodes die at once: the shards that kept two of their three replicas elect and
/// serve on; the shards that lost two serve nothing (no stale answer) until the nodes return,
/// and then serve again with every task unchanged and finished.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_five_nodes_shards_that_keep_a_majority_serve_while_two_nodes_are_down() {
    let _serial = SERIAL.lock().await;
    let shards = taskmesh_testkit::cluster_shards(16);
    // A short retry budget: a request to a shard without a quorum fails sooner.
    let mut nodes = start_cluster(5, shards, "request_retry_ms = 1500").await;
    let c = connect(&nodes[0]).await;
    let mut tasks: Vec<(String, Value)> = vec![];
    for i in 0..48 {
        let id = c
            .start_task(
                "slow_compute",
                json!({"seconds": 0.1, "label": format!("m{i}")}),
            )
            .await;
        tasks.push((id.clone(), json!(null)));
    }
    for (id, seen) in tasks.iter_mut() {
        *seen = wait_terminal(&c, id, Duration::from_secs(30)).await;
        assert_eq!(seen["status"], "completed", "{seen}");
    }
    let voters: Vec<Vec<u64>> = shard_views(&nodes, shards)
        .await
        .into_iter()
        .map(|v| v.voters)
        .collect();
    assert!(voters.iter().all(|v| v.len() == 3), "{voters:?}");

    let down = [4u64, 5];
    for id in down {
        nodes[id as usize - 1].kill9();
    }
    let kept: Vec<bool> = voters
        .iter()
        .map(|v| v.iter().filter(|n| !down.contains(n)).count() >= 2)
        .collect();
    assert!(
        kept.iter().any(|k| *k) && kept.iter().any(|k| !*k),
        "{voters:?}"
    );

    // While they are down: every task of a shard with a majority reads as before (once its
    // shard elected, if it lost its leader); a task of a shard without one answers as before
    // while its leader's read lease lasts (the last quorum acknowledgement is recent enough
    // that no other leader can exist yet), then -32603, and never anything else.
    // (One task per shard without a majority: each -32603 waits out the retry budget.)
    let c2 = connect(&nodes[1]).await;
    let mut asked = std::collections::HashSet::new();
    for (id, before) in &tasks {
        let shard = taskmesh_task::shard_of(id, shards) as usize;
        if kept[shard] {
            assert_eq!(&get_eventually(&c2, id).await, before, "shard {shard}");
        } else if asked.insert(shard) {
            let mut refused = false;
            for _ in 0..100 {
                let r = c2.call("tasks/get", json!({"taskId": id})).await;
                if let Some(got) = r.get("result") {
                    assert_eq!(got, before, "shard {shard} without a quorum answered: {r}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
                assert_eq!(
                    r["error"]["code"], -32603,
                    "shard {shard} has no quorum: {r}"
                );
                refused = true;
                break;
            }
            assert!(refused, "shard {shard} without a quorum kept answering");
        }
    }
    // New tasks on the shards with a majority are created and finish meanwhile.
    let mut created_meanwhile = 0;
    let mut refused = 0;
    for i in 0..12 {
        let r = c2
            .call(
                "tools/call",
                json!({"name": "slow_compute", "arguments": {"seconds": 0.1, "label": format!("d{i}")}, "task": {}}),
            )
            .await;
        match r["result"]["task"]["taskId"].as_str() {
            Some(id) => {
                let shard = taskmesh_task::shard_of(id, shards) as usize;
                assert!(
                    kept[shard],
                    "created on shard {shard} without a quorum: {r}"
                );
                let t = wait_terminal(&c2, id, Duration::from_secs(30)).await;
                assert_eq!(t["status"], "completed", "{t}");
                created_meanwhile += 1;
                tasks.push((id.to_string(), t));
            }
            None => {
                assert_eq!(r["error"]["code"], -32603, "{r}");
                refused += 1;
            }
        }
    }
    assert!(created_meanwhile > 0);

    // They return: the shards without a quorum serve again, every task as it was.
    let returned = Instant::now();
    for id in down {
        tokio::task::block_in_place(|| nodes[id as usize - 1].start_again());
    }
    let listening = returned.elapsed();
    let mut back_after = Duration::ZERO;
    for (id, before) in &tasks {
        let shard = taskmesh_task::shard_of(id, shards) as usize;
        let got = get_eventually(&c2, id).await;
        if !kept[shard] {
            back_after = back_after.max(returned.elapsed());
        }
        assert_eq!(&got, before, "task {id} of shard {shard} changed");
    }
    println!(
        "two of five nodes down: {} of {shards} shards kept a majority; {created_meanwhile} \
         creates succeeded and {refused} were refused meanwhile; the nodes listened again \
         {listening:?} after their start and every shard served again {back_after:?} after it; \
         voters {voters:?}",
        kept.iter().filter(|k| **k).count()
    );
}
