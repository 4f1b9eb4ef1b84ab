//! Errors keep their meaning across gRPC: each kind a node's host reports reaches a gateway's
//! `Peers` as the same kind, with what the caller acts on (a terminal status, a limit, whether
//! to retry), and a retried create says that it created nothing.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::json;
use taskmesh_host::ops::Cancel;
use taskmesh_host::{Created, HostError, NewTask, Operation, TaskSettings};
use taskmesh_router::remote::Peers;
use taskmesh_rpc::v1::{self, task_service_client::TaskServiceClient};
use taskmesh_task::{TaskStatus, ToolRequest};

use crate::support::{free_addr, host, host_with, serve, TASK};

fn new_task(task_id: &str, tool: &str) -> NewTask {
    NewTask {
        task_id: task_id.into(),
        owner: "alice".into(),
        session: None,
        ttl_ms: None,
        request: ToolRequest::new(tool, json!({"seconds": 3600}).to_string()),
        worker_rerun: None,
    }
}

/// A create on node 1, shard 0, as a router's attempt sends it.
async fn create(peers: &Peers, new: NewTask) -> Result<Created, HostError> {
    peers
        .apply(1, 0, &new.into())
        .await
        .and_then(NewTask::output)
}

/// A cancel of alice's task on node 1, shard 0.
async fn cancel(peers: &Peers, task_id: &str) -> Result<taskmesh_task::TaskView, HostError> {
    let op = Cancel {
        task_id: task_id.into(),
        owner: "alice".into(),
    };
    peers.apply(1, 0, &op.into()).await.and_then(Cancel::output)
}

const OTHER: &str = "fedcba9876543210fedcba9876543210";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_error_reaches_the_caller_as_the_same_kind() {
    let dir = tempfile::tempdir().unwrap();
    let host = host(dir.path()).await;
    let addr = free_addr();
    let server = serve(&host, &addr);
    let peers = Peers::new(HashMap::from([(1, addr.clone())]), Duration::from_secs(30)).unwrap();

    let r = peers.get(1, 0, OTHER, "alice").await;
    assert!(matches!(r, Err(HostError::NotFound)), "{r:?}");

    // A shard the node does not host: not its leader; retryable.
    match peers.get(1, 5, TASK, "alice").await {
        Err(e @ HostError::NotLeader { shard: 5, .. }) => assert!(e.retryable()),
        other => panic!("{other:?}"),
    }

    // A tool the node does not serve: its configuration, not a reason to retry.
    match create(&peers, new_task(OTHER, "no_such_tool")).await {
        Err(e @ HostError::Misconfigured(_)) => {
            assert!(!e.retryable());
            assert!(e.to_string().contains("no_such_tool"), "{e}");
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        peers.get(1, 0, OTHER, "alice").await,
        Err(HostError::NotFound)
    ));

    // Arguments that are no JSON object: invalid, and nothing is created.
    let mut raw = TaskServiceClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    let create_op = v1::apply_request::Op::Create(v1::CreateTaskRequest {
        shard: 0,
        owner: "alice".into(),
        task_id: OTHER.into(),
        session: None,
        requested_ttl_ms: None,
        request: Some(v1::ToolRequest {
            tool: "slow_compute".into(),
            arguments_json: "[1, 2".into(),
            progress_token_json: None,
            client: None,
            answers_json: None,
            traceparent: None,
        }),
        worker_rerun: None,
    });
    let status = raw
        .apply(v1::ApplyRequest {
            op: Some(create_op),
        })
        .await
        .expect_err("refused");
    let e = taskmesh_router::convert::error_from_status(0, &status);
    assert!(matches!(e, HostError::Invalid(_)), "{e:?}");
    assert!(!e.retryable());
    assert!(matches!(
        peers.get(1, 0, OTHER, "alice").await,
        Err(HostError::NotFound)
    ));

    // A create retried after it committed returns the task and says it created nothing.
    let again = create(&peers, new_task(TASK, "slow_compute"))
        .await
        .unwrap();
    assert_eq!(again.task.task_id, TASK);
    assert!(!again.fresh, "a retry is reported as such");
    let fresh = create(&peers, new_task(OTHER, "slow_compute"))
        .await
        .unwrap();
    assert!(fresh.fresh);

    // Cancel twice: the second names the terminal status.
    assert_eq!(
        cancel(&peers, TASK).await.unwrap().status,
        TaskStatus::Cancelled
    );
    let r = cancel(&peers, TASK).await;
    assert!(
        matches!(r, Err(HostError::Terminal(TaskStatus::Cancelled))),
        "{r:?}"
    );

    // The node is gone: unavailable, which is retryable.
    server.shutdown_background();
    match peers.get(1, 0, TASK, "alice").await {
        Err(e @ HostError::Unavailable(_)) => assert!(e.retryable()),
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capacity_error_carries_the_nodes_real_limit() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = TaskSettings {
        max_live_tasks: 1,
        ..TaskSettings::default()
    }
    .host_config(0);
    let host = host_with(dir.path(), cfg).await;
    let addr = free_addr();
    let server = serve(&host, &addr);
    let peers = Peers::new(HashMap::from([(1, addr)]), Duration::from_secs(30)).unwrap();
    match create(&peers, new_task(OTHER, "slow_compute")).await {
        Err(e @ HostError::Capacity { limit: 1 }) => {
            assert!(!e.retryable());
            assert!(e.to_string().contains("a limit of 1 is reached"), "{e}");
        }
        other => panic!("{other:?}"),
    }
    server.shutdown_background();
}
