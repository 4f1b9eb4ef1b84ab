//! The node beat between real nodes: numbered listings, unchanged beats that keep an idle group
//! quiet, a new listing that wakes what it drops, and silence that wakes the followers of a
//! dead leader's node, and a quiescent leader that was cut off and outvoted, which follows the
//! new leader once the partition ends without waiting for its periodic check.

use std::time::Duration;

use taskmesh_rpc::v1 as pb;
use taskmesh_rpc::v1::raft_transport_client::RaftTransportClient;
use taskmesh_shard::Quiet;
use taskmesh_transport::BeatConfig;
use tempfile::TempDir;
use tonic::Code;

use crate::common::*;

/// Beats every 100 ms (at most half the test nodes' 500 ms shortest election timeout); groups
/// quiesce after 300 ms settled.
fn beat_config() -> BeatConfig {
    BeatConfig {
        interval: Duration::from_millis(100),
        quiesce_after: Duration::from_millis(300),
        recheck: Duration::from_secs(10),
        silence: Duration::from_millis(base_config().raft.election_timeout_min_ms),
    }
}

/// Three beating nodes of one group, bootstrapped; returns them with the leader's id once every
/// replica is quiescent.
async fn quiet_cluster(root: &std::path::Path) -> (Vec<TestNode>, u64) {
    quiet_cluster_with(root, beat_config()).await
}

/// [`quiet_cluster`] with the nodes beating by `beat`.
async fn quiet_cluster_with(root: &std::path::Path, beat: BeatConfig) -> (Vec<TestNode>, u64) {
    let mut nodes = start_cluster(root, &[1, 2, 3], &base_config()).await;
    for n in &mut nodes {
        n.start_beating(beat);
    }
    bootstrap(&nodes).await;
    let leader = stable_leader(&nodes).await;
    propose(&nodes, create("t-1")).await;
    eventually("every replica quiesces", || all_quiet(&nodes, leader)).await;
    (nodes, leader)
}

