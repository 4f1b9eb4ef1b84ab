//! The disk a node's groups take follows the tasks they retain, not every task they ever held:
//! once tasks expire and the groups go idle, what their snapshots and logs took is given back,
//! and it stays given back across a restart.
//!
//! Several single-voter groups share one store (one write-ahead log with small segments, one
//! sled database), as the shards of a node do. Each creates and finishes many tasks, building
//! several snapshots on the way, and keeps a few with a long TTL. The rest expire; then the
//! node's beat is played (each group's `tick_quiet`, which quiets an idle group) until the data
//! directory is back near its size before the load.

// A test binary: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::time::Duration;

use futures::StreamExt;
use taskmesh_shard::storage::WalConfig;
use taskmesh_shard::{clock_ms, RaftSettings, ShardConfig, ShardReplica, Store};
use taskmesh_task::{Command, Outcome, TaskRecord, TaskStatus};
use tempfile::TempDir;

const WAIT: Duration = Duration::from_secs(10);
/// How long the data directory may take to come back down once the load is over.
const SETTLE: Duration = Duration::from_secs(30);
const GROUPS: u32 = 4;
/// Tasks each group creates, finishes and lets expire.
const EXPIRING: usize = 1_000;
/// Tasks each group keeps (a TTL far past the expiry's clock).
const RETAINED: usize = 25;
/// Proposals each group has under way at once.
const IN_FLIGHT: usize = 16;
/// The write-ahead log's segment size in this test.
const SEGMENT_BYTES: u64 = 4 << 20;
/// The clock the expiry checks TTLs against, in ms since the epoch.
const EXPIRY_NOW_MS: u64 = 10_000_000;
/// How long a group is idle before the beat quiets it.
const QUIESCE_AFTER: Duration = Duration::from_millis(100);
/// Arguments and a result of about 1 KiB each: a snapshot of a few hundred tasks is larger than
/// the values sled keeps inline, as a busy shard's is.
const PAYLOAD_BYTES: usize = 1_024;

fn task_id(group: u32, i: usize) -> String {
    format!("g{group}-t{i:05}")
}

