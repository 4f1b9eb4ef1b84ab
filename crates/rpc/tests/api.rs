//! Wire-level checks of the generated API: prost round trips of the messages, and a tonic
//! server and client talking over loopback.

// A test binary: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;

use prost::Message;
use taskmesh_rpc::v1::task_service_client::TaskServiceClient;
use taskmesh_rpc::v1::task_service_server::{TaskService, TaskServiceServer};
use taskmesh_rpc::v1::{
    apply_request, apply_response, outcome, AppendEntriesRequest, ApplyRequest, ApplyResponse,
    AttachResultEvent, AttachResultRequest, CancelTaskRequest, CancelTaskResponse, ClientCaps,
    InstallSnapshotChunk, LeaderHint, Outcome, OutcomeError, ReadTasksRequest, ReadTasksResponse,
    SnapshotHeader, TaskError, TaskErrorKind, TaskRecord, TaskStatus, TaskView, ToolRequest,
    VoteRequest, WatchStatusEvent, WatchStatusRequest,
};
use taskmesh_rpc::METADATA_GROUP;
use tonic::{Request, Response, Status};

fn sample_record(task_id: &str, owner: &str) -> TaskRecord {
    TaskRecord {
        task_id: task_id.to_owned(),
        owner: owner.to_owned(),
        session: Some("session-1".to_owned()),
        status: TaskStatus::Failed as i32,
        status_message: Some("the tool reported an error".to_owned()),
        created_at_ms: 1_700_000_000_000,
        last_updated_at_ms: 1_700_000_004_321,
        ttl_ms: Some(3_600_000),
        poll_interval_ms: 1_000,
        request: Some(ToolRequest {
            tool: "slow_echo".to_owned(),
            arguments_json: r#"{"text":"hi","delay_ms":50}"#.to_owned(),
            progress_token_json: Some("\"tok-7\"".to_owned()),
            client: Some(ClientCaps {
                elicitation: true,
                sampling: false,
                elicitation_tasks: false,
                sampling_tasks: false,
            }),
            answers_json: None,
            traceparent: None,
        }),
        outcome: Some(Outcome {
            kind: Some(outcome::Kind::Error(OutcomeError {
                code: -32603,
                message: "boom".to_owned(),
                data_json: Some(r#"{"retry":false}"#.to_owned()),
            })),
        }),
        exec_term: 3,
        updated_index: 42,
        upstream_task: None,
        client_task: None,
        worker: None,
        outbox: None,
    }
}

#[test]
fn task_record_round_trips() {
    let record = sample_record("0123456789abcdef0123456789abcdef", "alice");
    let bytes = record.encode_to_vec();
    let back = TaskRecord::decode(bytes.as_slice()).expect("decodes");
    assert_eq!(back, record);
    assert_eq!(back.status(), TaskStatus::Failed);
    assert_ne!(back.status(), TaskStatus::Working);

    // Absent optionals stay absent, and are distinct from empty or zero values.
    let mut sparse = record.clone();
    sparse.session = None;
    sparse.status_message = None;
    sparse.ttl_ms = None;
    sparse.outcome = None;
    sparse.status = TaskStatus::Working as i32;
    let back = TaskRecord::decode(sparse.encode_to_vec().as_slice()).expect("decodes");
    assert_eq!(back, sparse);
    assert_eq!(back.ttl_ms, None);
    assert_eq!(back.status(), TaskStatus::Working);

    let mut zero_ttl = record;
    zero_ttl.ttl_ms = Some(0);
    let back = TaskRecord::decode(zero_ttl.encode_to_vec().as_slice()).expect("decodes");
    assert_eq!(back.ttl_ms, Some(0));
}

#[test]
fn raft_messages_round_trip() {
    let append = AppendEntriesRequest {
        shard: 7,
        target: 2,
        payload: br#"{"vote":{},"prev_log_id":null,"entries":[],"leader_commit":null}"#.to_vec(),
    };
    let back = AppendEntriesRequest::decode(append.encode_to_vec().as_slice()).expect("decodes");
    assert_eq!(back, append);

    let vote = VoteRequest {
        shard: METADATA_GROUP,
        target: 1,
        pre_vote: true,
        payload: b"{}".to_vec(),
    };
    let back = VoteRequest::decode(vote.encode_to_vec().as_slice()).expect("decodes");
    assert_eq!(back, vote);
    assert_eq!(back.shard, u32::MAX);

    let first = InstallSnapshotChunk {
        shard: 0,
        target: 3,
        header: Some(SnapshotHeader {
            vote: b"{\"leader_id\":{}}".to_vec(),
            meta: b"{\"snapshot_id\":\"s-1\"}".to_vec(),
            size_bytes: 6,
        }),
        offset: 0,
        data: vec![1, 2, 3],
        done: false,
    };
    let last = InstallSnapshotChunk {
        shard: 0,
        target: 3,
        header: None,
        offset: 3,
        data: vec![4, 5, 6],
        done: true,
    };
    for chunk in [first, last] {
        let back = InstallSnapshotChunk::decode(chunk.encode_to_vec().as_slice()).expect("decodes");
        assert_eq!(back, chunk);
    }
}

#[test]
fn task_error_survives_a_status() {
    let hint = LeaderHint {
        node_id: 5,
        address: "10.0.0.5:7100".to_owned(),
    };
    let status =
        TaskError::not_leader(Some(hint.clone()), "shard 3 is led by node 5").into_status();
    assert_eq!(status.code(), tonic::Code::FailedPrecondition);
    let back = TaskError::from_status(&status).expect("carries a task error");
    assert_eq!(back.kind(), TaskErrorKind::NotLeader);
    assert_eq!(back.leader, Some(hint));

    let status: Status = TaskError::terminal(TaskStatus::Completed, "done already").into();
    assert_eq!(status.code(), tonic::Code::FailedPrecondition);
    let back = TaskError::from_status(&status).expect("carries a task error");
    assert_eq!(back.kind(), TaskErrorKind::Terminal);
    assert_eq!(back.terminal_status(), TaskStatus::Completed);

    assert!(TaskError::from_status(&Status::internal("no details")).is_none());
}

/// A task service that knows one task and reports every other id as led elsewhere.
struct OneTask {
    record: TaskRecord,
}

/// The view of a record, as a leader answers a cancel.
fn view_of(r: &TaskRecord) -> TaskView {
    TaskView {
        task_id: r.task_id.clone(),
        status: r.status,
        status_message: r.status_message.clone(),
        created_at_ms: r.created_at_ms,
        last_updated_at_ms: r.last_updated_at_ms,
        ttl_ms: r.ttl_ms,
        poll_interval_ms: r.poll_interval_ms,
        updated_index: r.updated_index,
    }
}

type NoStream<T> = tokio_stream::Empty<Result<T, Status>>;

#[tonic::async_trait]
impl TaskService for OneTask {
    /// Answers cancels only: another operation is not what this test asks.
    async fn apply(
        &self,
        request: Request<ApplyRequest>,
    ) -> Result<Response<ApplyResponse>, Status> {
        let Some(apply_request::Op::Cancel(req)) = request.into_inner().op else {
            return Err(Status::unimplemented("only cancel"));
        };
        if req.task_id == self.record.task_id && req.owner == self.record.owner {
            return Ok(Response::new(ApplyResponse {
                answer: Some(apply_response::Answer::Cancel(CancelTaskResponse {
                    task: Some(view_of(&self.record)),
                })),
            }));
        }
        if req.task_id == self.record.task_id {
            return Err(TaskError::not_found("no such task").into());
        }
        let hint = LeaderHint {
            node_id: 9,
            address: "127.0.0.1:1".to_owned(),
        };
        Err(
            TaskError::not_leader(Some(hint), format!("shard {} is led by node 9", req.shard))
                .into(),
        )
    }

    type ReadTasksStream = NoStream<ReadTasksResponse>;

    async fn read_tasks(
        &self,
        _request: Request<tonic::Streaming<ReadTasksRequest>>,
    ) -> Result<Response<Self::ReadTasksStream>, Status> {
        Err(Status::unimplemented("read stream"))
    }

    type AttachResultStream = NoStream<AttachResultEvent>;

    async fn attach_result(
        &self,
        _request: Request<AttachResultRequest>,
    ) -> Result<Response<Self::AttachResultStream>, Status> {
        Err(Status::unimplemented("attach"))
    }

    type WatchStatusStream = NoStream<WatchStatusEvent>;

    async fn watch_status(
        &self,
        _request: Request<WatchStatusRequest>,
    ) -> Result<Response<Self::WatchStatusStream>, Status> {
        Err(Status::unimplemented("watch"))
    }

    async fn exchange_workers(
        &self,
        _request: Request<taskmesh_rpc::v1::WorkerDigest>,
    ) -> Result<Response<taskmesh_rpc::v1::WorkerDigestAck>, Status> {
        Err(Status::unimplemented("workers"))
    }

    async fn take_work(
        &self,
        _request: Request<taskmesh_rpc::v1::TakeWorkRequest>,
    ) -> Result<Response<taskmesh_rpc::v1::TakeWorkResponse>, Status> {
        Err(Status::unimplemented("workers"))
    }
}

/// A cancel as the operation of an `Apply` call.
fn cancel(shard: u32, owner: &str, task_id: &str) -> ApplyRequest {
    ApplyRequest {
        op: Some(apply_request::Op::Cancel(CancelTaskRequest {
            shard,
            owner: owner.to_owned(),
            task_id: task_id.to_owned(),
        })),
    }
}

#[tokio::test]
async fn a_unary_call_and_its_task_errors_over_loopback() {
    let record = sample_record("00000000000000000000000000000001", "alice");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("binds");
    let addr: SocketAddr = listener.local_addr().expect("has an address");
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(TaskServiceServer::new(OneTask {
                record: record.clone(),
            }))
            .serve_with_incoming_shutdown(
                tonic::transport::server::TcpIncoming::from(listener),
                async {
                    let _ = stop_rx.await;
                },
            ),
    );

    let mut client = TaskServiceClient::connect(format!("http://{addr}"))
        .await
        .expect("connects");

    let got = client
        .apply(cancel(1, "alice", &record.task_id))
        .await
        .expect("the owner reaches its task")
        .into_inner();
    let Some(apply_response::Answer::Cancel(got)) = got.answer else {
        panic!("a cancel is answered as one: {got:?}");
    };
    assert_eq!(got.task, Some(view_of(&record)));

    let err = client
        .apply(cancel(1, "mallory", &record.task_id))
        .await
        .expect_err("another principal sees nothing");
    assert_eq!(err.code(), tonic::Code::NotFound);
    let e = TaskError::from_status(&err).expect("carries a task error");
    assert_eq!(e.kind(), TaskErrorKind::NotFound);

    let err = client
        .apply(cancel(3, "alice", "ffffffffffffffffffffffffffffffff"))
        .await
        .expect_err("the shard is led elsewhere");
    let e = TaskError::from_status(&err).expect("carries a task error");
    assert_eq!(e.kind(), TaskErrorKind::NotLeader);
    let hint = e.leader.expect("names the leader");
    assert_eq!((hint.node_id, hint.address.as_str()), (9, "127.0.0.1:1"));

    drop(client);
    stop_tx.send(()).expect("server still running");
    server
        .await
        .expect("server task joins")
        .expect("server stops cleanly");
}