/// Whether node `leader` leads the group quiescently and every other node follows it quietly.
fn all_quiet(nodes: &[TestNode], leader: u64) -> bool {
    nodes.iter().all(|n| {
        let want = if n.id == leader {
            Quiet::Leading
        } else {
            Quiet::Following { leader }
        };
        n.replica.quiet() == want
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unchanged_beat_of_a_listing_the_node_does_not_hold_asks_for_the_listing() {
    let dir = TempDir::new().unwrap();
    let n = TestNode::start(1, &dir.path().join("n1"), &base_config()).await;
    let mut c = RaftTransportClient::connect(format!("http://{}", n.addr))
        .await
        .unwrap();
    let unchanged = pb::BeatRequest {
        from: 2,
        target: 1,
        listing: 3,
        unchanged: true,
        ..Default::default()
    };
    let answer = c.beat(unchanged.clone()).await.unwrap().into_inner();
    assert!(answer.resend, "{answer:?}");
    assert!(answer.keeps_listings, "{answer:?}");
    assert!(answer.wake.is_empty(), "{answer:?}");

    // A full listing that the group cannot follow (it has no leader) is answered with the
    // group to wake, and held: the same listing's unchanged beat is then taken.
    let full = pb::BeatRequest {
        groups: vec![SHARD],
        terms: vec![1],
        commits: vec![1],
        unchanged: false,
        ..unchanged.clone()
    };
    let answer = c.beat(full).await.unwrap().into_inner();
    assert_eq!(answer.wake, vec![SHARD]);
    assert!(!answer.resend);
    assert_eq!(n.replica.quiet(), Quiet::Awake);
    let answer = c.beat(unchanged.clone()).await.unwrap().into_inner();
    assert!(!answer.resend, "{answer:?}");
    // Another number is not the listing held.
    let other = pb::BeatRequest {
        listing: 4,
        ..unchanged
    };
    assert!(c.beat(other).await.unwrap().into_inner().resend);

    // Lists of different lengths are refused.
    let bad = pb::BeatRequest {
        from: 2,
        target: 1,
        groups: vec![SHARD],
        terms: vec![],
        commits: vec![1],
        listing: 5,
        ..Default::default()
    };
    assert_eq!(c.beat(bad).await.unwrap_err().code(), Code::InvalidArgument);
    n.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_group_stays_quiescent_on_its_leaders_unchanged_beats() {
    let dir = TempDir::new().unwrap();
    let (nodes, leader) = quiet_cluster(dir.path()).await;
    // Four longest election timeouts: without the leader's node heard, its followers would
    // have ticked again by then. Every look finds every replica as quiet as before.
    let until = tokio::time::Instant::now()
        + Duration::from_millis(4 * base_config().raft.election_timeout_max_ms);
    while tokio::time::Instant::now() < until {
        assert!(
            all_quiet(&nodes, leader),
            "{:?}",
            nodes.iter().map(|n| n.replica.quiet()).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for n in nodes {
        n.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proposal_wakes_the_followers_through_the_next_listing_and_the_group_quiets_again() {
    let dir = TempDir::new().unwrap();
    let (nodes, leader) = quiet_cluster(dir.path()).await;
    let term = node(&nodes, leader).term();
    let followers: Vec<&TestNode> = nodes.iter().filter(|n| n.id != leader).collect();

    node(&nodes, leader)
        .replica
        .propose(create("t-2"))
        .await
        .unwrap();
    // The leader keeps what it just appended in memory for replication and the apply...
    assert!(node(&nodes, leader).replica.recent_entries_held().0 > 0);
    // The woken leader's next listing leaves the group out: its followers tick again (and
    // stay awake for at least the 300 ms the leader needs to settle again).
    eventually("the followers wake", || {
        followers.iter().all(|n| n.replica.quiet() == Quiet::Awake)
    })
    .await;
    eventually("the group quiesces again", || all_quiet(&nodes, leader)).await;
    for n in &nodes {
        // ...and every replica lets go of it once the group is quiet.
        assert_eq!(n.replica.recent_entries_held(), (0, 0), "node {}", n.id);
        assert!(n.has("t-2"), "node {}", n.id);
        assert_eq!(n.term(), term, "no election on node {}", n.id);
    }
    for n in nodes {
        n.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_quiet_followers_of_a_node_that_falls_silent_elect_a_new_leader() {
    let dir = TempDir::new().unwrap();
    let (mut nodes, leader) = quiet_cluster(dir.path()).await;
    let at = nodes.iter().position(|n| n.id == leader).unwrap();
    nodes.remove(at).stop().await;
    let new_leader = stable_leader(&nodes).await;
    assert_ne!(new_leader, leader);
    propose(&nodes, create("t-3")).await;
    eventually("both survivors hold the new task", || {
        nodes.iter().all(|n| n.has("t-3"))
    })
    .await;
    for n in nodes {
        n.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_leader_cut_off_and_outvoted_follows_the_new_leader_without_its_recheck() {
    let dir = TempDir::new().unwrap();
    // The quiet leaders' periodic check is far off: only the beat and its answers can tell
    // the old leader that it no longer leads.
    let beat = BeatConfig {
        recheck: Duration::from_secs(3600),
        ..beat_config()
    };
    let (mut nodes, old) = quiet_cluster_with(dir.path(), beat).await;
    let term = node(&nodes, old).term();
    let at = nodes.iter().position(|n| n.id == old).unwrap();
    nodes[at].cut_off().await;

    // Its followers stop hearing its node, wake and elect one of them in a newer term.
    eventually("a follower leads in a newer term", || {
        nodes
            .iter()
            .any(|n| n.id != old && n.leads() && n.term() > term)
    })
    .await;
    // Cut off, the old leader still takes itself for the quiet leader: nothing reached it.
    assert_eq!(nodes[at].replica.quiet(), Quiet::Leading);
    assert!(nodes[at].leads());

    nodes[at].reconnect().await;
    let new = eventually_leader_other_than(&nodes, old).await;
    // Whichever reaches it first (the new leader's AppendEntries, or the answers to its own
    // beat naming the old term), the old leader follows the new one, ticking, and the group
    // settles under the new leader.
    eventually("the group quiesces under the new leader", || {
        all_quiet(&nodes, new)
    })
    .await;
    assert!(!nodes[at].leads());
    propose(&nodes, create("t-4")).await;
    eventually("every replica holds the new task", || {
        nodes.iter().all(|n| n.has("t-4"))
    })
    .await;
    for n in nodes {
        n.stop().await;
    }
}

/// The leader of `nodes` once one other than `old` leads and every replica agrees on it.
async fn eventually_leader_other_than(nodes: &[TestNode], old: u64) -> u64 {
    let mut new = 0;
    eventually("every replica follows a new leader", || {
        let Some(l) = nodes.iter().find(|n| n.id != old && n.leads()) else {
            return false;
        };
        new = l.id;
        nodes.iter().all(|n| {
            n.replica.leadership().borrow().leader == Some(l.id) && (n.id == l.id || !n.leads())
        })
    })
    .await;
    new
}

/// One read of whether node `n` holds task `id`, through the replica's linearizable read.
async fn read_has(n: &TestNode, id: &str) -> Result<bool, taskmesh_shard::ShardError> {
    let id = id.to_string();
    n.replica.read(move |s| s.get(&id).is_some()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_leader_reads_on_its_beats_lease_and_its_group_stays_quiet() {
    let dir = TempDir::new().unwrap();
    let (nodes, leader) = quiet_cluster(dir.path()).await;
    let term = node(&nodes, leader).term();
    // Reads over two longest election timeouts: the beats keep renewing the lease, so none
    // needs a heartbeat round, and none wakes the group.
    let until = tokio::time::Instant::now()
        + Duration::from_millis(2 * base_config().raft.election_timeout_max_ms);
    let mut reads = 0;
    while tokio::time::Instant::now() < until {
        assert!(read_has(node(&nodes, leader), "t-1").await.unwrap());
        reads += 1;
        assert!(
            all_quiet(&nodes, leader),
            "after {reads} reads: {:?}",
            nodes.iter().map(|n| n.replica.quiet()).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(node(&nodes, leader).term(), term);
    for n in nodes {
        n.stop().await;
    }
}

/// Cut the quiet leader of `nodes` off; `wake_followers`: its followers are then woken on
/// their nodes (as a proposal or read sent to them would). Once the others elected a new
/// leader and it committed a new task, every read the old leader answers must show the task:
/// the old leader's lease must have ended before anyone else could lead.
async fn a_deposed_quiet_leader_serves_no_stale_read(wake_followers: bool) {
    let dir = TempDir::new().unwrap();
    let (mut nodes, old) = quiet_cluster(dir.path()).await;
    let term = node(&nodes, old).term();
    // Quiet for longer than the longest election timeout: openraft's own timers on the
    // followers have run out, so only what the quiet followers promised keeps them from
    // electing at once when they wake.
    tokio::time::sleep(Duration::from_millis(
        base_config().raft.election_timeout_max_ms + 200,
    ))
    .await;
    assert!(all_quiet(&nodes, old));
    assert!(read_has(node(&nodes, old), "t-1").await.unwrap());
    let at = nodes.iter().position(|n| n.id == old).unwrap();
    nodes[at].cut_off().await;
    if wake_followers {
        // One after the other: woken together, both would stand at once and split the vote.
        for n in nodes.iter().filter(|n| n.id != old) {
            n.replica.wake().await;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    eventually("a follower leads in a newer term", || {
        nodes
            .iter()
            .any(|n| n.id != old && n.leads() && n.term() > term)
    })
    .await;
    // Through the survivors only (the old leader still takes itself for the leader), retrying
    // while their leadership settles.
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let new = nodes
            .iter()
            .filter(|n| n.id != old && n.leads())
            .max_by_key(|n| n.term());
        if let Some(new) = new {
            if new.replica.propose(create("t-5")).await.is_ok() {
                break;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no survivor took t-5 within {WAIT:?}"
        );
        tokio::time::sleep(POLL).await;
    }
    // The new task is committed. The old leader, which nothing has reached, must not answer
    // a read without it.
    for attempt in 0..5 {
        match read_has(&nodes[at], "t-5").await {
            Ok(has) => assert!(has, "read {attempt} on the deposed leader misses t-5"),
            Err(e) => tracing::debug!(attempt, error = %e, "the deposed leader refused a read"),
        }
    }
    for n in nodes {
        n.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_leader_cut_off_serves_no_read_after_a_newer_leader_commits() {
    a_deposed_quiet_leader_serves_no_stale_read(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn followers_woken_early_keep_their_promise_to_the_quiet_leader() {
    a_deposed_quiet_leader_serves_no_stale_read(true).await;
}
