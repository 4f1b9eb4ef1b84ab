//! End-to-end behaviour of a single-voter shard replica over a real sled database: proposing,
//! reading, restarting, snapshots, events and durability of acknowledged proposals.

// A test binary: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::time::Duration;

use openraft::storage::RaftStateMachine;
use taskmesh_shard::storage::StateMachineStore;
use taskmesh_shard::{ShardConfig, ShardError, ShardEvent, ShardReplica, Store};
use taskmesh_task::{Applied, Command, Outcome, TaskRecord, TaskStatus};
use taskmesh_wal::MetaKey;
use tempfile::TempDir;

const WAIT: Duration = Duration::from_secs(10);

fn record(id: &str) -> TaskRecord {
    TaskRecord {
        session: Some("s-1".to_string()),
        ttl_ms: Some(60_000),
        ..TaskRecord::sample(id)
    }
}

fn create(id: &str) -> Command {
    Command::Create { record: record(id) }
}

fn set_status(id: &str, status: TaskStatus, at_ms: u64) -> Command {
    Command::SetStatus {
        task_id: id.to_string(),
        term: 1,
        status,
        message: Some(format!("now {status}")),
        at_ms,
    }
}

fn finish(id: &str, at_ms: u64) -> Command {
    Command::Finish {
        task_id: id.to_string(),
        term: 1,
        status: TaskStatus::Completed,
        message: None,
        outcome: Outcome::Result {
            json: r#"{"content":[]}"#.to_string(),
        },
        at_ms,
    }
}

fn config() -> ShardConfig {
    ShardConfig {
        shard_id: 3,
        node_id: 1,
        node_addr: "127.0.0.1:7001".to_string(),
        ..ShardConfig::default()
    }
}

/// Open the node storage under `path`, waiting while a previous instance still holds its lock.
///
/// sled's periodic background flush is off, so that only the flushes the replica makes put
/// data into the files: a copy of the files then shows what a crash would leave.
async fn open_db(path: &Path) -> Store {
    taskmesh_shard::fixtures::open_store(path, |c| c.flush_every_ms(None)).await
}

async fn start(path: &Path, cfg: ShardConfig) -> (Store, ShardReplica) {
    let db = open_db(path).await;
    let replica = <ShardReplica>::open(db.clone(), cfg).await.expect("open");
    replica.bootstrap_single().await.expect("bootstrap");
    replica.wait_leader(WAIT).await.expect("leader");
    (db, replica)
}

