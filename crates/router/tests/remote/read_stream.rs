//! The `ReadTasks` stream between nodes, over real gRPC on loopback: a one-shard node answers
//! batches of reads by number, refuses an oversized batch, and a gateway's `Peers` reads
//! through it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use taskmesh_host::ops::Cancel;
use taskmesh_host::{HostError, NewTask, TaskRead};
use taskmesh_router::remote::{Peers, MAX_GET_BATCH};
use taskmesh_rpc::v1::{self, get_task_result::Outcome, task_service_client::TaskServiceClient};
use taskmesh_task::{TaskStatus, ToolRequest};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use crate::support::{free_addr, host, serve, TASK};

fn get(owner: &str, task_id: &str) -> v1::GetTaskRequest {
    v1::GetTaskRequest {
        shard: 0,
        owner: owner.into(),
        task_id: task_id.into(),
        trace_id: 0,
        traceparent: String::new(),
        detail: false,
    }
}

/// The task id of a result, or the kind of its error.
fn outcome(r: &v1::GetTaskResult) -> Value {
    match r.outcome.as_ref().unwrap() {
        Outcome::Task(t) => json!({ "task": t.task_id }),
        Outcome::Error(e) => json!({ "error": e.kind }),
        other => panic!("a read without detail answers a task or an error: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_are_answered_by_number_and_an_oversized_one_ends_the_stream() {
    let dir = tempfile::tempdir().unwrap();
    let host = host(dir.path()).await;
    let addr = free_addr();
    let server = serve(&host, &addr);
    let mut client = TaskServiceClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    let (tx, rx) = mpsc::channel(8);
    let mut answers = client
        .read_tasks(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();

    let not_found = v1::TaskErrorKind::NotFound as i32;
    tx.send(v1::ReadTasksRequest {
        batch: 7,
        gets: vec![
            get("alice", TASK),
            get("mallory", TASK),
            get("alice", "ffffffffffffffffffffffffffffffff"),
        ],
    })
    .await
    .unwrap();
    tx.send(v1::ReadTasksRequest {
        batch: 8,
        gets: vec![get("alice", TASK)],
    })
    .await
    .unwrap();
    let mut by_batch = HashMap::new();
    for _ in 0..2 {
        let a = answers
            .message()
            .await
            .unwrap()
            .expect("an answer per batch");
        by_batch.insert(a.batch, a.results.iter().map(outcome).collect::<Vec<_>>());
    }
    assert_eq!(
        by_batch[&7],
        vec![
            json!({ "task": TASK }),
            json!({ "error": not_found }),
            json!({ "error": not_found }),
        ],
        "each read answered in its batch's order; another principal's task reads as missing"
    );
    assert_eq!(by_batch[&8], vec![json!({ "task": TASK })]);

    tx.send(v1::ReadTasksRequest {
        batch: 9,
        gets: vec![get("alice", TASK); MAX_GET_BATCH + 1],
    })
    .await
    .unwrap();
    let err = answers.message().await.expect_err("the stream ends");
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    server.shutdown_background();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_reads_through_the_stream_and_opens_a_new_one_after_it_ends() {
    let dir = tempfile::tempdir().unwrap();
    let host = host(dir.path()).await;
    let addr = free_addr();
    let server = serve(&host, &addr);
    let peers = Arc::new(
        // A request timeout far beyond the test's own bound: only the end of the stream can
        // answer the reads below in time.
        Peers::new(HashMap::from([(1, addr.clone())]), Duration::from_secs(300)).unwrap(),
    );
    let read_all = |peers: Arc<Peers>| async move {
        // Many reads at once: they share batches, and each gets its own answer.
        let reads = (0..64).map(|i| {
            let peers = peers.clone();
            async move {
                let owner = if i % 2 == 0 { "alice" } else { "mallory" };
                (i, peers.get(1, 0, TASK, owner).await.map(|r| r.task_id))
            }
        });
        for (i, r) in futures::future::join_all(reads).await {
            if i % 2 == 0 {
                assert_eq!(r.unwrap(), TASK);
            } else {
                assert!(matches!(r, Err(HostError::NotFound)), "{r:?}");
            }
        }
    };
    read_all(peers.clone()).await;

    // The node goes away with the stream open: reads fail in time instead of waiting.
    server.shutdown_background();
    let r = tokio::time::timeout(Duration::from_secs(30), peers.get(1, 0, TASK, "alice"))
        .await
        .expect("a read to a node that went away fails in time");
    assert!(matches!(r, Err(HostError::Unavailable(_))), "{r:?}");

    // The node is back at the same address: the next reads open a new stream.
    let server = serve(&host, &addr);
    read_all(peers.clone()).await;
    server.shutdown_background();
}

/// A read with detail answers, in the one batched round trip, what a 2026-07-28 `tasks/get`
/// shows: the requests an `input_required` task waits on, and a terminal task's record with
/// its outcome; a read without detail still answers the view alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_detailed_read_brings_the_pending_requests_or_the_outcome() {
    let dir = tempfile::tempdir().unwrap();
    let host = host(dir.path()).await;
    let addr = free_addr();
    let server = serve(&host, &addr);
    let peers = Peers::new(HashMap::from([(1, addr.clone())]), Duration::from_secs(30)).unwrap();

    match peers.read(1, 0, TASK, "alice", true).await.unwrap() {
        TaskRead::Task(t) => assert_eq!(t.status, TaskStatus::Working),
        other => panic!("a working task reads as its view: {other:?}"),
    }

    // A task that asks its client for a confirmation.
    const ASKING: &str = "00000000000000000000000000000abc";
    let mut new = NewTask {
        task_id: ASKING.into(),
        owner: "alice".into(),
        session: None,
        ttl_ms: None,
        request: ToolRequest::new("confirm_delete", json!({"filename": "a.txt"}).to_string()),
        worker_rerun: None,
    };
    new.request.client.elicitation = true;
    host.create(0, new).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let requests = loop {
        match peers.read(1, 0, ASKING, "alice", true).await.unwrap() {
            TaskRead::Waiting { task, requests } => {
                assert_eq!(task.status, TaskStatus::InputRequired);
                break requests;
            }
            TaskRead::Task(_) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await
            }
            other => panic!("the task should come to wait on its client: {other:?}"),
        }
    };
    assert_eq!(requests.len(), 1, "{requests:?}");
    let request: Value = serde_json::from_slice(&requests[0]).unwrap();
    assert_eq!(request["method"], "elicitation/create", "{request}");
    match peers.read(1, 0, ASKING, "alice", false).await.unwrap() {
        TaskRead::Task(t) => assert_eq!(t.status, TaskStatus::InputRequired),
        other => panic!("without detail, the view alone: {other:?}"),
    }
    assert!(matches!(
        peers.read(1, 0, ASKING, "mallory", true).await,
        Err(HostError::NotFound)
    ));

    let cancel = Cancel {
        task_id: TASK.into(),
        owner: "alice".into(),
    };
    host.apply(0, cancel.into()).await.unwrap();
    match peers.read(1, 0, TASK, "alice", true).await.unwrap() {
        TaskRead::Ended(r) => {
            assert_eq!(r.status, TaskStatus::Cancelled);
            assert_eq!(r.task_id, TASK);
        }
        other => panic!("a terminal task reads as its record: {other:?}"),
    }
    server.shutdown_background();
}
