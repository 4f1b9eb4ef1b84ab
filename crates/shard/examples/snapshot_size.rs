//! Measures what a shard snapshot costs at a given number of retained tasks: how long the
//! creates take (group-committed by concurrent proposals), how big the snapshot is, how long
//! building it takes, and how long a follower needs to install it (decode, write, flush,
//! rebuild the in-memory state). The install has to fit in `raft.install_snapshot_timeout_ms`.
//!
//!     cargo run --release -p taskmesh-shard --example snapshot_size -- 100000

use std::time::{Duration, Instant};

use futures::StreamExt;
use openraft::storage::RaftStateMachine;
use taskmesh_shard::storage::StateMachineStore;
use taskmesh_shard::{ShardConfig, ShardReplica};
use taskmesh_task::{Command, Outcome, TaskRecord, TaskStatus, ToolRequest};

fn record(i: usize) -> TaskRecord {
    let id = format!(
        "{:032x}",
        (i as u128).wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835)
    );
    TaskRecord {
        session: Some("0123456789abcdef0123456789abcdef".into()),
        created_at_ms: 1_764_000_000_000,
        last_updated_at_ms: 1_764_000_000_000,
        poll_interval_ms: 1_000,
        request: ToolRequest {
            arguments_json: r#"{"seconds":5,"label":"a typical label"}"#.into(),
            ..TaskRecord::sample(&id).request
        },
        ..TaskRecord::sample(&id)
    }
}

/// The storage of a node under `dir`, as the node lays it out.
fn open_store(dir: &std::path::Path) -> Result<taskmesh_shard::Store, Box<dyn std::error::Error>> {
    let db = sled::Config::new().path(dir.join("db")).open()?;
    let wal = taskmesh_shard::storage::Wal::open(&dir.join("wal"), Default::default())?;
    let snapshots = taskmesh_shard::storage::SnapshotDir::open(&dir.join("snapshots"))?;
    Ok(taskmesh_shard::Store::new(db, wal, snapshots))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: usize = std::env::args()
        .nth(1)
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(100_000);
    let dir = tempfile::tempdir()?;
    let db = open_store(dir.path())?;
    let mut cfg = ShardConfig {
        wait_timeout_ms: 600_000,
        ..ShardConfig::default()
    };
    cfg.raft.snapshot_logs_since_last = u64::MAX / 2;
    let replica = <ShardReplica>::open(db.clone(), cfg).await?;
    replica.bootstrap_single().await?;
    replica.wait_leader(Duration::from_secs(10)).await?;

    let t = Instant::now();
    let done = futures::stream::iter(0..n)
        .map(|i| {
            let replica = replica.clone();
            async move {
                let id = record(i).task_id.clone();
                replica.propose(Command::Create { record: record(i) }).await?;
                // Half the tasks finish with a result of a typical size.
                if i % 2 == 0 {
                    replica
                        .propose(Command::Finish {
                            task_id: id,
                            term: 1,
                            status: TaskStatus::Completed,
                            message: None,
                            outcome: Outcome::Result {
                                json: format!(
                                    r#"{{"content":[{{"type":"text","text":"result {i}: computed for 5 seconds"}}]}}"#
                                ),
                            },
                            at_ms: 1_764_000_005_000,
                        })
                        .await?;
                }
                Ok::<_, taskmesh_shard::ShardError>(())
            }
        })
        .buffer_unordered(512)
        .filter(|r| futures::future::ready(r.is_ok()))
        .count()
        .await;
    let write_s = t.elapsed().as_secs_f64();
    assert_eq!(done, n, "every proposal succeeded");

    let t = Instant::now();
    replica.trigger_snapshot().await?;
    let build_s = t.elapsed().as_secs_f64();
    let snapshot = replica.raft().get_snapshot().await?.ok_or("no snapshot")?;
    let bytes = snapshot.snapshot.len();
    replica.shutdown().await?;

    let other = tempfile::tempdir()?;
    let other_db = open_store(other.path())?;
    let mut sm = <StateMachineStore>::open(&other_db, 0, 16).await?;
    let t = Instant::now();
    sm.install_snapshot(&snapshot.meta, snapshot.snapshot)
        .await?;
    let install_s = t.elapsed().as_secs_f64();
    assert_eq!(sm.read(|s| s.len()), n);

    println!(
        "{n} tasks ({} completed): writes {write_s:.1} s ({:.0} proposals/s); snapshot {:.1} MiB \
         ({:.0} bytes/task), built in {build_s:.2} s; installed on an empty follower in {install_s:.2} s",
        n.div_ceil(2),
        (n + n.div_ceil(2)) as f64 / write_s,
        bytes as f64 / (1024.0 * 1024.0),
        bytes as f64 / n as f64,
    );
    Ok(())
}