fn all_records(replica: &ShardReplica) -> Vec<TaskRecord> {
    let mut records: Vec<TaskRecord> = replica.read_local(|s| s.records().cloned().collect());
    records.sort_by(|a, b| a.task_id.cmp(&b.task_id));
    records
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read dir") {
        let entry = entry.expect("dir entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("file type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn propose_and_read() {
    let dir = TempDir::new().expect("tempdir");
    let (_db, replica) = start(dir.path(), config()).await;
    assert!(replica.is_leader());
    assert!(replica.current_term() >= 1);
    assert_eq!(replica.shard_id(), 3);
    let l = replica.leadership().borrow().clone();
    assert!(l.is_leader);
    assert_eq!(l.leader, Some(1));
    assert_eq!(l.term, replica.current_term());

    let created = match replica.propose(create("t1")).await.expect("create") {
        Applied::Created {
            record,
            fresh: true,
        } => record,
        other => panic!("unexpected {other:?}"),
    };
    assert!(created.updated_index > 0);
    assert_eq!(created.status, TaskStatus::Working);

    match replica
        .propose(set_status("t1", TaskStatus::InputRequired, 2_000))
        .await
        .expect("set status")
    {
        Applied::Updated { record } => {
            assert_eq!(record.status, TaskStatus::InputRequired);
            assert!(record.updated_index > created.updated_index);
        }
        other => panic!("unexpected {other:?}"),
    }
    let finished = match replica.propose(finish("t1", 3_000)).await.expect("finish") {
        Applied::Updated { record } => record,
        other => panic!("unexpected {other:?}"),
    };
    assert_eq!(finished.status, TaskStatus::Completed);

    let read = replica
        .read(|s| s.get("t1").cloned())
        .await
        .expect("read")
        .expect("record present");
    assert_eq!(read, finished);
    assert_eq!(read.last_updated_at_ms, 3_000);
    assert!(read.outcome.is_some());

    match replica.propose(create("t1")).await.expect("repeat create") {
        Applied::Created {
            record,
            fresh: false,
        } => assert_eq!(record, finished),
        other => panic!("unexpected {other:?}"),
    }
    match replica
        .propose(set_status("missing", TaskStatus::Working, 1))
        .await
        .expect("propose")
    {
        Applied::Rejected(_) => {}
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(replica.read(|s| s.len()).await.expect("read"), 1);
    replica.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uninitialised_replica_is_not_leader() {
    let dir = TempDir::new().expect("tempdir");
    let db = open_db(dir.path()).await;
    let replica = <ShardReplica>::open(db, config()).await.expect("open");
    assert!(!replica.is_leader());
    match replica.propose(create("t1")).await {
        Err(ShardError::NotLeader { leader_hint: None }) => {}
        other => panic!("unexpected {other:?}"),
    }
    match replica.read(|s| s.len()).await {
        Err(ShardError::NotLeader { .. }) => {}
        other => panic!("unexpected {other:?}"),
    }
    match replica.wait_leader(Duration::from_millis(300)).await {
        Err(ShardError::Unavailable(_)) => {}
        other => panic!("unexpected {other:?}"),
    }
    replica.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_keeps_every_record() {
    let dir = TempDir::new().expect("tempdir");
    let before = {
        let (db, replica) = start(dir.path(), config()).await;
        for i in 0..5 {
            replica
                .propose(create(&format!("t{i}")))
                .await
                .expect("create");
        }
        replica
            .propose(set_status("t1", TaskStatus::InputRequired, 5_000))
            .await
            .expect("set status");
        replica.propose(finish("t2", 6_000)).await.expect("finish");
        replica
            .propose(Command::Cancel {
                task_id: "t3".into(),
                message: "stop".into(),
                at_ms: 7_000,
            })
            .await
            .expect("cancel");
        let records = all_records(&replica);
        assert_eq!(records.len(), 5);
        replica.shutdown().await.expect("shutdown");
        drop(replica);
        drop(db);
        records
    };

    let db = open_db(dir.path()).await;
    let replica = <ShardReplica>::open(db.clone(), config())
        .await
        .expect("reopen");
    // The state is rebuilt when the replica opens, before any leadership.
    assert_eq!(all_records(&replica), before);
    let (_, last_before) = replica.log_index_range().expect("log range");
    replica
        .bootstrap_single()
        .await
        .expect("bootstrap is a no-op");
    replica.wait_leader(WAIT).await.expect("leader");
    let (_, last_after) = replica.log_index_range().expect("log range");
    // Becoming leader again appends one blank entry; bootstrapping appended nothing.
    assert!(last_after <= last_before.map(|l| l + 1));

    let after: Vec<TaskRecord> = replica
        .read(|s| {
            let mut v: Vec<TaskRecord> = s.records().cloned().collect();
            v.sort_by(|a, b| a.task_id.cmp(&b.task_id));
            v
        })
        .await
        .expect("read");
    assert_eq!(after, before);

    match replica
        .propose(set_status("t4", TaskStatus::InputRequired, 8_000))
        .await
        .expect("propose after restart")
    {
        Applied::Updated { record } => {
            let old = before.iter().find(|r| r.task_id == "t4").expect("t4");
            assert!(record.updated_index > old.updated_index);
        }
        other => panic!("unexpected {other:?}"),
    }
    replica.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_purges_the_log_and_state_survives() {
    let dir = TempDir::new().expect("tempdir");
    let mut cfg = config();
    cfg.raft.snapshot_logs_since_last = 20;
    cfg.raft.max_in_snapshot_log_to_keep = 0;
    let (before, applied_before, snapshot) = {
        let (db, replica) = start(dir.path(), cfg.clone()).await;
        for i in 0..50 {
            let id = format!("t{i:03}");
            replica.propose(create(&id)).await.expect("create");
            replica
                .propose(set_status(&id, TaskStatus::InputRequired, 2_000 + i))
                .await
                .expect("set status");
        }
        replica.trigger_snapshot().await.expect("snapshot");
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let (first, _) = replica.log_index_range().expect("log range");
            if first.is_some_and(|f| f > 1) || first.is_none() {
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "log never purged");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let snapshot = replica
            .raft()
            .get_snapshot()
            .await
            .expect("get snapshot")
            .expect("a snapshot exists");
        let records = all_records(&replica);
        assert_eq!(records.len(), 50);
        let applied = replica.last_applied();
        replica.shutdown().await.expect("shutdown");
        drop(replica);
        drop(db);
        (records, applied, snapshot)
    };
    assert!(snapshot.meta.last_log_id.is_some_and(|l| l.index >= 100));

    let db = open_db(dir.path()).await;
    let replica = <ShardReplica>::open(db.clone(), cfg).await.expect("reopen");
    let (first, _) = replica.log_index_range().expect("log range");
    assert!(first.is_none_or(|f| f > 1), "log starts at {first:?}");
    assert_eq!(all_records(&replica), before);
    assert_eq!(replica.last_applied(), applied_before);
    replica.bootstrap_single().await.expect("bootstrap");
    replica.wait_leader(WAIT).await.expect("leader");
    assert_eq!(replica.read(|s| s.len()).await.expect("read"), 50);
    match replica.propose(create("late")).await.expect("propose") {
        Applied::Created { fresh: true, .. } => {}
        other => panic!("unexpected {other:?}"),
    }
    replica.shutdown().await.expect("shutdown");

    // The snapshot alone rebuilds the same state in an empty state machine.
    let other_dir = TempDir::new().expect("tempdir");
    let other_db = open_db(other_dir.path()).await;
    let mut sm = <StateMachineStore>::open(&other_db, 3, 16)
        .await
        .expect("open sm");
    sm.install_snapshot(&snapshot.meta, snapshot.snapshot.clone())
        .await
        .expect("install");
    let installed = {
        let mut v: Vec<TaskRecord> = sm.read(|s| s.records().cloned().collect());
        v.sort_by(|a, b| a.task_id.cmp(&b.task_id));
        v
    };
    assert_eq!(installed.len(), 50);
    let by_snapshot: Vec<TaskRecord> = before
        .iter()
        .filter(|r| {
            snapshot
                .meta
                .last_log_id
                .is_some_and(|l| r.updated_index <= l.index)
        })
        .cloned()
        .collect();
    assert_eq!(installed, by_snapshot);
    drop(sm);
    let reopened = <StateMachineStore>::open(&other_db, 3, 16)
        .await
        .expect("reopen sm");
    assert_eq!(reopened.read(|s| s.len()), 50);
    assert_eq!(reopened.last_applied(), snapshot.meta.last_log_id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_follow_applied_changes() {
    let dir = TempDir::new().expect("tempdir");
    let (_db, replica) = start(dir.path(), config()).await;
    let mut events = replica.subscribe();

    let created = match replica.propose(create("t1")).await.expect("create") {
        Applied::Created { record, .. } => record,
        other => panic!("unexpected {other:?}"),
    };
    match tokio::time::timeout(WAIT, events.recv())
        .await
        .expect("event in time")
    {
        Ok(ShardEvent::Changed { index, record }) => {
            assert_eq!(*record, created);
            assert_eq!(index, created.updated_index);
        }
        other => panic!("unexpected {other:?}"),
    }

    // A repeated create changes nothing and emits nothing: the next event is the status change.
    replica.propose(create("t1")).await.expect("repeat");
    let updated = match replica
        .propose(set_status("t1", TaskStatus::InputRequired, 2_000))
        .await
        .expect("set status")
    {
        Applied::Updated { record } => record,
        other => panic!("unexpected {other:?}"),
    };
    match tokio::time::timeout(WAIT, events.recv())
        .await
        .expect("event in time")
    {
        Ok(ShardEvent::Changed { index, record }) => {
            assert_eq!(*record, updated);
            assert_eq!(index, updated.updated_index);
        }
        other => panic!("unexpected {other:?}"),
    }

    let expire = Command::Expire {
        task_ids: vec!["t1".into()],
        now_ms: 1_000 + 60_000,
    };
    match replica.propose(expire).await.expect("expire") {
        Applied::Expired { task_ids } => assert_eq!(task_ids, vec!["t1".to_string()]),
        other => panic!("unexpected {other:?}"),
    }
    match tokio::time::timeout(WAIT, events.recv())
        .await
        .expect("event in time")
    {
        Ok(ShardEvent::Expired { task_ids, index }) => {
            assert_eq!(task_ids, vec!["t1".to_string()]);
            assert!(index > updated.updated_index);
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(replica.read(|s| s.is_empty()).await.expect("read"));
    replica.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_proposal_is_on_disk() {
    let dir = TempDir::new().expect("tempdir");
    let (db, replica) = start(dir.path(), config()).await;
    let created = match replica.propose(create("t1")).await.expect("create") {
        Applied::Created { record, .. } => record,
        other => panic!("unexpected {other:?}"),
    };

    // What is in the database files right after the acknowledgement, with the process still
    // running: this is what a crash at this instant leaves behind.
    let crash_dir = TempDir::new().expect("tempdir");
    copy_dir(dir.path(), crash_dir.path());
    {
        let db = open_db(crash_dir.path()).await;
        let copy = <ShardReplica>::open(db, config()).await.expect("open copy");
        assert_eq!(
            copy.read_local(|s| s.get("t1").cloned()),
            Some(created.clone())
        );
        copy.bootstrap_single().await.expect("bootstrap");
        copy.wait_leader(WAIT).await.expect("leader");
        assert_eq!(
            copy.read(|s| s.get("t1").cloned()).await.expect("read"),
            Some(created.clone())
        );
        copy.shutdown().await.expect("shutdown copy");
    }

    // Dropping everything without a shutdown, then reopening the same directory.
    drop(replica);
    drop(db);
    let db = open_db(dir.path()).await;
    let replica = <ShardReplica>::open(db, config()).await.expect("reopen");
    assert_eq!(replica.read_local(|s| s.get("t1").cloned()), Some(created));
    replica.shutdown().await.expect("shutdown");
}

/// Concurrent reads share leadership confirmations; none may see a state older than a write
/// acknowledged before the read began.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_reads_never_miss_an_acknowledged_write() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;

    let dir = TempDir::new().expect("tempdir");
    let (_db, replica) = start(dir.path(), config()).await;
    let created = match replica.propose(create("r1")).await.expect("create") {
        Applied::Created { record, .. } => record,
        other => panic!("unexpected {other:?}"),
    };
    let acknowledged = Arc::new(AtomicU64::new(created.updated_index));
    let done = Arc::new(AtomicBool::new(false));
    let mut readers = Vec::new();
    for _ in 0..8 {
        let (replica, acknowledged, done) = (replica.clone(), acknowledged.clone(), done.clone());
        readers.push(tokio::spawn(async move {
            let mut reads = 0u64;
            while !done.load(Ordering::Acquire) || reads == 0 {
                let floor = acknowledged.load(Ordering::Acquire);
                let seen = replica
                    .read(|s| s.get("r1").map(|r| r.updated_index))
                    .await
                    .expect("read")
                    .expect("record present");
                assert!(
                    seen >= floor,
                    "read saw index {seen} after {floor} was acknowledged"
                );
                reads += 1;
                // A read served from the lease completes without yielding.
                tokio::task::yield_now().await;
            }
            reads
        }));
    }
    for i in 0..60u64 {
        let status = if i % 2 == 0 {
            TaskStatus::InputRequired
        } else {
            TaskStatus::Working
        };
        match replica
            .propose(set_status("r1", status, 2_000 + i))
            .await
            .expect("set status")
        {
            Applied::Updated { record } => {
                acknowledged.store(record.updated_index, Ordering::Release)
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    done.store(true, Ordering::Release);
    let mut total = 0;
    for r in readers {
        total += r.await.expect("reader");
    }
    assert!(total >= 8);
}

/// A data directory of an earlier version kept each group's log in two sled trees
/// (`shard/{id}/log`, entries by big-endian index; `shard/{id}/raft`, the vote and the
/// committed id). Opening the group moves them into the write-ahead log, and nothing is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_kept_in_database_trees_moves_into_the_write_ahead_log() {
    let dir = TempDir::new().expect("tempdir");
    let before = {
        let (store, replica) = start(dir.path(), config()).await;
        for i in 0..3 {
            replica
                .propose(create(&format!("t{i}")))
                .await
                .expect("create");
        }
        let records = all_records(&replica);
        replica.shutdown().await.expect("shutdown");
        drop(replica);

        // Lay the log out as the earlier version did, and keep no state: the state must be
        // rebuilt from the moved log alone.
        let (db, wal) = (store.db(), store.wal());
        let log = db.open_tree("shard/3/log").expect("tree");
        for (index, bytes) in wal.read(3, 0, u64::MAX).expect("read") {
            log.insert(index.to_be_bytes(), bytes).expect("insert");
        }
        let raft = db.open_tree("shard/3/raft").expect("tree");
        let vote = wal.meta(3, MetaKey::Vote).expect("a vote");
        raft.insert("vote", vote).expect("insert");
        let committed = wal.meta(3, MetaKey::Committed).expect("a committed id");
        raft.insert("committed", committed).expect("insert");
        db.drop_tree("shard/3/sm").expect("drop");
        store.snapshots().remove(3).expect("remove");
        wal.drop_group(3).expect("drop");
        store.flush().await.expect("flush");
        records
    };
    assert_eq!(before.len(), 3);

    let store = open_db(dir.path()).await;
    assert_eq!(taskmesh_shard::stored_groups(&store), vec![3]);
    assert!(!store.wal().contains(3));
    let replica = <ShardReplica>::open(store.clone(), config())
        .await
        .expect("open");
    assert_eq!(all_records(&replica), before);
    let names = store.db().tree_names();
    assert!(!names
        .iter()
        .any(|n| n.as_ref() == b"shard/3/log" || n.as_ref() == b"shard/3/raft"));
    assert!(store.wal().contains(3));
    replica.wait_leader(WAIT).await.expect("leader");
    replica.propose(create("t9")).await.expect("create after");
    replica.shutdown().await.expect("shutdown");
    drop(replica);
    drop(store);

    let store = open_db(dir.path()).await;
    assert_eq!(taskmesh_shard::stored_groups(&store), vec![3]);
    let replica = <ShardReplica>::open(store, config()).await.expect("reopen");
    assert_eq!(all_records(&replica).len(), 4);
    replica.shutdown().await.expect("shutdown");
}

/// A state machine tree of an earlier version kept the state itself: a key per record
/// (`rec/{task id}`), the applied id (`meta/applied`) and the membership (`meta/membership`).
/// Opening it keeps that state as a snapshot instead, in the group's snapshot file, and the
/// tree goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_kept_key_by_key_becomes_a_snapshot() {
    use openraft::async_runtime::WatchReceiver;
    let dir = TempDir::new().expect("tempdir");
    let (records, applied, membership) = {
        let (_store, replica) = start(dir.path(), config()).await;
        for i in 0..4 {
            replica
                .propose(create(&format!("t{i}")))
                .await
                .expect("create");
        }
        // The state machine's own applied id (the metrics may lag it).
        let records = all_records(&replica);
        let applied = replica.last_applied();
        let m = replica.raft().metrics().borrow_watched().clone();
        replica.shutdown().await.expect("shutdown");
        (records, applied, (*m.membership_config).clone())
    };
    assert!(applied.is_some());

    let other = TempDir::new().expect("tempdir");
    let store = open_db(other.path()).await;
    {
        let tree = store.db().open_tree("shard/3/sm").expect("tree");
        for r in &records {
            let key = format!("rec/{}", r.task_id);
            tree.insert(key, serde_json::to_vec(r).expect("json"))
                .expect("insert");
        }
        tree.insert("meta/applied", serde_json::to_vec(&applied).expect("json"))
            .expect("insert");
        tree.insert(
            "meta/membership",
            serde_json::to_vec(&membership).expect("json"),
        )
        .expect("insert");
    }
    let mut sm = <StateMachineStore>::open(&store, 3, 16)
        .await
        .expect("open sm");
    let state = |sm: &StateMachineStore| {
        let mut v: Vec<TaskRecord> = sm.read(|s| s.records().cloned().collect());
        v.sort_by(|a, b| a.task_id.cmp(&b.task_id));
        v
    };
    assert_eq!(state(&sm), records);
    assert_eq!(sm.last_applied(), applied);
    let snapshot = sm
        .get_current_snapshot()
        .await
        .expect("snapshot")
        .expect("a snapshot was kept");
    assert_eq!(snapshot.meta.last_log_id, applied);
    assert_eq!(snapshot.meta.last_membership, membership);
    assert!(!has_tree(&store, "shard/3/sm"));
    let (meta, _) = store
        .snapshots()
        .read(3)
        .expect("read")
        .expect("a snapshot file");
    assert_eq!(meta.last_log_id, applied);
    drop(sm);
    let reopened = <StateMachineStore>::open(&store, 3, 16)
        .await
        .expect("reopen sm");
    assert_eq!(state(&reopened), records);
    assert_eq!(reopened.last_applied(), applied);
}

fn has_tree(store: &Store, name: &str) -> bool {
    store
        .db()
        .tree_names()
        .iter()
        .any(|n| n.as_ref() == name.as_bytes())
}

/// A version before this one kept each group's latest snapshot in its state machine tree
/// (`snap/meta`, `snap/data`), where sled never gave back the space of the ones it replaced.
/// Opening the group reads that snapshot, moves it into the group's snapshot file and drops
/// the tree; the state is the same, and later snapshots go to the file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_kept_in_the_database_moves_into_its_file() {
    let dir = TempDir::new().expect("tempdir");
    let before = {
        let (store, replica) = start(dir.path(), config()).await;
        for i in 0..5 {
            replica
                .propose(create(&format!("t{i}")))
                .await
                .expect("create");
        }
        replica.trigger_snapshot().await.expect("snapshot");
        let records = all_records(&replica);
        replica.shutdown().await.expect("shutdown");
        drop(replica);
        // Lay the snapshot out as the earlier version did.
        let (meta, data) = store
            .snapshots()
            .read(3)
            .expect("read")
            .expect("a snapshot");
        let tree = store.db().open_tree("shard/3/sm").expect("tree");
        tree.insert("snap/meta", serde_json::to_vec(&meta).expect("json"))
            .expect("insert");
        tree.insert("snap/data", data).expect("insert");
        store.snapshots().remove(3).expect("remove");
        store.flush().await.expect("flush");
        records
    };
    assert_eq!(before.len(), 5);

    let store = open_db(dir.path()).await;
    let replica = <ShardReplica>::open(store.clone(), config())
        .await
        .expect("open");
    assert_eq!(all_records(&replica), before);
    assert!(!has_tree(&store, "shard/3/sm"));
    assert!(store.snapshots().read(3).expect("read").is_some());
    replica.wait_leader(WAIT).await.expect("leader");
    replica.propose(create("t9")).await.expect("create after");
    replica.trigger_snapshot().await.expect("snapshot");
    replica.shutdown().await.expect("shutdown");
    drop(replica);
    drop(store);

    let store = open_db(dir.path()).await;
    let replica = <ShardReplica>::open(store.clone(), config())
        .await
        .expect("reopen");
    assert_eq!(all_records(&replica).len(), 6);
    assert!(!has_tree(&store, "shard/3/sm"));
    replica.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proposal_given_up_before_its_answer_is_counted_out() {
    use futures::FutureExt;
    let dir = TempDir::new().expect("tempdir");
    let (_db, replica) = start(dir.path(), config()).await;
    // Polled once, the proposal waits for its commit; dropping it gives it up there.
    let first_poll = replica.propose(create("t1")).now_or_never();
    assert!(first_poll.is_none(), "answered on its first poll");
    assert_eq!(replica.proposals_in_flight(), 0);
    // The entry may still commit; the group keeps serving.
    replica.propose(create("t2")).await.expect("create");
    assert_eq!(replica.proposals_in_flight(), 0);
    replica.shutdown().await.expect("shutdown");
}
