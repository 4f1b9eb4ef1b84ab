//! Three replicas of one shard group on three nodes talking over real gRPC: replication,
//! failover, catch-up from the log and from a snapshot, and leadership transfer.

use std::time::Duration;

use tempfile::TempDir;

use crate::common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_proposal_is_applied_on_every_replica() {
    let dir = TempDir::new().unwrap();
    let nodes = start_cluster(dir.path(), &[1, 2, 3], &base_config()).await;
    bootstrap(&nodes).await;
    let leader = stable_leader(&nodes).await;

    // Followers know the leader and do not take themselves for it.
    for n in nodes.iter().filter(|n| n.id != leader) {
        assert!(!n.replica.is_leader(), "node {} claims to lead", n.id);
        assert_eq!(n.replica.leadership().borrow().leader, Some(leader));
    }
    let voters = node(&nodes, leader).replica.voters();
    assert_eq!(voters, vec![1, 2, 3]);
    assert_eq!(node(&nodes, 2).replica.members(), members(&nodes));

    propose(&nodes, create("task-1")).await;
    for n in &nodes {
        eventually(&format!("node {} applies task-1", n.id), || n.has("task-1")).await;
    }
    let expected = node(&nodes, leader).records();
    for n in &nodes {
        assert_eq!(n.records(), expected, "node {} differs", n.id);
    }

    // Bootstrapping again changes nothing.
    bootstrap(&nodes).await;
    assert_eq!(node(&nodes, leader).replica.voters(), vec![1, 2, 3]);

    for n in nodes {
        n.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_new_leader_takes_over_and_the_old_one_catches_up_from_the_log() {
    let dir = TempDir::new().unwrap();
    let mut nodes = start_cluster(dir.path(), &[1, 2, 3], &base_config()).await;
    bootstrap(&nodes).await;
    let old_leader = stable_leader(&nodes).await;
    let old_term = node(&nodes, old_leader).term();
    propose(&nodes, create("before")).await;

    let i = nodes.iter().position(|n| n.id == old_leader).unwrap();
    let (id, path, cfg) = nodes.remove(i).stop().await;

    // The two others elect one of themselves and go on accepting proposals.
    let new_leader = stable_leader(&nodes).await;
    assert_ne!(new_leader, old_leader);
    assert!(node(&nodes, new_leader).term() > old_term);
    for k in 0..5 {
        propose(&nodes, create(&format!("after-{k}"))).await;
    }

    // The old leader comes back on another port; the group learns the new address.
    let restarted = TestNode::start(id, &path, &cfg).await;
    assert!(
        restarted.has("before"),
        "what it had applied survived the restart"
    );
    let addr = restarted.addr.clone();
    nodes.push(restarted);
    set_addr(&nodes, id, &addr).await;

    let back = node(&nodes, id);
    eventually("the restarted node catches up from the log", || {
        (0..5).all(|k| back.has(&format!("after-{k}")))
    })
    .await;
    let leader = stable_leader(&nodes).await;
    let expected = node(&nodes, leader).records();
    eventually("every replica holds the same records", || {
        nodes.iter().all(|n| n.records() == expected)
    })
    .await;
    assert_eq!(
        node(&nodes, leader).replica.members().get(&id),
        Some(&addr),
        "the membership records the new address"
    );

    for n in nodes {
        n.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_follower_behind_the_purged_log_catches_up_from_a_snapshot() {
    let dir = TempDir::new().unwrap();
    let mut base = base_config();
    base.raft.snapshot_logs_since_last = 5;
    base.raft.max_in_snapshot_log_to_keep = 0;
    let mut nodes = start_cluster(dir.path(), &[1, 2, 3], &base).await;
    bootstrap(&nodes).await;
    let leader = stable_leader(&nodes).await;
    propose(&nodes, create("early")).await;
    for n in &nodes {
        eventually(&format!("node {} applies early", n.id), || n.has("early")).await;
    }

    let follower = nodes.iter().find(|n| n.id != leader).unwrap().id;
    let i = nodes.iter().position(|n| n.id == follower).unwrap();
    let lagging_last = nodes[i].replica.log_index_range().unwrap().1.unwrap();
    let (id, path, cfg) = nodes.remove(i).stop().await;

    for k in 0..40 {
        propose(&nodes, create(&format!("late-{k}"))).await;
    }
    eventually(
        "the leader snapshots and purges the log the stopped follower lacks",
        || {
            current_leader(&nodes).is_some_and(|l| match l.replica.log_index_range() {
                Ok((Some(first), _)) => first > lagging_last + 1,
                Ok((None, _)) => true,
                Err(_) => false,
            })
        },
    )
    .await;

    let restarted = TestNode::start(id, &path, &cfg).await;
    let installs = restarted.replica.snapshot_installs();
    assert!(installs.borrow().is_none());
    let addr = restarted.addr.clone();
    nodes.push(restarted);
    set_addr(&nodes, id, &addr).await;

    let leader = stable_leader(&nodes).await;
    let back = node(&nodes, id);
    eventually("the restarted follower gets every record", || {
        back.records() == node(&nodes, leader).records()
    })
    .await;
    assert!(back.has("early") && back.has("late-39"));
    assert!(
        back.replica.snapshot_installs().borrow().is_some(),
        "the follower caught up through a snapshot"
    );

    for n in nodes {
        n.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn leadership_moves_to_the_named_node() {
    let dir = TempDir::new().unwrap();
    let nodes = start_cluster(dir.path(), &[1, 2, 3], &base_config()).await;
    bootstrap(&nodes).await;
    let leader = stable_leader(&nodes).await;
    propose(&nodes, create("t-1")).await;

    let target = nodes.iter().find(|n| n.id != leader).unwrap().id;
    let last = node(&nodes, leader).replica.last_applied();
    eventually("the target has the leader's whole log", || {
        node(&nodes, target).replica.last_applied() >= last
    })
    .await;

    // Only the leader can hand its leadership over.
    let not_leader = node(&nodes, target).replica.transfer_leader(leader).await;
    assert!(matches!(
        not_leader,
        Err(taskmesh_shard::ShardError::NotLeader { .. })
    ));

    node(&nodes, leader)
        .replica
        .transfer_leader(target)
        .await
        .unwrap();
    eventually("the named node leads", || node(&nodes, target).leads()).await;
    stable_leader(&nodes).await;
    propose(&nodes, create("t-2")).await;
    for n in &nodes {
        eventually(&format!("node {} applies t-2", n.id), || n.has("t-2")).await;
    }

    // Stepping down picks another voter and waits for it.
    let next = node(&nodes, target)
        .replica
        .step_down(Duration::from_secs(30))
        .await
        .unwrap();
    let next = next.expect("another node leads");
    assert_ne!(next, target);
    assert!(!node(&nodes, target).replica.is_leader());

    for n in nodes {
        n.stop().await;
    }
}
