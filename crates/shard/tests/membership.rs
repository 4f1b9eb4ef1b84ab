//! The membership side of a replica without peers: bootstrapping with an explicit member list,
//! member addresses and their watch, and the leader-only hand-over calls.

// A test binary: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use taskmesh_shard::{ShardConfig, ShardError, ShardReplica};
use tempfile::TempDir;

const WAIT: Duration = Duration::from_secs(30);

fn config() -> ShardConfig {
    ShardConfig {
        shard_id: 2,
        node_id: 1,
        node_addr: "127.0.0.1:7001".to_string(),
        ..ShardConfig::default()
    }
}

async fn open(dir: &TempDir) -> ShardReplica {
    let store = taskmesh_shard::fixtures::open_store(dir.path(), |c| c).await;
    <ShardReplica>::open(store, config()).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bootstrap_checks_its_member_list() {
    let dir = TempDir::new().unwrap();
    let replica = open(&dir).await;

    let without_me = BTreeMap::from([(2, "127.0.0.1:7002".to_string())]);
    assert!(matches!(
        replica.bootstrap(without_me).await,
        Err(ShardError::Invalid(_))
    ));
    let no_address = BTreeMap::from([(1, "127.0.0.1:7001".to_string()), (2, String::new())]);
    assert!(matches!(
        replica.bootstrap(no_address).await,
        Err(ShardError::Invalid(_))
    ));
    assert!(
        replica.members().is_empty(),
        "a rejected bootstrap wrote nothing"
    );

    // Not leader of anything yet.
    assert!(matches!(
        replica.transfer_leader(2).await,
        Err(ShardError::NotLeader { .. })
    ));
    assert_eq!(replica.step_down(WAIT).await.unwrap(), None);

    let me = BTreeMap::from([(1, "127.0.0.1:7001".to_string())]);
    replica.bootstrap(me.clone()).await.unwrap();
    replica.wait_leader(WAIT).await.unwrap();
    assert_eq!(replica.members(), me);
    assert_eq!(replica.voters(), vec![1]);

    // Again, even with another list: an initialised group is left as it is.
    let other = BTreeMap::from([
        (1, "127.0.0.1:7001".to_string()),
        (2, "127.0.0.1:7002".to_string()),
    ]);
    replica.bootstrap(other).await.unwrap();
    assert_eq!(replica.voters(), vec![1]);
    replica.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_address_change_reaches_the_members_watch() {
    let dir = TempDir::new().unwrap();
    let replica = open(&dir).await;
    replica.bootstrap_single().await.unwrap();
    replica.wait_leader(WAIT).await.unwrap();

    let mut watch = replica.members_watch();
    tokio::time::timeout(
        WAIT,
        watch.wait_for(|m| m.get(&1).map(String::as_str) == Some("127.0.0.1:7001")),
    )
    .await
    .expect("the watch shows the bootstrapped member")
    .unwrap();

    replica
        .set_node_addr(1, "127.0.0.1:7101".to_string())
        .await
        .unwrap();
    assert_eq!(
        replica.members().get(&1).map(String::as_str),
        Some("127.0.0.1:7101")
    );
    tokio::time::timeout(
        WAIT,
        watch.wait_for(|m| m.get(&1).map(String::as_str) == Some("127.0.0.1:7101")),
    )
    .await
    .expect("the watch sees the new address")
    .unwrap();

    assert!(matches!(
        replica.set_node_addr(9, "127.0.0.1:7009".to_string()).await,
        Err(ShardError::Invalid(_))
    ));
    assert!(matches!(
        replica.set_node_addr(1, " ".to_string()).await,
        Err(ShardError::Invalid(_))
    ));
    replica.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_voter_has_nobody_to_hand_over_to() {
    let dir = TempDir::new().unwrap();
    let replica = open(&dir).await;
    replica.bootstrap_single().await.unwrap();
    replica.wait_leader(WAIT).await.unwrap();

    replica.transfer_leader(1).await.unwrap();
    assert!(matches!(
        replica.transfer_leader(5).await,
        Err(ShardError::Invalid(_))
    ));
    assert_eq!(replica.step_down(WAIT).await.unwrap(), None);
    assert!(replica.is_leader(), "still the leader");
    replica.shutdown().await.unwrap();
}