fn create(group: u32, i: usize) -> Command {
    let mut record = TaskRecord::sample(&task_id(group, i));
    record.session = Some("s-1".into());
    record.ttl_ms = Some(if i < RETAINED { 1 << 40 } else { 60_000 });
    record.request.arguments_json = format!(r#"{{"pad":"{}"}}"#, "a".repeat(PAYLOAD_BYTES));
    Command::Create { record }
}

fn finish(group: u32, i: usize) -> Command {
    Command::Finish {
        task_id: task_id(group, i),
        term: 1,
        status: TaskStatus::Completed,
        message: None,
        outcome: Outcome::Result {
            json: format!(
                r#"{{"content":[{{"type":"text","text":"{}"}}]}}"#,
                "r".repeat(PAYLOAD_BYTES)
            ),
        },
        at_ms: 2_000,
    }
}

fn config(group: u32) -> ShardConfig {
    let raft = RaftSettings {
        snapshot_logs_since_last: 500,
        max_in_snapshot_log_to_keep: 100,
        ..RaftSettings::default()
    };
    raft.shard_config(group, 1, "127.0.0.1:7001".to_string())
}

async fn open_store(path: &Path) -> Store {
    taskmesh_shard::fixtures::open_store_with(
        path,
        |c| c,
        WalConfig {
            segment_bytes: SEGMENT_BYTES,
        },
    )
    .await
}

async fn start(store: &Store) -> Vec<ShardReplica> {
    let mut replicas = Vec::new();
    for group in 0..GROUPS {
        let replica = <ShardReplica>::open(store.clone(), config(group))
            .await
            .expect("open");
        replica.bootstrap_single().await.expect("bootstrap");
        replica.wait_leader(WAIT).await.expect("leader");
        replicas.push(replica);
    }
    replicas
}

async fn stop(replicas: Vec<ShardReplica>) {
    for replica in replicas {
        replica.shutdown().await.expect("shutdown");
    }
}

/// The disk the files under `path` take (allocated blocks, as `du` counts them). A file
/// deleted or renamed while it is counted (a log segment, a snapshot's temporary file) is
/// left out.
fn disk_bytes(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(path) else {
        return 0;
    };
    let mut total = 0;
    for entry in entries.flatten() {
        let Ok(meta) = entry.metadata() else {
            continue;
        };
        total += if meta.is_dir() {
            disk_bytes(&entry.path())
        } else {
            meta.blocks() * 512
        };
    }
    total
}

/// What each part of the directory takes, and how many files it holds, for messages.
fn breakdown(path: &Path) -> String {
    fn files(path: &Path) -> usize {
        std::fs::read_dir(path)
            .map(|d| {
                d.flatten()
                    .map(|e| {
                        if e.path().is_dir() {
                            files(&e.path())
                        } else {
                            1
                        }
                    })
                    .sum()
            })
            .unwrap_or(0)
    }
    let mut parts: Vec<String> = Vec::new();
    for part in ["db", "db/blobs", "wal", "snapshots"] {
        let p = path.join(part);
        if p.is_dir() {
            parts.push(format!(
                "{part}: {} bytes in {} files",
                disk_bytes(&p),
                files(&p)
            ));
        }
    }
    parts.join(", ")
}

/// Every group creates and finishes its tasks, `IN_FLIGHT` proposals at a time.
async fn load(replicas: &[ShardReplica]) {
    let groups = replicas.iter().map(|replica| async move {
        let group = replica.shard_id();
        futures::stream::iter(0..RETAINED + EXPIRING)
            .for_each_concurrent(IN_FLIGHT, |i| async move {
                replica.propose(create(group, i)).await.expect("create");
                replica.propose(finish(group, i)).await.expect("finish");
            })
            .await;
    });
    futures::future::join_all(groups).await;
}

/// Every group expires what has run out at `EXPIRY_NOW_MS`, as the leader's expiry would.
async fn expire(replicas: &[ShardReplica]) {
    for replica in replicas {
        loop {
            let due = replica.read_local(|s| s.expired(EXPIRY_NOW_MS, 200));
            if due.is_empty() {
                break;
            }
            replica
                .propose(Command::Expire {
                    task_ids: due,
                    now_ms: EXPIRY_NOW_MS,
                })
                .await
                .expect("expire");
        }
        assert_eq!(replica.read_local(|s| s.len()), RETAINED);
    }
}

/// Play the node's beat over the groups until the directory takes at most `bound` bytes, or
/// `SETTLE` passes; returns what it takes then.
async fn settle(replicas: &[ShardReplica], dir: &Path, bound: u64) -> u64 {
    let deadline = tokio::time::Instant::now() + SETTLE;
    loop {
        for replica in replicas {
            replica.tick_quiet(clock_ms(), QUIESCE_AFTER);
        }
        let size = disk_bytes(dir);
        if size <= bound || tokio::time::Instant::now() >= deadline {
            return size;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn assert_retained(replicas: &[ShardReplica]) {
    for replica in replicas {
        let group = replica.shard_id();
        let mut ids: Vec<String> =
            replica.read_local(|s| s.records().map(|r| r.task_id.clone()).collect());
        ids.sort();
        let expected: Vec<String> = (0..RETAINED).map(|i| task_id(group, i)).collect();
        assert_eq!(ids, expected, "group {group}");
        let done = replica.read_local(|s| {
            s.records()
                .all(|r| r.status == TaskStatus::Completed && r.outcome.is_some())
        });
        assert!(done, "group {group}: a retained task lost its result");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disk_comes_back_down_once_tasks_expire_and_after_a_restart() {
    let dir = TempDir::new().expect("tempdir");
    // The directory before the load, as the groups leave it once opened and restarted (sled
    // lays out its files at the first restart).
    let store = open_store(dir.path()).await;
    stop(start(&store).await).await;
    drop(store);
    let store = open_store(dir.path()).await;
    let replicas = start(&store).await;
    let before = disk_bytes(dir.path());

    load(&replicas).await;
    let loaded = disk_bytes(dir.path());
    expire(&replicas).await;
    let expired = disk_bytes(dir.path());

    // What may stay: the directory as it was before the load, the retained tasks (about
    // 2.5 KiB each) several times over, and what the write-ahead log keeps in a segment whose
    // entries are all gone before it closes it early. Not a whole segment: the log lets go of
    // its segments once the groups let go of their entries.
    let retained_bytes = u64::from(GROUPS) * RETAINED as u64 * 3 * PAYLOAD_BYTES as u64;
    let bound = before + 4 * retained_bytes + 2 * taskmesh_wal::IDLE_ROLL_MIN_BYTES;
    assert!(
        bound < SEGMENT_BYTES,
        "a segment is not all that is given back"
    );
    // The load must have taken far more than that, or the test shows nothing.
    assert!(
        loaded > 4 * bound,
        "the load took {loaded} bytes, bound {bound}"
    );

    let settled = settle(&replicas, dir.path(), bound).await;
    eprintln!(
        "data directory: {before} bytes before the load, {loaded} after it, {expired} once \
         expired, {settled} once idle (bound {bound}): {}",
        breakdown(dir.path())
    );
    assert!(
        settled <= bound,
        "the data directory still takes {settled} bytes once every task but {} expired and \
         the groups are idle (before the load: {before}; bound {bound})",
        u64::from(GROUPS) * RETAINED as u64
    );
    assert_retained(&replicas);

    stop(replicas).await;
    drop(store);
    let store = open_store(dir.path()).await;
    let replicas = start(&store).await;
    assert_retained(&replicas);
    let restarted = settle(&replicas, dir.path(), bound).await;
    eprintln!(
        "data directory after a restart: {restarted} bytes: {}",
        breakdown(dir.path())
    );
    assert!(
        restarted <= bound,
        "the data directory takes {restarted} bytes after a restart (bound {bound})"
    );
    stop(replicas).await;
}
